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
mod points;
mod variant;
pub mod variants;

use std::collections::BTreeMap;

use crate::Thresholds;
pub use lanes::{Lane, LaneContext, Memory};
pub use points::{Controls, Key, Outcome, Points, Recorded, ScheduleError, Series, Stage, Target, TrajectoryPlan};
pub use variant::Variant;
pub use variants::{VARIANTS, variant_by_name};

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
