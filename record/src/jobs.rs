//! The work a coordinator hands out and what workers report back, as the coordinator and the
//! workers both see it. The wire types of `vcurve.v1` are converted to and from these in one
//! module on each side.

use std::fmt;

use serde::{Deserialize, Serialize};
use vcurve_method::analyses::Observation;
use vcurve_method::schedule::Series;

use crate::trajectory::EndType;

/// The kinds of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A resumed run of the agent from `h_t` of a trajectory, with one seed.
    Continuation,
    /// Re-execute a recorded trajectory in a fresh container, verify every step, commit anchors.
    Replay,
    /// Judge a patch: an evaluation the patch cache asked for, or a flake re-check.
    Evaluation,
    /// A full run from `h_0` that records a new trajectory.
    BaseRun,
    /// A task-state study's multi-turn session of the agent on one task (docs/task-state.md).
    Session,
    /// One call of a task-state study's model stages, keyed by its
    /// [`crate::task_state::CallKey`].
    ModelCall,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Continuation => "continuation",
            JobKind::Replay => "replay",
            JobKind::Evaluation => "evaluation",
            JobKind::BaseRun => "base_run",
            JobKind::Session => "session",
            JobKind::ModelCall => "model_call",
        }
    }
}

/// One continuation of one study: `(study, trajectory, series, t, seed)` (docs/method.md §1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ContinuationKey {
    pub study: String,
    pub trajectory: String,
    pub series: Series,
    /// The prefix length: the continuation resumes from `h_t`.
    pub t: u32,
    /// The 0-based seed index within the point.
    pub seed: u32,
}

impl fmt::Display for ContinuationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/{}/{}", self.study, self.trajectory, self.series.as_str(), self.t, self.seed)
    }
}

/// One job of one study, of any kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobKey {
    Continuation(ContinuationKey),
    Replay {
        study: String,
        trajectory: String,
    },
    /// `round` 0 is the first evaluation of a patch, 1 its flake re-check.
    Evaluation {
        study: String,
        task: String,
        patch_sha256: String,
        round: u32,
    },
    BaseRun {
        study: String,
        task: String,
        seed: u32,
    },
    /// A task-state study's session of the agent on `task`.
    Session {
        study: String,
        task: String,
    },
    /// A task-state study's model call; `call` is its [`crate::task_state::CallKey`]'s subject.
    ModelCall {
        study: String,
        call: String,
    },
}

impl JobKey {
    pub fn kind(&self) -> JobKind {
        match self {
            JobKey::Continuation(_) => JobKind::Continuation,
            JobKey::Replay { .. } => JobKind::Replay,
            JobKey::Evaluation { .. } => JobKind::Evaluation,
            JobKey::BaseRun { .. } => JobKind::BaseRun,
            JobKey::Session { .. } => JobKind::Session,
            JobKey::ModelCall { .. } => JobKind::ModelCall,
        }
    }

    pub fn study(&self) -> &str {
        match self {
            JobKey::Continuation(k) => &k.study,
            JobKey::Replay { study, .. }
            | JobKey::Evaluation { study, .. }
            | JobKey::BaseRun { study, .. }
            | JobKey::Session { study, .. }
            | JobKey::ModelCall { study, .. } => study,
        }
    }

    /// The trajectory the job works on (continuations and replays).
    pub fn trajectory(&self) -> Option<&str> {
        match self {
            JobKey::Continuation(k) => Some(&k.trajectory),
            JobKey::Replay { trajectory, .. } => Some(trajectory),
            JobKey::Evaluation { .. } | JobKey::BaseRun { .. } | JobKey::Session { .. } | JobKey::ModelCall { .. } => {
                None
            }
        }
    }

    /// The continuation key, for a continuation.
    pub fn continuation(&self) -> Option<&ContinuationKey> {
        match self {
            JobKey::Continuation(k) => Some(k),
            _ => None,
        }
    }
}

impl From<ContinuationKey> for JobKey {
    fn from(key: ContinuationKey) -> Self {
        JobKey::Continuation(key)
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobKey::Continuation(k) => write!(f, "{k}"),
            JobKey::Replay { study, trajectory } => write!(f, "{study}/{trajectory}/replay"),
            JobKey::Evaluation { study, task, patch_sha256, round } => {
                write!(f, "{study}/{task}/evaluation/{patch_sha256}/{round}")
            }
            JobKey::BaseRun { study, task, seed } => write!(f, "{study}/{task}/base_run/{seed}"),
            JobKey::Session { study, task } => write!(f, "{study}/{task}/session"),
            JobKey::ModelCall { study, call } => write!(f, "{study}/call/{call}"),
        }
    }
}

