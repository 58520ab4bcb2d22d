//! The paper's analyses (docs/method.md §9) as pure functions over a study's curves, base runs and
//! labels: no I/O, no async. Every result is a plain struct that derives `Serialize`, so the export
//! can write it as JSON or CSV and a report can print it.
//!
//! | module | reproduces | input |
//! |---|---|---|
//! | [`labels`] | Tables 2, 21 and 22: labels against the decisive interval and the point of no return, probed drops at the labels, the post-cause-or-zero-drop share | [`CurveRecord`]s, [`Label`]s |
//! | [`restart`] | Tables 23–27: restart policies evaluated offline | [`CurveRecord`]s, [`Label`]s, [`DecoyLabel`]s, [`BaseRuns`](crate::BaseRuns) per task |
//! | [`localizers`] | Table 32: value captured `VC_0, VC_1, VC_3` per localizer | [`CurveRecord`]s with their fit, [`Label`]s |
//! | [`checks`] | Table 4 (checks before any claim) and Tables 18–20 (the controls) | counts and control points |
//! | [`stages`] | Table 13: continuations by schedule stage | per-trajectory stage counts |
//!
//! ## The inputs
//!
//! A [`CurveRecord`] is what the analyses need to know of one trajectory's curve: the quantities
//! of its Table 9 row (decisive interval, `t*`, `t_pnr`, the restart point, first edit, first
//! symptom), and optionally the isotonic fit at its resolved points (for value captured) and its
//! raw sampled points (for the probed drops at labels). It is built from a
//! [`CurveAnalysis`] with [`CurveRecord::from_analysis`], or straight from
//! exported files — the paper's own Table 9 is enough for the label placement.
//!
//! ## Interpretations
//!
//! Where docs/method.md and the paper leave a choice open, these modules decide as follows (each module
//! repeats the ones it uses):
//!
//! 1. **Placement** (Tables 2, 21): `before` `m ≤ a`, `inside` `a < m ≤ b`, `after`
//!    `b < m ≤ t_pnr`, `after_pnr` `m > t_pnr`; a curve without a decisive interval (flat) leaves
//!    its labels `unplaced`. These rules reproduce Tables 2, 21 and 22 from Tables 9–12 exactly.
//!    "Names the decisive step" is `m = t*`. The pooled column pools the sources the caller names
//!    (the paper: its four main judges; default: every source).
//! 2. **Probed drop at a label** `m`: `V̂(h_{m−1}) − V̂(h_m)` from the raw points, counted as probed
//!    only when both sides have `n ≥ K_label` (16; the paper: "probed at K ≥ 16 on both sides");
//!    at `m = T` the terminal side is the known `V̂(h_T) = 0` and the Fisher test is not run (one
//!    side has no counts, as for the onset). Zero-drop: drop `≤ 0`; large: drop `≥ 0.20`
//!    (`label_drop_raise`); significant: one-sided Fisher `p < α`.
//! 3. **The symptom share** ("H1") counts a label when it is post-cause (`after` or `after_pnr`)
//!    or probed with a zero drop; an unprobed label before or inside the interval does not count.
//!    Its denominator is every label that names a step. The bootstrap resamples the tasks on which
//!    the source answered, 10,000 times ([`Thresholds::bootstrap_resamples`](crate::Thresholds)),
//!    seed [`BOOTSTRAP_SEED`].
//! 4. **Near `t*` / near the first symptom**: `|m − t*| ≤ 1`, `|m − t_sym| ≤ 1`, over the labels on
//!    trajectories that have a first symptom (reproduces 17/138 and 3/138). When no label of a
//!    column is on a trajectory whose first symptom was measured, both are not measured.
//! 5. **Restarts**: a policy restarts a failed run at step `t` only if `t < T` (the run is still
//!    going); a run of length `T ≤ t` has ended and keeps its outcome. This is how the paper's
//!    second policy prints `t* = T` and uncertified `t_pnr = T` as "no restart", and how fixed
//!    `t = 50` restarts 43/47. A restart at `t` obtains `R̂(x, B − t)`; a judge restarts at its
//!    labelled step `m` itself (Table 27's restart steps equal the labels).
//! 6. **A random run of the task** (Table 23's "Random"): each failed trajectory stands for its
//!    task; its random run succeeds with `p(x)·s + (1 − p(x))·f`, where `f` is the trajectory's
//!    failed-run outcome under the policy and `s` the expected success of a run that would have
//!    succeeded; the column is the mean over trajectories (a mean over tasks gives 0.47 for
//!    "never", not the paper's 0.44). `s = 1` for value-based policies; for a judge
//!    `s = 1 − L` with `L` the loss per decoy, averaged over every decoy the judge answered on
//!    (unlabelled decoys lose 0) — the only reading under which Table 24's losses give Table 23's
//!    judge rows; for fixed `t`, `p·s = R̂(x, t) + (p − R̂(x, t))·R̂(x, B − t)` (successful runs
//!    that finished by step `t` keep their success). A judge's row covers the trajectories it
//!    answered on; gain is always against "never" on the row's own trajectories.
//! 7. **Localizers**: `VC_k` as [`CurveAnalysis::value_captured`](crate::CurveAnalysis), read off
//!    the fit at resolved points; "no mistake", a run that never edits (first edit) and a silent
//!    run (step before the first symptom) propose nothing and score 0 but count in `n`; a curve
//!    with no value to capture (`V(h_0) = 0`) or no fit is left out. A trajectory whose first edit
//!    (first symptom) was not measured is left out of that localizer's row and counted as not
//!    measured; a row that scores no trajectory has `VC_k` not measured. The random step is uniform on
//!    `1..=T`, drawn in trajectory-id order from ChaCha8 with the caller's seed (use
//!    [`BOOTSTRAP_SEED`]). Rows are sorted by `VC_1`, then `VC_3`, then name.
//! 8. **Checks** (Table 4): replay `≥ 70%`, flake rate `≤ 3%`, every `t = 0` sanity trajectory
//!    `p ≥ α`, retest median gap `≤ 0.2`, budget-exhausting continuations `< 35%`, confirmed drop or
//!    certified `t_pnr` on `≥ 60%` of trajectories, every evaluation through the cache. A check
//!    with nothing measured is `not_measured`, not a failure; the verdict is `pass` only when every
//!    check passes. Every comparison allows the `1e-9` tolerance in favour of meeting it, so
//!    exactly 35% budget-exhausting continuations meets `< 35%`, as `p = α` meets `p < α`.
//!    "Confirmed drop": both ends of the decisive interval at `K ≥ K_confirm`, the terminal end
//!    counting as known.
//! 9. **Controls**: retest gaps `|V̂₁ − V̂₂|`, median of an even count the mean of the middle two,
//!    "more than 0.25" strictly (`δ_screen`); budget control "within three steps" is
//!    `|t*_B − t*_{B−t}| ≤ 3`, two screenings without a drop agree.
//! 10. **Stages** (Table 13): the five curve stages, sorted by total as the paper prints them;
//!     control continuations are reported apart, not in the curves.
//!
//! ## Absent data
//!
//! A quantity the study has not measured is never reported as 0. It is [`Measured::NotMeasured`]
//! (or an `Option` that is `None`), serialized as `null` and printed as [`NOT_MEASURED`]; a
//! measured zero stays 0. First edit and first symptom are an [`Observation`]: not measured (the
//! trajectory was not replayed), never, or at a step. Counts of what was looked at (`n`,
//! trajectories, anchors) are measured even when they are 0; what is computed over them (a mean,
//! a share, a count of hits) is not measured when there was nothing to compute it over.

