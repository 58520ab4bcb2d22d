//! What can be read off a trajectory's commands and observations without running anything: the
//! kind of each command, the first edit (a heuristic, docs/method.md §3: replay measures it exactly), the
//! first symptom (docs/method.md §3) and the summary `vcurve inspect` prints.
//!
//! **First edit** (heuristic): the first step with a command that changes a file of the repository
//! that existed before: `sed -i`/`perl -i` on a file the agent did not create itself, `patch`,
//! `git apply`/`git am`, a str_replace-like tool, or a write (`>`, `>>`, `tee`, `cp`/`mv` onto it,
//! Python's `open(…, "w")`/`write_text`) to a path under the working directory that an earlier
//! command, observation or the task already named. Writes to new files (a reproduction script),
//! to `/tmp` or outside the working directory do not count: `git diff` of tracked files would stay
//! empty.
//!
//! **First symptom**: the first step after the first edit with an explicit failure signal in an
//! observation of a test or script run: a Python traceback, a failing test (pytest's `FAILED`,
//! `N failed`, unittest's `FAIL:`/`FAILED (`), or a non-zero exit of the run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use super::messages::{SUBMIT_MARKER, text_of};
use crate::trajectory::{Action, Trajectory, sha256_hex};

/// What a command does, by its words (the first that matches, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    Submit,
    Edit,
    Install,
    Test,
    Run,
    Write,
    Git,
    View,
    Search,
    Other,
}

impl CommandKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandKind::Submit => "submit",
            CommandKind::Edit => "edit",
            CommandKind::Test => "test",
            CommandKind::Run => "run",
            CommandKind::Write => "write",
            CommandKind::Install => "install",
            CommandKind::Git => "git",
            CommandKind::View => "view",
            CommandKind::Search => "search",
            CommandKind::Other => "other",
        }
    }
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a valid pattern")
}

