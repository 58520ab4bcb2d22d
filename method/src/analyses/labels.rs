//! Labels against the curves: the paper's Table 2 (four judges pooled), Table 21 (every source)
//! and Table 22 (the same on a subset, e.g. without the L2 stratum — filter the records).
//!
//! Each label `m` is placed against the decisive interval `(a, b]` and the point of no return:
//! `before` (`m ≤ a`), `inside` (`a < m ≤ b`), `after` (`b < m ≤ t_pnr`), `after_pnr`
//! (`m > t_pnr`), or `no_mistake`. From the paper's Tables 9–12 these rules give Tables 2, 21 and 22
//! exactly, as do the counts of labels within one step of `t*` and of the first symptom
//! (`|m − t*| ≤ 1`, `|m − t_sym| ≤ 1`, over labels on trajectories with a first symptom). The first
//! symptom is measured once a trajectory is replayed: when no label of a column is on a trajectory
//! whose first symptom was measured, both counts are not measured (`null`), not `0/0`.
//!
//! Where the raw points are known, the drop at the label `V̂(h_{m−1}) − V̂(h_m)` is read off them:
//! a label is *probed* when both sides have `n ≥ K_label` (the paper: "probed at K ≥ 16 on both
//! sides"; at `m = T` the terminal side is the known `V̂(h_T) = 0` and no Fisher test is run, one
//! side having no counts). Zero-drop: drop `≤ 0`; large: `≥ 0.20` (`label_drop_raise`);
//! significant: one-sided Fisher `p < α`. Without raw points in the study the probe fields are
//! absent; when the study has raw points but no label of a column is probed, the zero-drop, large
//! and significant counts are not measured (`null`): nothing was probed to count.
//!
//! The symptom share (the paper's "H1") counts the labels that are post-cause (`after`,
//! `after_pnr`) or probed with a zero drop, over every label that names a step; an unprobed label
//! before or inside the interval does not count. It carries a Wilson 95% interval (plain score
//! interval, `z_two_sided`) and a task-level cluster bootstrap interval (the tasks on which the
//! source answered, `bootstrap_resamples` resamples, a fixed seed). The post-cause share alone is
//! reported too: it needs no probes, so it is what a placement of new labels on old curves gives.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    AnalysisError, CurveRecord, Label, Measured, Ratio, index_trajectories, sources_in_order, validate_labels,
};
use crate::bootstrap::{Cluster, cluster_bootstrap_share};
use crate::curve::{Point, Shape};
use crate::stats::{TwoByTwo, wilson};
use crate::{Thresholds, meets_at_least, meets_at_most, meets_below};

/// Where a label falls against its trajectory's curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// `m ≤ a`: before the decisive interval.
    Before,
    /// `a < m ≤ b`: inside it.
    Inside,
    /// `b < m ≤ t_pnr`: after it, at or before the point of no return.
    After,
    /// `m > t_pnr`: after the point of no return.
    AfterPnr,
    /// The source answered "no mistake".
    NoMistake,
    /// The curve has no decisive interval (flat): a step label cannot be placed.
    Unplaced,
}

impl Placement {
    /// After the decisive drop: `after` or `after_pnr`.
    pub fn is_post_cause(&self) -> bool {
        matches!(self, Placement::After | Placement::AfterPnr)
    }
}

/// Place label `m` against a curve.
pub fn place(record: &CurveRecord, m: Option<u32>) -> Placement {
    let Some(m) = m else { return Placement::NoMistake };
    let Some(interval) = record.decisive_interval else { return Placement::Unplaced };
    if m <= interval.a {
        Placement::Before
    } else if m <= interval.b {
        Placement::Inside
    } else if m <= record.pnr {
        Placement::After
    } else {
        Placement::AfterPnr
    }
}

/// The direct measurement at a labelled step `m`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The raw point at `m − 1`.
    pub before: Point,
    /// The raw point at `m`; `None` at the terminal step (`V̂(h_T) = 0`, known).
    pub after: Option<Point>,
    /// `V̂(h_{m−1}) − V̂(h_m)`.
    pub drop: f64,
    /// One-sided Fisher exact `p` of `V(h_{m−1}) > V(h_m)`; `None` at the terminal step.
    pub p_value: Option<f64>,
    /// Drop `≤ 0`.
    pub zero_drop: bool,
    /// Drop `≥ label_drop_raise` (0.20).
    pub large_drop: bool,
    /// `p < α`.
    pub significant: bool,
}

