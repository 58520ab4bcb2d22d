//! `adaptive`: at most half of `paper`'s continuations at its accuracy (issue 14), with a
//! point-of-no-return certification whose false-certification rate holds under its repeated
//! looks. Opt-in; `paper` stays the default. docs/method.md gives its measured figures.
//!
//! Every stage is one sequential lane whose decisions read only the counts (and, for the
//! certification, what its own earlier steps decided from them), so the schedule is order-free
//! like `paper`: the same outcomes in any order, or all at once after a restart, give the same
//! requests.
//!
//! 1. **Screen** the first [`FIRST_WAVE`] anchors at `K = 4` (a point is resolved from `n ≥ 4`).
//! 2. **Certify** (stage `pnr`), in waves left to right, before any other stage raises a point.
//!    A *candidate* is the earliest screened anchor with no success that starts a run of
//!    [`ZERO_RUN`] such anchors (or a shorter run that ends at `T − 1`). While there is none, screen
//!    the next [`WAVE`] anchors (only as many as complete a run when the screened anchors end in
//!    one). A candidate is *looked at*: raised [`LOOK_STEP`] at a time to [`K_CERTIFY`], stopping
//!    at the first success; no success in `K_CERTIFY` certifies it and ends the screening — the
//!    anchors after a certified point are never sampled. A look that finds a success sends the
//!    search on to the next candidate. If the search ends uncertified, the anchors left are
//!    screened.
//! 3. **Refine** (stage `bisect`): read the estimator's decisive interval off the points so far
//!    ([`crate::analyze`], the same analysis a study reports) and sample where it is not settled:
//!    `t = 0` and the ends of every pair whose fitted drop is at least [`REFINE_SHARE`] of the
//!    largest to 8, then the decisive interval's midpoint at 8, until the decisive interval is one
//!    step wide (or 12 rounds) — unless the fit is a *settled erosion* ([`settled_erosion`]),
//!    whose shape no further bisection changes. The fit, not a fixed recursion, picks the half.
//! 4. **Confirm**: nothing on a settled erosion; otherwise the decisive interval's ends to
//!    `K_confirm = 16`, and where the concentration is open (within [`OPEN_BELOW`] under or
//!    [`OPEN_ABOVE`] over the cliff threshold) `t = 0` to [`K_TOTAL`] and the resolved points on
//!    either side to 16 too. If that moves the decisive interval, go on with the new one — its
//!    midpoint at 8 when it is wider than a step — for at most [`MAX_CONFIRM_ROUNDS`] rounds.
//! 5. Label probes and controls as `paper`, raised no further than a point can go without
//!    certifying (`Capped`).
//!
//! ## Why the certification keeps its error rate under repeated looks
//!
//! The estimator certifies a point whose one-sided Wilson bound is at most `ε`; under this schedule
//! at [`certification_z`], chosen so that no success certifies exactly from `n = K_CERTIFY` on,
//! and one success not below 38. Outside the certification stage no point is raised to a size at
//! which its successes so far could certify (`Capped`), and the certification stage raises a point
//! no further than `K_CERTIFY`, stopping at a success; so a point certifies only with its first
//! `K_CERTIFY` continuations all failures. On a curve with `V ≥ 0.2` at every `t < T` that has
//! probability at most `0.8^K_CERTIFY` = 0.0030 for any one point, whatever the schedule saw
//! elsewhere or decided. Looks go only to anchors, a set fixed by `T` before any outcome, so by
//! the union bound over the anchors at most `A · 0.8^K_CERTIFY` of such curves certify a point of
//! no return before `T`, however many looks the search takes: 0.048 for the 16 anchors of
//! `T = 100` (the most any `T ≤ B = 100` has), under `α` = 5%. Where a study's anchors are too
//! many for that (`A · 0.8^K_CERTIFY > α`), each look is paid for instead before it starts
//! ([`look_cost`]: `0.8^(K_CERTIFY − n)` at `n` continuations, all failures), the search ends when
//! `α` cannot pay the next, and the union bound runs over the looks.

use std::collections::BTreeSet;