/// A key with the attempt it was dispatched under: the same key leased again after a lost lease
/// or a no-outcome carries a higher attempt, and every heartbeat, report and release names the
/// attempt it is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HeldJob {
    pub key: JobKey,
    pub attempt: u32,
}

/// The comparison levels of replay, strictest first (docs/method.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareLevel {
    Exact,
    /// The same whole lines in another order.
    SortedLines,
    /// The same characters in another order: no longer accepted (it let a changed line such as
    /// `a + b` → `b + a` pass); kept to read replays and mismatches stored before.
    CharMultiset,
    /// The recorded state fingerprint (changed paths, return code, `git diff`, `git status`).
    Fingerprint,
}

impl CompareLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            CompareLevel::Exact => "exact",
            CompareLevel::SortedLines => "sorted_lines",
            CompareLevel::CharMultiset => "char_multiset",
            CompareLevel::Fingerprint => "fingerprint",
        }
    }
}

/// How a run's patch was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    /// Evaluated for this run.
    Evaluated,
    /// The same patch was judged before.
    Cached,
    /// An empty patch fails without evaluation.
    EmptyPatch,
}

impl Judged {
    pub fn as_str(self) -> &'static str {
        match self {
            Judged::Evaluated => "evaluated",
            Judged::Cached => "cached",
            Judged::EmptyPatch => "empty_patch",
        }
    }
}

/// A run that ended (a continuation or a base run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// `Y`: whether the patch resolved the task.
    pub success: bool,
    /// Steps the agent used, at most the budget.
    pub steps: u32,
    pub end_type: EndType,
    /// Hex SHA-256 of the submitted patch.
    pub patch_sha256: String,
    pub judged: Judged,
    /// The digest of a file the worker uploaded with the run: a base run's recorded trajectory
    /// (`vcurve.trajectory.v1`), or a continuation's transcript when the study keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
}

/// The state reached differs from the record (docs/method.md §5): the trajectory is dropped, and no
/// continuation ever runs from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonReplayable {
    /// 1-based step of the first mismatch; 0 when no replay could be carried out.
    pub step: u32,
    /// The loosest comparison level tried at that step.
    pub level: CompareLevel,
    pub reason: String,
    /// Excerpts of the recorded and the replayed observation, normalized.
    pub recorded_excerpt: String,
    pub replayed_excerpt: String,
    /// What differed (the paper's Table 14, right); `None` in a report stored before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<MismatchKind>,
    /// The recorded command at that step, at most [`COMMAND_CHARS`] characters
    /// ([`clip_command`]); the step's commands one a line when the state after it differed.
    /// `None` when there is none: no replay was carried out, the step ran no command, or the
    /// report was stored before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl NonReplayable {
    /// A trajectory no replay could be carried out for (every attempt ended without an outcome):
    /// no state is known to match the record. Step 0, no excerpts, no command.
    pub fn no_outcome(reason: impl Into<String>) -> NonReplayable {
        NonReplayable {
            step: 0,
            level: CompareLevel::Exact,
            reason: reason.into(),
            recorded_excerpt: String::new(),
            replayed_excerpt: String::new(),
            mismatch: Some(MismatchKind::NoOutcome),
            command: None,
        }
    }
}

/// What differed at a trajectory's first mismatch. The paper's Table 14 names `observation`,
/// `returncode` and `docker_diff_sha256` (its fingerprint held a digest of the container diff);
/// here the fingerprint's parts are named one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKind {
    /// A command's normalized output matched at no comparison level.
    Observation,
    /// A command's return code differed (its output matched), or the return code of the state
    /// fingerprint did.
    Returncode,
    /// A command timed out in one run and finished in the other.
    Timeout,
    /// The fingerprint's changed paths (the container diff outside caches, logs and temporary
    /// files) differed.
    ChangedPaths,
    /// The fingerprint's `git diff` differed.
    GitDiff,
    /// The fingerprint's `git status` differed.
    GitStatus,
    /// No replay could be carried out ([`NonReplayable::no_outcome`]).
    NoOutcome,
}

