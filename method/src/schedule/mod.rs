//! The adaptive schedule of docs/method.md §4 as a per-trajectory state machine.
//!
//! A [`TrajectorySchedule`] is told the outcomes of continuations and says which continuation keys
//! `(series, t, seed)` to run next. It is pure: no clock, no store, no async. It is also *order
//! free*: every decision is taken at a barrier (all continuations a step asked for have an outcome
//! or are retired) and reads only counts of keys that step asked for, so feeding it the same
//! outcomes in any order — or all at once after a restart — gives the same requests and points.
//!
//! ## How a stage runs
//!
//! A stage is a set of [`Lane`]s. A lane is a small sequential state machine: it raises points to
//! some `K` ([`Target`]), waits until every key of its last targets has an outcome, then looks at
//! the counts and raises more points or finishes. The bisection stage runs one lane per pair, so
//! pairs proceed concurrently without waiting on each other (their intervals are disjoint); every
//! other stage has one lane. A stage ends when all its lanes have finished; the next stage starts
//! then, and the trajectory is done after the last.
//!
//! ## Keys and seeds
//!
//! Raising a point to `K` adds the seeds `n .. K−1`; a key is never issued twice. A retired key
//! (no outcome after the retry limit) completes its barrier but does not count in `n`. Outcomes
//! for seeds beyond what was requested are kept and used once the point is raised that far — that
//! is how a coordinator rebuilds a schedule from its store after a restart.

mod lanes;
pub mod variants;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Thresholds;
use crate::curve::Point;
pub use lanes::{Lane, LaneContext, Memory};
pub use variants::{VARIANTS, Variant, variant_by_name};

/// Which curve a continuation belongs to (docs/method.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Series {
    /// The V-curve, budget `B − t`.
    Main,
    /// Fresh-seed re-screening at three anchors (test–retest control), budget `B − t`.
    Retest,
    /// Screening anchors with the full budget `B` (budget control).
    FullBudget,
}

impl Series {
    pub const ALL: [Series; 3] = [Series::Main, Series::Retest, Series::FullBudget];

    pub fn as_str(&self) -> &'static str {
        match self {
            Series::Main => "main",
            Series::Retest => "retest",
            Series::FullBudget => "full_budget",
        }
    }

    pub fn parse(s: &str) -> Option<Series> {
        Series::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The step budget of a continuation of this series from `h_t`.
    pub fn budget(&self, budget: u32, t: u32) -> u32 {
        match self {
            Series::Main | Series::Retest => budget.saturating_sub(t),
            Series::FullBudget => budget,
        }
    }
}

/// The stages of docs/method.md §4, in order, plus the controls of §7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Screen,
    Bisect,
    Confirm,
    Pnr,
    Labels,
    Controls,
    Done,
}

impl Stage {
    pub const ALL: [Stage; 7] =
        [Stage::Screen, Stage::Bisect, Stage::Confirm, Stage::Pnr, Stage::Labels, Stage::Controls, Stage::Done];

    pub fn as_str(&self) -> &'static str {
        match self {
            Stage::Screen => "screen",
            Stage::Bisect => "bisect",
            Stage::Confirm => "confirm",
            Stage::Pnr => "pnr",
            Stage::Labels => "labels",
            Stage::Controls => "controls",
            Stage::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// One continuation of one trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key {
    pub series: Series,
    pub t: u32,
    pub seed: u32,
}

/// What became of a continuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Failure,
    /// No outcome after the retry limit: completes barriers, does not count in `n`.
    Retired,
}

/// Raise the point `(series, t)` to `k` continuations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub series: Series,
    pub t: u32,
    pub k: u32,
}

/// Which controls of docs/method.md §7 this trajectory carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controls {
    /// `t = 0` sanity: compares the main series at `t = 0` with the base runs; adds no runs.
    pub sanity: bool,
    /// Test–retest: screening repeated with fresh seeds at the first, middle and last anchor.
    pub retest: bool,
    /// Budget control: every anchor screened again with the full budget `B`.
    pub budget_control: bool,
}

/// What the schedule needs to know of a trajectory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrajectoryPlan {
    /// `T`, the failed run's length.
    pub length: u32,
    /// Labeled first-mistake steps `m` (1-based), any order, duplicates allowed; "no mistake"
    /// labels are left out.
    pub labels: Vec<u32>,
    pub controls: Controls,
}

/// Why the schedule refused an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("t = {t} is not a prefix of a trajectory of length {length} (the terminal point is never sampled)")]
    NotAPrefix { t: u32, length: u32 },
}

/// Whether a recorded outcome was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    New,
    /// The key already had an outcome; nothing changed.
    Duplicate,
}

/// One point's keys: how many seeds were requested, and the outcome of each seed that has one.
#[derive(Debug, Clone, Default)]
struct PointState {
    requested: u32,
    outcomes: Vec<Option<Outcome>>,
}

impl PointState {
    fn outcome(&self, seed: u32) -> Option<Outcome> {
        self.outcomes.get(seed as usize).copied().flatten()
    }