static IN_PLACE: LazyLock<Regex> = LazyLock::new(|| re(r"\b(sed|perl)\s+[^|;&]*?(-i|-pi|-p\s+-i)\S*\s+[^|;&]*"));
static PATCH_TOOL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(^|[;&|(]\s*|\s)(patch\s+(-|<)|git\s+apply\b|git\s+am\b|str_replace_editor\b|apply_patch\b|edit_file\b)")
});
static REDIRECT: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:^|[^0-9&<>=])(?:[12])?>>?\s*([A-Za-z0-9_./~-][^\s;&|<>()]*)"));
static TEE: LazyLock<Regex> = LazyLock::new(|| re(r"\btee\s+(?:-a\s+)?([A-Za-z0-9_./~-][^\s;&|<>()]*)"));
static COPY: LazyLock<Regex> = LazyLock::new(|| re(r"\b(?:cp|mv)\s+(?:-\S+\s+)*\S+\s+([A-Za-z0-9_./~-][^\s;&|<>()]*)"));
static PY_WRITE: LazyLock<Regex> = LazyLock::new(|| {
    re(r#"open\(\s*['"]([^'"]+)['"]\s*,\s*['"][wa]\+?b?['"]|Path\(\s*['"]([^'"]+)['"]\s*\)\.write_(?:text|bytes)"#)
});
/// A Python write through a path held in a variable (`p = Path('x.py'); p.write_text(s)`), or
/// `open(name, 'w')`: an edit whose target the words do not name.
static PY_WRITE_UNNAMED: LazyLock<Regex> =
    LazyLock::new(|| re(r#"\.write_(?:text|bytes)\(|\bopen\([^()'"]*,\s*['"][wa]\+?b?['"]"#));
/// The paths a Python program names (`Path('x.py')`, `open('x.py')`), for the target of such a
/// write.
static PY_PATH: LazyLock<Regex> = LazyLock::new(|| re(r#"\b(?:Path|open)\(\s*['"]([^'"]+)['"]"#));
static TEST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\b(pytest|py\.test|tox|nox|nosetests|runtests\.py|unittest)\b|manage\.py\s+test\b|\bmake\s+(test|check)\b|\b(cargo|go)\s+test\b",
    )
});
static INSTALL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\b(pip3?|conda|apt-get|apt|poetry|uv)\s+(install|add)\b|setup\.py\s+(install|develop|build|build_ext)\b")
});
static RUN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\b(python[0-9.]*|node|ruby|perl|bash|sh)\s+(-c\b|-m\s+\S+|[^\s|;&-]\S*\.(py|js|rb|pl|sh)\b)|(^|[;&|]\s*)\./\S+",
    )
});
static GIT: LazyLock<Regex> = LazyLock::new(|| re(r"(^|[;&|]\s*)git\s"));
static VIEW: LazyLock<Regex> = LazyLock::new(|| re(r"(^|[;&|]\s*)(cat|head|tail|nl|less|more|sed\s+-n|awk|wc)\b"));
static SEARCH: LazyLock<Regex> = LazyLock::new(|| re(r"(^|[;&|]\s*)(grep|egrep|rg|ag|find|ls|tree|locate)\b"));
static HEREDOC: LazyLock<Regex> = LazyLock::new(|| re(r#"<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?"#));
static TRACEBACK: LazyLock<Regex> = LazyLock::new(|| re(r"Traceback \(most recent call last\)"));
static FAILING_TEST: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?m)^FAILED [^\s(]|^(FAIL|ERROR): \w+ \(|^FAILED \(|=+ .*\b\d+ (failed|errors?)\b.* =+$"));

/// A command with heredoc bodies removed and the insides of quotes emptied, so that what is left
/// is the shell's own words (a `>` inside a Python string is no redirection).
fn skeleton(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    let mut lines = command.lines();
    while let Some(line) = lines.next() {
        let delimiter = HEREDOC.captures(line).map(|c| c[1].to_string());
        out.push_str(&strip_quotes(line));
        out.push('\n');
        if let Some(d) = delimiter {
            for body in lines.by_ref() {
                if body.trim() == d {
                    break;
                }
            }
        }
    }
    out
}

fn strip_quotes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                out.push(c);
            }
            Some(_) => {}
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// What a command does, by its words.
pub fn command_kind(command: &str) -> CommandKind {
    if command.contains(SUBMIT_MARKER) {
        return CommandKind::Submit;
    }
    let words = skeleton(command);
    if IN_PLACE.is_match(&words)
        || PATCH_TOOL.is_match(&words)
        || PY_WRITE.is_match(command)
        || PY_WRITE_UNNAMED.is_match(command)
    {
        CommandKind::Edit
    } else if INSTALL.is_match(&words) {
        CommandKind::Install
    } else if TEST.is_match(&words) {
        CommandKind::Test
    } else if RUN.is_match(&words) {
        CommandKind::Run
    } else if write_targets(&words).next().is_some() {
        CommandKind::Write
    } else if GIT.is_match(&words) {
        CommandKind::Git
    } else if VIEW.is_match(&words) {
        CommandKind::View
    } else if SEARCH.is_match(&words) {
        CommandKind::Search
    } else {
        CommandKind::Other
    }
}

fn write_targets(words: &str) -> impl Iterator<Item = &str> {
    REDIRECT
        .captures_iter(words)
        .chain(TEE.captures_iter(words))
        .chain(COPY.captures_iter(words))
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str())
        .filter(|t| !t.starts_with("/dev/"))
}

/// A path as the repository sees it: relative to `workdir`, or `None` outside it.
fn in_repo(path: &str, workdir: &str) -> Option<String> {
    let path = path.trim_matches(|c| c == '\'' || c == '"');
    let relative = match path.strip_prefix(workdir) {
        Some(rest) => rest.strip_prefix('/')?,
        None if path.starts_with('/') || path.starts_with('~') => return None,
        None => path,
    };
    let relative = relative.trim_start_matches("./");
    (!relative.is_empty()).then(|| relative.to_string())
}

/// The first edit, by the heuristic of this module's documentation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FirstEdit {
    /// 1-based step.
    pub step: u32,
    pub command: String,
    /// The file it changes, when the command names it.
    pub target: Option<String>,
    /// Always true: read off the commands, not measured by replay.
    pub heuristic: bool,
}

/// The first step after the first edit with an explicit failure signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FirstSymptom {
    /// 1-based step.
    pub step: u32,
    /// What was seen: `traceback`, `failing test`, or `exit N of a test or script run`.
    pub signal: String,
}

