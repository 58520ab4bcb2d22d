//! What replay compares, as pure code (docs/method.md §5): the normalization of observations, the three
//! comparison levels, the state fingerprint and the excerpts a non-replayable trajectory is
//! reported with. The worker runs the commands; everything it decides about their results is
//! decided here.
//!
//! - [`Normalizer`]: an ordered list of [`Rule`]s (regexes with replacements) that mask values
//!   with a recognizable context — timestamps, durations, temporary paths, memory addresses,
//!   labelled hashes, process ids under a label. The default set ships in
//!   `record/rules/normalization.yaml`, one comment per rule.
//! - [`compare`]: the first of `exact`, `sorted_lines`, `char_multiset` that matches two
//!   normalized texts; [`Normalizer::compare_action`] checks one recorded action against what
//!   its re-execution observed (output, return code, timeout).
//! - [`fingerprint_paths`]: the changed paths a fingerprint compares — a container diff outside
//!   caches, logs and temporary files; [`Normalizer::compare_fingerprint`] names what differs.
//! - [`excerpt`]: short excerpts around the first difference, for [`NonReplayable`].

use std::collections::{BTreeMap, BTreeSet};

use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};

use crate::jobs::{CompareLevel, MismatchKind, NonReplayable, clip_command};
use crate::trajectory::{Action, Fingerprint};

/// The default rules, as shipped.
pub const DEFAULT_RULES_YAML: &str = include_str!("../rules/normalization.yaml");

/// The command a fingerprint's `git diff` is taken with, in the task's working directory.
/// `--no-optional-locks` keeps git from refreshing (writing) the index: measuring the state must
/// not change it.
pub const GIT_DIFF_COMMAND: &str = "git --no-optional-locks diff";

/// The command a fingerprint's `git status` is taken with (see [`GIT_DIFF_COMMAND`]).
pub const GIT_STATUS_COMMAND: &str = "git --no-optional-locks status --porcelain";

/// The longest excerpt [`excerpt`] returns, in characters (plus the `…` marks).
pub const EXCERPT_CHARS: usize = 400;

/// One normalization rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A unique name, used in errors and tests.
    pub name: String,
    /// A regular expression in the regex crate's syntax.
    pub pattern: String,
    /// What each match becomes; `${1}`, `${2}`… insert groups.
    pub replacement: String,
}

#[derive(Debug, Clone)]
struct Compiled {
    name: String,
    regex: Regex,
    replacement: String,
}

/// An ordered set of compiled [`Rule`]s.
#[derive(Debug, Clone)]
pub struct Normalizer {
    rules: Vec<Compiled>,
}