    /// `(n, successes)` over the requested seeds, retired keys left out.
    fn counts(&self) -> (u32, u32) {
        self.outcomes.iter().take(self.requested as usize).flatten().fold((0, 0), |(n, s), o| match o {
            Outcome::Success => (n + 1, s + 1),
            Outcome::Failure => (n + 1, s),
            Outcome::Retired => (n, s),
        })
    }

    fn complete_up_to(&self, k: u32) -> bool {
        (0..k).all(|seed| self.outcome(seed).is_some())
    }
}

/// The points of one trajectory as lanes see them.
#[derive(Debug, Clone, Default)]
pub struct Points {
    length: u32,
    points: BTreeMap<(Series, u32), PointState>,
}

impl Points {
    /// `(n, successes)` of a point; `(0, 0)` when unsampled. The terminal point reads `(0, 0)`
    /// too: use [`Points::v_hat`], which knows `V̂(T) = 0`.
    pub fn counts(&self, series: Series, t: u32) -> (u32, u32) {
        self.points.get(&(series, t)).map_or((0, 0), PointState::counts)
    }

    /// `V̂(h_t)`: `0` at the terminal point, `None` for an unsampled point.
    pub fn v_hat(&self, series: Series, t: u32) -> Option<f64> {
        if t >= self.length {
            return Some(0.0);
        }
        let (n, s) = self.counts(series, t);
        (n > 0).then(|| f64::from(s) / f64::from(n))
    }

    /// Raw drop `V̂(a) − V̂(b)`, treating an unsampled point as 0.
    pub fn drop(&self, series: Series, a: u32, b: u32) -> f64 {
        self.v_hat(series, a).unwrap_or(0.0) - self.v_hat(series, b).unwrap_or(0.0)
    }

    /// Continuations requested at a point so far.
    pub fn requested(&self, series: Series, t: u32) -> u32 {
        self.points.get(&(series, t)).map_or(0, |p| p.requested)
    }

    /// Every sampled point of a series with `n ≥ 1`, by `t`.
    pub fn sampled(&self, series: Series) -> Vec<Point> {
        self.points
            .iter()
            .filter(|((s, _), _)| *s == series)
            .filter_map(|(&(_, t), p)| {
                let (n, successes) = p.counts();
                (n > 0).then_some(Point { t, n, successes })
            })
            .collect()
    }

    fn complete(&self, target: &Target) -> bool {
        target.t >= self.length
            || self.points.get(&(target.series, target.t)).is_some_and(|p| p.complete_up_to(target.k))
    }
}

/// A lane of the current stage with the targets it waits on.
struct ActiveLane {
    lane: Box<dyn Lane>,
    waiting: Vec<Target>,
}

/// The schedule of one trajectory. See the module docs.
pub struct TrajectorySchedule {
    plan: TrajectoryPlan,
    params: Thresholds,
    variant: &'static dyn Variant,
    stages: Vec<Stage>,
    stage_index: usize,
    lanes: Vec<ActiveLane>,
    points: Points,
    memory: Memory,
    cost: BTreeMap<Stage, u32>,
}

impl std::fmt::Debug for TrajectorySchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrajectorySchedule")
            .field("variant", &self.variant.name())
            .field("length", &self.plan.length)
            .field("stage", &self.stage())
            .finish_non_exhaustive()
    }
}

impl TrajectorySchedule {
    /// Start the schedule of a trajectory: the first stage's requests are ready at once.
    ///
    /// `params` are the study's parameters; the variant adjusts them (e.g. `K = 4` screening).
    pub fn new(plan: TrajectoryPlan, params: &Thresholds, variant: &'static dyn Variant) -> Self {
        let params = variant.params(params);
        let stages = variant.stages().to_vec();
        let mut schedule = TrajectorySchedule {
            points: Points { length: plan.length, points: BTreeMap::new() },
            plan,
            params,
            variant,
            stages,
            stage_index: 0,
            lanes: Vec::new(),
            memory: Memory::default(),
            cost: BTreeMap::new(),
        };
        schedule.start_stage();
        schedule.advance();
        schedule
    }

    /// A schedule rebuilt from every stored outcome of its trajectory. The schedule is order-free,
    /// so this gives the same requests whatever order the outcomes arrived in, and after any
    /// restart. Outcomes at prefixes beyond the trajectory cannot have been requested by this
    /// schedule (they would come from a corrupted store) and are skipped.
    pub fn rebuild(
        plan: &TrajectoryPlan,
        params: &Thresholds,
        variant: &'static dyn Variant,
        outcomes: impl IntoIterator<Item = (Key, Outcome)>,
    ) -> Self {
        let mut schedule = TrajectorySchedule::new(plan.clone(), params, variant);
        let valid = outcomes.into_iter().filter(|(k, _)| k.t < plan.length);
        schedule.record_all(valid).expect("filtered to prefixes of the trajectory");
        schedule
    }

    /// The parameters in force (the study's, as the variant adjusted them).
    pub fn params(&self) -> &Thresholds {
        &self.params
    }