/// The probe at label `m`, if both sides were sampled at `n ≥ K_label`.
pub fn probe(record: &CurveRecord, m: u32, params: &Thresholds) -> Option<Probe> {
    let probed = |p: Point| (p.n >= params.k_label).then_some(p);
    let before = probed(record.point(m.checked_sub(1)?)?)?;
    let after = if m >= record.length { None } else { Some(probed(record.point(m)?)?) };
    let drop = before.v_hat() - after.map_or(0.0, |p| p.v_hat());
    let p_value = after.map(|a| TwoByTwo::new(before.successes, before.n, a.successes, a.n).fisher_greater());
    Some(Probe {
        before,
        after,
        drop,
        p_value,
        zero_drop: meets_at_most(drop, 0.0),
        large_drop: meets_at_least(drop, params.label_drop_raise),
        significant: p_value.is_some_and(|p| meets_below(p, params.alpha)),
    })
}

/// One label placed on its curve (a row of the export).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacedLabel {
    pub trajectory: String,
    pub task: String,
    pub source: String,
    pub step: Option<u32>,
    pub placement: Placement,
    /// `m = t*`.
    pub at_t_star: bool,
    pub probe: Option<Probe>,
}

/// A share with its intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub hits: u32,
    pub total: u32,
    pub share: Option<f64>,
    /// Wilson 95% score interval.
    pub wilson_lo: Option<f64>,
    pub wilson_hi: Option<f64>,
    /// Task-level cluster bootstrap 95% interval.
    pub bootstrap_lo: Option<f64>,
    pub bootstrap_hi: Option<f64>,
}

/// One column of Table 21: a source, or the pooled sources.
///
/// Serialized with the counts not measured as `null`: the probe counts when nothing was probed,
/// `near_t_star` and `near_symptom` when no first symptom was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "PlacementSummaryJson", from = "PlacementSummaryJson")]
pub struct PlacementSummary {
    /// Trajectories on which the source answered.
    pub trajectories: u32,
    /// Answers naming a step.
    pub labels: u32,
    pub before: u32,
    pub inside: u32,
    pub after: u32,
    pub after_pnr: u32,
    pub no_mistake: u32,
    /// Step labels on curves without a decisive interval.
    pub unplaced: u32,
    /// Labels naming the decisive step itself (`m = t*`).
    pub at_t_star: u32,
    /// `after + after_pnr` of `labels`.
    pub post_cause: Share,
    /// Labels probed at `K ≥ K_label` on both sides; the probe fields are absent when the study
    /// has no raw points at all.
    pub probed: Option<u32>,
    /// Probed labels on a zero drop; `None` also when no label of the column is probed (not
    /// measured, serialized as `null`).
    pub zero_drop: Option<u32>,
    pub large_drop: Option<u32>,
    pub significant: Option<u32>,
    /// Post-cause or probed zero-drop, of `labels` (the paper's H1 share).
    pub post_cause_or_zero_drop: Option<Share>,
    /// Labels within one step of `t*`, on trajectories with a first symptom. Counts only when
    /// `symptoms_measured`: read it with [`PlacementSummary::near_t_star_measured`].
    pub near_t_star: Ratio,
    /// Labels within one step of the first symptom, on trajectories with one (as `near_t_star`).
    pub near_symptom: Ratio,
    /// Some label of the column is on a trajectory whose first symptom was measured; otherwise
    /// `near_t_star` and `near_symptom` are not measured.
    pub symptoms_measured: bool,
}

impl PlacementSummary {
    /// Labels within one step of `t*` on trajectories with a first symptom, when measured.
    pub fn near_t_star_measured(&self) -> Measured<Ratio> {
        if self.symptoms_measured { Measured::Value(self.near_t_star) } else { Measured::NotMeasured }
    }

    /// Labels within one step of the first symptom, when measured.
    pub fn near_symptom_measured(&self) -> Measured<Ratio> {
        if self.symptoms_measured { Measured::Value(self.near_symptom) } else { Measured::NotMeasured }
    }
}

