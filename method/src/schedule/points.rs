//! The vocabulary of a schedule — series, stages, keys, targets and outcomes, a trajectory's
//! plan — and the [`Points`] its lanes read. Lanes, variants and the schedule itself build on it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::curve::Point;

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
pub(super) struct PointState {
    pub(super) requested: u32,
    pub(super) outcomes: Vec<Option<Outcome>>,
}

impl PointState {
    pub(super) fn outcome(&self, seed: u32) -> Option<Outcome> {
        self.outcomes.get(seed as usize).copied().flatten()
    }

    /// `(n, successes)` over the requested seeds, retired keys left out.
    pub(super) fn counts(&self) -> (u32, u32) {
        self.outcomes.iter().take(self.requested as usize).flatten().fold((0, 0), |(n, s), o| match o {
            Outcome::Success => (n + 1, s + 1),
            Outcome::Failure => (n + 1, s),
            Outcome::Retired => (n, s),
        })
    }

    pub(super) fn complete_up_to(&self, k: u32) -> bool {
        (0..k).all(|seed| self.outcome(seed).is_some())
    }
}

/// The points of one trajectory as lanes see them.
#[derive(Debug, Clone, Default)]
pub struct Points {
    pub(super) length: u32,
    pub(super) points: BTreeMap<(Series, u32), PointState>,
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

    pub(super) fn complete(&self, target: &Target) -> bool {
        target.t >= self.length
            || self.points.get(&(target.series, target.t)).is_some_and(|p| p.complete_up_to(target.k))
    }
}