    pub fn plan(&self) -> &TrajectoryPlan {
        &self.plan
    }

    pub fn variant(&self) -> &'static dyn Variant {
        self.variant
    }

    /// The current stage ([`Stage::Done`] when finished).
    pub fn stage(&self) -> Stage {
        self.stages.get(self.stage_index).copied().unwrap_or(Stage::Done)
    }

    pub fn is_done(&self) -> bool {
        self.stage() == Stage::Done
    }

    pub fn points(&self) -> &Points {
        &self.points
    }

    /// What the stages learned (e.g. the bracketed and confirmed pairs).
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Continuations requested by each stage so far.
    pub fn cost_by_stage(&self) -> &BTreeMap<Stage, u32> {
        &self.cost
    }

    /// Continuations requested so far, in all.
    pub fn requested_total(&self) -> u32 {
        self.cost.values().sum()
    }

    /// Every requested key that has no outcome yet, sorted.
    pub fn pending(&self) -> Vec<Key> {
        self.points
            .points
            .iter()
            .flat_map(|(&(series, t), p)| {
                (0..p.requested).filter(|&seed| p.outcome(seed).is_none()).map(move |seed| Key { series, t, seed })
            })
            .collect()
    }

    /// Every key requested so far, sorted.
    pub fn requested_keys(&self) -> Vec<Key> {
        self.points
            .points
            .iter()
            .flat_map(|(&(series, t), p)| (0..p.requested).map(move |seed| Key { series, t, seed }))
            .collect()
    }

    /// Record the outcome of a key and advance as far as the outcomes allow.
    pub fn record(&mut self, key: Key, outcome: Outcome) -> Result<Recorded, ScheduleError> {
        let recorded = self.record_only(key, outcome)?;
        if recorded == Recorded::New {
            self.advance();
        }
        Ok(recorded)
    }

    /// Record many outcomes, then advance once (rebuilding from a store).
    pub fn record_all(&mut self, outcomes: impl IntoIterator<Item = (Key, Outcome)>) -> Result<(), ScheduleError> {
        for (key, outcome) in outcomes {
            self.record_only(key, outcome)?;
        }
        self.advance();
        Ok(())
    }

    fn record_only(&mut self, key: Key, outcome: Outcome) -> Result<Recorded, ScheduleError> {
        if key.t >= self.plan.length {
            return Err(ScheduleError::NotAPrefix { t: key.t, length: self.plan.length });
        }
        let point = self.points.points.entry((key.series, key.t)).or_default();
        let slot = key.seed as usize;
        if point.outcomes.len() <= slot {
            point.outcomes.resize(slot + 1, None);
        }
        if point.outcomes[slot].is_some() {
            return Ok(Recorded::Duplicate);
        }
        point.outcomes[slot] = Some(outcome);
        Ok(Recorded::New)
    }

    fn start_stage(&mut self) {
        loop {
            let stage = self.stage();
            if stage == Stage::Done {
                return;
            }
            let ctx = self.context();
            let lanes = self.variant.lanes(stage, &ctx, &self.memory, &self.points);
            if lanes.is_empty() {
                self.stage_index += 1;
                continue;
            }
            self.lanes = lanes.into_iter().map(|lane| ActiveLane { lane, waiting: Vec::new() }).collect();
            return;
        }
    }

    fn context(&self) -> LaneContext {
        LaneContext {
            length: self.plan.length,
            anchors: self.params.anchors(self.plan.length),
            labels: self.plan.labels.clone(),
            controls: self.plan.controls,
            params: self.params.clone(),
        }
    }

    /// Let every lane whose barrier is met take its next step, until all wait on outcomes or the
    /// trajectory is done.
    fn advance(&mut self) {
        while self.stage() != Stage::Done {
            let mut progressed = false;
            let mut i = 0;
            while i < self.lanes.len() {
                if !self.lanes[i].waiting.iter().all(|t| self.points.complete(t)) {
                    i += 1;
                    continue;
                }
                progressed = true;
                let stage = self.stage();
                let ActiveLane { lane, waiting } = &mut self.lanes[i];
                match lane.next(&self.points, &mut self.memory) {
                    Some(targets) => {
                        *waiting = targets;
                        for target in waiting.iter() {
                            raise(&mut self.points, &mut self.cost, stage, *target);
                        }
                        i += 1;
                    }
                    None => {
                        self.lanes.swap_remove(i);
                    }
                }
            }
            if self.lanes.is_empty() {
                self.stage_index += 1;
                self.start_stage();
            } else if !progressed {
                return;
            }
        }
    }
}

/// Raise a point to `k` requested continuations (never lowering it; the terminal point is never
/// sampled), charging the new seeds to `stage`.
fn raise(points: &mut Points, cost: &mut BTreeMap<Stage, u32>, stage: Stage, target: Target) {
    if target.t >= points.length {
        return;
    }
    let point = points.points.entry((target.series, target.t)).or_default();
    if target.k > point.requested {
        *cost.entry(stage).or_default() += target.k - point.requested;
        point.requested = target.k;
    }
}

#[cfg(test)]
mod tests;
