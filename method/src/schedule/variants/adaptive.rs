//! `adaptive`: far fewer continuations than `paper` at close to its accuracy (issue 14), with a
//! point-of-no-return certification whose false-certification rate holds under its repeated
//! looks. Opt-in; `paper` stays the default. docs/method.md gives its measured figures.
//!
//! Every stage is one sequential lane whose decisions read only the counts (and, for the
//! certification, what its own earlier steps decided from them), so the schedule is order-free
//! like `paper`: the same outcomes in any order, or all at once after a restart, give the same
//! requests.
//!
//! 1. **Screen** every anchor at `K = 4` (a point is resolved from `n ≥ 4`).
//! 2. **Certify** (stage `pnr`), before any other stage raises a point. The *zero tail* is the run
//!    of anchors up to `T − 1` with no success. Between the latest point with a success and the
//!    tail, bisect the boundary with midpoints at 8; then look at the earliest point with no
//!    success: raise it to 8, 16 and [`K_CERTIFY`], stopping at the first success. No success in
//!    `K_CERTIFY` certifies it. After one failed look at the boundary, the looks go to the tail's
//!    anchors from the left, the points most likely to hold no value. Every look is paid for from
//!    the error budget `α` ([`look_cost`]); when the budget cannot pay the next look, the search
//!    ends uncertified.
//! 3. **Refine** (stage `bisect`): read the estimator's decisive interval off the points so far
//!    ([`crate::analyze`], the same analysis a study reports) and sample where it is not settled:
//!    `t = 0` and the ends of every pair whose fitted drop is at least half the largest to 8, then
//!    the decisive interval's midpoint at 8, until the decisive interval is one step wide (or 12
//!    rounds). The fit, not a fixed recursion, picks the half to go on with.
//! 4. **Confirm**: the decisive interval's ends to `K_confirm = 16` (not 32: measured, 32 bought
//!    no accuracy issue 14's targets count), and where the concentration is within
//!    0.15 of the cliff threshold (the shape is open) `t = 0` and the resolved points on either
//!    side too. If that moves the decisive interval, go on with the new one — its midpoint at 8
//!    when it is wider than a step — for at most 3 rounds.
//! 5. Label probes and controls as `paper`, raised no further than a point can go without
//!    certifying (`Capped`).
//!
//! ## Why the certification keeps its error rate under repeated looks
//!
//! The estimator certifies a point whose one-sided Wilson bound is at most `ε`; under this schedule
//! at [`certification_z`], chosen so that no success certifies exactly from `n = K_CERTIFY` on.
//! Outside the certification stage no point is raised to a size at which its successes so far
//! could certify (`Capped`), so a curve certifies only through a look. A look at a point with
//! `n` continuations and no success certifies only if the `K_CERTIFY − n` still to come all fail:
//! on a curve with `V ≥ 0.2` at every `t < T`, probability at most `0.8^(K_CERTIFY − n)`, whatever
//! the looks before it saw. The stage pays that before the look (a midpoint's look is paid before
//! it is sampled, `n = 0`) and never spends more than `α` in all, so by the union bound over the
//! looks at most `α` = 5% of such curves certify a point of no return before `T`.

use std::collections::BTreeSet;

use super::Variant;
use crate::Thresholds;
use crate::curve::CurveAnalysis;
use crate::schedule::lanes::{self, Lane, LaneContext, Memory};
use crate::schedule::{Points, Series, Stage, Target};
use crate::stats::wilson_upper;
use crate::{analyze, meets_at_most};

#[derive(Debug, Clone, Copy)]
pub struct Adaptive;

/// Screening `K`; also the least `n` of a resolved point.
const K_SCREEN: u32 = 4;
/// Where a look, a refinement or a boundary midpoint samples first.
const K_STEP: u32 = 8;
/// The continuations without a success that certify a point (the study's `k_pnr` if larger): two
/// more than `paper`'s 24, so that a look at a screened anchor costs `0.8^22` = 0.0074 of `α`.
pub const K_CERTIFY: u32 = 26;
/// The confirmation `K` (the estimator's `k_confirm` under this schedule).
const K_CONFIRM: u32 = 16;
/// A pair whose fitted drop is at least this share of the largest could be the decisive one.
const REFINE_SHARE: f64 = 0.5;
/// How close to the cliff threshold a concentration leaves the shape open.
const SHAPE_MARGIN: f64 = 0.15;
/// Rounds of confirmation, at most.
const MAX_CONFIRM_ROUNDS: u32 = 3;
/// Rounds of refinement, at most.
const MAX_REFINE_ROUNDS: u32 = 12;
/// The curves the certification guarantee is about: `V(h_t) ≥ HOLDING` at every `t < T`.
pub const HOLDING: f64 = 0.2;

