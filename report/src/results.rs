//! Every trajectory of a study analyzed: the [`Results`] an export writes (`results.json`, and the
//! rows of `trajectories.csv` and `curves.csv`), and what the report, the analyses and the figures
//! are built from. Pure: a [`StudyRecord`] in, [`Results`] out.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vcurve_method::curve::CurveAnalysis;
use vcurve_method::schedule::{Key, Series, Stage, TrajectorySchedule};
use vcurve_method::{CurveError, Point, Shape, analyze};

use vcurve_record::{BaseRunRecord, DecoySpec, EvaluationStats, StudyRecord, TrajectoryRecord, TrajectoryState};

/// One trajectory's row of `trajectories.csv`, and its entry in `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryResult {
    pub trajectory: String,
    pub task: String,
    pub state: TrajectoryState,
    pub stage: Stage,
    pub length: u32,
    /// `None`, with every curve quantity, for a doomed or non-replayable trajectory (no curve is
    /// built) and for one never measured: no continuation of its main series has an outcome yet
    /// (waiting, replaying, or cancelled before any ran). Such a trajectory exports its `state`
    /// and no shape, never a flat curve with `pnr = T`.
    pub shape: Option<Shape>,
    pub v0_fit: Option<f64>,
    pub concentration: Option<f64>,
    pub t_star: Option<u32>,
    pub decisive_a: Option<u32>,
    pub decisive_b: Option<u32>,
    pub onset: Option<u32>,
    pub pnr: Option<u32>,
    pub pnr_certified: Option<bool>,
    pub restart_point: Option<u32>,
    /// Continuations with an outcome or retired, all series.
    pub continuations: u32,
    pub retired: u32,
    /// Continuations whose run ended at the step cap (exhausted its budget).
    #[serde(default)]
    pub cap_hits: u32,
    /// Continuations requested by each stage (the paper's Table 13).
    pub continuations_by_stage: BTreeMap<Stage, u32>,
    /// `source → step` (`None` = no mistake).
    pub labels: Vec<(String, Option<u32>)>,
    /// Every sampled point of every series, analyzed.
    pub series: BTreeMap<Series, Vec<vcurve_method::FittedPoint>>,
    /// The task's base runs (for restart values and the `t = 0` sanity control).
    pub base_runs: vcurve_method::BaseRuns,
    /// The controls this trajectory carried (docs/method.md §7).
    pub controls: vcurve_method::schedule::Controls,
    /// The first step after which `git diff` of the repository's tracked files is not empty:
    /// measured when the trajectory is replayed in a container; `null` (not measured) until then
    /// (and for a trajectory without a recorded run), `"never"` for a run that never edits.
    #[serde(default)]
    pub first_edit: vcurve_method::analyses::Observation,
    /// The first step after the first edit whose observation shows a failure signal (`null`: not
    /// measured, `"never"`: a silent run, or one that never edits).
    #[serde(default)]
    pub first_symptom: vcurve_method::analyses::Observation,
    /// Where `first_edit` and `first_symptom` come from when measured: `"replay"` (the replay
    /// job); absent when not measured. A study never guesses them from the commands (the
    /// importer's heuristic, marked as such by `vcurve import` and `vcurve inspect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_edit_source: Option<ObservationSource>,
    /// Why the trajectory was dropped as non-replayable (step, level, reason, excerpts), when it
    /// was: it has no curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_replayable: Option<vcurve_record::jobs::NonReplayable>,
    /// Its replay (anchors committed, the level each step matched at), once it reproduced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<vcurve_record::jobs::Replayed>,
    /// The digest of its recorded run, when the study gave one: the trajectories replay applies
    /// to (the replay check of Table 4 counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
}

impl TrajectoryResult {
    /// Whether its main curve was measured: at least one continuation of the main series has an
    /// outcome. A doomed or non-replayable trajectory has none; nor has one that is waiting,
    /// replaying, or was cancelled or cut short before any continuation ran.
    pub fn measured(&self) -> bool {
        self.series.get(&Series::Main).is_some_and(|p| !p.is_empty())
    }