/// [`PlacementSummary`] as exported: a probe field is absent when the study has no raw points,
/// `null` when it has but nothing was probed; the neighbourhoods are `null` when not measured.
#[derive(Serialize, Deserialize)]
struct PlacementSummaryJson {
    trajectories: u32,
    labels: u32,
    before: u32,
    inside: u32,
    after: u32,
    after_pnr: u32,
    no_mistake: u32,
    unplaced: u32,
    at_t_star: u32,
    post_cause: Share,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    probed: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default, deserialize_with = "present")]
    zero_drop: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none", default, deserialize_with = "present")]
    large_drop: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none", default, deserialize_with = "present")]
    significant: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    post_cause_or_zero_drop: Option<Share>,
    near_t_star: Measured<Ratio>,
    near_symptom: Measured<Ratio>,
}

/// A field that is present, `null` or not.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(deserializer).map(Some)
}

impl From<PlacementSummary> for PlacementSummaryJson {
    fn from(s: PlacementSummary) -> Self {
        // Present (a count or null) exactly when the study has raw points.
        let probe = |count: Option<u32>| s.probed.map(|_| count);
        PlacementSummaryJson {
            near_t_star: s.near_t_star_measured(),
            near_symptom: s.near_symptom_measured(),
            trajectories: s.trajectories,
            labels: s.labels,
            before: s.before,
            inside: s.inside,
            after: s.after,
            after_pnr: s.after_pnr,
            no_mistake: s.no_mistake,
            unplaced: s.unplaced,
            at_t_star: s.at_t_star,
            post_cause: s.post_cause,
            probed: s.probed,
            zero_drop: probe(s.zero_drop),
            large_drop: probe(s.large_drop),
            significant: probe(s.significant),
            post_cause_or_zero_drop: s.post_cause_or_zero_drop,
        }
    }
}

impl From<PlacementSummaryJson> for PlacementSummary {
    fn from(j: PlacementSummaryJson) -> Self {
        PlacementSummary {
            trajectories: j.trajectories,
            labels: j.labels,
            before: j.before,
            inside: j.inside,
            after: j.after,
            after_pnr: j.after_pnr,
            no_mistake: j.no_mistake,
            unplaced: j.unplaced,
            at_t_star: j.at_t_star,
            post_cause: j.post_cause,
            probed: j.probed,
            zero_drop: j.zero_drop.flatten(),
            large_drop: j.large_drop.flatten(),
            significant: j.significant.flatten(),
            post_cause_or_zero_drop: j.post_cause_or_zero_drop,
            symptoms_measured: j.near_t_star.is_measured() || j.near_symptom.is_measured(),
            near_t_star: j.near_t_star.value().unwrap_or_default(),
            near_symptom: j.near_symptom.value().unwrap_or_default(),
        }
    }
}

/// Tables 2 and 21.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementReport {
    /// Every source's column.
    pub sources: BTreeMap<String, PlacementSummary>,
    /// The sources pooled, in order.
    pub pooled_sources: Vec<String>,
    pub pooled: PlacementSummary,
    /// The pooled sources by the curve's shape (the paper: 91% on cliffs, 77% on erosion).
    pub pooled_by_shape: BTreeMap<String, PlacementSummary>,
    /// Every label, placed.
    pub labels: Vec<PlacedLabel>,
}

/// Options of [`place_labels`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementOptions {
    /// Sources pooled into the `pooled` column; `None`: every source.
    pub pooled_sources: Option<Vec<String>>,
    /// Seed of the cluster bootstrap.
    pub bootstrap_seed: u64,
}

impl Default for PlacementOptions {
    fn default() -> Self {
        PlacementOptions { pooled_sources: None, bootstrap_seed: super::BOOTSTRAP_SEED }
    }
}