use crate::Thresholds;
use crate::curve::CurveAnalysis;
use crate::schedule::lanes::{Lane, LaneContext, Memory};
use crate::schedule::points::{Points, Series, Stage, Target};
use crate::schedule::variant::Variant;
use crate::stats::wilson_upper;
use crate::{analyze, meets_at_most};

#[derive(Debug, Clone, Copy)]
pub struct Adaptive;

/// Screening `K`; also the least `n` of a resolved point.
const K_SCREEN: u32 = 4;
/// Where a refinement samples a point first.
const K_STEP: u32 = 8;
/// The continuations without a success that certify a point (the study's `k_pnr` if larger): two
/// more than `paper`'s 24, so that the 16 anchors of `T = 100` hold `16 · 0.8^26` = 0.048 ≤ `α`.
pub const K_CERTIFY: u32 = 26;
/// The confirmation `K` (the estimator's `k_confirm` under this schedule).
const K_CONFIRM: u32 = 16;
/// Where an open shape raises `t = 0`, whose value is the total of every drop.
const K_TOTAL: u32 = 20;
/// Anchors screened before the first look.
pub const FIRST_WAVE: usize = 4;
/// Anchors screened at a time after that.
pub const WAVE: usize = 3;
/// Anchors with no success in a row that make a candidate for a look.
pub const ZERO_RUN: usize = 2;
/// A look raises its point this many continuations at a time, so that it stops soon after a
/// success.
pub const LOOK_STEP: u32 = 4;
/// A pair whose fitted drop is at least this share of the largest could be the decisive one.
const REFINE_SHARE: f64 = 0.75;
/// A concentration this far below the cliff threshold, with a largest fitted drop below
/// [`SETTLED_DROP`], is a settled erosion.
const SETTLED_BELOW: f64 = 0.15;
/// The largest fitted drop below which a settled erosion has no big cliff to locate.
const SETTLED_DROP: f64 = 0.2;
/// How far below the cliff threshold a concentration leaves the shape open.
const OPEN_BELOW: f64 = 0.1;
/// How far above the cliff threshold a concentration leaves the shape open.
const OPEN_ABOVE: f64 = 0.2;
/// A pair more than a step wide whose fitted drop is at least this share of the largest is
/// bisected too: a second cliff of about the same size as the decisive one could end up the
/// largest drop once its ends are raised, and then its `t*` should be one step wide as well.
const BISECT_SHARE: f64 = 0.75;
/// ...and at least this large: small drops of erosions are left alone (their shape does not depend
/// on where they are).
const BISECT_DROP: f64 = 0.3;
/// The onset search raises the ends of its pair this many continuations at a time...
const ONSET_STEP: u32 = 4;
/// ...up to this many: below [`K_CERTIFY`] − 1, so that a point without a success can get there
/// (`Capped`).
const ONSET_MAX: u32 = 24;
/// The least raw drop worth testing for an onset.
const ONSET_DROP: f64 = 0.1;
/// On a settled erosion, the onset search tests the first pair whose raw drop is at least this.
const ONSET_FIRST_DROP: f64 = 0.3;
/// Rounds of confirmation, at most.
const MAX_CONFIRM_ROUNDS: u32 = 6;
/// Rounds of refinement, at most.
const MAX_REFINE_ROUNDS: u32 = 12;
/// The curves the certification guarantee is about: `V(h_t) ≥ HOLDING` at every `t < T`.
pub const HOLDING: f64 = 0.2;

/// What a look at a point with `n` continuations and no success costs of the error budget: the
/// chance that the `k_certify − n` continuations still to come all fail when `V ≥ HOLDING`.
pub fn look_cost(n: u32, k_certify: u32) -> f64 {
    (1.0 - HOLDING).powi(k_certify.saturating_sub(n) as i32)
}

