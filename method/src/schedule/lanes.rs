//! The lanes of the paper's stages (docs/method.md §4), each a small sequential state machine.
//!
//! A lane's [`Lane::next`] is called when every key of its previous targets has an outcome; it
//! reads the counts it needs and returns the next targets, or `None` when it is finished.

use crate::stats::wilson_upper;
use crate::{Thresholds, meets_at_least, meets_at_most};

use super::points::{Controls, Points, Series, Target};

/// A sequential piece of a stage. See the module docs.
pub trait Lane: Send {
    /// The next points to raise, or `None` when the lane is finished. Called again (at once) if
    /// every returned target is already met.
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>>;
}

/// What a stage needs to know of the trajectory.
#[derive(Debug, Clone)]
pub struct LaneContext {
    pub length: u32,
    /// The anchors under the variant's parameters.
    pub anchors: Vec<u32>,
    pub labels: Vec<u32>,
    pub controls: Controls,
    pub params: Thresholds,
}

/// What stages learn and later stages read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    /// Pairs `(a, b)` with `b − a = 1` that bisection bracketed.
    pub bracketed: Vec<(u32, u32)>,
    /// Bracketed pairs whose ends were raised to `K_confirm`, in the order they were confirmed.
    pub confirmed: Vec<(u32, u32)>,
    /// Point-of-no-return search: the point that certified, if any (an anchor under `paper`; the
    /// earliest certified point under `adaptive`).
    pub certified_anchor: Option<u32>,
}

/// The drop `V̂(a) − V̂(b)` of the main series, `V̂(T) = 0`.
fn main_drop(points: &Points, a: u32, b: u32) -> f64 {
    points.drop(Series::Main, a, b)
}

/// Sort pairs by drop, largest first, equal drops (within the tolerance) earliest first.
fn rank_by_drop(points: &Points, pairs: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut ranked: Vec<((u32, u32), f64)> = pairs.iter().map(|&(a, b)| ((a, b), main_drop(points, a, b))).collect();
    // A stable insertion by "strictly larger beyond the tolerance" keeps ties in `t` order.
    ranked.sort_by_key(|&((a, _), _)| a);
    let mut out: Vec<((u32, u32), f64)> = Vec::with_capacity(ranked.len());
    for item in ranked {
        let pos = out.iter().position(|&(_, d)| item.1 > d + crate::TOLERANCE).unwrap_or(out.len());
        out.insert(pos, item);
    }
    out.into_iter().map(|(pair, _)| pair).collect()
}

fn main_target(t: u32, k: u32) -> Target {
    Target { series: Series::Main, t, k }
}

/// Screening: `K_screen` continuations at every anchor.
pub struct Screen {
    targets: Option<Vec<Target>>,
}

impl Screen {
    pub fn new(ctx: &LaneContext) -> Self {
        Screen { targets: Some(ctx.anchors.iter().map(|&t| main_target(t, ctx.params.k_screen)).collect()) }
    }
}

impl Lane for Screen {
    fn next(&mut self, _: &Points, _: &mut Memory) -> Option<Vec<Target>> {
        self.targets.take()
    }
}

/// The pairs bisection starts from: adjacent anchors and the terminal pair `(T − 1, T)` whose
/// screened drop is at least `δ_screen`, largest first, at most `max_bisected`.
pub fn bisection_pairs(ctx: &LaneContext, points: &Points) -> Vec<(u32, u32)> {
    let mut pairs: Vec<(u32, u32)> = ctx.anchors.windows(2).map(|w| (w[0], w[1])).collect();
    if let Some(&last) = ctx.anchors.last() {
        pairs.push((last, ctx.length));
    }
    let candidates: Vec<(u32, u32)> =
        pairs.into_iter().filter(|&(a, b)| meets_at_least(main_drop(points, a, b), ctx.params.delta_screen)).collect();
    let mut ranked = rank_by_drop(points, &candidates);
    ranked.truncate(ctx.params.max_bisected as usize);
    ranked
}

/// Bisection of one pair: sample the midpoint at `K_screen`, recurse into the half with the
/// larger drop (ties: the earlier half) until the ends are adjacent.
pub struct Bisect {
    a: u32,
    b: u32,
    mid: Option<u32>,
    k: u32,
}

impl Bisect {
    pub fn new(ctx: &LaneContext, (a, b): (u32, u32)) -> Self {
        Bisect { a, b, mid: None, k: ctx.params.k_screen }
    }
}