impl Normalizer {
    /// Compile `rules`; an error names the rule and what is wrong with it.
    pub fn new(rules: &[Rule]) -> Result<Normalizer, String> {
        let mut seen = BTreeSet::new();
        let mut compiled = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            if rule.name.trim().is_empty() {
                return Err(format!("normalization rule {} has an empty name", i + 1));
            }
            if !seen.insert(rule.name.as_str()) {
                return Err(format!("normalization rule {:?} is defined twice", rule.name));
            }
            let regex = Regex::new(&rule.pattern)
                .map_err(|e| format!("normalization rule {:?}: pattern does not compile: {e}", rule.name))?;
            if regex.is_match("") {
                return Err(format!(
                    "normalization rule {:?}: pattern {:?} matches the empty string",
                    rule.name, rule.pattern
                ));
            }
            compiled.push(Compiled { name: rule.name.clone(), regex, replacement: rule.replacement.clone() });
        }
        Ok(Normalizer { rules: compiled })
    }

    /// Parse a rule file (a YAML list of `{name, pattern, replacement}`) and compile it.
    pub fn from_yaml(yaml: &str) -> Result<Normalizer, String> {
        let rules: Vec<Rule> =
            serde_norway::from_str(yaml).map_err(|e| format!("normalization rules are not a list of rules: {e}"))?;
        Normalizer::new(&rules)
    }

    /// The rules' names, in the order they apply.
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.name.as_str())
    }

    /// Apply every rule in order.
    pub fn normalize(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for rule in &self.rules {
            // An empty match (a pattern that can match nothing somewhere) is left as it was, so no
            // rule can insert its replacement between characters.
            let replaced = rule.regex.replace_all(&out, |caps: &Captures<'_>| {
                let mut dst = String::new();
                if caps[0].is_empty() {
                    return dst;
                }
                caps.expand(&rule.replacement, &mut dst);
                dst
            });
            if let std::borrow::Cow::Owned(s) = replaced {
                out = s;
            }
        }
        out
    }

    /// Normalize both texts and [`compare`] them.
    pub fn compare(&self, recorded: &str, replayed: &str) -> Option<CompareLevel> {
        compare(&self.normalize(recorded), &self.normalize(replayed))
    }

    /// Check one recorded action against what its re-execution observed: the normalized output at
    /// the three levels, the return code and the timeout, exactly. Returns the level the output
    /// matched at.
    ///
    /// On a mismatch the [`Mismatch::level`] is `char_multiset` when the output matched at no
    /// level, else the level the output did match at (the return code or the timeout differed);
    /// its [`Mismatch::kind`] is the first of `observation`, `timeout`, `returncode` that differed,
    /// and its [`Mismatch::command`] the recorded command.
    pub fn compare_action(
        &self,
        recorded: &Action,
        output: &str,
        returncode: Option<i32>,
        timed_out: bool,
    ) -> Result<CompareLevel, Mismatch> {
        let rec = self.normalize(&recorded.output);
        let rep = self.normalize(output);
        let level = compare(&rec, &rep);
        let mut reasons = Vec::new();
        if level.is_none() {
            let line = first_differing_line(&rec, &rep) + 1;
            reasons.push(format!("output differs at every level (first at line {line})"));
        }
        if recorded.timed_out != timed_out {
            reasons.push(match recorded.timed_out {
                true => "the recorded command timed out; the replayed one finished".to_owned(),
                false => "the replayed command timed out; the recorded one finished".to_owned(),
            });
        } else if recorded.returncode != returncode {
            reasons.push(format!(
                "return code {} recorded, {} replayed",
                show_code(recorded.returncode),
                show_code(returncode)
            ));
        }
        match (level, reasons.is_empty()) {
            (Some(level), true) => Ok(level),
            (level, _) => {
                let (recorded_excerpt, replayed_excerpt) = excerpt(&rec, &rep);
                let kind = if level.is_none() {
                    MismatchKind::Observation
                } else if recorded.timed_out != timed_out {
                    MismatchKind::Timeout
                } else {
                    MismatchKind::Returncode
                };
                Err(Mismatch {
                    level: level.unwrap_or(CompareLevel::CharMultiset),
                    kind,
                    command: Some(clip_command(&recorded.command)),
                    reason: format!("command {:?}: {}", short(&recorded.command, 120), reasons.join("; ")),
                    recorded_excerpt,
                    replayed_excerpt,
                })
            }
        }
    }

    /// Compare a recorded fingerprint with the replayed one: the changed paths (both through
    /// [`fingerprint_paths`]), the return code, and `git diff` and `git status` after
    /// normalization (status lines of excluded paths dropped), exactly. The error names every
    /// component that differs.
    pub fn compare_fingerprint(&self, recorded: &Fingerprint, replayed: &Fingerprint) -> Result<(), String> {
        self.check_fingerprint(recorded, replayed).map_err(|m| m.reason)
    }

    /// [`Normalizer::compare_fingerprint`] with excerpts of the first component that differs
    /// (`git diff`, then `git status`, then the changed paths), for a [`NonReplayable`]; that
    /// component (the return code when nothing else differs) is the [`Mismatch::kind`]. A
    /// fingerprint knows no command: the caller adds the step's ([`Mismatch::with_command`]).
    pub fn check_fingerprint(&self, recorded: &Fingerprint, replayed: &Fingerprint) -> Result<(), Mismatch> {
        let mut reasons = Vec::new();
        let mut excerpts: Option<(MismatchKind, String, String)> = None;
        let with = |kind: MismatchKind, (a, b): (String, String)| (kind, a, b);

        let rec_paths = fingerprint_paths(recorded.changed_paths.iter().map(String::as_str));
        let rep_paths = fingerprint_paths(replayed.changed_paths.iter().map(String::as_str));
        let paths_differ = rec_paths != rep_paths;
        if paths_differ {
            let rec: BTreeSet<&String> = rec_paths.iter().collect();
            let rep: BTreeSet<&String> = rep_paths.iter().collect();
            let missing: Vec<&str> = rec.difference(&rep).map(|s| s.as_str()).collect();
            let added: Vec<&str> = rep.difference(&rec).map(|s| s.as_str()).collect();
            let mut parts = Vec::new();
            if !missing.is_empty() {
                parts.push(format!("missing in the replay: {}", list(&missing)));
            }
            if !added.is_empty() {
                parts.push(format!("only in the replay: {}", list(&added)));
            }
            reasons.push(format!("changed paths differ ({})", parts.join("; ")));
        }
        if recorded.returncode != replayed.returncode {
            reasons.push(format!(
                "return code {} recorded, {} replayed",
                show_code(recorded.returncode),
                show_code(replayed.returncode)
            ));
        }
        let (rec_diff, rep_diff) = (self.normalize(&recorded.git_diff), self.normalize(&replayed.git_diff));
        if rec_diff != rep_diff {
            let line = first_differing_line(&rec_diff, &rep_diff) + 1;
            reasons.push(format!("git diff differs (first at line {line})"));
            excerpts.get_or_insert_with(|| with(MismatchKind::GitDiff, excerpt(&rec_diff, &rep_diff)));
        }
        let rec_status = status_outside_caches(&self.normalize(&recorded.git_status));
        let rep_status = status_outside_caches(&self.normalize(&replayed.git_status));
        if rec_status != rep_status {
            let line = first_differing_line(&rec_status, &rep_status) + 1;
            reasons.push(format!("git status differs (first at line {line})"));
            excerpts.get_or_insert_with(|| with(MismatchKind::GitStatus, excerpt(&rec_status, &rep_status)));
        }
        if paths_differ {
            excerpts.get_or_insert_with(|| {
                with(MismatchKind::ChangedPaths, excerpt(&rec_paths.join("\n"), &rep_paths.join("\n")))
            });
        }
        if reasons.is_empty() {
            return Ok(());
        }
        let (kind, recorded_excerpt, replayed_excerpt) = excerpts.unwrap_or_else(|| {
            (
                MismatchKind::Returncode,
                format!("return code {}", show_code(recorded.returncode)),
                format!("return code {}", show_code(replayed.returncode)),
            )
        });
        Err(Mismatch {
            level: CompareLevel::Fingerprint,
            kind,
            command: None,
            reason: format!("state fingerprint: {}", reasons.join("; ")),
            recorded_excerpt,
            replayed_excerpt,
        })
    }
}