/// What a look at a point with `n` continuations and no success costs of the error budget: the
/// chance that the `k_certify − n` continuations still to come all fail when `V ≥ HOLDING`.
pub fn look_cost(n: u32, k_certify: u32) -> f64 {
    (1.0 - HOLDING).powi(k_certify.saturating_sub(n) as i32)
}

/// The one-sided Wilson `z` under which no success in `n` certifies (`U ≤ ε`) exactly from
/// `n = k_certify`: `U(0, n) = z² / (n + z²)`, so `z² = ε (k_certify − ½) / (1 − ε)` puts the
/// boundary half-way between `k_certify − 1` and `k_certify`.
pub fn certification_z(k_certify: u32, epsilon: f64) -> f64 {
    (epsilon * (f64::from(k_certify) - 0.5) / (1.0 - epsilon)).sqrt()
}

/// The least `n` at which `successes` of `n` certify under `z` and `ε` (`u32::MAX`: never below
/// a million).
pub fn certifies_from(successes: u32, z: f64, epsilon: f64) -> u32 {
    (successes.max(1)..1_000_000).find(|&n| meets_at_most(wilson_upper(successes, n, z), epsilon)).unwrap_or(u32::MAX)
}

impl Variant for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn summary(&self) -> &'static str {
        "screen at K = 4, certify in paid looks (false certification ≤ α), refine where the fit is open, confirm at 16"
    }

    fn params(&self, study: &Thresholds) -> Thresholds {
        let k_pnr = study.k_pnr.max(K_CERTIFY);
        Thresholds {
            k_screen: K_SCREEN.min(study.k_screen),
            k_confirm: K_CONFIRM,
            k_pnr,
            z_one_sided: certification_z(k_pnr, study.epsilon),
            ..study.clone()
        }
    }

    fn stages(&self) -> &'static [Stage] {
        &[Stage::Screen, Stage::Pnr, Stage::Bisect, Stage::Confirm, Stage::Labels, Stage::Controls]
    }

    fn lanes(&self, stage: Stage, ctx: &LaneContext, memory: &Memory, points: &Points) -> Vec<Box<dyn Lane>> {
        let cap = Cap { z: ctx.params.z_one_sided, epsilon: ctx.params.epsilon };
        match stage {
            Stage::Screen => vec![Box::new(lanes::Screen::new(ctx))],
            Stage::Pnr => vec![Box::new(Certify::new(ctx))],
            Stage::Bisect => vec![Box::new(Capped { inner: Refine { ctx: ctx.clone(), rounds: 0 }, cap })],
            Stage::Confirm => vec![Box::new(Capped { inner: Confirm { ctx: ctx.clone(), rounds: 0 }, cap })],
            Stage::Labels => super::paper_lanes(stage, ctx, memory, points)
                .into_iter()
                .map(|inner| Box::new(Capped { inner, cap }) as Box<dyn Lane>)
                .collect(),
            _ => super::paper_lanes(stage, ctx, memory, points),
        }
    }
}

fn main_target(t: u32, k: u32) -> Target {
    Target { series: Series::Main, t, k }
}

/// The estimator on the main series so far, and its decisive interval `(a, b)` (`None`: no drop).
fn decisive(ctx: &LaneContext, points: &Points) -> Option<(CurveAnalysis, u32, u32)> {
    let analysis = analyze(ctx.length, &points.sampled(Series::Main), None, ctx.params.budget, &ctx.params)
        .expect("the schedule's own points are valid");
    let pair = analysis.decisive_interval?;
    Some((analysis, pair.a, pair.b))
}