pub mod checks;
pub mod labels;
pub mod localizers;
pub mod online;
pub mod restart;
pub mod stages;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Thresholds;
use crate::curve::{CurveAnalysis, Interval, Point, Shape};

/// Seed of every random draw of the analyses (cluster bootstrap, random-step localizer): the
/// paper's synthetic-validation seed.
pub const BOOTSTRAP_SEED: u64 = 20_260_928;

/// How a quantity the study has not measured prints.
pub const NOT_MEASURED: &str = "not measured";

/// A quantity the study may not have measured. Not measured is not zero: it serializes as `null`
/// and prints as [`NOT_MEASURED`]; a measured value serializes and prints as the value itself
/// (`format!("{:.2}", m)` formats a measured `f64` exactly as the `f64`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Measured<T> {
    #[default]
    NotMeasured,
    Value(T),
}

impl<T> From<T> for Measured<T> {
    fn from(value: T) -> Self {
        Measured::Value(value)
    }
}

impl<T> Measured<T> {
    /// `None` is not measured.
    pub fn from_option(value: Option<T>) -> Self {
        value.map_or(Measured::NotMeasured, Measured::Value)
    }

    /// The value, if measured.
    pub fn value(self) -> Option<T> {
        match self {
            Measured::NotMeasured => None,
            Measured::Value(v) => Some(v),
        }
    }