impl MismatchKind {
    pub const ALL: [MismatchKind; 7] = [
        MismatchKind::Observation,
        MismatchKind::Returncode,
        MismatchKind::Timeout,
        MismatchKind::ChangedPaths,
        MismatchKind::GitDiff,
        MismatchKind::GitStatus,
        MismatchKind::NoOutcome,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MismatchKind::Observation => "observation",
            MismatchKind::Returncode => "returncode",
            MismatchKind::Timeout => "timeout",
            MismatchKind::ChangedPaths => "changed_paths",
            MismatchKind::GitDiff => "git_diff",
            MismatchKind::GitStatus => "git_status",
            MismatchKind::NoOutcome => "no_outcome",
        }
    }

    pub fn parse(s: &str) -> Option<MismatchKind> {
        MismatchKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The longest command a [`NonReplayable`] keeps, in characters (plus a `…` mark).
pub const COMMAND_CHARS: usize = 400;

/// `command` cut to [`COMMAND_CHARS`] characters, `…` marking a cut.
pub fn clip_command(command: &str) -> String {
    match command.char_indices().nth(COMMAND_CHARS) {
        None => command.to_owned(),
        Some((end, _)) => format!("{}…", &command[..end]),
    }
}

/// The jobs of one kind a study retired: every attempt ended without an outcome, up to the retry
/// limit (`retries_before_retired`), so the key is never run again. Shown by `vcurve status`, the
/// export (`results.json`) and the report, with the reasons of their last no-outcomes, so that no
/// job disappears unseen (a base run whose trajectory could not be uploaded, a replay the engine
/// failed, an evaluation that never finished).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredJobs {
    pub kind: JobKind,
    /// How many were retired.
    pub count: u64,
    /// The reasons of their last no-outcomes, the most frequent first (ties by text), at most
    /// [`RETIRED_REASONS`] of them, each clipped to [`RETIRED_REASON_CHARS`] characters; the
    /// counts of the reasons left out are in `count` only.
    pub reasons: Vec<RetiredReason>,
}

/// One reason jobs were retired for, and how many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredReason {
    pub reason: String,
    pub count: u64,
}

/// How the reason of a run retired at the study's wall-clock cap begins ([`JobReport::capped`]).
pub const CAPPED: &str = "capped at the study's run_timeout_s: ";

impl RetiredReason {
    /// Whether these jobs were runs capped by the study's wall-clock limit (not retried).
    pub fn capped(&self) -> bool {
        self.reason.starts_with(CAPPED)
    }
}

/// The most reasons [`RetiredJobs`] lists per kind.
pub const RETIRED_REASONS: usize = 5;

/// The longest a [`RetiredReason`] is, in characters (a longer one ends with `…`).
pub const RETIRED_REASON_CHARS: usize = 300;

impl RetiredJobs {
    /// The retired jobs of one kind from `(reason, count)` pairs (a `None` reason: none was
    /// stored), `None` when there is none.
    pub fn of(kind: JobKind, reasons: impl IntoIterator<Item = (Option<String>, u64)>) -> Option<RetiredJobs> {
        let mut merged: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        for (reason, n) in reasons {
            let reason = reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| "no reason recorded".to_owned());
            let reason = match reason.char_indices().nth(RETIRED_REASON_CHARS) {
                None => reason,
                Some((end, _)) => format!("{}…", &reason[..end]),
            };
            *merged.entry(reason).or_default() += n;
        }
        let count = merged.values().sum();
        if count == 0 {
            return None;
        }
        let mut reasons: Vec<RetiredReason> =
            merged.into_iter().map(|(reason, count)| RetiredReason { reason, count }).collect();
        // Capped runs first, so that their count is never among the reasons left out.
        reasons.sort_by(|a, b| {
            b.capped().cmp(&a.capped()).then(b.count.cmp(&a.count)).then_with(|| a.reason.cmp(&b.reason))
        });
        reasons.truncate(RETIRED_REASONS);
        Some(RetiredJobs { kind, count, reasons })
    }

    /// How many of them were runs capped by the study's wall-clock limit, among the reasons
    /// listed (a capped reason is never cut from the list: [`RetiredJobs::of`] lists them first).
    pub fn capped(&self) -> u64 {
        self.reasons.iter().filter(|r| r.capped()).map(|r| r.count).sum()
    }

    /// One line: `3 base runs: 2× "reason", 1× "other reason"`.
    pub fn text(&self) -> String {
        let kind = match (self.kind, self.count) {
            (JobKind::Continuation, 1) => "continuation",
            (JobKind::Continuation, _) => "continuations",
            (JobKind::Replay, 1) => "replay",
            (JobKind::Replay, _) => "replays",
            (JobKind::Evaluation, 1) => "evaluation",
            (JobKind::Evaluation, _) => "evaluations",
            (JobKind::BaseRun, 1) => "base run",
            (JobKind::BaseRun, _) => "base runs",
            (JobKind::Session, 1) => "session",
            (JobKind::Session, _) => "sessions",
            (JobKind::ModelCall, 1) => "model call",
            (JobKind::ModelCall, _) => "model calls",
        };
        let reasons: Vec<String> = self.reasons.iter().map(|r| format!("{}× {:?}", r.count, r.reason)).collect();
        let listed: u64 = self.reasons.iter().map(|r| r.count).sum();
        let more = if listed < self.count { format!(", {} more", self.count - listed) } else { String::new() };
        format!("{} {kind}: {}{more}", self.count, reasons.join(", "))
    }
}