impl Default for Normalizer {
    /// The shipped rules (`record/rules/normalization.yaml`). A unit test compiles them, so this
    /// cannot fail in a build whose tests pass.
    fn default() -> Self {
        match Normalizer::from_yaml(DEFAULT_RULES_YAML) {
            Ok(n) => n,
            Err(e) => panic!("the shipped normalization rules do not compile: {e}"),
        }
    }
}

/// A replayed observation or state that differs from the record: a [`NonReplayable`] without its
/// step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub level: CompareLevel,
    /// What differed.
    pub kind: MismatchKind,
    /// The recorded command, clipped ([`clip_command`]); `None` until known.
    pub command: Option<String>,
    pub reason: String,
    pub recorded_excerpt: String,
    pub replayed_excerpt: String,
}

impl Mismatch {
    /// The report for a mismatch at the 1-based `step`.
    pub fn at_step(self, step: u32) -> NonReplayable {
        NonReplayable {
            step,
            level: self.level,
            reason: self.reason,
            recorded_excerpt: self.recorded_excerpt,
            replayed_excerpt: self.replayed_excerpt,
            mismatch: Some(self.kind),
            command: self.command,
        }
    }

    /// With the recorded `command` (clipped; none when empty): for a fingerprint's mismatch, the
    /// step's commands.
    pub fn with_command(self, command: &str) -> Mismatch {
        let command = (!command.is_empty()).then(|| clip_command(command));
        Mismatch { command, ..self }
    }
}

/// The first of `exact`, `sorted_lines` (the same multiset of `\n`-separated lines) and
/// `char_multiset` (the same multiset of characters) at which two (normalized) texts match;
/// `None` when none does. Each level accepts everything the stricter ones do.
pub fn compare(recorded: &str, replayed: &str) -> Option<CompareLevel> {
    if recorded == replayed {
        return Some(CompareLevel::Exact);
    }
    if recorded.len() != replayed.len() {
        // Both looser levels keep every byte.
        return None;
    }
    let mut a: Vec<&str> = recorded.split('\n').collect();
    let mut b: Vec<&str> = replayed.split('\n').collect();
    a.sort_unstable();
    b.sort_unstable();
    if a == b {
        return Some(CompareLevel::SortedLines);
    }
    let mut counts: BTreeMap<char, i64> = BTreeMap::new();
    for c in recorded.chars() {
        *counts.entry(c).or_default() += 1;
    }
    for c in replayed.chars() {
        *counts.entry(c).or_default() -= 1;
    }
    counts.values().all(|&n| n == 0).then_some(CompareLevel::CharMultiset)
}

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
fn status_outside_caches(status: &str) -> String {
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

/// Excerpts of both texts around their first difference: from up to two lines before the line
/// where they first differ (and at most 160 characters before the first differing character), at
/// most [`EXCERPT_CHARS`] characters each, `…` marking what was cut.
pub fn excerpt(recorded: &str, replayed: &str) -> (String, String) {
    let common = recorded.chars().zip(replayed.chars()).take_while(|(a, b)| a == b).count();
    (window(recorded, common), window(replayed, common))
}

fn window(text: &str, at: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = at.min(chars.len());
    // The start of the line two lines before the one holding `at`.
    let mut start = at;
    let mut newlines = 0;
    while start > 0 {
        if chars[start - 1] == '\n' {
            newlines += 1;
            if newlines == 3 {
                break;
            }
        }
        start -= 1;
    }
    let start = start.max(at.saturating_sub(160));
    let end = (start + EXCERPT_CHARS).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&chars[start..end]);
    if end < chars.len() {
        out.push('…');
    }
    out
}

