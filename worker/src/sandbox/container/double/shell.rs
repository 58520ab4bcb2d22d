//! The default exec handler of [`FakeRuntime`](super::FakeRuntime): [`fake_shell`], a tiny
//! explicit interpreter over a [`FakeFs`], with its `git diff` / `git status` over the working tree.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use super::fs::{ExecHandler, FakeFs};
use crate::sandbox::container::{ExecOutput, ExecRequest};

/// The default exec handler: a tiny, explicit shell over a [`FakeFs`].
///
/// The command is the request's last argument. It is split into statements at `;` and newlines,
/// each statement into words at whitespace (no quoting, no globbing, no pipes); a statement may
/// end with `> FILE` or `>> FILE`. Relative paths are taken from the request's working directory.
/// The exit code is the last statement's.
///
/// | statement | does |
/// |---|---|
/// | `echo WORDS…` | prints the words and a newline |
/// | `printf WORDS…` | prints the words, with `\n` turned into newlines, and no newline of its own |
/// | `cat FILE…` | prints the files; a missing one: an error and exit 1 |
/// | `ls [DIR]` | the names directly in `DIR` (default: the working directory), one a line |
/// | `rm [-f|-rf] PATH…` | removes files or directories |
/// | `true`, `false`, `exit N` | exit 0, 1, N (`exit` ends the command) |
/// | `sleep SECONDS` | spends simulated time: past the request's timeout the command is killed, keeping what it printed so far |
/// | `git [--flags] diff` | a unified-looking diff of the working directory's files against the task image's |
/// | `git [--flags] status [--porcelain]` | ` M`, ` D` and `??` lines for the same |
/// | `date` | `date`'s default format, the seconds changing on every call (a normalization rule masks it) |
/// | `random` | a random 24-letter token, new on every call (no rule masks it) |
/// | `shuffle WORDS…` | the words one a line, rotated by a call counter (the same lines in another order) |
/// | `scramble WORD` | the word's characters rotated by a call counter (the same characters in another order) |
///
/// Anything else prints `bash: NAME: command not found` and exits 127.
pub fn fake_shell() -> ExecHandler {
    let counter = Arc::new(AtomicU64::new(0));
    Arc::new(move |fs: &mut FakeFs, request: &ExecRequest| {
        let script = request.argv.last().cloned().unwrap_or_default();
        run_script(fs, request, &script, &counter)
    })
}

