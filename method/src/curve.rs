//! The V-curve estimator of docs/method.md §3: sampled points of one trajectory's series in, every
//! quantity the paper reports about the curve out.
//!
//! The terminal point `(T, 0)` of a failed trajectory is known, never sampled: it enters the fit
//! with infinite weight, is always a resolved point, and always qualifies as a point of no return.

use serde::{Deserialize, Serialize};

use crate::isotonic::{Weighted, fit_non_increasing};
use crate::params::Thresholds;
use crate::stats::{TwoByTwo, wilson};
use crate::tolerance::{TOLERANCE, meets_at_least, meets_at_most, meets_below};

/// The pooled continuations from one prefix `h_t` of one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub t: u32,
    pub n: u32,
    pub successes: u32,
}

impl Point {
    /// The raw estimate `V̂(h_t) = successes / n`.
    pub fn v_hat(&self) -> f64 {
        f64::from(self.successes) / f64::from(self.n)
    }

    /// Check the point against a trajectory of length `length`.
    pub fn validate(&self, length: u32) -> Result<(), CurveError> {
        if self.t >= length {
            return Err(CurveError::BeyondTerminal { t: self.t, length });
        }
        if self.n == 0 {
            return Err(CurveError::NoContinuations { t: self.t });
        }
        if self.successes > self.n {
            return Err(CurveError::MoreSuccessesThanRuns { t: self.t, successes: self.successes, n: self.n });
        }
        Ok(())
    }
}

/// Why a set of points does not describe a curve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurveError {
    #[error("the trajectory length T must be at least 1")]
    EmptyTrajectory,
    #[error("t = {t} is not before the terminal step T = {length} (the terminal point is known, never sampled)")]
    BeyondTerminal { t: u32, length: u32 },
    #[error("t = {t} has n = 0 continuations; a sampled point needs n ≥ 1")]
    NoContinuations { t: u32 },
    #[error("t = {t} has {successes} successes of n = {n}")]
    MoreSuccessesThanRuns { t: u32, successes: u32, n: u32 },
    #[error("t = {t} appears twice")]
    DuplicateStep { t: u32 },
}

/// One base run of the task from the empty history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRun {
    pub success: bool,
    /// The run's length in steps.
    pub steps: u32,
}

/// A task's base runs: the pass rate and the restart value `R̂(x, b)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRuns(pub Vec<BaseRun>);

impl BaseRuns {
    /// `p̂(x)`: the share of base runs that succeeded (`None` without base runs).
    pub fn pass_rate(&self) -> Option<f64> {
        (!self.0.is_empty()).then(|| self.0.iter().filter(|r| r.success).count() as f64 / self.0.len() as f64)
    }

    /// `R̂(x, b) = (1/n) Σ 1[Y_i = 1 and T_i ≤ b]`: the chance that a fresh run with budget `b`
    /// succeeds. A negative budget succeeds never.
    pub fn restart_value(&self, budget: i64) -> Option<f64> {
        let n = self.0.len();
        (n > 0).then(|| {
            let hits = self.0.iter().filter(|r| r.success && i64::from(r.steps) <= budget).count();
            hits as f64 / n as f64
        })
    }
}

/// A sampled point with its estimates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FittedPoint {
    pub t: u32,
    pub n: u32,
    pub successes: u32,
    pub v_hat: f64,
    pub v_fit: f64,
    /// Two-sided Wilson band (`z_two_sided`).
    pub wilson_lo: f64,
    pub wilson_hi: f64,
    /// One-sided Wilson upper bound (`z_one_sided`), the certification bound.
    pub upper_one_sided: f64,
}

/// The shape of a curve by its concentration `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// One drop carries at least half of the total (`C ≥ 0.5`).
    Cliff,
    /// The value is lost over several drops.
    Erosion,
    /// No drop at all.
    Flat,
}

impl Shape {
    pub fn as_str(&self) -> &'static str {
        match self {
            Shape::Cliff => "cliff",
            Shape::Erosion => "erosion",
            Shape::Flat => "flat",
        }
    }
}

/// A resolved point as the curve analysis sees it: a sampled point with `n ≥ K_screen`, or the
/// terminal point (`point == None`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    pub t: u32,
    pub v_fit: f64,
    pub point: Option<Point>,
}

/// A pair of consecutive resolved points `a < b`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub a: u32,
    pub b: u32,
}