/// The 0-based index of the first `\n`-separated line at which two texts differ.
fn first_differing_line(a: &str, b: &str) -> usize {
    let mut la = a.split('\n');
    let mut lb = b.split('\n');
    let mut i = 0;
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => i += 1,
            (None, None) => return i,
            _ => return i,
        }
    }
}

fn show_code(code: Option<i32>) -> String {
    code.map_or_else(|| "none".to_owned(), |c| c.to_string())
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_owned() } else { format!("{}…", s.chars().take(max).collect::<String>()) }
}

fn list(paths: &[&str]) -> String {
    const SHOWN: usize = 10;
    let mut out = paths.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if paths.len() > SHOWN {
        out.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm() -> Normalizer {
        Normalizer::default()
    }

    /// A rule's name, inputs it masks (with the expected text) and inputs it must leave alone.
    type RuleCase<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);

    #[test]
    fn each_default_rule_masks_its_context_and_nothing_else() {
        let cases: &[RuleCase<'_>] = &[
            (
                "iso8601_datetime",
                &[
                    ("at 2026-12-01T11:15:48.123456+00:00 ok", "at <TIMESTAMP> ok"),
                    ("2026-12-01 11:15:48,123 INFO x", "<TIMESTAMP> INFO x"),
                    ("t=2026-12-01T11:15:48Z", "t=<TIMESTAMP>"),
                ],
                &["released 2026-12-01", "version 2026.12.01"],
            ),
            (
                "weekday_datetime",
                &[
                    ("Tue Dec  1 11:15:48 UTC 2026", "<TIMESTAMP>"),
                    ("Date:   Tue Dec 1 11:15:48 2026 +0000", "Date:   <TIMESTAMP>"),
                ],
                &["Tue Dec 1", "Meeting on Tue at 11:15"],
            ),
            (
                "rfc2822_datetime",
                &[
                    ("Date: Tue, 01 Dec 2026 11:15:48 +0000", "Date: <TIMESTAMP>"),
                    ("Tue, 1 Dec 2026 11:15:48 GMT", "<TIMESTAMP>"),
                ],
                &["Tue, 01 Dec 2026"],
            ),
            (
                "syslog_timestamp",
                &[("Dec  1 11:15:48 host cron: x", "<TIMESTAMP> host cron: x")],
                &["Dec 1st at noon", "December 11:15:48"],
            ),
            (
                "syslog_pid",
                &[("Dec  1 11:15:48 host sshd[1234]: ok", "<TIMESTAMP> host sshd[<PID>]: ok")],
                &["    if a[1]:", "x = b[12]: 3"],
            ),
            (
                "ls_mtime",
                &[
                    ("-rw-r--r-- 1 root root 12 Dec  1 11:15 a.py", "-rw-r--r-- 1 root root 12 <TIMESTAMP> a.py"),
                    ("drwxr-xr-x 2 root root 4096 Jan 12  2019 src", "drwxr-xr-x 2 root root 4096 <TIMESTAMP> src"),
                ],
                &["Dec 1", "in Jan 2019 we"],
            ),
            (
                "labelled_epoch",
                &[
                    ("timestamp: 1764587748", "timestamp: <EPOCH>"),
                    ("\"mtime\": 1764587748.25,", "\"mtime\": <EPOCH>,"),
                    ("created=1764587748123", "created=<EPOCH>"),
                ],
                &["1764587748", "id: 1764587748", "time: 17645877"],
            ),
            (
                "bash_time_report",
                &[(
                    "real\t0m0.012s\nuser\t0m0.004s\nsys\t0m0.000s",
                    "real\t<DURATION>\nuser\t<DURATION>\nsys\t<DURATION>",
                )],
                &["surreal 0m0.012 seconds"],
            ),
            (
                "unittest_ran",
                &[
                    ("Ran 3 tests in 0.001s", "Ran 3 tests in <DURATION>"),
                    ("Ran 1 test in 12s", "Ran 1 test in <DURATION>"),
                ],
                &["Ran 3 tests", "Ran in 3 tests"],
            ),
            (
                "pytest_duration",
                &[
                    ("==== 3 passed, 1 warning in 0.12s ====", "==== 3 passed, 1 warning in <DURATION> ===="),
                    ("1 failed in 61.02s (0:01:01)", "1 failed in <DURATION>"),
                    ("2 passed in 0.35 seconds", "2 passed in <DURATION>"),
                    ("no tests ran in 0.01s", "no tests ran in <DURATION>"),
                ],
                &["3 passed", "failed in 3 places"],
            ),
            (
                "labelled_duration",
                &[
                    ("took 1.2 seconds", "took <DURATION>"),
                    ("Elapsed: 35ms", "Elapsed: <DURATION>"),
                    ("Finished in 2 s", "Finished in <DURATION>"),
                ],
                &["took 3 apples", "duration of the task"],
            ),
            (
                "timeit_loop",
                &[("1000 loops, best of 5: 12.3 usec per loop", "1000 loops, best of 5: <DURATION> per loop")],
                &["best of 5 tries"],
            ),
            (
                "fractional_duration",
                &[("step 0.0123s", "step <DURATION>"), ("12.5ms each", "<DURATION> each"), ("3.1µs", "<DURATION>")],
                &["timeout 5s", "version 1.2", "v1.2.3s"],
            ),
            (
                "python_tempfile",
                &[("/tmp/tmpab12cd_x/a.py", "/tmp/<TMP>/a.py")],
                &["/tmp/tmpfile", "/testbed/tmpab12cd_x"],
            ),
            ("mktemp_default", &[("/tmp/tmp.Xq3ZkPa9Lm", "/tmp/<TMP>")], &["/tmp/tmp.txt"]),
            (
                "pip_tempdir",
                &[
                    ("/tmp/pip-install-ab12cd34/x", "/tmp/pip-install-<TMP>/x"),
                    ("/tmp/pip-req-build-x1y2z3w4", "/tmp/pip-req-build-<TMP>"),
                ],
                &["/tmp/pip-install-log"],
            ),
            (
                "pytest_basetemp",
                &[("/tmp/pytest-of-root/pytest-3/test_a0/f.txt", "<TMP>/test_a0/f.txt")],
                &["/tmp/pytest-of-root", "/testbed/pytest-3"],
            ),
            (
                "repr_address",
                &[
                    ("<function f at 0x7f3a2b1c4d50>", "<function f at <ADDR>>"),
                    ("<object at 0x10a>", "<object at <ADDR>>"),
                ],
                &["at 0xyz", "look at 0 x"],
            ),
            (
                "hex_address",
                &[
                    ("ptr 0x7f3a2b1c", "ptr <ADDR>"),
                    ("Thread 0x00007f3a2b1c4d50 (most recent)", "Thread <ADDR> (most recent)"),
                ],
                &["flags 0xff", "mask 0x1234567", "7f3a2b1c4d50"],
            ),
            (
                "git_commit_label",
                &[
                    ("commit 3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345", "commit <HASH>"),
                    ("HEAD is now at 3f2a1b9 Fix", "HEAD is now at <HASH> Fix"),
                    ("revision: abcdef0", "revision: <HASH>"),
                ],
                &["commit the change", "commit abc", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345"],
            ),
            (
                "git_commit_summary",
                &[
                    ("[main 3f2a1b9] Fix it", "[main <HASH>] Fix it"),
                    ("[main (root-commit) 3f2a1b9] x", "[main (root-commit) <HASH>] x"),
                ],
                &["[main] 3f2a1b9", "x [main 3f2a1b9]"],
            ),
            (
                "git_index_line",
                &[("index 3f2a1b9..9c8d7e6 100644", "index <HASH>..<HASH> 100644")],
                &["the index 3f2a1b9..9c8d7e6", "index 1..2"],
            ),
            (
                "git_stash_wip",
                &[
                    (
                        "Saved working directory and index state WIP on main: 3f2a1b9 msg",
                        "Saved working directory and index state WIP on main: <HASH> msg",
                    ),
                    ("stash@{0}: WIP on main: 3f2a1b9 msg", "stash@{0}: WIP on main: <HASH> msg"),
                ],
                &["WIP on main: not a hash"],
            ),
            (
                "git_stash_dropped",
                &[(
                    "Dropped refs/stash@{0} (3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345)",
                    "Dropped refs/stash@{0} (<HASH>)",
                )],
                &["Dropped refs/stash@{0} (3f2a1b9)"],
            ),
            (
                "digest_label",
                &[
                    ("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "sha256:<HASH>"),
                    ("md5=0123456789abcdef0123456789abcdef", "md5=<HASH>"),
                ],
                &["sha256:abc", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"],
            ),
            ("uuid", &[("id 123e4567-e89b-42d3-a456-426614174000 ok", "id <UUID> ok")], &["123e4567-e89b-42d3-a456"]),
            (
                "labelled_pid",
                &[
                    ("pid 1234", "pid <PID>"),
                    ("PID: 1234", "PID: <PID>"),
                    ("worker pid=77 ppid=1", "worker pid=<PID> ppid=<PID>"),
                    ("process id 99", "process id <PID>"),
                ],
                &["rapid 1234", "pids 12"],
            ),
            ("job_control_pid", &[("[1] 12345", "[1] <PID>")], &["x [1] 12345", "[1]+  Done   python x.py"]),
            (
                "ephemeral_port",
                &[("http://127.0.0.1:45123/", "http://127.0.0.1:<PORT>/"), ("localhost:32768", "localhost:<PORT>")],
                &["127.0.0.1:8000", "localhost:32767", "localhost:61000", "10.0.0.1:45123"],
            ),
            (
                "randomly_seed",
                &[("Using --randomly-seed=2847562", "Using --randomly-seed=<SEED>")],
                &["--randomly-seed"],
            ),
        ];
        let n = norm();
        let names: Vec<&str> = n.rule_names().collect();
        for (name, positives, negatives) in cases {
            assert!(names.contains(name), "no rule {name}");
            for (input, expected) in *positives {
                assert_eq!(n.normalize(input), *expected, "rule {name} on {input:?}");
            }
            for input in *negatives {
                assert_eq!(n.normalize(input), *input, "rule {name} must leave {input:?} alone");
            }
        }
        // Every shipped rule has its cases.
        for name in &names {
            assert!(cases.iter().any(|(c, _, _)| c == name), "rule {name} has no test cases");
        }
        assert!(names.len() >= 26, "{} rules", names.len());
    }

    #[test]
    fn a_random_token_is_never_masked() {
        let n = norm();
        for token in [
            "qXkzpTmwbRhavLcYeJdnUgFs",
            "vjqmzkxwbrtlhpyfdgcsnaeu",
            "QWERTYUIOPASDFGHJKLZXCVB",
            "a8f3k2m9q1w7e5r4t6y0u2i3",
        ] {
            for text in [token.to_owned(), format!("token: {token}\n"), format!("savepoint s{token}_x1")] {
                assert_eq!(n.normalize(&text), text);
            }
        }
    }

    #[test]
    fn rule_files_are_checked() {
        let rule =
            |name: &str, pattern: &str| Rule { name: name.into(), pattern: pattern.into(), replacement: "X".into() };
        let err = Normalizer::new(&[rule("broken", "(unclosed")]).unwrap_err();
        assert!(err.contains("\"broken\"") && err.contains("does not compile"), "{err}");
        let err = Normalizer::new(&[rule("empty", "a*")]).unwrap_err();
        assert!(err.contains("\"empty\"") && err.contains("empty string"), "{err}");
        let err = Normalizer::new(&[rule("twice", "a"), rule("twice", "b")]).unwrap_err();
        assert!(err.contains("twice"), "{err}");
        assert!(Normalizer::new(&[rule(" ", "a")]).unwrap_err().contains("empty name"));
        let err = Normalizer::from_yaml("- name: x\n  pattern: a\n").unwrap_err();
        assert!(err.contains("replacement"), "{err}");
        let err = Normalizer::from_yaml("- name: x\n  pattern: a\n  replacement: b\n  extra: 1\n").unwrap_err();
        assert!(err.contains("extra"), "{err}");
        // Rules apply in order, with groups.
        let n = Normalizer::from_yaml(
            "- {name: a, pattern: 'id=(\\d+)', replacement: 'id=<${1}>'}\n- {name: b, pattern: '<\\d+>', replacement: N}\n",
        )
        .unwrap();
        assert_eq!(n.normalize("id=42 id=7"), "id=N id=N");
    }

    #[test]
    fn comparison_levels() {
        assert_eq!(compare("a\nb\n", "a\nb\n"), Some(CompareLevel::Exact));
        assert_eq!(compare("", ""), Some(CompareLevel::Exact));
        assert_eq!(compare("a\nb\nc", "c\na\nb"), Some(CompareLevel::SortedLines));
        assert_eq!(compare("b.py a.py", "a.py b.py"), Some(CompareLevel::CharMultiset));
        assert_eq!(compare("ab\n", "ba\n"), Some(CompareLevel::CharMultiset));
        assert_eq!(compare("a\nb", "a\nc"), None);
        assert_eq!(compare("a\nb\n", "a\nb"), None);
        assert_eq!(compare("a", "a\n"), None);
        // Unicode counts characters, not bytes.
        assert_eq!(compare("µa", "aµ"), Some(CompareLevel::CharMultiset));
        // Normalization first.
        let n = norm();
        assert_eq!(n.compare("done in 0.12s", "done in 0.98s"), Some(CompareLevel::Exact));
        assert_eq!(n.compare("took 1 s\nx", "x\ntook 2 s"), Some(CompareLevel::SortedLines));
    }

    fn action(output: &str, returncode: Option<i32>, timed_out: bool) -> Action {
        Action { command: "run".into(), timeout_s: 10.0, output: output.into(), returncode, timed_out, exception: None }
    }

    #[test]
    fn actions_are_checked_for_output_code_and_timeout() {
        let n = norm();
        assert_eq!(n.compare_action(&action("ok\n", Some(0), false), "ok\n", Some(0), false), Ok(CompareLevel::Exact));
        assert_eq!(
            n.compare_action(&action("1 passed in 0.1s\n", Some(0), false), "1 passed in 0.3s\n", Some(0), false),
            Ok(CompareLevel::Exact)
        );
        let m = n.compare_action(&action("token abc\n", Some(0), false), "token xyz\n", Some(0), false).unwrap_err();
        assert_eq!(m.level, CompareLevel::CharMultiset);
        assert_eq!((m.kind, m.command.as_deref()), (MismatchKind::Observation, Some("run")));
        assert!(m.reason.contains("output differs") && m.reason.contains("line 1"), "{}", m.reason);
        assert!(m.recorded_excerpt.contains("abc") && m.replayed_excerpt.contains("xyz"));
        let m = n.compare_action(&action("b\na\n", Some(0), false), "a\nb\n", Some(1), false).unwrap_err();
        assert_eq!(m.level, CompareLevel::SortedLines);
        assert_eq!(m.kind, MismatchKind::Returncode);
        assert!(m.reason.contains("return code 0 recorded, 1 replayed"), "{}", m.reason);
        let m = n.compare_action(&action("partial", None, true), "partial", Some(0), false).unwrap_err();
        assert_eq!(m.kind, MismatchKind::Timeout);
        assert!(m.reason.contains("recorded command timed out"), "{}", m.reason);
        // Output and return code both differ: the output is what differed first.
        let m = n.compare_action(&action("a\n", Some(0), false), "b\n", Some(2), false).unwrap_err();
        assert_eq!(m.kind, MismatchKind::Observation);
        assert_eq!(n.compare_action(&action("partial", None, true), "partial", None, true), Ok(CompareLevel::Exact));
        let m = n.compare_action(&action("x", Some(0), false), "x", None, true).unwrap_err();
        assert!(m.reason.contains("replayed command timed out"), "{}", m.reason);
        let report = m.at_step(7);
        assert_eq!(report.step, 7);
        assert_eq!((report.mismatch, report.command.as_deref()), (Some(MismatchKind::Timeout), Some("run")));
        // A long command is clipped.
        let long = Action { command: "x".repeat(1000), ..action("a", Some(0), false) };
        let m = n.compare_action(&long, "b", Some(0), false).unwrap_err();
        assert_eq!(m.command.unwrap().chars().count(), crate::jobs::COMMAND_CHARS + 1);
    }

    fn fp(paths: &[&str], code: Option<i32>, diff: &str, status: &str) -> Fingerprint {
        Fingerprint {
            changed_paths: paths.iter().map(|p| p.to_string()).collect(),
            returncode: code,
            git_diff: diff.into(),
            git_status: status.into(),
        }
    }

    #[test]
    fn fingerprint_paths_leave_out_caches_logs_and_parents() {
        let paths = [
            "/testbed",
            "/testbed/src",
            "/testbed/src/a.py",
            "/testbed/src/__pycache__",
            "/testbed/src/__pycache__/a.cpython-311.pyc",
            "/testbed/old.pyc",
            "/testbed/.pytest_cache/v/cache/lastfailed",
            "/testbed/.git/index",
            "/testbed/.git",
            "/testbed/.coverage.host.12.xyz",
            "/testbed/src-extra",
            "/root",
            "/root/.cache/pip/x",
            "/home/u/.cache/y",
            "/tmp",
            "/tmp/tmpab12cd_x",
            "/var/log/dpkg.log",
            "/var/cache/apt",
            "/etc/hosts",
            "/etc/passwd",
            "/testbed/new_dir/",
            "/testbed/src/a.py",
        ];
        assert_eq!(
            fingerprint_paths(paths),
            ["/etc/passwd", "/testbed/new_dir", "/testbed/src-extra", "/testbed/src/a.py"]
        );
        assert!(is_excluded_path("src/__pycache__/"));
        assert!(is_excluded_path("/tmp"));
        assert!(!is_excluded_path("/tmpfile"));
        assert!(!is_excluded_path("/testbed/cache.py"));
    }

    #[test]
    fn fingerprints_match_after_normalization_and_name_what_differs() {
        let n = norm();
        let diff =
            "diff --git a/x.py b/x.py\nindex 3f2a1b9..9c8d7e6 100644\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n";
        let recorded = fp(&["/testbed", "/testbed/x.py"], Some(0), diff, " M x.py\n?? src/__pycache__/\n");
        let same =
            fp(&["/testbed/x.py", "/tmp/tmpzz99yy00"], Some(0), &diff.replace("3f2a1b9", "1234567"), " M x.py\n");
        assert_eq!(n.compare_fingerprint(&recorded, &same), Ok(()));

        let err = n.compare_fingerprint(&recorded, &fp(&["/testbed/y.py"], Some(0), diff, " M x.py\n")).unwrap_err();
        assert!(err.contains("missing in the replay: /testbed/x.py"), "{err}");
        let m = n.check_fingerprint(&recorded, &fp(&["/testbed/y.py"], Some(0), diff, " M x.py\n")).unwrap_err();
        assert_eq!((m.kind, m.command.as_deref()), (MismatchKind::ChangedPaths, None));
        assert_eq!(m.with_command("echo y > y.py").at_step(2).command.as_deref(), Some("echo y > y.py"));
        let m = n.check_fingerprint(&recorded, &fp(&["/testbed/x.py"], Some(1), diff, " M x.py\n")).unwrap_err();
        assert_eq!((m.kind, m.with_command("").command), (MismatchKind::Returncode, None));
        assert!(err.contains("only in the replay: /testbed/y.py"), "{err}");

        let err = n.compare_fingerprint(&recorded, &fp(&["/testbed/x.py"], Some(1), diff, " M x.py\n")).unwrap_err();
        assert!(err.contains("return code 0 recorded, 1 replayed"), "{err}");

        let m =
            n.check_fingerprint(&recorded, &fp(&["/testbed/x.py"], Some(0), &diff.replace("+b", "+c"), " M x.py\n"));
        let m = m.unwrap_err();
        assert_eq!((m.level, m.kind), (CompareLevel::Fingerprint, MismatchKind::GitDiff));
        assert!(m.reason.contains("git diff differs (first at line 7)"), "{}", m.reason);
        assert!(m.recorded_excerpt.contains("+b") && m.replayed_excerpt.contains("+c"));

        let changed = fp(&["/testbed/x.py"], Some(0), diff, " M x.py\n?? y.py\n");
        assert_eq!(n.check_fingerprint(&recorded, &changed).unwrap_err().kind, MismatchKind::GitStatus);
        let err = n.compare_fingerprint(&recorded, &changed).unwrap_err();
        assert!(err.contains("git status differs"), "{err}");
        assert!(!err.contains("git diff"), "{err}");
    }

    #[test]
    fn excerpts_surround_the_first_difference() {
        let rec: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let rep = rec.replace("line 50\n", "line fifty\n");
        let (a, b) = excerpt(&rec, &rep);
        assert!(a.starts_with("…line 48\nline 49\nline 50\n"), "{a:?}");
        assert!(b.starts_with("…line 48\nline 49\nline fifty\n"), "{b:?}");
        assert!(a.chars().count() <= EXCERPT_CHARS + 2 && a.ends_with('…'));
        // One long line: the window starts shortly before the difference.
        let long_a = format!("{}X{}", "a".repeat(5000), "b".repeat(5000));
        let long_b = format!("{}Y{}", "a".repeat(5000), "b".repeat(5000));
        let (a, b) = excerpt(&long_a, &long_b);
        assert!(a.contains('X') && b.contains('Y'));
        assert!(a.chars().count() <= EXCERPT_CHARS + 2);
        // Short and equal texts come whole.
        assert_eq!(excerpt("ok\n", "ok\n"), ("ok\n".to_owned(), "ok\n".to_owned()));
        assert_eq!(excerpt("", "x"), (String::new(), "x".to_owned()));
    }

    #[test]
    fn normalizes_real_looking_outputs() {
        let n = norm();
        let recorded = "============================= test session starts ==============================\n\
platform linux -- Python 3.9.20, pytest-7.4.0, pluggy-1.3.0\n\
rootdir: /testbed\n\
collected 2 items\n\n\
tests/test_a.py .F                                                       [100%]\n\n\
E       AssertionError: <Table object at 0x7f3a2b1c4d50> != 3\n\
========================= 1 failed, 1 passed in 0.43s ==========================\n";
        let replayed = recorded.replace("0x7f3a2b1c4d50", "0x7f99aa001122").replace("0.43s", "0.51s");
        assert_eq!(n.compare(recorded, &replayed), Some(CompareLevel::Exact));
    }
}