fn resolve(workdir: &str, path: &str) -> String {
    let joined =
        if path.starts_with('/') { path.to_owned() } else { format!("{}/{path}", workdir.trim_end_matches('/')) };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn run_script(fs: &mut FakeFs, request: &ExecRequest, script: &str, counter: &AtomicU64) -> ExecOutput {
    let mut output = Vec::new();
    let mut code = 0i64;
    let mut elapsed = Duration::ZERO;
    for statement in script.split([';', '\n']) {
        let mut words: Vec<&str> = statement.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let mut redirect: Option<(String, bool)> = None;
        if words.len() >= 2 && matches!(words[words.len() - 2], ">" | ">>") {
            let target = resolve(&request.workdir, words[words.len() - 1]);
            redirect = Some((target, words[words.len() - 2] == ">>"));
            words.truncate(words.len() - 2);
        }
        let mut out = Vec::new();
        let (name, args) = (words.first().copied().unwrap_or(""), words.get(1..).unwrap_or(&[]));
        let mut stop = false;
        code = match name {
            "echo" => {
                out.extend_from_slice(args.join(" ").as_bytes());
                out.push(b'\n');
                0
            }
            "printf" => {
                out.extend_from_slice(args.join(" ").replace("\\n", "\n").as_bytes());
                0
            }
            "cat" => {
                let mut code = 0;
                for arg in args {
                    match fs.read(&resolve(&request.workdir, arg)) {
                        Some(content) => out.extend_from_slice(content),
                        None => {
                            out.extend_from_slice(format!("cat: {arg}: No such file or directory\n").as_bytes());
                            code = 1;
                        }
                    }
                }
                code
            }
            "ls" => {
                let dir = resolve(&request.workdir, args.first().copied().unwrap_or("."));
                let prefix = if dir == "/" { "/".to_owned() } else { format!("{dir}/") };
                let names: BTreeSet<&str> = fs
                    .files()
                    .keys()
                    .filter_map(|p| p.strip_prefix(&prefix))
                    .map(|rest| rest.split('/').next().unwrap_or(rest))
                    .collect();
                for n in names {
                    out.extend_from_slice(n.as_bytes());
                    out.push(b'\n');
                }
                0
            }
            "rm" => {
                for arg in args.iter().filter(|a| !a.starts_with('-')) {
                    fs.remove(&resolve(&request.workdir, arg));
                }
                0
            }
            "true" => 0,
            "false" => 1,
            "exit" => {
                stop = true;
                args.first().and_then(|a| a.parse().ok()).unwrap_or(0)
            }
            "sleep" => {
                let secs: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(0.0);
                elapsed += Duration::from_secs_f64(secs.max(0.0));
                if elapsed > request.timeout {
                    return ExecOutput { output, exit_code: None, timed_out: true };
                }
                0
            }
            "git" => {
                let sub = args.iter().find(|a| !a.starts_with('-')).copied().unwrap_or("");
                let workdir = format!("{}/", request.workdir.trim_end_matches('/'));
                match sub {
                    "diff" => {
                        out.extend_from_slice(git_diff(fs, &workdir).as_bytes());
                        0
                    }
                    "status" => {
                        out.extend_from_slice(git_status(fs, &workdir).as_bytes());
                        0
                    }
                    other => {
                        out.extend_from_slice(format!("git: '{other}' is not a git command\n").as_bytes());
                        1
                    }
                }
            }
            "date" => {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                out.extend_from_slice(format!("Tue Dec  1 11:15:{:02} UTC 2026\n", n % 60).as_bytes());
                0
            }
            "random" => {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let digest = Sha256::digest(format!("fake-random-{n}").as_bytes());
                let token: String = digest.iter().take(24).map(|b| (b'a' + b % 26) as char).collect();
                out.extend_from_slice(token.as_bytes());
                out.push(b'\n');
                0
            }
            "shuffle" => {
                let n = counter.fetch_add(1, Ordering::Relaxed) as usize;
                let mut items: Vec<&str> = args.to_vec();
                if !items.is_empty() {
                    let len = items.len();
                    items.rotate_left(n % len);
                }
                for item in items {
                    out.extend_from_slice(item.as_bytes());
                    out.push(b'\n');
                }
                0
            }
            "scramble" => {
                let n = counter.fetch_add(1, Ordering::Relaxed) as usize;
                let mut chars: Vec<char> = args.join(" ").chars().collect();
                if !chars.is_empty() {
                    let len = chars.len();
                    chars.rotate_left(n % len);
                }
                out.extend_from_slice(chars.into_iter().collect::<String>().as_bytes());
                out.push(b'\n');
                0
            }
            other => {
                out.extend_from_slice(format!("bash: {other}: command not found\n").as_bytes());
                127
            }
        };
        match redirect {
            Some((target, true)) => fs.append(&target, &out),
            Some((target, false)) => fs.write(&target, out),
            None => output.extend_from_slice(&out),
        }
        if stop {
            break;
        }
    }
    ExecOutput { output, exit_code: Some(code), timed_out: false }
}

/// A working-tree file that differs from the origin: its path relative to the working directory,
/// its content in the origin and now (`None`: absent).
type WorktreeChange<'a> = (String, Option<&'a [u8]>, Option<&'a [u8]>);

/// The files under `workdir` (which ends with `/`) that differ from the origin.
fn worktree_changes<'a>(fs: &'a FakeFs, workdir: &str) -> Vec<WorktreeChange<'a>> {
    let paths: BTreeSet<&String> = fs
        .files()
        .keys()
        .chain(fs.origin().keys())
        .filter(|p| p.starts_with(workdir) && !p.contains("/.git/"))
        .collect();
    paths
        .into_iter()
        .filter_map(|p| {
            let old = fs.origin().get(p).map(Vec::as_slice);
            let new = fs.read(p);
            (old != new).then(|| (p[workdir.len()..].to_owned(), old, new))
        })
        .collect()
}

fn git_diff(fs: &FakeFs, workdir: &str) -> String {
    let mut out = String::new();
    for (rel, old, new) in worktree_changes(fs, workdir) {
        let Some(old) = old else { continue }; // untracked files are not in `git diff`
        out.push_str(&format!("diff --git a/{rel} b/{rel}\n--- a/{rel}\n"));
        out.push_str(&match new {
            Some(_) => format!("+++ b/{rel}\n"),
            None => "+++ /dev/null\n".to_owned(),
        });
        for line in String::from_utf8_lossy(old).lines() {
            out.push_str(&format!("-{line}\n"));
        }
        for line in new.map(String::from_utf8_lossy).unwrap_or_default().lines() {
            out.push_str(&format!("+{line}\n"));
        }
    }
    out
}

fn git_status(fs: &FakeFs, workdir: &str) -> String {
    worktree_changes(fs, workdir)
        .into_iter()
        .map(|(rel, old, new)| match (old, new) {
            (None, _) => format!("?? {rel}\n"),
            (Some(_), None) => format!(" D {rel}\n"),
            (Some(_), Some(_)) => format!(" M {rel}\n"),
        })
        .collect()
}