/// Everything docs/method.md §3 reads off one series of one trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct CurveAnalysis {
    pub length: u32,
    /// Every sampled point, sorted by `t` (the terminal point is not listed).
    pub points: Vec<FittedPoint>,
    /// The resolved points, sorted by `t`, ending with the terminal point.
    pub resolved: Vec<Resolved>,
    /// The largest fitted drop between consecutive resolved points (earliest on ties).
    pub decisive_interval: Option<Interval>,
    /// Its size `V(a) − V(b)` on the fit.
    pub decisive_drop: Option<f64>,
    /// `t* = a + 1`.
    pub t_star: Option<u32>,
    /// `C = max Δ⁺ / Σ Δ⁺`; `None` when there is no drop.
    pub concentration: Option<f64>,
    pub shape: Shape,
    /// The first consecutive resolved pair whose drop is significant by one-sided Fisher.
    pub onset_interval: Option<Interval>,
    pub onset_p_value: Option<f64>,
    /// `t_on = a + 1` of the onset pair.
    pub onset: Option<u32>,
    /// The point of no return `t_pnr` (`T` when nothing earlier certifies).
    pub pnr: u32,
    /// `t_pnr < T`.
    pub pnr_certified: bool,
    /// The restart point `t_r`; `None` without base runs or when no point qualifies.
    pub restart_point: Option<u32>,
}

/// Analyze the sampled points of one series of a trajectory of length `length`.
///
/// `points` may come in any order; a duplicate `t` or an invalid point is an error. `base_runs`
/// and `budget` only feed the restart point.
pub fn analyze(
    length: u32,
    points: &[Point],
    base_runs: Option<&BaseRuns>,
    budget: u32,
    params: &Thresholds,
) -> Result<CurveAnalysis, CurveError> {
    if length == 0 {
        return Err(CurveError::EmptyTrajectory);
    }
    let mut sorted = points.to_vec();
    sorted.sort_by_key(|p| p.t);
    for p in &sorted {
        p.validate(length)?;
    }
    if let Some(w) = sorted.windows(2).find(|w| w[0].t == w[1].t) {
        return Err(CurveError::DuplicateStep { t: w[0].t });
    }

    // The fit runs over every sampled point plus the pinned terminal point.
    let weighted: Vec<Weighted> = sorted
        .iter()
        .map(|p| Weighted { value: p.v_hat(), weight: f64::from(p.n) })
        .chain([Weighted { value: 0.0, weight: f64::INFINITY }])
        .collect();
    let fit = fit_non_increasing(&weighted);

    let fitted: Vec<FittedPoint> = sorted
        .iter()
        .zip(&fit)
        .map(|(p, &v_fit)| {
            let band = wilson(p.successes, p.n, params.z_two_sided);
            FittedPoint {
                t: p.t,
                n: p.n,
                successes: p.successes,
                v_hat: p.v_hat(),
                v_fit,
                wilson_lo: band.lo,
                wilson_hi: band.hi,
                upper_one_sided: wilson(p.successes, p.n, params.z_one_sided).hi,
            }
        })
        .collect();

    let resolved: Vec<Resolved> = sorted
        .iter()
        .zip(&fit)
        .filter(|(p, _)| p.n >= params.k_screen)
        .map(|(p, &v_fit)| Resolved { t: p.t, v_fit, point: Some(*p) })
        .chain([Resolved { t: length, v_fit: 0.0, point: None }])
        .collect();

    let mut analysis = CurveAnalysis {
        length,
        points: fitted,
        resolved,
        decisive_interval: None,
        decisive_drop: None,
        t_star: None,
        concentration: None,
        shape: Shape::Flat,
        onset_interval: None,
        onset_p_value: None,
        onset: None,
        pnr: length,
        pnr_certified: false,
        restart_point: None,
    };
    analysis.locate_decisive_drop(params);
    analysis.locate_onset(params);
    analysis.locate_point_of_no_return(params);
    if let Some(runs) = base_runs {
        analysis.restart_point = analysis.restart_point(runs, budget, params);
    }
    Ok(analysis)
}

/// A drop smaller than this is floating-point noise between equal fitted values, not a drop.
const NO_DROP: f64 = 1e-12;

