//! A study as data: the validated spec a study runs from, and what the store holds of it.
//!
//! These are plain values. The coordinator parses and validates a YAML spec into a [`StudySpec`]
//! (`vcurve_coordinator::spec`), stores it, and hands out a [`StudyRecord`] — the spec with every
//! trajectory's state and outcomes — to whatever renders results (`vcurve-report`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vcurve_method::schedule::{Outcome, Series, Stage, TrajectoryPlan};
use vcurve_method::{BaseRuns, Thresholds};

use crate::jobs::{NonReplayable, Replayed};
pub use crate::runner::RunnerSpec;

/// A validated study: what the coordinator stores and schedules from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudySpec {
    pub name: String,
    /// The study seed; the synthetic runner hashes it into every outcome.
    pub seed: u64,
    /// The step budget `B`; always equal to `thresholds.budget`.
    pub budget: u32,
    /// A name from `vcurve_method::schedule::variants::variant_names`.
    pub schedule: String,
    pub runner: RunnerSpec,
    /// The paper's parameters with the spec's overrides, validated; the budget, control counts
    /// and batch parameters are the ones in effect.
    pub thresholds: Thresholds,
    pub controls: ControlCounts,
    pub admission: Admission,
    /// In processing order (the file's order); ids are unique.
    pub trajectories: Vec<TrajectorySpec>,
    /// Successful runs that judges labelled (docs/method.md §7): never continued, only scored — a judge's
    /// restart policy that restarts a decoy forfeits a success.
    #[serde(default)]
    pub decoys: Vec<DecoySpec>,
    /// Tasks the study makes base runs of (docs/method.md §7): every failed base run becomes a
    /// trajectory of the study, with `R̂(x, b)` from the task's base runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskRuns>,
    /// How the study set is chosen from the tasks' base runs (docs/method.md §7): present whenever
    /// `tasks` is; the band, cap and decoy count are in `thresholds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<SelectionSpec>,
    /// Set on an online restart check (Appendix Q): a study of fresh base runs with reduced
    /// budgets, one row per trajectory of another study with a restart point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_check: Option<RestartCheckSpec>,
    /// Set on a task-state study (docs/task-state.md): a session of each task, then the model
    /// stages; it has no trajectories, base runs or selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<crate::task_state::TaskStateSettings>,
    /// The judge models that label the first mistake of every trajectory (`judges:`,
    /// docs/spec.md "Judge labels"), by name: each name is a label source.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub judges: BTreeMap<String, crate::task_state::StageModel>,
}

/// The `selection:` block: the seed of the fixed order and the size of the study set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionSpec {
    /// The seed of every draw of the selection (`vcurve_method::selection`).
    pub seed: u64,
    /// Stop selecting at this many trajectories; `None`: as many as the per-task cap allows.
    pub target: Option<u32>,
}

/// An online restart check of study `of` (Appendix Q): for every trajectory with a restart
/// point `t_r`, `runs` fresh runs of its task from `h_0` with budget `B − t_r` and new seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartCheckSpec {
    /// The study whose restart points are checked.
    pub of: String,
    /// Fresh runs per trajectory.
    pub runs: u32,
    /// One per trajectory with a restart point, in the checked study's processing order.
    pub rows: Vec<RestartCheckRow>,
}

/// One trajectory of a restart check, with what the checked study predicted for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartCheckRow {
    pub trajectory: String,
    pub task: String,
    /// `t_r`; the fresh runs have budget `B − t_r`.
    pub restart_point: u32,
    /// `R̂(x, B − t_r)` from the task's base runs.
    pub predicted: f64,
    /// `V(h_{t_r})`, the value of continuing (the isotonic fit).
    pub continuing: f64,
}

impl RestartCheckRow {
    /// The budget of its fresh runs under a study budget `budget`.
    pub fn budget(&self, budget: u32) -> u32 {
        budget.saturating_sub(self.restart_point)
    }
}

/// A task and how many base runs from `h_0` to make of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRuns {
    pub task: crate::trajectory::Task,
    pub base_runs: u32,
}

/// A successful run of a study's task that judges labelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecoySpec {
    pub id: String,
    /// The task it is a run of: one of the study's trajectories' tasks.
    pub task: String,
    /// Its number of steps.
    pub length: u32,
    /// In the file's order; a step means the judge would restart it there.
    pub labels: Vec<Label>,
    /// The digest of its recorded run (`recorded:`), which the study's judges read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
}

/// How many of the first trajectories, in processing order, carry each control of docs/method.md §7.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlCounts {
    pub sanity: u32,
    pub retest: u32,
    pub budget_control: u32,
}

/// When new trajectories are admitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Admission {
    /// Whenever free worker slots exceed the runnable continuations.
    #[default]
    Demand,
    /// The paper's rule: `batch_size` at a time, when fewer than `pipeline_threshold` are in flight.
    Batch { batch_size: u32, pipeline_threshold: u32 },
}

/// One failed trajectory of the study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectorySpec {
    pub id: String,
    /// The task it is a run of; trajectories of one task share it.
    pub task: String,
    /// `T`, the number of steps.
    pub length: u32,
    /// The true curve `V(h_t)` for `t = 0..length−1` (the synthetic runner's ground truth).
    pub curve: Option<Vec<f64>>,
    /// In the file's order.
    pub labels: Vec<Label>,
    pub base_runs: BaseRuns,
    /// The digest of the recorded run ([`Trajectory::digest`](crate::trajectory::Trajectory::digest)),
    /// where the study gives one: it is replayed before any continuation runs from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
}

/// A judge's first-mistake label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub source: String,
    /// The 1-based step `m`; `None` is "no mistake".
    pub step: Option<u32>,
}