/// The first edit of a trajectory (heuristic; `None` when no command looks like one).
pub fn first_edit(trajectory: &Trajectory) -> Option<FirstEdit> {
    let workdir = trajectory.task.workdir.trim_end_matches('/');
    // Everything the agent had seen so far: a file named there existed (or was named by the task).
    let mut seen: String =
        trajectory.messages[..trajectory.initial_messages].iter().map(text_of).collect::<Vec<_>>().join("\n");
    let mut created: BTreeSet<String> = BTreeSet::new();
    for (t, step) in trajectory.steps.iter().enumerate() {
        for action in &step.actions {
            let command = &action.command;
            let hit = |target: Option<String>| {
                Some(FirstEdit { step: t as u32 + 1, command: command.clone(), target, heuristic: true })
            };
            if command.contains(SUBMIT_MARKER) {
                continue;
            }
            let words = skeleton(command);
            if PATCH_TOOL.is_match(&words) {
                return hit(None);
            }
            if let Some(m) = IN_PLACE.find(&words) {
                let target = m.as_str().split_whitespace().last().and_then(|p| in_repo(p, workdir));
                if let Some(target) = target.filter(|t| !created.contains(t)) {
                    return hit(Some(target));
                }
            }
            let mut python: Vec<&str> = PY_WRITE
                .captures_iter(command)
                .filter_map(|c| c.get(1).or_else(|| c.get(2)))
                .map(|m| m.as_str())
                .collect();
            if PY_WRITE_UNNAMED.is_match(command) {
                python.extend(PY_PATH.captures_iter(command).filter_map(|c| c.get(1)).map(|m| m.as_str()));
            }
            let targets: Vec<&str> = write_targets(&words).chain(python).collect();
            for target in targets {
                let Some(relative) = in_repo(target, workdir) else { continue };
                if !created.contains(&relative) && seen.contains(&relative) {
                    return hit(Some(relative));
                }
                created.insert(relative);
            }
            seen.push('\n');
            seen.push_str(command);
            seen.push('\n');
            seen.push_str(&action.output);
        }
    }
    None
}

/// The failure signal in one action's observation, if any.
fn action_signal(action: &Action) -> Option<String> {
    failure_signal(&action.command, &action.output, action.returncode)
}

/// The failure signal (docs/method.md §3) in the observation of `command` — its `output` and
/// `returncode` (`None`: it did not finish) — if any: a Python traceback or a failing test in the
/// output of a test, script, edit or other command, or a non-zero exit of a test or script run.
/// What it says: `traceback`, `failing test`, or `exit N of a test or script run`. The importer
/// reads it off recorded observations; replay applies it to the observations it reproduces.
pub fn failure_signal(command: &str, output: &str, returncode: Option<i32>) -> Option<String> {
    let kind = command_kind(command);
    if !matches!(kind, CommandKind::Test | CommandKind::Run | CommandKind::Edit | CommandKind::Other) {
        return None;
    }
    if TRACEBACK.is_match(output) {
        return Some("traceback".into());
    }
    if FAILING_TEST.is_match(output) {
        return Some("failing test".into());
    }
    match returncode {
        Some(rc) if rc != 0 && matches!(kind, CommandKind::Test | CommandKind::Run) => {
            Some(format!("exit {rc} of a test or script run"))
        }
        _ => None,
    }
}

/// The first step after step `after` whose observations carry a failure signal.
pub fn first_symptom(trajectory: &Trajectory, after: u32) -> Option<FirstSymptom> {
    trajectory.steps.iter().enumerate().skip(after as usize).find_map(|(t, step)| {
        step.actions.iter().find_map(action_signal).map(|signal| FirstSymptom { step: t as u32 + 1, signal })
    })
}

/// One step in [`Summary::per_step`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepSummary {
    /// 1-based.
    pub step: u32,
    pub actions: usize,
    /// In action order; `null` for a command that did not finish.
    pub returncodes: Vec<Option<i32>>,
}

/// What `vcurve inspect` shows of one trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub format: String,
    pub instance_id: String,
    /// Model calls (format errors included).
    pub steps: u32,
    pub exit_status: String,
    pub end_type: String,
    pub submission_sha256: Option<String>,
    pub first_edit: Option<FirstEdit>,
    pub first_symptom: Option<FirstSymptom>,
    pub actions: usize,
    /// Steps without an action (format errors), 1-based.
    pub format_error_steps: Vec<u32>,
    pub commands_by_kind: BTreeMap<CommandKind, usize>,
    /// Steps with a command that timed out, 1-based.
    pub timeout_steps: Vec<u32>,
    pub per_step: Vec<StepSummary>,
}