/// How far a point may be raised outside the certification stage.
#[derive(Debug, Clone, Copy)]
struct Cap {
    z: f64,
    epsilon: f64,
}

/// A lane whose targets never take a main-series point to a size at which its successes so far
/// could certify it: only the certification stage may, so that its paid looks are the only way a
/// curve certifies (module docs). More continuations only add successes, which raise the bound.
struct Capped<L> {
    inner: L,
    cap: Cap,
}

impl<L: Lane> Lane for Capped<L> {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        let targets = self.inner.next(points, memory)?;
        let capped = |t: Target| {
            if t.series != Series::Main {
                return t;
            }
            let (_, successes) = points.counts(t.series, t.t);
            let limit = certifies_from(successes, self.cap.z, self.cap.epsilon).saturating_sub(1);
            Target { k: t.k.min(limit.max(points.requested(t.series, t.t))), ..t }
        };
        Some(targets.into_iter().map(capped).collect())
    }
}

impl<L: Lane + ?Sized> Lane for Box<L> {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        (**self).next(points, memory)
    }
}

/// The certification stage (module docs, step 2).
struct Certify {
    anchors: Vec<u32>,
    k_pnr: u32,
    z: f64,
    epsilon: f64,
    alpha: f64,
    /// The error rate spent on looks so far.
    spent: f64,
    /// Points whose look is paid for: raising them to `K_pnr` may certify.
    looked: BTreeSet<u32>,
    /// A look at the boundary between the last success and the zero tail found a success.
    failed: bool,
    /// The point a look raised last.
    looking: Option<u32>,
    /// The search is over.
    finished: bool,
}

impl Certify {
    fn new(ctx: &LaneContext) -> Self {
        Certify {
            anchors: ctx.anchors.clone(),
            k_pnr: ctx.params.k_pnr,
            z: ctx.params.z_one_sided,
            epsilon: ctx.params.epsilon,
            alpha: ctx.params.alpha,
            spent: 0.0,
            looked: BTreeSet::new(),
            failed: false,
            looking: None,
            finished: false,
        }
    }

    fn certifies(&self, points: &Points, t: u32) -> bool {
        let (n, s) = points.counts(Series::Main, t);
        n > 0 && s == 0 && meets_at_most(wilson_upper(s, n, self.z), self.epsilon)
    }

    /// Pay for a look at `t`, which has `n` continuations and no success: it certifies only if
    /// the `K_pnr − n` still to come all fail. `false` when the budget `α` does not cover it.
    fn pay(&mut self, t: u32, n: u32) -> bool {
        if self.looked.contains(&t) {
            return true;
        }
        let cost = look_cost(n, self.k_pnr);
        if self.spent + cost > self.alpha + crate::TOLERANCE {
            return false;
        }
        self.spent += cost;
        self.looked.insert(t);
        true
    }

    /// The first anchor of the zero tail: it and every later anchor have no success.
    fn zero_tail(&self, points: &Points) -> Option<u32> {
        let mut start = None;
        for &t in self.anchors.iter().rev() {
            let (n, s) = points.counts(Series::Main, t);
            if n == 0 || s > 0 {
                break;
            }
            start = Some(t);
        }
        start
    }

    /// The next `K` of a look at a point with `n` continuations.
    fn look_step(&self, n: u32) -> u32 {
        [K_STEP, 2 * K_STEP].into_iter().find(|&k| k > n && k < self.k_pnr).unwrap_or(self.k_pnr)
    }
}