impl Lane for Bisect {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        if let Some(mid) = self.mid.take() {
            let left = main_drop(points, self.a, mid);
            let right = main_drop(points, mid, self.b);
            if right > left + crate::TOLERANCE {
                self.a = mid;
            } else {
                self.b = mid;
            }
        }
        if self.b - self.a <= 1 {
            memory.bracketed.push((self.a, self.b));
            return None;
        }
        let mid = (self.a + self.b) / 2;
        self.mid = Some(mid);
        Some(vec![main_target(mid, self.k)])
    }
}

/// Confirmation: raise both ends of the largest bracketed drop to `K_confirm`; then, if the
/// second-ranked pair's drop is still at least the second-drop minimum, its ends too.
pub struct Confirm {
    ranked: Option<Vec<(u32, u32)>>,
    second: Option<(u32, u32)>,
    k: u32,
    second_min: f64,
    done: bool,
}

impl Confirm {
    pub fn new(ctx: &LaneContext) -> Self {
        Confirm {
            ranked: None,
            second: None,
            k: ctx.params.k_confirm,
            second_min: ctx.params.second_drop_min,
            done: false,
        }
    }

    fn ends(&self, (a, b): (u32, u32)) -> Vec<Target> {
        vec![main_target(a, self.k), main_target(b, self.k)]
    }
}

impl Lane for Confirm {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        if self.done {
            return None;
        }
        if self.ranked.is_none() {
            let ranked = rank_by_drop(points, &memory.bracketed);
            let first = *ranked.first()?;
            self.second = ranked.get(1).copied();
            self.ranked = Some(ranked);
            memory.confirmed.push(first);
            if self.second.is_none() {
                self.done = true;
            }
            return Some(self.ends(first));
        }
        self.done = true;
        let second = self.second?;
        if meets_at_least(main_drop(points, second.0, second.1), self.second_min) {
            memory.confirmed.push(second);
            return Some(self.ends(second));
        }
        None
    }
}

/// The point-of-no-return search (docs/method.md §4 step 4).
pub struct PointOfNoReturn {
    anchors: Vec<u32>,
    state: PnrState,
    k_screen: u32,
    k_pnr: u32,
    epsilon: f64,
    z: f64,
}

#[derive(Debug, Clone, Copy)]
enum PnrState {
    /// Look for the next anchor with no success, from this index on.
    Search {
        from: usize,
    },
    /// The anchor at this index was raised to `K_pnr`.
    CheckAnchor {
        index: usize,
    },
    /// Backward bisection between a point with a success and a certified one.
    Backward {
        lo: u32,
        hi: u32,
    },
    /// The midpoint was sampled at `K_screen`.
    MidScreened {
        lo: u32,
        hi: u32,
        mid: u32,
    },
    /// The midpoint was raised to `K_pnr`.
    MidRaised {
        lo: u32,
        hi: u32,
        mid: u32,
    },
    Finished,
}

impl PointOfNoReturn {
    pub fn new(ctx: &LaneContext) -> Self {
        PointOfNoReturn {
            anchors: ctx.anchors.clone(),
            state: PnrState::Search { from: 0 },
            k_screen: ctx.params.k_screen,
            k_pnr: ctx.params.k_pnr,
            epsilon: ctx.params.epsilon,
            z: ctx.params.z_one_sided,
        }
    }

    fn certifies(&self, points: &Points, t: u32) -> bool {
        let (n, s) = points.counts(Series::Main, t);
        n > 0 && s == 0 && meets_at_most(wilson_upper(s, n, self.z), self.epsilon)
    }

    fn has_success(points: &Points, t: u32) -> bool {
        points.counts(Series::Main, t).1 > 0
    }
}

