//! Continuation durations as the coordinator learns them, pure: each trajectory's rate
//! (milliseconds per step of budget) from the continuations of it that finished, shrunk toward
//! its study's; a pending continuation's expected duration; a trajectory's expected remaining
//! chain, which the claim order puts first (docs/decisions.md, "Duration-aware dispatch").
//!
//! A continuation's duration is the time from its lease to its outcome's report, what the
//! coordinator sees: no oracle. Its budget (`B − t`, or `B` on `full_budget`) is what it knows
//! of a continuation before it runs; a task's steps cost what its tests cost, so the rate is kept
//! per trajectory (each trajectory is one task's run).

use statrs::distribution::{ContinuousCDF, FisherSnedecor};
use vcurve_method::schedule::Stage;

/// What a trajectory's (or a study's) finished continuations say of their durations: how many
/// were timed, their milliseconds and their step budgets, summed; and their log milliseconds and
/// its squares, summed (what [`Spread`] tests).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timed {
    pub n: i64,
    pub ms: i64,
    pub budget: i64,
    /// Σ ln ms (a continuation's milliseconds at least 1).
    pub log_ms: f64,
    /// Σ (ln ms)².
    pub log_ms_sq: f64,
}

impl Timed {
    /// Milliseconds per step of budget, `None` before any budget was timed.
    pub fn rate(&self) -> Option<f64> {
        (self.n > 0 && self.budget > 0).then(|| self.ms as f64 / self.budget as f64)
    }

    /// These sums with one more continuation of `ms` milliseconds and `budget` steps.
    pub fn plus(self, ms: i64, budget: i64) -> Timed {
        let log = (ms.max(1) as f64).ln();
        Timed {
            n: self.n + 1,
            ms: self.ms + ms.max(0),
            budget: self.budget + budget.max(0),
            log_ms: self.log_ms + log,
            log_ms_sq: self.log_ms_sq + log * log,
        }
    }

    /// The sums of two sets of continuations together.
    pub fn and(self, other: Timed) -> Timed {
        Timed {
            n: self.n + other.n,
            ms: self.ms + other.ms,
            budget: self.budget + other.budget,
            log_ms: self.log_ms + other.log_ms,
            log_ms_sq: self.log_ms_sq + other.log_ms_sq,
        }
    }
}

/// The significance below which a study's trajectories are taken to differ in speed
/// ([`Spread::pooled`]).
pub const SPREAD_P: f64 = 0.01;

/// Whether a study's continuation durations differ by trajectory, from its finished trajectories:
/// a one-way analysis of variance of their continuations' log milliseconds, each trajectory a
/// group. When a task's steps cost what its tests cost they do, and a trajectory's own rate says
/// how long its chain will take; when they do not (every continuation's time a draw from one
/// distribution), a trajectory's own rate is noise, and the claim order ranks by the stage alone
/// (docs/decisions.md, "Duration-aware dispatch"). Only finished trajectories: a running one's
/// timed continuations are its quick ones.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    /// Finished trajectories with a timed continuation.
    pub m: i64,
    /// Their timed continuations.
    pub n: i64,
    /// Σ ln ms over them.
    pub log_ms: f64,
    /// Σ (ln ms)² over them.
    pub log_ms_sq: f64,
    /// Σ over the trajectories of (Σ ln ms)² / n: the part of the squares their means explain.
    pub between: f64,
}

impl Spread {
    /// The spread of these finished trajectories' timed sums.
    pub fn of(finished: impl IntoIterator<Item = Timed>) -> Spread {
        finished.into_iter().filter(|t| t.n > 0).fold(Spread::default(), |a, t| Spread {
            m: a.m + 1,
            n: a.n + t.n,
            log_ms: a.log_ms + t.log_ms,
            log_ms_sq: a.log_ms_sq + t.log_ms_sq,
            between: a.between + t.log_ms * t.log_ms / t.n as f64,
        })
    }