/// Whether `α` covers every anchor's certification at once: `anchors · 0.8^k_certify ≤ α`
/// (module docs). Then looks at anchors need no payment.
pub fn anchors_covered(anchors: usize, k_certify: u32, alpha: f64) -> bool {
    anchors as f64 * look_cost(0, k_certify) <= alpha + crate::TOLERANCE
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
        "screen at K = 4 in waves to the first certified zero anchor (false certification ≤ α), refine and confirm at 16 where the fit is open"
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
            Stage::Screen => vec![Box::new(FirstWave { targets: Some(first_wave(ctx)) })],
            Stage::Pnr => vec![Box::new(Certify::new(ctx))],
            Stage::Bisect => vec![Box::new(Capped { inner: Refine { ctx: ctx.clone(), rounds: 0 }, cap })],
            Stage::Confirm => vec![Box::new(Capped {
                inner: Then {
                    first: Some(Confirm { ctx: ctx.clone(), rounds: 0 }),
                    then: Onset { ctx: ctx.clone(), raised: 0 },
                },
                cap,
            })],
            Stage::Labels => crate::schedule::variant::paper_lanes(stage, ctx, memory, points)
                .into_iter()
                .map(|inner| Box::new(Capped { inner, cap }) as Box<dyn Lane>)
                .collect(),
            _ => crate::schedule::variant::paper_lanes(stage, ctx, memory, points),
        }
    }
}

/// The first wave of screening.
fn first_wave(ctx: &LaneContext) -> Vec<Target> {
    ctx.anchors.iter().take(FIRST_WAVE).map(|&t| main_target(t, K_SCREEN)).collect()
}

/// Screening, step 1: the first wave.
struct FirstWave {
    targets: Option<Vec<Target>>,
}

impl Lane for FirstWave {
    fn next(&mut self, _: &Points, _: &mut Memory) -> Option<Vec<Target>> {
        self.targets.take()
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

/// A *settled erosion*: the fit reads as an erosion with a margin and its largest drop is small,
/// so neither the shape nor a big cliff's `t*` depends on more samples around the decisive
/// interval. (Measured: confirming such curves moved their decisive interval among similar small
/// drops and read more of them as cliffs, at 10–30 continuations per curve.)
fn settled_erosion(ctx: &LaneContext, analysis: &CurveAnalysis) -> bool {
    let c = analysis.concentration.unwrap_or(1.0);
    c < ctx.params.cliff_threshold - SETTLED_BELOW && analysis.decisive_drop.unwrap_or(1.0) < SETTLED_DROP
}

/// A fitted drop that could be the decisive one instead of the largest, `largest`: at least
/// [`BISECT_SHARE`] of it and at least [`BISECT_DROP`]. Refinement bisects it and confirmation
/// raises its ends as it does the decisive interval's.
fn rival(drop: f64, largest: f64) -> bool {
    drop >= BISECT_SHARE * largest - crate::TOLERANCE && drop >= BISECT_DROP - crate::TOLERANCE
}

/// How far a point may be raised outside the certification stage.
#[derive(Debug, Clone, Copy)]
struct Cap {
    z: f64,
    epsilon: f64,
}

/// A lane whose targets never take a main-series point to a size at which its successes so far
/// could certify it: only the certification stage may, so that its looks are the only way a
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

/// The certification stage with screening in waves (module docs, step 2).
struct Certify {
    anchors: Vec<u32>,
    k_pnr: u32,
    z: f64,
    epsilon: f64,
    alpha: f64,
    /// `α` covers every anchor at once: looks need no payment.
    covered: bool,
    /// The error rate spent on looks so far (when not `covered`).
    spent: f64,
    /// Anchors whose look is paid for: raising them to `K_pnr` may certify.
    looked: BTreeSet<u32>,
    /// Anchors `anchors[..screened]` are screened.
    screened: usize,
    /// The search is over: screen what is left, then end.
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
            covered: anchors_covered(ctx.anchors.len(), ctx.params.k_pnr, ctx.params.alpha),
            spent: 0.0,
            looked: BTreeSet::new(),
            screened: FIRST_WAVE.min(ctx.anchors.len()),
            finished: false,
        }
    }

    fn certifies(&self, points: &Points, t: u32) -> bool {
        let (n, s) = points.counts(Series::Main, t);
        n > 0 && s == 0 && meets_at_most(wilson_upper(s, n, self.z), self.epsilon)
    }