/// A replay that reproduced every step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// The anchors committed.
    pub anchors: Vec<u32>,
    /// The level each step `1..=T` matched at.
    pub levels: Vec<CompareLevel>,
    /// The digest of the fingerprints the replay recorded where the trajectory had none (a JSON
    /// object from step to [`Fingerprint`](crate::Fingerprint)), kept as a file by the coordinator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprints: Option<String>,
    /// The first edit the replay measured (docs/method.md §3): the first step after which `git
    /// diff` of the repository's tracked files is not empty, or never; not measured (absent) in a
    /// report of a worker that does not measure it.
    #[serde(default, skip_serializing_if = "not_measured")]
    pub first_edit: Observation,
    /// The first step after the first edit whose replayed observation carries a failure signal
    /// ([`crate::import::failure_signal`]), or never (also on a run that never edits); not
    /// measured (absent) with the first edit.
    #[serde(default, skip_serializing_if = "not_measured")]
    pub first_symptom: Observation,
}

fn not_measured(o: &Observation) -> bool {
    !o.is_measured()
}

/// What a worker reports for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum JobReport {
    /// A continuation or base run ended and was judged.
    Outcome(RunOutcome),
    /// The job had no outcome (killed, evaluation failed): the key is run again, and retired
    /// after the retry limit.
    NoOutcome { reason: String },
    /// A continuation or base run hit the study's wall-clock cap (`runner.run_timeout_s`): no
    /// outcome, and the key is not run again (the cap would censor it again); it is retired at
    /// once with the reason [`JobReport::capped`] gives it, and counted (never dropped unseen).
    Capped { reason: String },
    /// A continuation or replay met a state that differs from the record.
    NonReplayable(NonReplayable),
    /// A replay reproduced every step.
    Replayed(Replayed),
    /// An evaluation's verdict.
    Evaluated { resolved: bool },
    /// A session ended with every turn: the [`crate::task_state::RecordedSession`] uploaded by
    /// its SHA-256.
    SessionRecorded { recorded: String },
    /// A model call ended, answered, malformed or failed: the [`crate::task_state::CallOutput`]
    /// uploaded by its SHA-256. A malformed or failed call is recorded, never scored, and not
    /// asked again.
    CallAnswered { output: String },
}

impl JobReport {
    /// A [`JobReport::NoOutcome`] with the given reason.
    pub fn no_outcome(reason: impl Into<String>) -> Self {
        JobReport::NoOutcome { reason: reason.into() }
    }

    /// A [`JobReport::Capped`]: the reason starts with [`CAPPED`], so that the retired jobs a
    /// study lists count the capped runs apart ([`RetiredReason::capped`]).
    pub fn capped(reason: impl AsRef<str>) -> Self {
        let reason = reason.as_ref();
        let reason = if reason.starts_with(CAPPED) { reason.to_string() } else { format!("{CAPPED}{reason}") };
        JobReport::Capped { reason }
    }