    /// Whether a trajectory's own rate is noise: its study's trajectories do not differ
    /// significantly (the F test at [`SPREAD_P`]), so every trajectory runs at the study's rate.
    /// `false` before two finished trajectories with more continuations than trajectories, or
    /// when the durations do not vary within trajectories at all.
    pub fn pooled(&self) -> bool {
        let (m, n) = (self.m as f64, self.n as f64);
        if self.m < 2 || self.n <= self.m {
            return false;
        }
        let between = (self.between - self.log_ms * self.log_ms / n).max(0.0) / (m - 1.0);
        let within = (self.log_ms_sq - self.between).max(0.0) / (n - m);
        if within <= 0.0 {
            return false;
        }
        let Ok(f) = FisherSnedecor::new(m - 1.0, n - m) else { return false };
        f.sf(between / within) >= SPREAD_P
    }
}

/// How many continuations' worth the study's rate weighs in a trajectory's own: after `n` timed
/// continuations its own rate counts `n / (n + 10)`. Counted in continuations, not steps of
/// budget: a continuation's time is its budget's share that it used (a failure to the cap, a
/// success early) times the task's speed, a noise proportional to it, so a continuation of 100
/// steps tells no more of the task's speed than one of 20 (docs/decisions.md, "Duration-aware
/// dispatch").
pub const PRIOR_CONTINUATIONS: f64 = 10.0;

/// The rate assumed before any continuation of the study finished (ms per step of budget). Only
/// the order of the expected chains matters then, and with one rate for every trajectory they
/// are ordered by their budgets alone.
pub const DEFAULT_RATE: f64 = 1_000.0;

/// A trajectory's rate, ms per step of budget: its own (its timed milliseconds over their
/// budgets) and its study's, weighed `n` to [`PRIOR_CONTINUATIONS`] for its `n` timed
/// continuations; the study's before it has its own, or when the study's trajectories do not
/// differ ([`Spread::pooled`], `pooled`); [`DEFAULT_RATE`] before either.
pub fn rate(trajectory: Timed, study: Timed, pooled: bool) -> f64 {
    if pooled {
        return study.rate().unwrap_or(DEFAULT_RATE);
    }
    rate_weighed(trajectory, study, PRIOR_CONTINUATIONS)
}

/// [`rate`] with the study's rate weighing `prior` continuations instead of
/// [`PRIOR_CONTINUATIONS`] (the dispatch lab tries other weights with it).
pub fn rate_weighed(trajectory: Timed, study: Timed, prior: f64) -> f64 {
    let study_rate = study.rate().unwrap_or(DEFAULT_RATE);
    let Some(own) = trajectory.rate() else { return study_rate };
    let n = trajectory.n as f64;
    (n * own + prior * study_rate) / (n + prior)
}

/// The expected duration of a continuation with `budget` steps at `rate`, ms.
pub fn expected_ms(rate: f64, budget: u32) -> i64 {
    (rate * f64::from(budget.max(1))).round() as i64
}

/// A trajectory's expected remaining chain, ms: its current barrier waits for its slowest open
/// continuation, whose expected duration is its largest open budget's. `None` open keys: nothing
/// left (0).
pub fn chain_ms(rate: f64, open_budgets: impl IntoIterator<Item = u32>) -> i64 {
    open_budgets.into_iter().max().map_or(0, |b| expected_ms(rate, b))
}

/// A trajectory's expected remaining chain on entering each stage of [`Stage::ALL`], in steps of
/// budget per step of the study's budget `B`: at its rate, `rate × B ×` this is how long it has
/// left. Measured on the paper schedule with the dispatch lab (the mean over a study's
/// trajectories of the time from entering the stage to the curve's end over `rate × B`, with as
/// many workers as continuations), and used for every schedule: only the order matters, and every
/// schedule's stages come in this order (docs/decisions.md, "Duration-aware dispatch").
pub const STAGE_FACTORS: [f64; 7] = [12.03, 10.18, 6.38, 5.03, 0.0, 0.0, 0.0];