    /// Whether its replay finished: reproduced every step (`Some(true)`) or dropped it as
    /// non-replayable (`Some(false)`, also when a continuation's replay of the prefix dropped it
    /// later); `None` for a trajectory without a recorded run or whose replay has not finished.
    pub fn replay_reconstructed(&self) -> Option<bool> {
        self.recorded.as_ref()?;
        match (self.state, &self.replay) {
            (TrajectoryState::NonReplayable, _) => Some(false),
            (_, Some(_)) => Some(true),
            (_, None) => None,
        }
    }
}

/// Who measured a trajectory's first edit and first symptom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationSource {
    /// Replay in a container, step by step (docs/method.md §3).
    Replay,
}

/// How a study's patches were judged (docs/method.md §6): the counts of the patch cache, with the flake
/// rate and the share of runs the cache saved an evaluation. Measured for a study of the `agent`
/// runner only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    #[serde(flatten)]
    pub stats: EvaluationStats,
    /// Flakes of the flake checks; `null` (not measured) when no flake check was made.
    pub flake_rate: Option<f64>,
    /// The share of judged runs that needed no evaluation of their own (a cache hit or an empty
    /// patch); `null` with no run judged.
    pub saved_share: Option<f64>,
}

impl Evaluation {
    /// The study's evaluation, or `None` (not measured) for a runner that judges no patch.
    pub fn of(study: &StudyRecord) -> Option<Evaluation> {
        study.spec.runner.runs_containers().then(|| Evaluation {
            stats: study.evaluation,
            flake_rate: study.evaluation.flake_rate(),
            saved_share: study.evaluation.saved_share(),
        })
    }
}

/// Everything an export writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub name: String,
    pub schedule: String,
    pub budget: u32,
    /// The parameters the schedule ran under (the study's, as its variant adjusted them).
    pub thresholds: vcurve_method::Thresholds,
    /// Labelled successful runs (scored by the restart policies, never continued).
    #[serde(default)]
    pub decoys: Vec<DecoySpec>,
    /// How the study's patches were judged; `null` (not measured) for a study whose runner
    /// judges no patch (synthetic).
    #[serde(default)]
    pub evaluation: Option<Evaluation>,
    pub trajectories: Vec<TrajectoryResult>,
    /// Every base run with an outcome, by subject and seed; absent for a study that made none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_runs: Vec<vcurve_record::BaseRunRecord>,
    /// The selection the study set was drawn by, with its back-fills; absent for a study that
    /// lists its trajectories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<vcurve_method::selection::Selection>,
    /// Every job retired after repeated no-outcomes, by kind, with the reasons of their last
    /// no-outcomes; absent when no job was retired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_jobs: Vec<vcurve_record::jobs::RetiredJobs>,
}

fn points_of(outcomes: &[(Series, u32, u32, vcurve_method::schedule::Outcome)], series: Series) -> Vec<Point> {
    let mut by_t: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for &(s, t, _, outcome) in outcomes {
        if s != series {
            continue;
        }
        let entry = by_t.entry(t).or_default();
        match outcome {
            vcurve_method::schedule::Outcome::Success => *entry = (entry.0 + 1, entry.1 + 1),
            vcurve_method::schedule::Outcome::Failure => entry.0 += 1,
            vcurve_method::schedule::Outcome::Retired => {}
        }
    }
    by_t.into_iter().filter(|(_, (n, _))| *n > 0).map(|(t, (n, successes))| Point { t, n, successes }).collect()
}

/// Analyze every trajectory of a study.
pub fn results(study: &StudyRecord) -> Result<Results, CurveError> {
    results_from(study, study.trajectories.iter())
}

/// [`results`] of a study whose trajectories come one at a time, in processing order (the store
/// reads them so): `head` is the study without them. Only one trajectory's outcomes are held at a
/// time.
pub fn results_from<R: Borrow<TrajectoryRecord>>(
    head: &StudyRecord,
    trajectories: impl IntoIterator<Item = R>,
) -> Result<Results, CurveError> {
    let spec = &head.spec;
    let variant = vcurve_method::schedule::variants::variant_by_name(&spec.schedule);
    let params = variant.map_or_else(|| spec.thresholds.clone(), |v| v.params(&spec.thresholds));
    let mut out = Vec::new();
    for (record, tspec) in trajectories.into_iter().zip(&spec.trajectories) {
        out.push(trajectory_result(spec, variant, &params, record.borrow(), tspec)?);
    }
    Ok(Results {
        name: spec.name.clone(),
        schedule: spec.schedule.clone(),
        budget: spec.budget,
        thresholds: params,
        decoys: spec.decoys.clone(),
        evaluation: Evaluation::of(head),
        trajectories: out,
        base_runs: {
            let mut runs = head.base_runs.clone();
            runs.sort_by(by_subject_and_seed);
            runs
        },
        selection: head.selection.clone(),
        retired_jobs: head.retired.clone(),
    })
}

