//! The state a fingerprint compares: the commands it is taken with and the changed paths it
//! leaves out (caches, logs, temporary and engine-managed files).

use std::collections::BTreeSet;

/// The command a fingerprint's `git diff` is taken with, in the task's working directory.
/// `--no-optional-locks` keeps git from refreshing (writing) the index: measuring the state must
/// not change it.
pub const GIT_DIFF_COMMAND: &str = "git --no-optional-locks diff";

/// The command a fingerprint's `git status` is taken with (see [`GIT_DIFF_COMMAND`]).
pub const GIT_STATUS_COMMAND: &str = "git --no-optional-locks status --porcelain";

/// Path components that mark a cache: whatever lies in or under them differs between runs without
/// changing what the agent works on (bytecode written or not, a cache of test outcomes).
const CACHE_COMPONENTS: &[&str] = &[
    // Python bytecode directories (written depending on timestamps and on what was imported).
    "__pycache__",
    // pytest's cache of last failures and node ids.
    ".pytest_cache",
    // Type checkers' and linters' caches.
    ".mypy_cache",
    ".ruff_cache",
    // Hypothesis's example database (grows with every run).
    ".hypothesis",
    // Git's internals: the index carries stat data refreshed by any `git status`, object files are
    // named by hashes of commits that carry the run's clock, reflogs carry timestamps. The
    // repository's state is compared through `git diff` and `git status` instead.
    ".git",
];

/// Path prefixes (a directory and everything below it) outside the state a fingerprint compares.
const EXCLUDED_PREFIXES: &[&str] = &[
    // Temporary files: random names by design (tempfile, mktemp, pytest's basetemp). A later
    // command that reads one is still checked by its observation.
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    // Runtime state: pid files, sockets.
    "/run",
    "/var/run",
    // Logs and caches of the system and of tools run as root (pip, matplotlib, fontconfig).
    "/var/log",
    "/var/cache",
    "/root/.cache",
    // Kernel file systems and devices: never part of an image.
    "/proc",
    "/sys",
    "/dev",
    // Files the container engine writes into every container.
    "/.dockerenv",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/mtab",
    // Interactive tools' history files: logs of what was typed.
    "/root/.bash_history",
    "/root/.python_history",
    "/root/.lesshst",
    "/root/.viminfo",
];

/// Whether a path (absolute, or relative to the working directory as in `git status`) lies outside
/// the state a fingerprint compares; see [`fingerprint_paths`].
pub fn is_excluded_path(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if EXCLUDED_PREFIXES.iter().any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/'))) {
        return true;
    }
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    // Other users' caches: /home/<user>/.cache.
    if components.len() >= 3 && components[0] == "home" && components[2] == ".cache" {
        return true;
    }
    if components.iter().any(|c| CACHE_COMPONENTS.contains(c)) {
        return true;
    }
    let name = components.last().copied().unwrap_or("");
    // Bytecode files outside __pycache__ (Python 2 layout, `-B` not given), and coverage data
    // files (`.coverage`, `.coverage.<host>.<pid>.<random>` with parallel mode).
    name.ends_with(".pyc") || name.ends_with(".pyo") || name == ".coverage" || name.starts_with(".coverage.")
}

/// The changed paths a fingerprint compares, sorted and without duplicates: `paths` (a container
/// diff's paths) less
///
/// - every path that is an ancestor of another changed path: a container diff lists each changed
///   file's directories as modified too, which says nothing more than the file does (and a
///   directory changed only by an excluded child, like `/root` for `/root/.cache/pip`, would
///   otherwise differ with the cache);
/// - paths under caches, logs, temporary and engine-managed files ([`is_excluded_path`]):
///   `__pycache__`, `*.pyc`, `.pytest_cache`, `.mypy_cache`, `.ruff_cache`, `.hypothesis`,
///   `.coverage*`, `.git/` internals, `/tmp`, `/var/tmp`, `/dev/shm`, `/run`, `/var/log`,
///   `/var/cache`, `/root/.cache`, `/home/*/.cache`, `/proc`, `/sys`, `/dev`, `/.dockerenv`,
///   `/etc/{hostname,hosts,resolv.conf,mtab}` and shell/REPL history files.
pub fn fingerprint_paths<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let all: BTreeSet<String> = paths
        .into_iter()
        .map(|p| if p.len() > 1 { p.trim_end_matches('/') } else { p })
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    let mut out = Vec::new();
    for path in &all {
        // In sorted order, the descendants of `path` (`path/…`) follow it, after any sibling
        // `path<c>` with c < '/' (such as `path-x` or `path.y`): look at the first entry at or after
        // `path/`.
        let prefix = format!("{path}/");
        let has_child = all.range(prefix.clone()..).next().is_some_and(|next| next.starts_with(&prefix));
        if !has_child && !is_excluded_path(path) {
            out.push(path.clone());
        }
    }
    out
}

/// `git status --porcelain` without the lines of excluded paths (see [`is_excluded_path`]).
pub(super) fn status_outside_caches(status: &str) -> String {
    status
        .split('\n')
        .filter(|line| {
            let Some(path) = line.get(3..) else { return true };
            let path = path.rsplit(" -> ").next().unwrap_or(path).trim_matches('"');
            !is_excluded_path(path)
        })
        .collect::<Vec<_>>()
        .join("\n")
}