/// The steps of budget a trajectory in `stage` has left on its chain ([`STAGE_FACTORS`]) when its
/// study's budget is `budget`; the claim order multiplies it by the trajectory's rate as it is
/// when a worker claims, so what is stored never goes stale.
pub fn remaining_steps(stage: Stage, budget: u32) -> i64 {
    (STAGE_FACTORS[crate::planner::stage_rank(stage) as usize] * f64::from(budget)).round() as i64
}

/// A trajectory as the study's estimated end sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrajectoryLeft {
    /// Not admitted yet: all of its work is ahead.
    pub waiting: bool,
    /// Its finished continuations' sums.
    pub timed: Timed,
    /// The budgets of its open (pending or leased) continuations, summed.
    pub open_budget: i64,
    /// Its current barrier, ms ([`chain_ms`], as its last replan stored it).
    pub chain_ms: i64,
    /// The steps of budget its stage has left ([`remaining_steps`]; a waiting one's, screening's).
    pub remaining_steps: i64,
}

/// The estimated time to a study's end, ms, from its durations (docs/decisions.md,
/// "Duration-aware dispatch").
///
/// The work left of an admitted trajectory is what it is expected to run in all, less what it
/// ran, and at least its open continuations' budgets, at its own rate. The expected total comes
/// from the finished trajectories' total budgets and the running ones' budgets so far
/// ([`TotalBudgets`], a Kaplan–Meier estimate): the trajectories finished at half-way are the
/// ones whose schedules asked for less, and a running one has run at least what it ran. A
/// waiting one's work is the mean over the trajectories that ran of their milliseconds in all —
/// a finished one's, a running one's so far plus its work left — each counted once: the study's
/// rate weighs a trajectory by what it ran, and the claim order runs the slow ones first, so
/// the study's rate times the expected total read 4% high at 50 workers and 16% at 1,000 (the
/// dispatch lab, realistic durations). The study ends when its work is done — the work left over
/// the `slots` of the live workers, plus the longest a continuation started as the work runs out
/// may take (`budget` steps at the study's rate) — or when its longest chain is, whichever is
/// later: each trajectory's steps left at its rate (the claim order's rank), at least its
/// current barrier. `None` before a trajectory finished, with no slots, or with nothing timed.
pub fn eta_ms(trajectories: &[TrajectoryLeft], done: &[Timed], slots: u64, budget: u32) -> Option<f64> {
    let work = WorkLeft::of(trajectories, done)?;
    if slots == 0 {
        return None;
    }
    let waiting = work.waiting_ms(trajectories, done);
    let (mut total, mut chain) = (0.0f64, 0.0f64);
    for t in trajectories {
        let r = rate(if t.waiting { Timed::default() } else { t.timed }, work.study, work.pooled);
        total += if t.waiting { waiting } else { work.admitted_ms(t) };
        chain = chain.max(t.chain_ms as f64).max(r * t.remaining_steps as f64);
    }
    Some((total / slots as f64 + work.study_rate * f64::from(budget)).max(chain))
}

/// What the estimated end ([`eta_ms`]) reads of a study's work left: its durations so far and
/// what its trajectories run in all.
#[derive(Debug, Clone)]
pub struct WorkLeft {
    study: Timed,
    study_rate: f64,
    pooled: bool,
    totals: TotalBudgets,
}

impl WorkLeft {
    /// `None` before a trajectory finished or with nothing timed.
    pub fn of(trajectories: &[TrajectoryLeft], done: &[Timed]) -> Option<WorkLeft> {
        let study = trajectories.iter().map(|t| t.timed).chain(done.iter().copied()).fold(Timed::default(), Timed::and);
        let study_rate = study.rate()?;
        if done.is_empty() {
            return None;
        }
        Some(WorkLeft {
            study,
            study_rate,
            pooled: Spread::of(done.iter().copied()).pooled(),
            totals: TotalBudgets::new(
                done.iter().map(|d| d.budget as f64),
                trajectories.iter().filter(|t| !t.waiting).map(|t| t.timed.budget as f64),
            ),
        })
    }