impl Lane for PointOfNoReturn {
    fn next(&mut self, points: &Points, memory: &mut Memory) -> Option<Vec<Target>> {
        loop {
            match self.state {
                PnrState::Search { from } => {
                    let next = (from..self.anchors.len()).find(|&i| {
                        let (n, s) = points.counts(Series::Main, self.anchors[i]);
                        n > 0 && s == 0
                    });
                    let Some(index) = next else {
                        self.state = PnrState::Finished;
                        continue;
                    };
                    self.state = PnrState::CheckAnchor { index };
                    return Some(vec![main_target(self.anchors[index], self.k_pnr)]);
                }
                PnrState::CheckAnchor { index } => {
                    let anchor = self.anchors[index];
                    if !self.certifies(points, anchor) {
                        self.state = PnrState::Search { from: index + 1 };
                        continue;
                    }
                    memory.certified_anchor = Some(anchor);
                    // The latest earlier sampled point with a success, from any stage.
                    let lo = points
                        .sampled(Series::Main)
                        .iter()
                        .rev()
                        .find(|p| p.t < anchor && p.successes > 0)
                        .map(|p| p.t);
                    self.state = match lo {
                        Some(lo) => PnrState::Backward { lo, hi: anchor },
                        None => PnrState::Finished,
                    };
                }
                PnrState::Backward { lo, hi } => {
                    if hi - lo <= 1 {
                        self.state = PnrState::Finished;
                        continue;
                    }
                    let mid = (lo + hi) / 2;
                    self.state = PnrState::MidScreened { lo, hi, mid };
                    return Some(vec![main_target(mid, self.k_screen)]);
                }
                PnrState::MidScreened { lo, hi, mid } => {
                    if Self::has_success(points, mid) {
                        self.state = PnrState::Backward { lo: mid, hi };
                        continue;
                    }
                    self.state = PnrState::MidRaised { lo, hi, mid };
                    return Some(vec![main_target(mid, self.k_pnr)]);
                }
                PnrState::MidRaised { lo, hi, mid } => {
                    self.state = if self.certifies(points, mid) {
                        PnrState::Backward { lo, hi: mid }
                    } else {
                        PnrState::Backward { lo: mid, hi }
                    };
                }
                PnrState::Finished => return None,
            }
        }
    }
}

/// Label probes: `m − 1` and `m` of each distinct labeled step (at most `max_labels_probed`,
/// earliest first) to `K_label`, then to `K_label_raised` where the probed drop is at least
/// `label_drop_raise`.
pub struct LabelProbes {
    steps: Vec<u32>,
    phase: u8,
    k: u32,
    k_raised: u32,
    raise_at: f64,
}

impl LabelProbes {
    pub fn new(ctx: &LaneContext) -> Self {
        let mut steps: Vec<u32> = ctx.labels.iter().copied().filter(|&m| (1..=ctx.length).contains(&m)).collect();
        steps.sort_unstable();
        steps.dedup();
        steps.truncate(ctx.params.max_labels_probed as usize);
        LabelProbes {
            steps,
            phase: 0,
            k: ctx.params.k_label,
            k_raised: ctx.params.k_label_raised,
            raise_at: ctx.params.label_drop_raise,
        }
    }

    fn probe(&self, m: u32, k: u32) -> [Target; 2] {
        [main_target(m - 1, k), main_target(m, k)]
    }
}

impl Lane for LabelProbes {
    fn next(&mut self, points: &Points, _: &mut Memory) -> Option<Vec<Target>> {
        self.phase += 1;
        match self.phase {
            1 if !self.steps.is_empty() => Some(self.steps.iter().flat_map(|&m| self.probe(m, self.k)).collect()),
            2 => {
                let raised: Vec<Target> = self
                    .steps
                    .iter()
                    .filter(|&&m| meets_at_least(main_drop(points, m - 1, m), self.raise_at))
                    .flat_map(|&m| self.probe(m, self.k_raised))
                    .collect();
                (!raised.is_empty()).then_some(raised)
            }
            _ => None,
        }
    }
}

/// The anchors the test–retest control re-screens: the first, the middle and the last.
pub fn retest_anchors(anchors: &[u32]) -> Vec<u32> {
    let mut picked: Vec<u32> =
        [anchors.first(), anchors.get(anchors.len() / 2), anchors.last()].into_iter().flatten().copied().collect();
    picked.dedup();
    picked
}

/// Controls (docs/method.md §7): test–retest on series `retest`, budget control on `full_budget`.
pub struct ControlRuns {
    targets: Option<Vec<Target>>,
}

impl ControlRuns {
    pub fn new(ctx: &LaneContext) -> Self {
        let k = ctx.params.k_screen;
        let mut targets = Vec::new();
        if ctx.controls.retest {
            targets.extend(retest_anchors(&ctx.anchors).into_iter().map(|t| Target { series: Series::Retest, t, k }));
        }
        if ctx.controls.budget_control {
            targets.extend(ctx.anchors.iter().map(|&t| Target { series: Series::FullBudget, t, k }));
        }
        ControlRuns { targets: (!targets.is_empty()).then_some(targets) }
    }
}

impl Lane for ControlRuns {
    fn next(&mut self, _: &Points, _: &mut Memory) -> Option<Vec<Target>> {
        self.targets.take()
    }
}