    /// Whether a job of `kind` may report this; anything else is refused as a protocol error.
    pub fn fits(&self, kind: JobKind) -> bool {
        matches!(
            (self, kind),
            (JobReport::NoOutcome { .. }, _)
                | (JobReport::Outcome(_) | JobReport::Capped { .. }, JobKind::Continuation | JobKind::BaseRun)
                | (JobReport::NonReplayable(_), JobKind::Continuation | JobKind::Replay)
                | (JobReport::Replayed(_), JobKind::Replay)
                | (JobReport::Evaluated { .. }, JobKind::Evaluation)
                | (JobReport::SessionRecorded { .. } | JobReport::Capped { .. }, JobKind::Session)
                | (JobReport::CallAnswered { .. }, JobKind::ModelCall)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_jobs_merge_their_reasons_most_frequent_first() {
        assert_eq!(RetiredJobs::of(JobKind::BaseRun, []), None);
        assert_eq!(RetiredJobs::of(JobKind::BaseRun, [(Some("x".into()), 0)]), None);
        let long = "y".repeat(RETIRED_REASON_CHARS + 10);
        let r = RetiredJobs::of(
            JobKind::BaseRun,
            [(Some("upload failed".into()), 2), (None, 1), (Some(" ".into()), 1), (Some(long.clone()), 3)],
        )
        .unwrap();
        assert_eq!(r.count, 7);
        let clipped = format!("{}…", &long[..RETIRED_REASON_CHARS]);
        let reasons: Vec<(&str, u64)> = r.reasons.iter().map(|x| (x.reason.as_str(), x.count)).collect();
        assert_eq!(reasons, [(clipped.as_str(), 3), ("no reason recorded", 2), ("upload failed", 2)]);
        assert!(r.text().starts_with("7 base runs: 3× \"yyy"), "{}", r.text());
        assert!(r.text().ends_with("2× \"no reason recorded\", 2× \"upload failed\""), "{}", r.text());
        // More reasons than listed: the rest is counted.
        let many = RetiredJobs::of(JobKind::Replay, (0..8).map(|i| (Some(format!("r{i}")), 1))).unwrap();
        assert_eq!((many.count, many.reasons.len()), (8, RETIRED_REASONS));
        assert!(
            many.text().starts_with("8 replays: 1× \"r0\"") && many.text().ends_with(", 3 more"),
            "{}",
            many.text()
        );
        // Runs capped by the study's wall-clock limit are listed first and counted apart.
        let JobReport::Capped { reason } = JobReport::capped("the run took longer than its 60 s") else { panic!() };
        assert_eq!(reason, format!("{CAPPED}the run took longer than its 60 s"));
        let mut reasons: Vec<(Option<String>, u64)> = (0..8).map(|i| (Some(format!("r{i}")), 3)).collect();
        reasons.push((Some(reason), 1));
        let with_cap = RetiredJobs::of(JobKind::Continuation, reasons).unwrap();
        assert_eq!((with_cap.count, with_cap.capped()), (25, 1));
        assert!(with_cap.reasons[0].capped());
        assert_eq!(r.capped(), 0);
        let one = RetiredJobs::of(JobKind::Evaluation, [(Some("timed out".into()), 1)]).unwrap();
        assert_eq!(one.text(), "1 evaluation: 1× \"timed out\"");
    }

    #[test]
    fn a_non_replayable_stored_before_its_mismatch_kind_and_command_still_reads() {
        let old = r#"{"step":3,"level":"char_multiset","reason":"output differs","recorded_excerpt":"a","replayed_excerpt":"b"}"#;
        let n: NonReplayable = serde_json::from_str(old).unwrap();
        assert_eq!((n.step, n.level, n.mismatch, n.command.as_deref()), (3, CompareLevel::CharMultiset, None, None));
        // Without them it writes what it was read from.
        assert_eq!(serde_json::to_string(&n).unwrap(), old);
        let new = NonReplayable { mismatch: Some(MismatchKind::GitDiff), command: Some("git stash".into()), ..n };
        let json = serde_json::to_value(&new).unwrap();
        assert_eq!((json["mismatch"].as_str(), json["command"].as_str()), (Some("git_diff"), Some("git stash")));
        assert_eq!(serde_json::from_value::<NonReplayable>(json).unwrap(), new);
    }

    #[test]
    fn mismatch_kinds_name_themselves_as_serde_does() {
        for k in MismatchKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            assert_eq!(MismatchKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(MismatchKind::parse("docker_diff_sha256"), None);
        let n = NonReplayable::no_outcome("3 attempts");
        assert_eq!((n.step, n.mismatch, n.command.as_deref()), (0, Some(MismatchKind::NoOutcome), None));
    }

    #[test]
    fn commands_are_clipped_by_characters() {
        assert_eq!(clip_command("ls -la"), "ls -la");
        let exact = "µ".repeat(COMMAND_CHARS);
        assert_eq!(clip_command(&exact), exact);
        let long = format!("{exact}tail");
        assert_eq!(clip_command(&long), format!("{exact}…"));
    }
}