    /// The study's rate: its timed milliseconds over their budgets.
    pub fn study_rate(&self) -> f64 {
        self.study_rate
    }

    /// What a trajectory of the study runs in all, in steps of budget.
    pub fn totals(&self) -> &TotalBudgets {
        &self.totals
    }

    /// An admitted trajectory's work left, ms: what it is expected to run in all less what it
    /// ran, at least its open continuations, at its rate.
    pub fn admitted_ms(&self, t: &TrajectoryLeft) -> f64 {
        let ran = t.timed.budget as f64;
        let total = self.totals.mean_beyond(ran).unwrap_or(ran);
        rate(t.timed, self.study, self.pooled) * (total - ran).max(t.open_budget as f64)
    }

    /// A waiting trajectory's work, ms: the mean over the trajectories that ran of what each runs
    /// in all — a finished one's milliseconds, a running one's so far and its work left.
    pub fn waiting_ms(&self, trajectories: &[TrajectoryLeft], done: &[Timed]) -> f64 {
        let (n, sum) = done
            .iter()
            .map(|d| d.ms as f64)
            .chain(
                trajectories
                    .iter()
                    .filter(|t| !t.waiting && t.timed.n > 0)
                    .map(|t| t.timed.ms as f64 + self.admitted_ms(t)),
            )
            .fold((0.0f64, 0.0f64), |(n, sum), ms| (n + 1.0, sum + ms));
        sum / n
    }
}

/// What a trajectory of a study runs in all, in steps of budget, as a Kaplan–Meier estimate: the
/// finished trajectories' totals are observed, the running ones' are known only to exceed what
/// they ran so far (censored). Without the censored ones the mean would come from the
/// trajectories that finished early, which are those that needed less.
#[derive(Debug, Clone, PartialEq)]
pub struct TotalBudgets {
    /// The observed totals, increasing, each with the survival `S` just after it and the area
    /// under `S` from it to the last observed total.
    steps: Vec<(f64, f64, f64)>,
}

impl TotalBudgets {
    pub fn new(finished: impl IntoIterator<Item = f64>, running: impl IntoIterator<Item = f64>) -> Self {
        let mut all: Vec<(f64, bool)> =
            finished.into_iter().map(|v| (v, true)).chain(running.into_iter().map(|v| (v, false))).collect();
        // At a tie an observed total comes first: a censored one at the same value was still at
        // risk of it.
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut at_risk = all.len() as f64;
        let mut survival = 1.0;
        let mut steps: Vec<(f64, f64, f64)> = Vec::new();
        let mut i = 0;
        while i < all.len() {
            let value = all[i].0;
            let (mut ended, mut left) = (0.0, 0.0);
            while i < all.len() && all[i].0 == value {
                if all[i].1 {
                    ended += 1.0;
                } else {
                    left += 1.0;
                }
                i += 1;
            }
            if ended > 0.0 {
                survival *= 1.0 - ended / at_risk;
                steps.push((value, survival, 0.0));
            }
            at_risk -= ended + left;
        }
        for j in (0..steps.len().saturating_sub(1)).rev() {
            let (here, next) = (steps[j], steps[j + 1]);
            steps[j].2 = next.2 + here.1 * (next.0 - here.0);
        }
        TotalBudgets { steps }
    }