    /// A look at anchor `t`, which has `n` continuations and no success, may go ahead: `α`
    /// covers every anchor, or it pays for this look (it certifies only if the `K_pnr − n` still
    /// to come all fail). `false` when the budget cannot pay.
    fn pay(&mut self, t: u32, n: u32) -> bool {
        if self.covered || self.looked.contains(&t) {
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

    fn zero(points: &Points, t: u32) -> bool {
        let (n, s) = points.counts(Series::Main, t);
        n > 0 && s == 0
    }

    /// The earliest screened anchor with no success that starts a run of [`ZERO_RUN`] such
    /// anchors, or of fewer that ends at `T − 1`.
    fn candidate(&self, points: &Points) -> Option<u32> {
        let screened = &self.anchors[..self.screened];
        (0..screened.len()).find_map(|i| {
            let run = screened[i..].iter().take_while(|&&t| Self::zero(points, t)).count();
            let to_the_end = i + run == self.anchors.len();
            (run > 0 && (run >= ZERO_RUN || to_the_end)).then_some(screened[i])
        })
    }

    /// The next wave of anchors to screen: [`WAVE`], or only what completes a run of anchors
    /// with no success that the screened ones end in; all that are left once the search is over.
    fn next_wave(&mut self, points: &Points) -> Option<Vec<Target>> {
        if self.screened >= self.anchors.len() {
            return None;
        }
        let trailing = self.anchors[..self.screened].iter().rev().take_while(|&&t| Self::zero(points, t)).count();
        let size = if trailing > 0 { ZERO_RUN - trailing.min(ZERO_RUN - 1) } else { WAVE };
        let end = if self.finished { self.anchors.len() } else { (self.screened + size).min(self.anchors.len()) };
        let wave = self.anchors[self.screened..end].iter().map(|&t| main_target(t, K_SCREEN)).collect();
        self.screened = end;
        Some(wave)
    }

    /// The next `K` of a look at a point with `n` continuations requested.
    fn look_step(&self, n: u32) -> u32 {
        (1..).map(|i| i * LOOK_STEP).take_while(|&k| k < self.k_pnr).find(|&k| k > n).unwrap_or(self.k_pnr)
    }
}

impl Lane for Certify {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        if self.finished {
            return self.next_wave(points);
        }
        let Some(candidate) = self.candidate(points) else {
            let wave = self.next_wave(points);
            self.finished = wave.is_none();
            return wave;
        };
        if self.certifies(points, candidate) {
            memory.certified_anchor = Some(candidate);
            // The anchors after a certified point are never screened.
            self.finished = true;
            self.screened = self.anchors.len();
            return None;
        }
        let (n, _) = points.counts(Series::Main, candidate);
        let requested = points.requested(Series::Main, candidate);
        if requested >= self.k_pnr || !self.pay(candidate, n) {
            // Retired keys left it short, or the budget cannot pay the look: uncertified.
            self.finished = true;
            return self.next_wave(points);
        }
        Some(vec![main_target(candidate, self.look_step(requested))])
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
        // Every pair whose fitted drop is close to the largest could be the decisive one:
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
        if !done && !settled_erosion(&self.ctx, &analysis) {
            // The decisive interval and every other pair more than a step wide whose fitted drop
            // is close enough to the largest to become it: each is bisected at once.
            let midpoints: Vec<Target> = analysis
                .resolved
                .windows(2)
                .filter(|w| w[1].t - w[0].t > 1)
                .filter(|w| (w[0].t, w[1].t) == (a, b) || rival(w[0].v_fit - w[1].v_fit, largest))
                .map(|w| main_target((w[0].t + w[1].t) / 2, K_STEP))
                .filter(|t| points.requested(Series::Main, t.t) < K_STEP)
                .collect();
            if !midpoints.is_empty() {
                return Some(midpoints);
            }
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
        if self.rounds > MAX_CONFIRM_ROUNDS || settled_erosion(&self.ctx, &analysis) {
            return None;
        }
        if b - a > 1 {
            // Confirmation moved the decisive interval to a pair more than one step wide.
            return Some(vec![main_target((a + b) / 2, K_STEP)]);
        }
        if !memory.confirmed.contains(&(a, b)) {
            memory.confirmed.push((a, b));
        }
        // The shape is open: `V(h_0)`, the total of every drop, and the resolved points on either
        // side of the decisive interval (is its drop one step, or the edge of a pooled slope?)
        // settle `C` against the cliff threshold.
        let threshold = self.ctx.params.cliff_threshold;
        let open = analysis.concentration.is_some_and(|c| c > threshold - OPEN_BELOW && c < threshold + OPEN_ABOVE);
        let mut wanted: Vec<(u32, u32)> = vec![(a, K_CONFIRM), (b, K_CONFIRM)];
        // A rival drop close to the decisive one (the other of two cliffs) is confirmed alongside:
        // compared at 8 against 16, the less sampled drop wins too often by noise alone.
        let largest = analysis.decisive_drop.unwrap_or(0.0);
        for w in analysis.resolved.windows(2) {
            let drop = w[0].v_fit - w[1].v_fit;
            if (w[0].t, w[1].t) != (a, b) && rival(drop, largest) {
                wanted.extend([(w[0].t, K_CONFIRM), (w[1].t, K_CONFIRM)]);
            }
        }
        if open {
            let ts: Vec<u32> = analysis.resolved.iter().map(|r| r.t).collect();
            let at = ts.iter().position(|&t| t == a).unwrap_or(0);
            wanted.push((0, K_TOTAL));
            for t in [at.checked_sub(1).map(|i| ts[i]), ts.get(at + 2).copied()].into_iter().flatten() {
                wanted.push((t, K_CONFIRM));
            }
        }
        let mut targets: Vec<Target> = Vec::new();
        for (t, k) in wanted {
            if t < self.ctx.length && points.requested(Series::Main, t) < k && !targets.iter().any(|e| e.t == t) {
                targets.push(main_target(t, k));
            }
        }
        (!targets.is_empty()).then_some(targets)
    }
}

/// `first` until it is finished, then `then`: two sequential steps of one lane.
struct Then<A, B> {
    first: Option<A>,
    then: B,
}

impl<A: Lane, B: Lane> Lane for Then<A, B> {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        if let Some(first) = &mut self.first {
            if let Some(targets) = first.next(points, memory) {
                return Some(targets);
            }
            self.first = None;
        }
        self.then.next(points, memory)
    }
}

/// The onset search, after confirmation (module docs, step 5): while no pair of consecutive
/// resolved points is significant, raise the ends of the decisive interval [`ONSET_STEP`] at a time
/// to [`ONSET_MAX`], stopping as soon as it is. Only a decisive interval before the terminal pair
/// whose raw drop is at least [`ONSET_DROP`] is tested.
struct Onset {
    ctx: LaneContext,
    /// The `K` of the last raise: the search never asks for the same `K` twice.
    raised: u32,
}

impl Lane for Onset {
    fn next(&mut self, points: &Points, _: &mut Memory) -> Option<Vec<Target>> {
        let (analysis, mut a, mut b) = decisive(&self.ctx, points)?;
        if analysis.onset.is_some() {
            return None;
        }
        if settled_erosion(&self.ctx, &analysis) {
            // Raising the decisive pair of a settled erosion reads it as a cliff more often (the
            // raised pair takes its neighbours' drops into its own in the fit): test the first
            // clear drop instead, where the onset is.
            (a, b) = analysis.resolved.windows(2).map(|w| (w[0].t, w[1].t)).find(|&(x, y)| {
                y < self.ctx.length && points.drop(Series::Main, x, y) >= ONSET_FIRST_DROP - crate::TOLERANCE
            })?;
        }
        if b >= self.ctx.length || points.drop(Series::Main, a, b) < ONSET_DROP - crate::TOLERANCE {
            return None;
        }
        let n = points.requested(Series::Main, a).min(points.requested(Series::Main, b)).max(self.raised);
        let k = ((n / ONSET_STEP + 1) * ONSET_STEP).min(ONSET_MAX);
        if k <= n {
            return None;
        }
        self.raised = k;
        Some([a, b].into_iter().filter(|&t| points.requested(Series::Main, t) < k).map(|t| main_target(t, k)).collect())
    }
}

#[cfg(test)]
#[path = "adaptive_harness.rs"]
mod harness;