impl Summary {
    pub fn new(trajectory: &Trajectory, format: &str, exit_status: &str) -> Summary {
        let first_edit = first_edit(trajectory);
        let first_symptom = first_edit.as_ref().and_then(|e| first_symptom(trajectory, e.step));
        let mut commands_by_kind = BTreeMap::new();
        let mut timeout_steps = Vec::new();
        let mut format_error_steps = Vec::new();
        let mut per_step = Vec::new();
        for (t, step) in trajectory.steps.iter().enumerate() {
            let number = t as u32 + 1;
            for action in &step.actions {
                *commands_by_kind.entry(command_kind(&action.command)).or_insert(0) += 1;
            }
            if step.actions.iter().any(|a| a.timed_out) {
                timeout_steps.push(number);
            }
            if step.actions.is_empty() {
                format_error_steps.push(number);
            }
            per_step.push(StepSummary {
                step: number,
                actions: step.actions.len(),
                returncodes: step.actions.iter().map(|a| a.returncode).collect(),
            });
        }
        Summary {
            format: format.to_string(),
            instance_id: trajectory.task.id.clone(),
            steps: trajectory.length(),
            exit_status: exit_status.to_string(),
            end_type: trajectory.end_type.as_str().to_string(),
            submission_sha256: trajectory
                .submission
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(|s| sha256_hex(s.as_bytes())),
            first_edit,
            first_symptom,
            actions: trajectory.steps.iter().map(|s| s.actions.len()).sum(),
            format_error_steps,
            commands_by_kind,
            timeout_steps,
            per_step,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let cases = [
            ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff", CommandKind::Submit),
            ("sed -i 's/a/b/' pkg/x.py", CommandKind::Edit),
            ("cd /testbed && git apply fix.patch", CommandKind::Edit),
            ("cd /testbed && python -m pytest tests/test_x.py -q", CommandKind::Test),
            ("python3 tests/runtests.py utils_tests.test_dateparse", CommandKind::Test),
            ("cd /testbed && python -c \"print(1 > 0)\"", CommandKind::Run),
            ("python3 reproduce_issue.py", CommandKind::Run),
            ("cat <<'EOF' > reproduce.py\nprint(1)\nEOF", CommandKind::Write),
            ("pip install pytest -q 2>&1 | tail -3", CommandKind::Install),
            ("cd /testbed && git diff astropy/table/table.py", CommandKind::Git),
            ("sed -n '1,20p' a.py", CommandKind::View),
            ("cat -n a.py | head -20", CommandKind::View),
            ("grep -rn \"x > y\" /testbed/astropy", CommandKind::Search),
            ("find /testbed -name '*.py' | xargs grep -l foo", CommandKind::Search),
            ("echo hi", CommandKind::Other),
            (
                "python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('calc/parse.py')\ns = p.read_text()\np.write_text(s)\nEOF",
                CommandKind::Edit,
            ),
            ("python3 - <<'EOF'\nf = open(name, 'w')\nEOF", CommandKind::Edit),
        ];
        for (command, kind) in cases {
            assert_eq!(command_kind(command), kind, "{command}");
        }
    }

    #[test]
    fn skeletons_drop_heredocs_and_quotes() {
        let s = skeleton("cat > /tmp/p.py << 'EOF'\nif a > b: pass\nEOF\npython /tmp/p.py \"x > y\"");
        assert!(!s.contains("a > b") && !s.contains("x > y"), "{s}");
        assert!(s.contains("python /tmp/p.py"), "{s}");
    }

    #[test]
    fn paths_in_the_repository() {
        assert_eq!(in_repo("/testbed/a/b.py", "/testbed").as_deref(), Some("a/b.py"));
        assert_eq!(in_repo("./a/b.py", "/testbed").as_deref(), Some("a/b.py"));
        assert_eq!(in_repo("/tmp/p.py", "/testbed"), None);
        assert_eq!(in_repo("/testbedx/p.py", "/testbed"), None);
    }
}