/// One trajectory analyzed.
fn trajectory_result(
    spec: &vcurve_record::StudySpec,
    variant: Option<&'static dyn vcurve_method::schedule::Variant>,
    params: &vcurve_method::Thresholds,
    record: &TrajectoryRecord,
    tspec: &vcurve_record::TrajectorySpec,
) -> Result<TrajectoryResult, CurveError> {
    let mut series = BTreeMap::new();
    let mut main: Option<CurveAnalysis> = None;
    if !matches!(record.state, TrajectoryState::Doomed | TrajectoryState::NonReplayable) {
        for s in Series::ALL {
            let points = points_of(&record.outcomes, s);
            if points.is_empty() {
                // Not measured: an empty series would analyze as a flat curve with `pnr = T`.
                continue;
            }
            let base = (s == Series::Main).then_some(&tspec.base_runs).filter(|b| !b.0.is_empty());
            let analysis = analyze(record.plan.length, &points, base, spec.budget, params)?;
            series.insert(s, analysis.points.clone());
            if s == Series::Main {
                main = Some(analysis);
            }
        }
    }
    let by_stage = match variant {
        Some(v) if record.state.has_curve() => {
            let outcomes = record.outcomes.iter().map(|&(series, t, seed, o)| (Key { series, t, seed }, o));
            TrajectorySchedule::rebuild(&record.plan, &spec.thresholds, v, outcomes).cost_by_stage().clone()
        }
        _ => BTreeMap::new(),
    };
    // Measured by the replay job, when it ran and measured them.
    let observed = record.replay.as_ref().map_or_else(Default::default, |r| (r.first_edit, r.first_symptom));
    let retired = record.outcomes.iter().filter(|o| o.3 == vcurve_method::schedule::Outcome::Retired).count() as u32;
    Ok(TrajectoryResult {
        trajectory: record.id.clone(),
        task: tspec.task.clone(),
        state: record.state,
        stage: record.stage,
        length: record.plan.length,
        shape: main.as_ref().map(|a| a.shape),
        v0_fit: main.as_ref().and_then(|a| a.v0_fit()),
        concentration: main.as_ref().and_then(|a| a.concentration),
        t_star: main.as_ref().and_then(|a| a.t_star),
        decisive_a: main.as_ref().and_then(|a| a.decisive_interval.map(|i| i.a)),
        decisive_b: main.as_ref().and_then(|a| a.decisive_interval.map(|i| i.b)),
        onset: main.as_ref().and_then(|a| a.onset),
        pnr: main.as_ref().map(|a| a.pnr),
        pnr_certified: main.as_ref().map(|a| a.pnr_certified),
        restart_point: main.as_ref().and_then(|a| a.restart_point),
        continuations: record.outcomes.len() as u32,
        retired,
        cap_hits: record.cap_hits,
        continuations_by_stage: by_stage,
        labels: tspec.labels.iter().map(|l| (l.source.clone(), l.step)).collect(),
        series,
        base_runs: tspec.base_runs.clone(),
        controls: record.plan.controls,
        first_edit: observed.0,
        first_symptom: observed.1,
        first_edit_source: observed.0.is_measured().then_some(ObservationSource::Replay),
        non_replayable: record.non_replayable.clone(),
        replay: record.replay.clone(),
        recorded: tspec.recorded.clone(),
    })
}

/// The order base runs are exported in: by subject, then seed.
pub fn by_subject_and_seed(a: &BaseRunRecord, b: &BaseRunRecord) -> std::cmp::Ordering {
    (a.subject.as_str(), a.seed).cmp(&(b.subject.as_str(), b.seed))
}