impl CurveAnalysis {
    /// Consecutive resolved pairs with their fitted drop `V(a) − V(b)`.
    fn resolved_drops(&self) -> impl Iterator<Item = (Interval, f64)> + '_ {
        self.resolved.windows(2).map(|w| (Interval { a: w[0].t, b: w[1].t }, w[0].v_fit - w[1].v_fit))
    }

    fn locate_decisive_drop(&mut self, params: &Thresholds) {
        let mut largest: Option<(Interval, f64)> = None;
        let mut total = 0.0;
        for (pair, drop) in self.resolved_drops() {
            if drop <= NO_DROP {
                continue;
            }
            total += drop;
            // Strictly larger beyond the tolerance: equal drops go to the earliest.
            if largest.is_none_or(|(_, best)| drop > best + TOLERANCE) {
                largest = Some((pair, drop));
            }
        }
        let Some((pair, drop)) = largest else {
            self.shape = Shape::Flat;
            return;
        };
        let concentration = drop / total;
        self.decisive_interval = Some(pair);
        self.decisive_drop = Some(drop);
        self.t_star = Some(pair.a + 1);
        self.concentration = Some(concentration);
        self.shape = if meets_at_least(concentration, params.cliff_threshold) { Shape::Cliff } else { Shape::Erosion };
    }

    fn locate_onset(&mut self, params: &Thresholds) {
        // The pair that ends at the terminal point has no counts on one side: it is not tested.
        let onset = self.resolved.windows(2).find_map(|w| {
            let (a, b) = (w[0].point?, w[1].point?);
            let p = TwoByTwo::new(a.successes, a.n, b.successes, b.n).fisher_greater();
            meets_below(p, params.alpha).then_some((Interval { a: a.t, b: b.t }, p))
        });
        if let Some((pair, p)) = onset {
            self.onset_interval = Some(pair);
            self.onset_p_value = Some(p);
            self.onset = Some(pair.a + 1);
        }
    }

    fn locate_point_of_no_return(&mut self, params: &Thresholds) {
        // `later_max[i]`: the largest raw estimate among resolved sampled points after i.
        let mut later_max = vec![0.0_f64; self.resolved.len()];
        for i in (0..self.resolved.len().saturating_sub(1)).rev() {
            let next = self.resolved[i + 1].point.map_or(0.0, |p| p.v_hat());
            later_max[i] = later_max[i + 1].max(next);
        }
        let pnr = self
            .resolved
            .iter()
            .zip(&later_max)
            .find(|&(r, &later)| {
                let certifies = r.point.is_none_or(|p| {
                    meets_at_most(crate::stats::wilson_upper(p.successes, p.n, params.z_one_sided), params.epsilon)
                });
                certifies && meets_at_most(later, params.epsilon)
            })
            .map_or(self.length, |(r, _)| r.t);
        self.pnr = pnr;
        self.pnr_certified = pnr < self.length;
    }

    /// The restart point `t_r = min{t : R̂(x, B − t) − V(h_t) ≥ μ}` over resolved points.
    pub fn restart_point(&self, runs: &BaseRuns, budget: u32, params: &Thresholds) -> Option<u32> {
        self.resolved.iter().find_map(|r| {
            let restart = runs.restart_value(i64::from(budget) - i64::from(r.t))?;
            meets_at_least(restart - r.v_fit, params.restart_margin).then_some(r.t)
        })
    }

    /// The fitted value at step `t` (clamped to `[0, T]`): the value of the nearest resolved point
    /// at or before it. `None` when no resolved point precedes `t`.
    pub fn fit_at(&self, t: i64) -> Option<f64> {
        let t = t.clamp(0, i64::from(self.length));
        self.resolved.iter().rev().find(|r| i64::from(r.t) <= t).map(|r| r.v_fit)
    }

    /// The fitted `V(h_0)`, if step 0 is resolved.
    pub fn v0_fit(&self) -> Option<f64> {
        self.resolved.first().filter(|r| r.t == 0).map(|r| r.v_fit)
    }

    /// Value captured by a proposed step `m` within `k` steps:
    /// `VC_k(m) = max(0, V(h_{m−1−k}) − V(h_{m+k})) / (V(h_0) − V(h_T))`. "No mistake"
    /// (`m = None`) scores 0. `None` when the curve has no value to capture.
    pub fn value_captured(&self, m: Option<u32>, k: u32) -> Option<f64> {
        value_captured(|t| self.fit_at(t), m, k)
    }
}

/// `VC_k(m)` (docs/method.md §3) off a fit given as `fit_at(t)`: the fitted value at step `t` (clamped
/// to `[0, T]`, `V(h_T) = 0`), `None` where unknown. Shared by [`CurveAnalysis`] and the analyses'
/// records, which carry only an exported fit.
pub fn value_captured(fit_at: impl Fn(i64) -> Option<f64>, m: Option<u32>, k: u32) -> Option<f64> {
    let total = fit_at(0)?;
    if total <= NO_DROP {
        return None;
    }
    let Some(m) = m else { return Some(0.0) };
    let (m, k) = (i64::from(m), i64::from(k));
    let captured = fit_at(m - 1 - k)? - fit_at(m + k)?;
    Some(captured.max(0.0) / total)
}

#[cfg(test)]
mod tests;
