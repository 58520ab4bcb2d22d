//! Pure decisions the store takes inside its transactions: rebuilding a trajectory's schedule from
//! its stored outcomes, ordering work, and admitting trajectories. No I/O here.

use vcurve_method::Thresholds;
use vcurve_method::schedule::{Controls, Key, Outcome, Stage, TrajectoryPlan, TrajectorySchedule, Variant};

use crate::spec::{Admission, ControlCounts};

/// What the schedule says after replaying a trajectory's outcomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Replan {
    /// Requested keys without an outcome: they must exist as pending or leased continuations.
    pub pending: Vec<Key>,
    pub stage: Stage,
    pub done: bool,
}

/// Rebuild a trajectory's schedule from its stored outcomes (see [`TrajectorySchedule::rebuild`])
/// and summarize what it asks for.
pub fn replan(
    plan: &TrajectoryPlan,
    params: &Thresholds,
    variant: &'static dyn Variant,
    outcomes: impl IntoIterator<Item = (Key, Outcome)>,
) -> Replan {
    let schedule = TrajectorySchedule::rebuild(plan, params, variant, outcomes);
    Replan { pending: schedule.pending(), stage: schedule.stage(), done: schedule.is_done() }
}

/// Claim order among runnable work: trajectories in later stages first, so that curves finish
/// (and appear in exports) early instead of every trajectory advancing in lock step.
pub fn stage_rank(stage: Stage) -> i64 {
    Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0) as i64
}

/// The controls the `rank`-th (0-based) trajectory of a study in processing order carries: the
/// first ones get them (docs/method.md §7).
pub fn controls_for(rank: u32, counts: &ControlCounts) -> Controls {
    Controls {
        sanity: rank < counts.sanity,
        retest: rank < counts.retest,
        budget_control: rank < counts.budget_control,
    }
}

/// The controls of each trajectory of a study, decided once at launch from the spec alone: the
/// processing order is the spec's order, and a doomed trajectory (`doomed[i]`) is never admitted,
/// so it carries none and the controls go to the next ones. Deciding them before any lease makes
/// them the same however many coordinators serve the study, restarted or not, and whatever order
/// their leases interleave in.
pub fn controls_at_launch(doomed: &[bool], counts: &ControlCounts) -> Vec<Controls> {
    let mut rank = 0;
    doomed
        .iter()
        .map(|&doomed| {
            if doomed {
                return Controls::default();
            }
            rank += 1;
            controls_for(rank - 1, counts)
        })
        .collect()
}

/// The stretch of a study's run its throughput is measured over: the last five minutes before
/// it ended (or now, while it runs), or its whole run when it ran for less.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThroughputWindow {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl ThroughputWindow {
    /// The longest window: five minutes.
    pub const MAX_MS: i64 = 300_000;

    pub fn of(created_ms: i64, finished_ms: Option<i64>, now_ms: i64) -> Self {
        let end_ms = finished_ms.unwrap_or(now_ms).max(created_ms);
        ThroughputWindow { start_ms: created_ms.max(end_ms - Self::MAX_MS), end_ms }
    }

    /// `count` outcomes in the window, per minute of it. A window shorter than a second counts
    /// as a second, so the first outcomes of a study do not read as millions per minute.
    pub fn per_minute(&self, count: u64) -> f64 {
        let minutes = (self.end_ms - self.start_ms).max(1_000) as f64 / 60_000.0;
        count as f64 / minutes
    }
}

/// How many trajectories to admit now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitDecision {
    Nothing,
    /// Admit one at the head of the claim order, then look again: a worker slot would idle
    /// without it (demand).
    One,
    /// Admit one behind the head, then look again: the study has a finished curve and the queue
    /// is short of [`LOOK_AHEAD`] (demand).
    Ahead,
    /// Admit this many at once (the paper's batch rule).
    Batch(u32),
}

/// What admission weighs, over every running study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demand {
    /// The slots of the live workers.
    pub slots: u64,
    /// Those slots less the jobs leased.
    pub free: u64,
    /// Continuations and jobs pending in running studies.
    pub runnable: u64,
    /// Of those, jobs (replays, base runs): claimed before any continuation.
    pub jobs: u64,
}

/// How many runnable continuations per live worker slot demand admission keeps queued beyond the
/// free slots, so the claim order has the longest chains to choose from (docs/decisions.md,
/// "Duration-aware dispatch").
pub const LOOK_AHEAD: u64 = 16;