    pub fn is_measured(&self) -> bool {
        matches!(self, Measured::Value(_))
    }

    pub fn as_ref(&self) -> Measured<&T> {
        match self {
            Measured::NotMeasured => Measured::NotMeasured,
            Measured::Value(v) => Measured::Value(v),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Measured<U> {
        match self {
            Measured::NotMeasured => Measured::NotMeasured,
            Measured::Value(v) => Measured::Value(f(v)),
        }
    }
}

impl std::ops::Sub<f64> for Measured<f64> {
    type Output = Measured<f64>;

    /// A measured difference, or not measured.
    fn sub(self, rhs: f64) -> Measured<f64> {
        self.map(|v| v - rhs)
    }
}

impl<T: std::fmt::Display> std::fmt::Display for Measured<T> {
    /// The value with the formatter's options (precision, sign, width), or [`NOT_MEASURED`] in
    /// full (a precision does not cut it), aligned in the width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Alignment;
        match self {
            Measured::NotMeasured => {
                let w = f.width().unwrap_or(0);
                match f.align() {
                    Some(Alignment::Right) => write!(f, "{NOT_MEASURED:>w$}"),
                    Some(Alignment::Center) => write!(f, "{NOT_MEASURED:^w$}"),
                    _ => write!(f, "{NOT_MEASURED:<w$}"),
                }
            }
            Measured::Value(v) => v.fmt(f),
        }
    }
}

impl<T: Serialize> Serialize for Measured<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Measured::NotMeasured => serializer.serialize_none(),
            Measured::Value(v) => serializer.serialize_some(v),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Measured<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(deserializer).map(Measured::from_option)
    }
}

/// A step the study observes on a trajectory by replaying it in a container: its first edit, its
/// first symptom. Serialized as `null` (not measured), `"never"`, or the step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Observation {
    /// The trajectory was not replayed: nothing is known.
    #[default]
    NotMeasured,
    /// Measured: it never happens (a run that never edits, a silent run).
    Never,
    /// Measured: at this 1-based step.
    At(u32),
}

impl Observation {
    /// The step, when measured and it happens.
    pub fn step(self) -> Option<u32> {
        match self {
            Observation::At(t) => Some(t),
            Observation::NotMeasured | Observation::Never => None,
        }
    }

    pub fn is_measured(self) -> bool {
        self != Observation::NotMeasured
    }

    /// `None`: not measured; `Some(None)`: never; `Some(Some(t))`: at `t`.
    pub fn measured(self) -> Measured<Option<u32>> {
        match self {
            Observation::NotMeasured => Measured::NotMeasured,
            Observation::Never => Measured::Value(None),
            Observation::At(t) => Measured::Value(Some(t)),
        }
    }
}

impl From<Option<u32>> for Observation {
    /// A measured observation: `None` is "never".
    fn from(step: Option<u32>) -> Self {
        step.map_or(Observation::Never, Observation::At)
    }
}