    /// The expected total of a trajectory that ran `ran` steps of budget so far: `ran` plus the
    /// area under the survival beyond it over the survival at it. `None` when no observed total
    /// lies beyond `ran` (nothing to say but that it ran at least that).
    pub fn mean_beyond(&self, ran: f64) -> Option<f64> {
        // The first observed total beyond `ran`, and the survival at `ran`.
        let next = self.steps.partition_point(|s| s.0 <= ran);
        let first = self.steps.get(next)?;
        let at = if next == 0 { 1.0 } else { self.steps[next - 1].1 };
        if at <= 0.0 {
            return None;
        }
        Some(ran + (at * (first.0 - ran) + first.2) / at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trajectory_rate_starts_at_its_study_and_moves_to_its_own() {
        let study = Timed { n: 10, ms: 500_000, budget: 1_000, ..Timed::default() }; // 500 ms a step
        assert_eq!(rate(Timed::default(), study, false), 500.0);
        assert_eq!(rate(Timed::default(), Timed::default(), false), DEFAULT_RATE);
        // One continuation at 2,000 ms a step weighs one to the study's ten, whatever its budget.
        for budget in [10, 100] {
            let own = Timed::default().plus(2_000 * budget, budget);
            assert_eq!(rate(own, study, false), (2_000.0 + 10.0 * 500.0) / 11.0);
        }
        // Ten: halfway.
        let own = Timed { n: 10, ms: 1_000_000, budget: 500, ..Timed::default() };
        assert_eq!(rate(own, study, false), 1_250.0);
        // Many: nearly its own.
        let own = Timed { n: 1_000, ms: 200_000_000, budget: 100_000, ..Timed::default() };
        assert!((rate(own, study, false) - 2_000.0).abs() < 20.0);
    }

    #[test]
    fn a_pooled_study_rates_every_trajectory_at_the_study_rate() {
        let study = Timed { n: 10, ms: 500_000, budget: 1_000, ..Timed::default() };
        let own = Timed { n: 10, ms: 1_000_000, budget: 500, ..Timed::default() };
        assert_eq!(rate(own, study, true), 500.0);
        assert_eq!(rate(own, Timed::default(), true), DEFAULT_RATE);
    }

    /// A trajectory's timed sums from these milliseconds.
    fn timed(ms: &[i64]) -> Timed {
        ms.iter().fold(Timed::default(), |t, ms| t.plus(*ms, 10))
    }

    #[test]
    fn trajectories_differ_when_their_means_are_far_apart_for_their_noise() {
        // The same draws around 1 s in every trajectory: no difference.
        let same: Vec<Timed> = (0..20).map(|i| timed(&[800 + i, 1_000, 1_250 - i, 900, 1_100])).collect();
        assert!(Spread::of(same.iter().copied()).pooled());
        // Half the trajectories four times slower, the same noise: they differ.
        let apart: Vec<Timed> = same
            .iter()
            .enumerate()
            .map(|(i, t)| if i % 2 == 0 { *t } else { timed(&[3_200, 4_000, 5_000, 3_600, 4_400]) })
            .collect();
        assert!(!Spread::of(apart.iter().copied()).pooled());
        // The F test by hand: two trajectories, ln ms {0, 2} and {4, 6}: between 16 on 1 degree,
        // within 4 on 2: F = 8, P(F(1, 2) > 8) = 0.106 — not significant at 0.01.
        let by_hand = [(0.0f64, 2.0f64), (4.0, 6.0)].map(|(a, b)| Timed {
            n: 2,
            log_ms: a + b,
            log_ms_sq: a * a + b * b,
            ..Timed::default()
        });
        let spread = Spread::of(by_hand);
        assert_eq!((spread.m, spread.n), (2, 4));
        assert!(spread.pooled());
        // Too little to say, or no noise within: not pooled.
        assert!(!Spread::of([timed(&[1_000, 2_000])]).pooled());
        assert!(!Spread::of([timed(&[1_000, 1_000]), timed(&[1_000, 1_000])]).pooled());
        assert!(!Spread::of([]).pooled());
    }

    #[test]
    fn a_chain_is_its_longest_open_continuation() {
        assert_eq!(chain_ms(10.0, [5, 80, 20]), 800);
        assert_eq!(chain_ms(10.0, []), 0);
        assert_eq!(expected_ms(10.0, 0), 10);
    }

    #[test]
    fn the_end_is_the_work_left_over_the_slots_or_the_longest_chain() {
        // Two finished trajectories of 1,000 budget steps each at 10 ms a step.
        let done = [Timed { n: 10, ms: 10_000, budget: 1_000, ..Timed::default() }; 2];
        let waiting = TrajectoryLeft {
            waiting: true,
            timed: Timed::default(),
            open_budget: 0,
            chain_ms: 0,
            remaining_steps: 1_200,
        };
        let half = TrajectoryLeft {
            waiting: false,
            timed: Timed { n: 5, ms: 5_000, budget: 500, ..Timed::default() },
            open_budget: 100,
            chain_ms: 900,
            remaining_steps: 500,
        };
        // Work left: 1,000 + 500 steps at 10 ms = 15,000 ms over 10 slots, and a continuation
        // of 100 steps started as it runs out (1,000 ms); the chains (12,000 and 5,000 ms) are
        // longer.
        assert_eq!(eta_ms(&[waiting, half], &done, 10, 100), Some(12_000.0));
        assert_eq!(eta_ms(&[half], &done, 10, 100), Some(5_000.0));
        // One slot: the work.
        assert_eq!(eta_ms(&[waiting, half], &done, 1, 100), Some(16_000.0));
        // A current barrier longer than the stage's expectation.
        let long = TrajectoryLeft { chain_ms: 40_000, ..half };
        assert_eq!(eta_ms(&[long], &done, 10, 100), Some(40_000.0));
        // A slow trajectory left. The study's rate: 70,000 ms over 2,500 steps, 28 ms; the slow
        // one's own 100 ms, weighed 5 to 10: 52 ms, so its 500 steps left 26,000 ms. The waiting
        // one runs what a trajectory that ran does, each counted once: the two finished ones'
        // 10,000 ms and the slow one's 50,000 + 26,000, a mean of 32,000 ms (the study's rate
        // times 1,000 steps would read 28,000: it weighs the slow one by the 500 steps it ran).
        // Work: 58,000 ms on one slot, plus 100 steps at 28 ms.
        let slow =
            TrajectoryLeft { timed: Timed { n: 5, ms: 50_000, budget: 500, ..Timed::default() }, chain_ms: 0, ..half };
        let eta = eta_ms(&[waiting, slow], &done, 1, 100).unwrap();
        assert!((eta - 60_800.0).abs() < 1e-6, "{eta}");
        // Nothing finished yet, or no slots: not known.
        assert_eq!(eta_ms(&[waiting, half], &[], 10, 100), None);
        assert_eq!(eta_ms(&[waiting, half], &done, 0, 100), None);
    }

    #[test]
    fn total_budgets_count_the_running_trajectories_as_at_least_what_they_ran() {
        // Finished at 100 and 200 steps; two still running at 300. The finished ones alone say
        // 150; counting the running ones as at least 300, a quarter end at 100 and a quarter at
        // 200, the rest are beyond what was seen: 175 up to the last observed total.
        let totals = TotalBudgets::new([100.0, 200.0], [300.0, 300.0]);
        assert_eq!(totals.mean_beyond(0.0), Some(175.0));
        // One that ran 150 ends at 200 (as far as anything was seen).
        assert_eq!(totals.mean_beyond(150.0), Some(200.0));
        // Beyond every observed total nothing is known but what it ran.
        assert_eq!(totals.mean_beyond(300.0), None);
        // Without running ones, the plain mean.
        assert_eq!(TotalBudgets::new([100.0, 200.0, 300.0], []).mean_beyond(0.0), Some(200.0));
        assert_eq!(TotalBudgets::new([], [50.0]).mean_beyond(0.0), None);
    }
}