/// Place every label on its curve and summarize per source and pooled.
pub fn place_labels(
    trajectories: &[CurveRecord],
    labels: &[Label],
    options: &PlacementOptions,
    params: &Thresholds,
) -> Result<PlacementReport, AnalysisError> {
    validate_labels(trajectories, labels)?;
    let index = index_trajectories(trajectories)?;
    let with_points = trajectories.iter().any(|r| !r.points.is_empty());

    let placed: Vec<PlacedLabel> = labels
        .iter()
        .map(|label| {
            let record = index[label.trajectory.as_str()];
            PlacedLabel {
                trajectory: label.trajectory.clone(),
                task: record.task.clone(),
                source: label.source.clone(),
                step: label.step,
                placement: place(record, label.step),
                at_t_star: label.step.is_some() && label.step == record.t_star,
                probe: label.step.and_then(|m| probe(record, m, params)),
            }
        })
        .collect();

    let summarize = |subset: Vec<&PlacedLabel>| summarize(&subset, &index, with_points, options.bootstrap_seed, params);
    let sources = sources_in_order(labels.iter().map(|l| l.source.as_str()));
    let pooled_sources = options.pooled_sources.clone().unwrap_or_else(|| sources.clone());
    let pooled: Vec<&PlacedLabel> = placed.iter().filter(|l| pooled_sources.contains(&l.source)).collect();

    let mut pooled_by_shape = BTreeMap::new();
    for shape in [Shape::Cliff, Shape::Erosion, Shape::Flat] {
        let subset: Vec<&PlacedLabel> =
            pooled.iter().copied().filter(|l| index[l.trajectory.as_str()].shape == shape).collect();
        if !subset.is_empty() {
            pooled_by_shape.insert(shape.as_str().to_owned(), summarize(subset));
        }
    }
    Ok(PlacementReport {
        sources: sources
            .iter()
            .map(|s| (s.clone(), summarize(placed.iter().filter(|l| &l.source == s).collect())))
            .collect(),
        pooled: summarize(pooled),
        pooled_sources,
        pooled_by_shape,
        labels: placed,
    })
}