impl TrajectorySpec {
    /// The labeled steps, "no mistake" left out, in the file's order (what the schedule probes).
    pub fn labeled_steps(&self) -> Vec<u32> {
        self.labels.iter().filter_map(|l| l.step).collect()
    }
}

/// A study's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StudyState {
    Running,
    Done,
    Cancelled,
}

impl StudyState {
    pub fn as_str(&self) -> &'static str {
        match self {
            StudyState::Running => "running",
            StudyState::Done => "done",
            StudyState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [StudyState::Running, StudyState::Done, StudyState::Cancelled].into_iter().find(|x| x.as_str() == s)
    }
}

/// A trajectory's state in a study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrajectoryState {
    /// Not admitted yet.
    Waiting,
    /// Admitted; its recorded run is being replayed before any continuation runs from it.
    Replaying,
    Running,
    Done,
    /// The task's pass rate is at most `ε₀`: nothing to localize, no curve is built.
    Doomed,
    /// A replay or a continuation met a state that differs from the record (docs/method.md §5): it is
    /// dropped, with the step and the reason, and no continuation of it is issued again.
    NonReplayable,
}

impl TrajectoryState {
    pub fn as_str(&self) -> &'static str {
        match self {
            TrajectoryState::Waiting => "waiting",
            TrajectoryState::Replaying => "replaying",
            TrajectoryState::Running => "running",
            TrajectoryState::Done => "done",
            TrajectoryState::Doomed => "doomed",
            TrajectoryState::NonReplayable => "non_replayable",
        }
    }

    pub const ALL: [TrajectoryState; 6] = [
        TrajectoryState::Waiting,
        TrajectoryState::Replaying,
        TrajectoryState::Running,
        TrajectoryState::Done,
        TrajectoryState::Doomed,
        TrajectoryState::NonReplayable,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        TrajectoryState::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Whether the trajectory has a curve to analyze (it was admitted and not dropped).
    pub fn has_curve(self) -> bool {
        matches!(self, TrajectoryState::Running | TrajectoryState::Done)
    }
}

/// One trajectory's stored state, for export and reports.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryRecord {
    pub id: String,
    pub state: TrajectoryState,
    pub stage: Stage,
    pub plan: TrajectoryPlan,
    /// Every continuation with an outcome: `(series, t, seed, outcome)`.
    pub outcomes: Vec<(Series, u32, u32, Outcome)>,
    /// Continuations with an outcome whose run ended at the step cap (exhausted its budget).
    pub cap_hits: u32,
    /// Why the trajectory is non-replayable, when it is.
    pub non_replayable: Option<NonReplayable>,
    /// Its replay, once one reproduced every step.
    pub replay: Option<Replayed>,
}

/// A study with everything needed to export it.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyRecord {
    pub id: String,
    pub state: StudyState,
    pub spec: StudySpec,
    pub trajectories: Vec<TrajectoryRecord>,
    /// How the study's patches were judged (docs/method.md §6).
    pub evaluation: EvaluationStats,
    /// Every base run that ended with an outcome, by subject (the task; a restart check's row:
    /// the trajectory) and seed.
    pub base_runs: Vec<BaseRunRecord>,
    /// The selection the study set was drawn by, with its back-fills; `None` for a study that
    /// lists its trajectories.
    pub selection: Option<vcurve_method::selection::Selection>,
    /// The jobs retired without an outcome, by kind (continuations, replays, evaluations, base
    /// runs), each kind with at least one; empty when none was.
    pub retired: Vec<crate::jobs::RetiredJobs>,
    /// The logs of its judges' label calls that ended (of its trajectories and decoys), in
    /// call-key order: `calls.csv` of its export. Empty for a study without judges.
    pub calls: Vec<crate::llm::ModelCall>,
}

/// A base run with an outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRunRecord {
    /// The task id; in a restart check, the checked trajectory's id.
    pub subject: String,
    pub seed: u32,
    pub success: bool,
    pub steps: u32,
    pub end_type: crate::trajectory::EndType,
}

/// How a study's patches were judged: through the patch cache, evaluated, re-checked for flakes
/// (docs/method.md §6, the Table 4 checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvaluationStats {
    /// Runs whose patch was evaluated for them.
    pub evaluated_runs: u64,
    /// Runs judged by a verdict already in the cache.
    pub cache_hits: u64,
    /// Runs whose empty patch failed without evaluation.
    pub empty_patches: u64,
    /// Distinct non-empty patches judged.
    pub unique_patches: u64,
    /// Evaluations carried out in all: the runs' own and the flake re-checks.
    pub evaluations: u64,
    /// Evaluations of a patch after its first (re-checks, and concurrent first evaluations).
    pub flake_checks: u64,
    /// Of those, the ones whose verdict differed from the first.
    pub flakes: u64,
    /// Base runs that ended with an outcome (each judged a patch, like a continuation's).
    #[serde(default)]
    pub base_run_outcomes: u64,
}

impl EvaluationStats {
    /// Runs judged in all (each through the cache: evaluated once, a hit, or an empty patch).
    pub fn judged_runs(&self) -> u64 {
        self.evaluated_runs + self.cache_hits + self.empty_patches
    }

    /// The share of flake checks that disagreed; `None` when none was made (not measured).
    pub fn flake_rate(&self) -> Option<f64> {
        (self.flake_checks > 0).then(|| self.flakes as f64 / self.flake_checks as f64)
    }

    /// The share of judged runs that needed no evaluation of their own; `None` with no run.
    pub fn saved_share(&self) -> Option<f64> {
        let judged = self.judged_runs();
        (judged > 0).then(|| (self.cache_hits + self.empty_patches) as f64 / judged as f64)
    }
}