impl Serialize for Observation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Observation::NotMeasured => serializer.serialize_none(),
            Observation::Never => serializer.serialize_str("never"),
            Observation::At(t) => serializer.serialize_u32(*t),
        }
    }
}

impl<'de> Deserialize<'de> for Observation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Observation;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("null (not measured), \"never\", or a step")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Observation, E> {
                Ok(Observation::NotMeasured)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Observation, E> {
                Ok(Observation::NotMeasured)
            }
            fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Observation, D::Error> {
                deserializer.deserialize_any(Visitor)
            }
            fn visit_u64<E: serde::de::Error>(self, t: u64) -> Result<Observation, E> {
                u32::try_from(t).map(Observation::At).map_err(|_| E::custom(format!("step {t} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, t: i64) -> Result<Observation, E> {
                u32::try_from(t).map(Observation::At).map_err(|_| E::custom(format!("step {t} is not a step")))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Observation, E> {
                match s {
                    "never" => Ok(Observation::Never),
                    other => Err(E::custom(format!("expected null, \"never\" or a step, not {other:?}"))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The fitted value `V(h_t)` at a resolved point (the terminal point `(T, 0)` included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FitValue {
    pub t: u32,
    pub v_fit: f64,
}

/// What the analyses know of one trajectory's curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveRecord {
    pub trajectory: String,
    pub task: String,
    /// `T`, the failed run's length.
    pub length: u32,
    /// Selection stratum (`L0`, `L1`, `L2`), when known.
    #[serde(default)]
    pub stratum: Option<String>,
    pub shape: Shape,
    /// The decisive interval `(a, b]`; `None` on a flat curve.
    pub decisive_interval: Option<Interval>,
    /// `t* = a + 1`.
    pub t_star: Option<u32>,
    /// `t_pnr` (`T` when nothing earlier certifies).
    pub pnr: u32,
    /// Both ends of the decisive interval at `K ≥ K_confirm` (the terminal end counts as known).
    #[serde(default)]
    pub confirmed_drop: bool,
    /// The restart point `t_r`, when one exists.
    #[serde(default)]
    pub restart_point: Option<u32>,
    /// First step after which the repository's tracked files differ; `Never`: never edits; not
    /// measured until the trajectory is replayed.
    #[serde(default)]
    pub first_edit: Observation,
    /// First step after the first edit with an explicit failure signal; `Never`: a silent run; not
    /// measured until the trajectory is replayed.
    #[serde(default)]
    pub first_symptom: Observation,
    /// The isotonic fit at the resolved points, sorted by `t`, ending with `(T, 0)`; empty when
    /// not known (value captured is then unavailable).
    #[serde(default)]
    pub fit: Vec<FitValue>,
    /// The raw sampled points of the main series, sorted by `t`; empty when not known (probed
    /// drops are then unavailable).
    #[serde(default)]
    pub points: Vec<Point>,
}

impl CurveRecord {
    /// The record of an analyzed curve. First edit, first symptom and stratum are not part of the
    /// analysis: they are left not measured (unknown); set them on the result.
    pub fn from_analysis(
        trajectory: impl Into<String>,
        task: impl Into<String>,
        analysis: &CurveAnalysis,
        params: &Thresholds,
    ) -> CurveRecord {
        let n_at = |t: u32| analysis.points.iter().find(|p| p.t == t).map(|p| p.n);
        let confirmed_drop = analysis.decisive_interval.is_some_and(|i| {
            let end_ok = |t: u32| t >= analysis.length || n_at(t).is_some_and(|n| n >= params.k_confirm);
            end_ok(i.a) && end_ok(i.b)
        });
        CurveRecord {
            trajectory: trajectory.into(),
            task: task.into(),
            length: analysis.length,
            stratum: None,
            shape: analysis.shape,
            decisive_interval: analysis.decisive_interval,
            t_star: analysis.t_star,
            pnr: analysis.pnr,
            confirmed_drop,
            restart_point: analysis.restart_point,
            first_edit: Observation::NotMeasured,
            first_symptom: Observation::NotMeasured,
            fit: analysis.resolved.iter().map(|r| FitValue { t: r.t, v_fit: r.v_fit }).collect(),
            points: analysis.points.iter().map(|p| Point { t: p.t, n: p.n, successes: p.successes }).collect(),
        }
    }

    /// `t_pnr < T`.
    pub fn pnr_certified(&self) -> bool {
        self.pnr < self.length
    }

    /// The fitted value at step `t` (clamped to `[0, T]`): the value of the nearest resolved point
    /// at or before it, as [`CurveAnalysis::fit_at`].
    pub fn fit_at(&self, t: i64) -> Option<f64> {
        let t = t.clamp(0, i64::from(self.length));
        self.fit.iter().rev().find(|f| i64::from(f.t) <= t).map(|f| f.v_fit)
    }

    /// `VC_k(m) = max(0, V(h_{m−1−k}) − V(h_{m+k})) / (V(h_0) − V(h_T))` off the fit, as
    /// [`CurveAnalysis::value_captured`]: `m = None` ("no mistake") scores 0; `None` when the
    /// fit is unknown or has no value to capture.
    pub fn value_captured(&self, m: Option<u32>, k: u32) -> Option<f64> {
        crate::curve::value_captured(|t| self.fit_at(t), m, k)
    }

    /// The raw point at `t`, if sampled.
    pub fn point(&self, t: u32) -> Option<Point> {
        self.points.iter().find(|p| p.t == t).copied()
    }

    fn validate(&self) -> Result<(), AnalysisError> {
        let bad = |reason: String| AnalysisError::InvalidCurve { trajectory: self.trajectory.clone(), reason };
        if self.length == 0 {
            return Err(bad("length T must be at least 1".into()));
        }
        if let Some(Interval { a, b }) = self.decisive_interval
            && (a >= b || b > self.length)
        {
            return Err(bad(format!("decisive interval ({a}, {b}] is not inside [0, T = {}]", self.length)));
        }
        if self.pnr > self.length {
            return Err(bad(format!("t_pnr = {} is beyond T = {}", self.pnr, self.length)));
        }
        Ok(())
    }
}

/// A source's first-mistake answer on a failed trajectory: a 1-based step, or "no mistake".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub trajectory: String,
    pub source: String,
    /// `m = i + 1`; `None` = "no mistake".
    pub step: Option<u32>,
}

/// A source's answer on a decoy (a successful run of a band task).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecoyLabel {
    pub decoy: String,
    pub task: String,
    pub source: String,
    /// `None` = "no mistake" (the decoy is not restarted).
    pub step: Option<u32>,
    /// The decoy's length, when known: a label at or after it is no restart (the run had ended).
    #[serde(default)]
    pub length: Option<u32>,
}

/// `hits` of `total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ratio {
    pub hits: u32,
    pub total: u32,
}

impl Ratio {
    /// `hits / total`; `None` when `total = 0`.
    pub fn share(&self) -> Option<f64> {
        (self.total > 0).then(|| f64::from(self.hits) / f64::from(self.total))
    }

    fn count(&mut self, hit: bool) {
        self.total += 1;
        self.hits += u32::from(hit);
    }
}

/// Why the analyses refused their input. All are errors in the input files or records: fatal, fix
/// the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnalysisError {
    #[error("trajectory `{trajectory}` appears twice")]
    DuplicateTrajectory { trajectory: String },
    #[error("trajectory `{trajectory}`: {reason}")]
    InvalidCurve { trajectory: String, reason: String },
    #[error("a label of `{label_source}` names trajectory `{trajectory}`, which is not in the study")]
    UnknownTrajectory { trajectory: String, label_source: String },
    #[error("`{label_source}` labels step {step} of `{trajectory}`, outside 1..={length}")]
    StepOutOfRange { trajectory: String, label_source: String, step: u32, length: u32 },
    #[error("`{label_source}` labels `{trajectory}` twice")]
    DuplicateLabel { trajectory: String, label_source: String },
    #[error("`{label_source}` labels step 0 of decoy `{decoy}`; steps are 1-based")]
    DecoyStepZero { decoy: String, label_source: String },
    #[error("task `{task}` has no base runs (needed for its pass rate and restart values)")]
    MissingBaseRuns { task: String },
}

/// The trajectories by id, checked: ids unique, curve quantities consistent.
fn index_trajectories(trajectories: &[CurveRecord]) -> Result<BTreeMap<&str, &CurveRecord>, AnalysisError> {
    let mut index = BTreeMap::new();
    for record in trajectories {
        record.validate()?;
        if index.insert(record.trajectory.as_str(), record).is_some() {
            return Err(AnalysisError::DuplicateTrajectory { trajectory: record.trajectory.clone() });
        }
    }
    Ok(index)
}

/// Check the labels against the trajectories: known trajectory, step in `1..=T`, one answer per
/// source and trajectory. This is what `vcurve labels` reports for a bad labels file.
pub fn validate_labels(trajectories: &[CurveRecord], labels: &[Label]) -> Result<(), AnalysisError> {
    let index = index_trajectories(trajectories)?;
    let mut seen = BTreeSet::new();
    for label in labels {
        let record = index.get(label.trajectory.as_str()).ok_or_else(|| AnalysisError::UnknownTrajectory {
            trajectory: label.trajectory.clone(),
            label_source: label.source.clone(),
        })?;
        if let Some(step) = label.step
            && !(1..=record.length).contains(&step)
        {
            return Err(AnalysisError::StepOutOfRange {
                trajectory: label.trajectory.clone(),
                label_source: label.source.clone(),
                step,
                length: record.length,
            });
        }
        if !seen.insert((label.trajectory.as_str(), label.source.as_str())) {
            return Err(AnalysisError::DuplicateLabel {
                trajectory: label.trajectory.clone(),
                label_source: label.source.clone(),
            });
        }
    }
    Ok(())
}

/// The distinct sources of some labels, in order of first appearance.
pub fn sources_in_order<'a>(sources: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    sources.into_iter().filter(|s| seen.insert(*s)).map(str::to_owned).collect()
}

#[cfg(test)]
pub(crate) mod testing {
    //! Hand-made curves for the analyses' unit tests.
    use super::*;

    /// A record with a decisive interval `(a, b]`, `t_pnr` and nothing else.
    pub fn record(id: &str, task: &str, length: u32, a: u32, b: u32, pnr: u32) -> CurveRecord {
        CurveRecord {
            trajectory: id.into(),
            task: task.into(),
            length,
            stratum: None,
            shape: Shape::Cliff,
            decisive_interval: Some(Interval { a, b }),
            t_star: Some(a + 1),
            pnr,
            confirmed_drop: false,
            restart_point: None,
            first_edit: Observation::NotMeasured,
            first_symptom: Observation::NotMeasured,
            fit: Vec::new(),
            points: Vec::new(),
        }
    }

    pub fn label(trajectory: &str, source: &str, step: Option<u32>) -> Label {
        Label { trajectory: trajectory.into(), source: source.into(), step }
    }

    /// A value that may be measured: an `f64`, or a [`Measured`] one (not measured is close to
    /// nothing).
    pub trait MaybeMeasured {
        fn measured(self) -> Option<f64>;
    }

    impl MaybeMeasured for f64 {
        fn measured(self) -> Option<f64> {
            Some(self)
        }
    }

    impl MaybeMeasured for Measured<f64> {
        fn measured(self) -> Option<f64> {
            self.value()
        }
    }

    /// `a` and `b` are measured and within `1e-9` of each other.
    pub fn close(a: impl MaybeMeasured, b: impl MaybeMeasured) -> bool {
        a.measured().zip(b.measured()).is_some_and(|(a, b)| (a - b).abs() < 1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::analyze;

    #[test]
    fn record_from_analysis_matches_the_analysis_value_captured() {
        let points = [
            Point { t: 0, n: 8, successes: 6 },
            Point { t: 5, n: 8, successes: 6 },
            Point { t: 7, n: 32, successes: 20 },
            Point { t: 8, n: 32, successes: 4 },
            Point { t: 10, n: 8, successes: 1 },
            Point { t: 12, n: 4, successes: 3 }, // unresolved: not in the fit's resolved points
            Point { t: 15, n: 24, successes: 0 },
            Point { t: 19, n: 8, successes: 0 },
        ];
        let params = Thresholds::default();
        let analysis = analyze(20, &points, None, 100, &params).unwrap();
        let record = CurveRecord::from_analysis("x s1", "x", &analysis, &params);
        assert_eq!(record.decisive_interval, Some(Interval { a: 7, b: 8 }));
        assert!(record.confirmed_drop);
        assert_eq!(record.fit.last(), Some(&FitValue { t: 20, v_fit: 0.0 }));
        assert_eq!(record.points.len(), points.len());
        for m in [None, Some(1), Some(6), Some(8), Some(9), Some(13), Some(20)] {
            for k in [0, 1, 3] {
                assert_eq!(record.value_captured(m, k), analysis.value_captured(m, k), "m = {m:?}, k = {k}");
            }
        }
    }

    #[test]
    fn value_captured_off_a_hand_made_fit() {
        let mut r = record("a", "x", 10, 4, 5, 8);
        r.fit = vec![
            FitValue { t: 0, v_fit: 0.8 },
            FitValue { t: 4, v_fit: 0.8 },
            FitValue { t: 5, v_fit: 0.2 },
            FitValue { t: 8, v_fit: 0.0 },
            FitValue { t: 10, v_fit: 0.0 },
        ];
        // m = 5, k = 0: V(4) − V(5) = 0.6 of 0.8.
        assert!(close(r.value_captured(Some(5), 0).unwrap(), 0.75));
        // m = 7, k = 0: V(6) = V(5) = 0.2, V(7) = 0.2 → 0.
        assert!(close(r.value_captured(Some(7), 0).unwrap(), 0.0));
        // m = 7, k = 1: V(5) − V(8) = 0.2 of 0.8.
        assert!(close(r.value_captured(Some(7), 1).unwrap(), 0.25));
        // m = 1, k = 3: V(−3 → 0) − V(4) = 0.
        assert!(close(r.value_captured(Some(1), 3).unwrap(), 0.0));
        // m = 5, k = 3: V(1) − V(8) = 0.8: everything.
        assert!(close(r.value_captured(Some(5), 3).unwrap(), 1.0));
        assert_eq!(r.value_captured(None, 1), Some(0.0));
        // No fit, or no value: nothing to capture.
        assert_eq!(record("b", "x", 10, 4, 5, 8).value_captured(Some(5), 0), None);
        r.fit = vec![FitValue { t: 0, v_fit: 0.0 }, FitValue { t: 10, v_fit: 0.0 }];
        assert_eq!(r.value_captured(Some(5), 0), None);
    }

    #[test]
    fn measured_serializes_as_null_and_prints_not_measured() {
        let none: Measured<f64> = Measured::NotMeasured;
        assert_eq!(serde_json::to_string(&none).unwrap(), "null");
        assert_eq!(serde_json::to_string(&Measured::Value(0.0)).unwrap(), "0.0", "a measured 0 is 0");
        assert_eq!(
            serde_json::to_string(&Measured::Value(0.1 + 0.2)).unwrap(),
            serde_json::to_string(&(0.1 + 0.2)).unwrap()
        );
        assert_eq!(serde_json::from_str::<Measured<f64>>("null").unwrap(), Measured::NotMeasured);
        assert_eq!(serde_json::from_str::<Measured<f64>>("0.25").unwrap(), Measured::Value(0.25));
        // As the value itself, the formatter's options included; "not measured" in full.
        for v in [0.0, 0.375, -0.041, 12.5] {
            assert_eq!(
                format!("{:.2}|{:+.2}|{:>8.1}", Measured::Value(v), Measured::Value(v), Measured::Value(v)),
                format!("{v:.2}|{v:+.2}|{v:>8.1}")
            );
        }
        assert_eq!(format!("{none:.2}|{none:+.2}"), "not measured|not measured");
        assert_eq!(format!("[{none:>14}]"), "[  not measured]");
        assert!(Measured::Value(0.0) > none, "not measured ranks below every value");
        assert_eq!(Measured::Value(0.5) - 0.25, Measured::Value(0.25));
        assert_eq!(none - 0.25, Measured::NotMeasured);
    }

    #[test]
    fn observations_are_not_measured_never_or_at_a_step() {
        let json = |o: Observation| serde_json::to_string(&o).unwrap();
        assert_eq!(
            (json(Observation::NotMeasured), json(Observation::Never), json(Observation::At(7))),
            ("null".into(), "\"never\"".into(), "7".into())
        );
        for o in [Observation::NotMeasured, Observation::Never, Observation::At(7)] {
            assert_eq!(serde_json::from_str::<Observation>(&json(o)).unwrap(), o);
        }
        assert!(serde_json::from_str::<Observation>("\"sometimes\"").is_err());
        assert!(serde_json::from_str::<Observation>("-1").is_err());
        assert_eq!(Observation::from(None), Observation::Never, "a measured None is never");
        assert_eq!(Observation::from(Some(3)), Observation::At(3));
        assert_eq!(
            (Observation::At(3).step(), Observation::Never.step(), Observation::NotMeasured.step()),
            (Some(3), None, None)
        );
        assert_eq!(Observation::NotMeasured.measured(), Measured::NotMeasured);
        assert_eq!(Observation::Never.measured(), Measured::Value(None));
        // A record without the fields (an older export) has them not measured.
        let mut r = record("a", "x", 10, 4, 5, 8);
        let mut value = serde_json::to_value(&r).unwrap();
        assert_eq!(value["first_edit"], serde_json::Value::Null);
        value.as_object_mut().unwrap().remove("first_edit");
        assert_eq!(serde_json::from_value::<CurveRecord>(value).unwrap(), r);
        r.first_symptom = Observation::Never;
        assert_eq!(serde_json::from_value::<CurveRecord>(serde_json::to_value(&r).unwrap()).unwrap(), r);
    }

    #[test]
    fn labels_are_validated() {
        let trajectories = vec![record("a", "x", 10, 4, 5, 8)];
        let ok = [label("a", "J", Some(10)), label("a", "K", None)];
        validate_labels(&trajectories, &ok).unwrap();
        let err = validate_labels(&trajectories, &[label("b", "J", Some(3))]).unwrap_err();
        assert!(matches!(err, AnalysisError::UnknownTrajectory { .. }), "{err}");
        let err = validate_labels(&trajectories, &[label("a", "J", Some(11))]).unwrap_err();
        assert_eq!(err.to_string(), "`J` labels step 11 of `a`, outside 1..=10");
        let err = validate_labels(&trajectories, &[label("a", "J", Some(0))]).unwrap_err();
        assert!(matches!(err, AnalysisError::StepOutOfRange { step: 0, .. }), "{err}");
        let err = validate_labels(&trajectories, &[label("a", "J", Some(3)), label("a", "J", None)]).unwrap_err();
        assert!(matches!(err, AnalysisError::DuplicateLabel { .. }), "{err}");
        let twice = vec![record("a", "x", 10, 4, 5, 8), record("a", "x", 10, 4, 5, 8)];
        assert!(matches!(validate_labels(&twice, &[]), Err(AnalysisError::DuplicateTrajectory { .. })));
        let bad = vec![record("a", "x", 10, 5, 5, 8)];
        assert!(matches!(validate_labels(&bad, &[]), Err(AnalysisError::InvalidCurve { .. })));
    }
}