fn summarize(
    labels: &[&PlacedLabel],
    index: &BTreeMap<&str, &CurveRecord>,
    with_points: bool,
    seed: u64,
    params: &Thresholds,
) -> PlacementSummary {
    let mut trajectories = std::collections::BTreeSet::new();
    let (mut near_t_star, mut near_symptom) = (Ratio::default(), Ratio::default());
    let mut counts = BTreeMap::<Placement, u32>::new();
    // Per task: (post-cause, post-cause or zero-drop, labels).
    let mut by_task = BTreeMap::<&str, (u32, u32, u32)>::new();
    let (mut probed, mut zero_drop, mut large_drop, mut significant, mut at_t_star) = (0, 0, 0, 0, 0);
    let mut symptoms_measured = false;
    for label in labels {
        let record = index[label.trajectory.as_str()];
        trajectories.insert(label.trajectory.as_str());
        symptoms_measured |= record.first_symptom.is_measured();
        *counts.entry(label.placement).or_default() += 1;
        let task = by_task.entry(record.task.as_str()).or_default();
        let Some(m) = label.step else { continue };
        let post = label.placement.is_post_cause();
        let zero = label.probe.is_some_and(|p| p.zero_drop);
        task.0 += u32::from(post);
        task.1 += u32::from(post || zero);
        task.2 += 1;
        at_t_star += u32::from(label.at_t_star);
        if let Some(p) = label.probe {
            probed += 1;
            zero_drop += u32::from(p.zero_drop);
            large_drop += u32::from(p.large_drop);
            significant += u32::from(p.significant);
        }
        if let Some(symptom) = record.first_symptom.step() {
            near_t_star.count(record.t_star.is_some_and(|t| m.abs_diff(t) <= 1));
            near_symptom.count(m.abs_diff(symptom) <= 1);
        }
    }
    let count = |p: Placement| counts.get(&p).copied().unwrap_or(0);
    let share = |pick: fn(&(u32, u32, u32)) -> u32| {
        let clusters: Vec<Cluster> = by_task.values().map(|c| Cluster { hits: pick(c), total: c.2 }).collect();
        let (hits, total) = clusters.iter().fold((0, 0), |(h, t), c| (h + c.hits, t + c.total));
        let band = (total > 0).then(|| wilson(hits, total, params.z_two_sided));
        let boot = cluster_bootstrap_share(&clusters, params.bootstrap_resamples, seed, 0.95);
        Share {
            hits,
            total,
            share: Ratio { hits, total }.share(),
            wilson_lo: band.map(|b| b.lo),
            wilson_hi: band.map(|b| b.hi),
            bootstrap_lo: boot.map(|b| b.0),
            bootstrap_hi: boot.map(|b| b.1),
        }
    };
    PlacementSummary {
        trajectories: trajectories.len() as u32,
        labels: labels.iter().filter(|l| l.step.is_some()).count() as u32,
        before: count(Placement::Before),
        inside: count(Placement::Inside),
        after: count(Placement::After),
        after_pnr: count(Placement::AfterPnr),
        no_mistake: count(Placement::NoMistake),
        unplaced: count(Placement::Unplaced),
        at_t_star,
        post_cause: share(|c| c.0),
        probed: with_points.then_some(probed),
        // Counts over the probed labels: not measured when none is.
        zero_drop: (with_points && probed > 0).then_some(zero_drop),
        large_drop: (with_points && probed > 0).then_some(large_drop),
        significant: (with_points && probed > 0).then_some(significant),
        post_cause_or_zero_drop: with_points.then(|| share(|c| c.1)),
        near_t_star,
        near_symptom,
        symptoms_measured,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Observation;
    use super::super::testing::*;
    use super::*;

    fn params() -> Thresholds {
        Thresholds { bootstrap_resamples: 2_000, ..Thresholds::default() }
    }

    #[test]
    fn placement_at_the_edges() {
        // (a, b] = (10, 12], t_pnr = 20, T = 30.
        let r = record("a", "x", 30, 10, 12, 20);
        assert_eq!(place(&r, Some(1)), Placement::Before);
        assert_eq!(place(&r, Some(10)), Placement::Before, "m = a is before");
        assert_eq!(place(&r, Some(11)), Placement::Inside);
        assert_eq!(place(&r, Some(12)), Placement::Inside, "m = b is inside");
        assert_eq!(place(&r, Some(13)), Placement::After);
        assert_eq!(place(&r, Some(20)), Placement::After, "m = t_pnr is after, not after the PNR");
        assert_eq!(place(&r, Some(21)), Placement::AfterPnr);
        assert_eq!(place(&r, Some(30)), Placement::AfterPnr);
        assert_eq!(place(&r, None), Placement::NoMistake);
        // t_pnr inside the interval (certified at b): everything after b is after the PNR.
        let r = record("b", "x", 30, 10, 12, 12);
        assert_eq!(place(&r, Some(12)), Placement::Inside);
        assert_eq!(place(&r, Some(13)), Placement::AfterPnr);
        // No decisive interval.
        let mut flat = record("c", "x", 30, 10, 12, 30);
        flat.decisive_interval = None;
        assert_eq!(place(&flat, Some(3)), Placement::Unplaced);
        assert_eq!(place(&flat, None), Placement::NoMistake);
    }

    #[test]
    fn probes_read_the_raw_points() {
        let params = Thresholds::default();
        let mut r = record("a", "x", 30, 10, 12, 20);
        r.points = vec![
            Point { t: 4, n: 16, successes: 8 },
            Point { t: 5, n: 16, successes: 8 },
            Point { t: 10, n: 32, successes: 16 },
            Point { t: 11, n: 32, successes: 2 },
            Point { t: 14, n: 16, successes: 4 },
            Point { t: 15, n: 8, successes: 4 },
            Point { t: 29, n: 16, successes: 5 },
        ];
        let flat = probe(&r, 5, &params).unwrap();
        assert!(flat.zero_drop && !flat.large_drop && !flat.significant);
        assert_eq!(flat.drop, 0.0);
        let cliff = probe(&r, 11, &params).unwrap();
        assert!(close(cliff.drop, 0.5 - 2.0 / 32.0));
        assert!(!cliff.zero_drop && cliff.large_drop && cliff.significant);
        // A rise is a zero drop (≤ 0).
        assert!(probe(&r, 15, &params).is_none(), "n = 8 at m is not probed");
        // Unsampled side: no probe.
        assert!(probe(&r, 13, &params).is_none());
        assert!(probe(&r, 1, &params).is_none());
        // m = T: the terminal side is known, not tested.
        let terminal = probe(&r, 30, &params).unwrap();
        assert!(close(terminal.drop, 5.0 / 16.0));
        assert!(terminal.large_drop && !terminal.significant && terminal.p_value.is_none());
        // The 0.20 rule meets with tolerance: 0.6 − 0.4 = 0.19999999999999996.
        r.points = vec![Point { t: 0, n: 20, successes: 12 }, Point { t: 1, n: 20, successes: 8 }];
        assert!(probe(&r, 1, &params).unwrap().large_drop);
    }

    #[test]
    fn summary_counts_shares_and_neighbourhoods() {
        let mut a = record("a", "x", 30, 10, 12, 20);
        a.first_symptom = Observation::At(18);
        a.points = vec![Point { t: 2, n: 16, successes: 4 }, Point { t: 3, n: 16, successes: 6 }];
        let mut b = record("b", "y", 40, 5, 6, 8);
        b.shape = Shape::Erosion;
        b.first_symptom = Observation::Never; // silent
        let trajectories = vec![a, b];
        let labels = vec![
            label("a", "J", Some(3)),  // before, probed zero drop (a rise)
            label("a", "K", Some(11)), // inside = t*, near t*
            label("a", "L", Some(19)), // after, near the symptom
            label("b", "J", Some(6)),  // inside (t* = 6), b is silent
            label("b", "K", Some(30)), // after the PNR
            label("b", "L", None),
        ];
        let options = PlacementOptions { pooled_sources: Some(vec!["J".into(), "K".into()]), ..Default::default() };
        let report = place_labels(&trajectories, &labels, &options, &params()).unwrap();
        let j = &report.sources["J"];
        assert_eq!((j.trajectories, j.labels, j.before, j.inside, j.after, j.after_pnr), (2, 2, 1, 1, 0, 0));
        assert_eq!((j.probed, j.zero_drop, j.large_drop, j.significant), (Some(1), Some(1), Some(0), Some(0)));
        assert_eq!((j.post_cause.hits, j.post_cause.total), (0, 2));
        let h1 = j.post_cause_or_zero_drop.unwrap();
        assert_eq!((h1.hits, h1.total), (1, 2));
        assert_eq!(j.near_t_star, Ratio { hits: 0, total: 1 }, "only the symptomatic trajectory counts");
        assert_eq!(j.at_t_star, 1);
        let l = &report.sources["L"];
        assert_eq!((l.labels, l.after, l.no_mistake), (1, 1, 1));
        assert_eq!(l.near_symptom, Ratio { hits: 1, total: 1 });
        assert_eq!(l.post_cause.share, Some(1.0));
        let pooled = &report.pooled;
        assert_eq!((pooled.labels, pooled.before, pooled.inside, pooled.after, pooled.after_pnr), (4, 1, 2, 0, 1));
        assert_eq!(pooled.near_t_star, Ratio { hits: 1, total: 2 });
        assert_eq!(pooled.post_cause_or_zero_drop.unwrap().hits, 2);
        let h1 = pooled.post_cause_or_zero_drop.unwrap();
        let wilson = crate::stats::wilson(2, 4, 1.96);
        assert_eq!((h1.wilson_lo, h1.wilson_hi), (Some(wilson.lo), Some(wilson.hi)));
        // Two tasks: x with 1 of 2 (J's zero drop at 3), y with 1 of 2 (K after the PNR): every
        // resample pools to 1/2.
        assert_eq!((h1.bootstrap_lo, h1.bootstrap_hi), (Some(0.5), Some(0.5)));
        let post = pooled.post_cause;
        // Post-cause alone: x 0 of 2, y 1 of 2 → resamples give 0, 1/4 or 1/2.
        assert!(post.bootstrap_lo.unwrap() <= post.share.unwrap() && post.share.unwrap() <= post.bootstrap_hi.unwrap());
        assert_eq!((post.bootstrap_lo, post.bootstrap_hi), (Some(0.0), Some(0.5)));
        assert_eq!(report.pooled_by_shape["cliff"].labels, 2);
        assert_eq!(report.pooled_by_shape["erosion"].after_pnr, 1);
        assert_eq!(report.labels.len(), 6);
        assert_eq!(report.labels[1].placement, Placement::Inside);
    }

    #[test]
    fn without_points_the_probe_fields_are_absent() {
        let trajectories = vec![record("a", "x", 30, 10, 12, 20)];
        let report =
            place_labels(&trajectories, &[label("a", "J", Some(25))], &PlacementOptions::default(), &params()).unwrap();
        let j = &report.sources["J"];
        assert_eq!(j.probed, None);
        assert_eq!(j.post_cause_or_zero_drop, None);
        let json = serde_json::to_value(j).unwrap();
        assert!(json.get("zero_drop").is_none());
        assert_eq!(json["after_pnr"], 1);
        assert_eq!(json["labels"], 1);
        // One task: the bootstrap interval is the share itself.
        assert_eq!((j.post_cause.bootstrap_lo, j.post_cause.bootstrap_hi), (Some(1.0), Some(1.0)));
    }

    #[test]
    fn without_measured_symptoms_the_neighbourhoods_are_not_measured() {
        // Nothing replayed: no first symptom known anywhere.
        let trajectories = vec![record("a", "x", 30, 10, 12, 20), record("b", "y", 40, 5, 6, 8)];
        let labels = vec![label("a", "J", Some(11)), label("b", "J", Some(7))];
        let report = place_labels(&trajectories, &labels, &PlacementOptions::default(), &params()).unwrap();
        let j = &report.sources["J"];
        assert!(!j.symptoms_measured);
        assert_eq!(
            (j.near_t_star_measured(), j.near_symptom_measured()),
            (Measured::NotMeasured, Measured::NotMeasured)
        );
        let json = serde_json::to_value(j).unwrap();
        assert_eq!(json["near_t_star"], serde_json::Value::Null);
        assert_eq!(json["near_symptom"], serde_json::Value::Null);
        assert!(json.get("symptoms_measured").is_none(), "the JSON says it with null");
        assert_eq!(serde_json::from_value::<PlacementSummary>(json).unwrap(), *j);

        // Measured, every run silent: a measured 0 of 0, exported as such.
        let mut silent = trajectories.clone();
        for r in &mut silent {
            r.first_symptom = Observation::Never;
        }
        let report = place_labels(&silent, &labels, &PlacementOptions::default(), &params()).unwrap();
        let j = &report.sources["J"];
        assert_eq!(j.near_t_star_measured(), Measured::Value(Ratio { hits: 0, total: 0 }));
        let json = serde_json::to_value(j).unwrap();
        assert_eq!(json["near_t_star"], serde_json::json!({"hits": 0, "total": 0}));

        // One trajectory replayed: the column counts the labels on it.
        let mut partly = trajectories;
        partly[0].first_symptom = Observation::At(12);
        let report = place_labels(&partly, &labels, &PlacementOptions::default(), &params()).unwrap();
        let j = &report.sources["J"];
        assert_eq!(j.near_t_star_measured(), Measured::Value(Ratio { hits: 1, total: 1 }));
        assert_eq!(j.near_symptom_measured(), Measured::Value(Ratio { hits: 1, total: 1 }));
    }

    #[test]
    fn a_column_with_nothing_probed_has_its_probe_counts_not_measured() {
        let mut a = record("a", "x", 30, 10, 12, 20);
        a.points = vec![Point { t: 2, n: 16, successes: 4 }, Point { t: 3, n: 16, successes: 6 }];
        let labels = vec![label("a", "J", Some(3)), label("a", "K", Some(25))];
        let report = place_labels(&[a], &labels, &PlacementOptions::default(), &params()).unwrap();
        // J is probed: its counts are measured, zeros included.
        let j = &report.sources["J"];
        assert_eq!((j.probed, j.zero_drop, j.large_drop, j.significant), (Some(1), Some(1), Some(0), Some(0)));
        // K is not: 0 probed, and nothing to count zero drops among.
        let k = &report.sources["K"];
        assert_eq!((k.probed, k.zero_drop, k.large_drop, k.significant), (Some(0), None, None, None));
        let json = serde_json::to_value(k).unwrap();
        assert_eq!(json["probed"], 0);
        for field in ["zero_drop", "large_drop", "significant"] {
            assert_eq!(json.get(field), Some(&serde_json::Value::Null), "{field} is null, not absent or 0");
        }
        // The H1 share is defined with unprobed labels (they do not count): K's post-cause label.
        assert_eq!(k.post_cause_or_zero_drop.map(|s| (s.hits, s.total)), Some((1, 1)));
        assert_eq!(serde_json::from_value::<PlacementSummary>(json).unwrap(), *k);
        let json = serde_json::to_value(j).unwrap();
        assert_eq!(
            (json["zero_drop"].clone(), json["large_drop"].clone()),
            (serde_json::json!(1), serde_json::json!(0))
        );
    }

    #[test]
    fn bad_labels_are_refused() {
        let trajectories = vec![record("a", "x", 30, 10, 12, 20)];
        let err = place_labels(&trajectories, &[label("z", "J", Some(3))], &PlacementOptions::default(), &params());
        assert!(matches!(err, Err(AnalysisError::UnknownTrajectory { .. })));
    }
}