/// The admission rule.
///
/// - `demand`: admit while free worker slots exceed the runnable continuations, so no worker
///   idles while a study has work; those go at the head of the claim order. Once the study has
///   `finished` a curve, and while no job is pending, go on admitting while the runnable
///   continuations are fewer than the free slots plus [`LOOK_AHEAD`] per slot: the claim order
///   then has the longest chains to choose from, and until then a study's first curves come as
///   soon as before. Jobs are claimed first, so a queue of them (a recorded run's replay for each
///   trajectory admitted) would hold every continuation back instead.
/// - `batch`: the paper's rule — admit `batch_size` when fewer than `pipeline_threshold` are in
///   flight.
pub fn admission(policy: &Admission, in_flight: u32, finished: bool, demand: Demand) -> AdmitDecision {
    match *policy {
        Admission::Demand => {
            let Demand { slots, free, runnable, jobs } = demand;
            if free > runnable {
                AdmitDecision::One
            } else if finished && jobs == 0 && runnable < free.saturating_add(LOOK_AHEAD.saturating_mul(slots)) {
                AdmitDecision::Ahead
            } else {
                AdmitDecision::Nothing
            }
        }
        Admission::Batch { batch_size, pipeline_threshold } => {
            if in_flight < pipeline_threshold {
                AdmitDecision::Batch(batch_size)
            } else {
                AdmitDecision::Nothing
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcurve_method::schedule::{Series, variants::variant_by_name};

    #[test]
    fn replan_after_screening_moves_to_bisection() {
        let plan = TrajectoryPlan { length: 40, labels: vec![], controls: Controls::default() };
        let params = Thresholds::default();
        let paper = variant_by_name("paper").unwrap();
        let first = replan(&plan, &params, paper, []);
        assert_eq!(first.stage, Stage::Screen);
        assert_eq!(first.pending.len(), 72);
        let outcomes = first.pending.iter().map(|k| (*k, if k.t < 23 { Outcome::Success } else { Outcome::Failure }));
        let next = replan(&plan, &params, paper, outcomes);
        assert_eq!(next.stage, Stage::Bisect);
        assert!(next.pending.iter().all(|k| k.t == 22 && k.series == Series::Main));
    }

    #[test]
    fn demand_admission_fills_free_slots_then_looks_ahead() {
        let demand = |slots, free, runnable, jobs| Demand { slots, free, runnable, jobs };
        let d = &Admission::Demand;
        assert_eq!(admission(d, 0, false, demand(4, 4, 0, 0)), AdmitDecision::One);
        assert_eq!(admission(d, 3, false, demand(4, 4, 3, 0)), AdmitDecision::One);
        // Every slot has work: before the study's first curve, nothing more.
        assert_eq!(admission(d, 3, false, demand(4, 4, 4, 0)), AdmitDecision::Nothing);
        // After it, queue up to 16 a slot beyond the free ones.
        assert_eq!(admission(d, 3, true, demand(4, 4, 4, 0)), AdmitDecision::Ahead);
        assert_eq!(admission(d, 3, true, demand(4, 1, 64, 0)), AdmitDecision::Ahead);
        assert_eq!(admission(d, 3, true, demand(4, 1, 65, 0)), AdmitDecision::Nothing);
        // A job pending: nothing ahead of it.
        assert_eq!(admission(d, 3, true, demand(4, 4, 4, 1)), AdmitDecision::Nothing);
        // No live worker: nothing.
        assert_eq!(admission(d, 0, true, demand(0, 0, 0, 0)), AdmitDecision::Nothing);
        let batch = Admission::Batch { batch_size: 10, pipeline_threshold: 3 };
        assert_eq!(admission(&batch, 2, false, Demand::default()), AdmitDecision::Batch(10));
        assert_eq!(admission(&batch, 3, true, demand(100, 100, 0, 0)), AdmitDecision::Nothing);
    }

    #[test]
    fn throughput_is_over_the_time_the_study_actually_ran() {
        // 2,240 continuations in 5.7 s: 23,579 per minute, not 448.
        let w = ThroughputWindow::of(0, Some(5_700), 60_000);
        assert_eq!((w.start_ms, w.end_ms), (0, 5_700));
        assert!((w.per_minute(2_240) - 2_240.0 / (5.7 / 60.0)).abs() < 1e-6);
        // A long study: the last five minutes.
        let w = ThroughputWindow::of(0, None, 3_600_000);
        assert_eq!((w.start_ms, w.end_ms), (3_300_000, 3_600_000));
        assert_eq!(w.per_minute(500), 100.0);
        // At launch: a second at least.
        assert_eq!(ThroughputWindow::of(10, None, 10).per_minute(1), 60.0);
    }

    #[test]
    fn controls_go_to_the_first_trajectories() {
        let counts = ControlCounts { sanity: 1, retest: 2, budget_control: 0 };
        assert_eq!(controls_for(0, &counts), Controls { sanity: true, retest: true, budget_control: false });
        assert_eq!(controls_for(1, &counts), Controls { sanity: false, retest: true, budget_control: false });
        assert_eq!(controls_for(2, &counts), Controls::default());
    }

    #[test]
    fn controls_at_launch_skip_doomed_trajectories() {
        let counts = ControlCounts { sanity: 1, retest: 2, budget_control: 1 };
        let all = Controls { sanity: true, retest: true, budget_control: true };
        let retest = Controls { retest: true, ..Controls::default() };
        assert_eq!(
            controls_at_launch(&[true, false, true, false, false], &counts),
            vec![Controls::default(), all, Controls::default(), retest, Controls::default()]
        );
        assert_eq!(controls_at_launch(&[true, true], &counts), vec![Controls::default(); 2]);
        assert!(controls_at_launch(&[], &counts).is_empty());
    }
}