impl Lane for Certify {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        if self.finished {
            return None;
        }
        let tail = self.zero_tail(points)?;
        let sampled = points.sampled(Series::Main);
        // The latest point before the zero tail with a success, and the earliest point after it
        // with none: the point of no return lies in (lo, boundary] if anywhere.
        let lo = sampled.iter().rev().find(|p| p.t < tail && p.successes > 0).map(|p| p.t);
        let boundary = sampled
            .iter()
            .find(|p| lo.is_none_or(|lo| p.t > lo) && p.t <= tail && p.successes == 0)
            .map_or(tail, |p| p.t);
        if self.looking.take().is_some_and(|t| t < tail && points.counts(Series::Main, t).1 > 0) {
            self.failed = true;
        }
        let hi = if self.failed { tail } else { boundary };
        if let Some(lo) = lo
            && hi - lo > 1
            && !self.failed
        {
            // No sampled point lies strictly between: the midpoint is new, its look paid (if the
            // budget allows) before any of its outcomes exist.
            let mid = (lo + hi) / 2;
            self.pay(mid, 0);
            return Some(vec![main_target(mid, K_STEP)]);
        }
        if self.certifies(points, hi) {
            memory.certified_anchor = Some(hi);
            self.finished = true;
            return None;
        }
        let (n, _) = points.counts(Series::Main, hi);
        if points.requested(Series::Main, hi) >= self.k_pnr || !self.pay(hi, n) {
            // Retired keys left it short, or the budget cannot pay the look: uncertified.
            self.finished = true;
            return None;
        }
        self.looking = Some(hi);
        Some(vec![main_target(hi, self.look_step(points.requested(Series::Main, hi)))])
    }
}

/// The refinement stage (module docs, step 3).
struct Refine {
    ctx: LaneContext,
    rounds: u32,
}

impl Lane for Refine {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        let (analysis, a, b) = decisive(&self.ctx, points)?;
        let largest = analysis.decisive_drop.unwrap_or(0.0);
        // Every pair whose fitted drop is at least half the largest could be the decisive one:
        // its ends below K_STEP are raised first, and `t = 0`, which carries the total drop.
        let mut short: Vec<Target> = analysis
            .resolved
            .windows(2)
            .filter(|w| w[0].v_fit - w[1].v_fit >= REFINE_SHARE * largest - crate::TOLERANCE)
            .flat_map(|w| [w[0].t, w[1].t])
            .chain([0])
            .filter(|&t| t < self.ctx.length && points.counts(Series::Main, t).0 < K_STEP)
            .map(|t| main_target(t, K_STEP))
            .collect();
        short.sort_by_key(|t| t.t);
        short.dedup_by_key(|t| t.t);
        let done = self.rounds >= MAX_REFINE_ROUNDS;
        self.rounds += 1;
        if !short.is_empty() && !done {
            return Some(short);
        }
        if b - a > 1 && !done {
            return Some(vec![main_target((a + b) / 2, K_STEP)]);
        }
        if b - a == 1 {
            memory.bracketed.push((a, b));
        }
        None
    }
}

/// The confirmation stage (module docs, step 4).
struct Confirm {
    ctx: LaneContext,
    rounds: u32,
}

impl Lane for Confirm {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        let (analysis, a, b) = decisive(&self.ctx, points)?;
        self.rounds += 1;
        if self.rounds > MAX_CONFIRM_ROUNDS {
            return None;
        }
        if b - a > 1 {
            // Confirmation moved the decisive interval to a pair more than one step wide.
            return Some(vec![main_target((a + b) / 2, K_STEP)]);
        }
        let mut ends: Vec<Target> = [a, b]
            .into_iter()
            .filter(|&t| t < self.ctx.length && points.requested(Series::Main, t) < K_CONFIRM)
            .map(|t| main_target(t, K_CONFIRM))
            .collect();
        if ends.is_empty() {
            return None;
        }
        if !memory.confirmed.contains(&(a, b)) {
            memory.confirmed.push((a, b));
        }
        // The shape is open: `V(h_0)`, the total of every drop, and the resolved points on either
        // side of the decisive interval (is its drop one step, or the edge of a pooled slope?)
        // settle `C` against the cliff threshold.
        let threshold = self.ctx.params.cliff_threshold;
        if analysis.concentration.is_some_and(|c| (c - threshold).abs() < SHAPE_MARGIN) {
            let ts: Vec<u32> = analysis.resolved.iter().map(|r| r.t).collect();
            let at = ts.iter().position(|&t| t == a).unwrap_or(0);
            let around = [Some(0), at.checked_sub(1).map(|i| ts[i]), ts.get(at + 2).copied()];
            for t in around.into_iter().flatten() {
                if t < self.ctx.length
                    && points.requested(Series::Main, t) < K_CONFIRM
                    && !ends.iter().any(|e| e.t == t)
                {
                    ends.push(main_target(t, K_CONFIRM));
                }
            }
        }
        Some(ends)
    }
}
