//! Localizers ranked by the value they capture: the paper's Table 32 (its `VC_k` columns).
//!
//! A localizer proposes one step `m` per trajectory (or nothing); it is scored by
//! `VC_k(m) = max(0, V(h_{m−1−k}) − V(h_{m+k})) / (V(h_0) − V(h_T))` read off the isotonic fit at
//! the resolved points, exactly as [`CurveAnalysis::value_captured`](crate::CurveAnalysis) (docs/method.md
//! §3), so it works from an exported fit as well as from a fresh analysis. A row is the mean over
//! the trajectories the localizer is scored on, for `k = 0, 1, 3`, sorted by `VC_1` (then `VC_3`,
//! then name).
//!
//! The localizers: every label source (scored on the trajectories it answered; "no mistake"
//! scores 0), the first edit (a run that never edits proposes nothing, scores 0), step 1, a random
//! step (uniform on `1..=T`, drawn in trajectory-id order from ChaCha8 with a fixed seed), and the
//! step before the first symptom (a silent run proposes nothing, scores 0). A trajectory whose fit
//! is unknown or has no value to capture (`V(h_0) = 0`) is left out of every row.
//!
//! First edit and first symptom are measured only once a trajectory is replayed in a container. A
//! trajectory on which they were not measured is left out of their rows and counted in the row's
//! `not_measured`: a row is the mean over the trajectories it has a step (or a measured "never")
//! for, and `n` says how many. A row that scores no trajectory has `VC_k` not measured (`null`), not
//! 0, and proposes nothing.

use serde::{Deserialize, Serialize};

use super::{AnalysisError, CurveRecord, Label, Measured, index_trajectories, sources_in_order, validate_labels};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Who proposes the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Localizer {
    /// A label source (a judge or an annotator).
    Source {
        source: String,
    },
    FirstEdit,
    StepOne,
    RandomStep,
    /// `t_sym − 1`.
    BeforeFirstSymptom,
}

impl Localizer {
    pub fn name(&self) -> String {
        match self {
            Localizer::Source { source } => source.clone(),
            Localizer::FirstEdit => "first edit".into(),
            Localizer::StepOne => "step 1".into(),
            Localizer::RandomStep => "random step".into(),
            Localizer::BeforeFirstSymptom => "before first symptom".into(),
        }
    }
}

/// One localizer on one trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub localizer: String,
    pub trajectory: String,
    /// The proposed step; `None`: nothing proposed.
    pub step: Option<u32>,
    pub vc0: f64,
    pub vc1: f64,
    pub vc3: f64,
}

/// A row of Table 32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalizerRow {
    pub localizer: Localizer,
    pub name: String,
    /// Trajectories scored.
    pub n: u32,
    /// Trajectories with a value to capture that the localizer could not be scored on because its
    /// input was not measured on them (the first edit, the first symptom).
    #[serde(default)]
    pub not_measured: u32,
    /// Mean `VC_0` over the `n` trajectories; not measured when `n = 0`.
    pub vc0: Measured<f64>,
    pub vc1: Measured<f64>,
    pub vc3: Measured<f64>,
}

/// Table 32 with every proposal behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalizerReport {
    /// Sorted by `VC_1`, best first.
    pub rows: Vec<LocalizerRow>,
    pub proposals: Vec<Proposal>,
}

/// Score every label source and the heuristics on the trajectories' fits. `sources`: which label
/// sources to score, in order (`None`: all); `random_seed`: the random-step seed.
pub fn rank_localizers(
    trajectories: &[CurveRecord],
    labels: &[Label],
    sources: Option<&[String]>,
    random_seed: u64,
) -> Result<LocalizerReport, AnalysisError> {
    validate_labels(trajectories, labels)?;
    let index = index_trajectories(trajectories)?;
    let sources: Vec<String> = match sources {
        Some(s) => s.to_vec(),
        None => sources_in_order(labels.iter().map(|l| l.source.as_str())),
    };

    // The random step of every trajectory, drawn in id order so input order does not matter.
    let mut rng = ChaCha8Rng::seed_from_u64(random_seed);
    let random: std::collections::BTreeMap<&str, u32> =
        index.iter().map(|(&id, r)| (id, rng.random_range(1..=r.length))).collect();

    let mut proposals = Vec::new();
    let mut rows = Vec::new();
    // A pick is the proposed step (`None`: nothing proposed), or not measured.
    let mut score = |localizer: Localizer, picks: Vec<(&CurveRecord, Measured<Option<u32>>)>| {
        let name = localizer.name();
        let mut not_measured = 0;
        let scored: Vec<Proposal> = picks
            .into_iter()
            .filter_map(|(record, pick)| {
                // A curve with no value to capture is left out of every row, measured or not.
                record.value_captured(None, 0)?;
                let Measured::Value(step) = pick else {
                    not_measured += 1;
                    return None;
                };
                Some(Proposal {
                    localizer: name.clone(),
                    trajectory: record.trajectory.clone(),
                    step,
                    vc0: record.value_captured(step, 0)?,
                    vc1: record.value_captured(step, 1)?,
                    vc3: record.value_captured(step, 3)?,
                })
            })
            .collect();
        let n = scored.len();
        let mean = |f: fn(&Proposal) -> f64| {
            if n == 0 { Measured::NotMeasured } else { Measured::Value(scored.iter().map(f).sum::<f64>() / n as f64) }
        };
        rows.push(LocalizerRow {
            name: name.clone(),
            localizer,
            n: n as u32,
            not_measured,
            vc0: mean(|p| p.vc0),
            vc1: mean(|p| p.vc1),
            vc3: mean(|p| p.vc3),
        });
        proposals.extend(scored);
    };

    for source in &sources {
        let picks = labels
            .iter()
            .filter(|l| &l.source == source)
            .map(|l| (index[l.trajectory.as_str()], Measured::Value(l.step)))
            .collect();
        score(Localizer::Source { source: source.clone() }, picks);
    }
    let all = |f: &dyn Fn(&CurveRecord) -> Measured<Option<u32>>| -> Vec<(&CurveRecord, Measured<Option<u32>>)> {
        index.values().map(|&r| (r, f(r))).collect()
    };
    score(Localizer::FirstEdit, all(&|r| r.first_edit.measured()));
    score(Localizer::StepOne, all(&|_| Measured::Value(Some(1))));
    score(Localizer::RandomStep, all(&|r| Measured::Value(Some(random[r.trajectory.as_str()]))));
    score(Localizer::BeforeFirstSymptom, all(&|r| r.first_symptom.measured().map(|s| s.map(|s| s.saturating_sub(1)))));

    // Best first; rows that score nothing (not measured) last.
    let key = |m: Measured<f64>| m.value().unwrap_or(f64::NEG_INFINITY);
    rows.sort_by(|a, b| {
        b.vc1
            .is_measured()
            .cmp(&a.vc1.is_measured())
            .then(key(b.vc1).total_cmp(&key(a.vc1)))
            .then(key(b.vc3).total_cmp(&key(a.vc3)))
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(LocalizerReport { rows, proposals })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{FitValue, Observation};
    use super::*;

    /// A cliff from 0.8 to 0.2 between 4 and 5, to 0 at 8; T = 10.
    fn cliff(id: &str) -> CurveRecord {
        let mut r = record(id, "x", 10, 4, 5, 8);
        r.fit = vec![
            FitValue { t: 0, v_fit: 0.8 },
            FitValue { t: 4, v_fit: 0.8 },
            FitValue { t: 5, v_fit: 0.2 },
            FitValue { t: 8, v_fit: 0.0 },
            FitValue { t: 10, v_fit: 0.0 },
        ];
        r
    }

    #[test]
    fn value_captured_per_localizer() {
        let mut a = cliff("a");
        a.first_edit = Observation::At(5);
        a.first_symptom = Observation::At(9);
        let mut b = cliff("b");
        b.first_edit = Observation::Never; // never edits
        b.first_symptom = Observation::Never; // silent
        let mut no_fit = cliff("c");
        no_fit.fit.clear();
        let trajectories = vec![a, b, no_fit];
        let labels =
            vec![label("a", "J", Some(5)), label("b", "J", None), label("c", "J", Some(5)), label("a", "K", Some(7))];
        let report = rank_localizers(&trajectories, &labels, None, 7).unwrap();
        let row = |name: &str| report.rows.iter().find(|r| r.name == name).unwrap().clone();

        // J: a at 5 captures 0.75 at k = 0, 0.75 at k = 1 (V(3) − V(6)), 1.0 at k = 3; b "no mistake" 0.
        let j = row("J");
        assert_eq!(j.n, 2, "the trajectory without a fit is left out");
        assert!(close(j.vc0, 0.375) && close(j.vc1, 0.375) && close(j.vc3, 0.5));
        // K: a at 7: 0 at k = 0, V(5) − V(8) = 0.2/0.8 at k = 1, V(3) − V(10) = 1 at k = 3.
        let k = row("K");
        assert_eq!(k.n, 1);
        assert!(close(k.vc0, 0.0) && close(k.vc1, 0.25) && close(k.vc3, 1.0));
        // First edit: a at 5 as J's label; b never edits → 0.
        let edit = row("first edit");
        assert_eq!(edit.n, 2);
        assert!(close(edit.vc0, 0.375));
        // Step 1: V(0) − V(1) = 0; at k = 3: V(0) − V(4) = 0.
        let one = row("step 1");
        assert!(close(one.vc0, 0.0) && close(one.vc3, 0.0));
        // Before the first symptom: a at 8: V(7) − V(8) = 0.2 → 0.25; b silent → 0.
        let sym = row("before first symptom");
        assert!(close(sym.vc0, 0.125));
        // Sorted by VC_1: J and first edit tie at 0.375 (VC_3 0.5 each), then by name.
        let names: Vec<&str> = report.rows.iter().map(|r| r.name.as_str()).filter(|&n| n != "random step").collect();
        assert_eq!(&names[..2], &["J", "first edit"]);
        assert!(report.rows.windows(2).all(|w| w[0].vc1 >= w[1].vc1));
        assert_eq!(row("random step").n, 2);
    }

    #[test]
    fn unmeasured_first_edit_and_symptom_score_nothing() {
        // Nothing replayed: the first edit and the first symptom are not measured anywhere.
        let trajectories = vec![cliff("a"), cliff("b")];
        let labels = vec![label("a", "J", Some(5))];
        let report = rank_localizers(&trajectories, &labels, None, 7).unwrap();
        let row = |name: &str| report.rows.iter().find(|r| r.name == name).unwrap().clone();
        for name in ["first edit", "before first symptom"] {
            let r = row(name);
            assert_eq!((r.n, r.not_measured), (0, 2), "{name}");
            assert_eq!((r.vc0, r.vc1, r.vc3), (Measured::NotMeasured, Measured::NotMeasured, Measured::NotMeasured));
            assert!(report.proposals.iter().all(|p| p.localizer != name), "{name} proposes nothing");
        }
        // Exported as null, not 0.
        let json = serde_json::to_value(row("first edit")).unwrap();
        assert_eq!(json["vc0"], serde_json::Value::Null);
        assert_eq!(json["vc1"], serde_json::Value::Null);
        assert_eq!(json["n"], 0);
        assert_eq!(json["not_measured"], 2);
        // Measured rows are unchanged and rank first; the unmeasured ones go last.
        let j = row("J");
        assert_eq!((j.n, j.not_measured), (1, 0));
        assert!(close(j.vc0, 0.75) && close(j.vc1, 0.75) && close(j.vc3, 1.0));
        let names: Vec<&str> = report.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(&names[3..], ["before first symptom", "first edit"]);
        // A row round-trips through its JSON.
        let back: LocalizerRow = serde_json::from_value(json).unwrap();
        assert_eq!(back, row("first edit"));
    }

    #[test]
    fn a_partly_replayed_study_averages_over_the_measured_trajectories() {
        let mut a = cliff("a");
        a.first_edit = Observation::At(5);
        a.first_symptom = Observation::At(9);
        let mut b = cliff("b");
        b.first_edit = Observation::Never;
        b.first_symptom = Observation::Never;
        let c = cliff("c"); // not replayed
        let mut no_fit = cliff("d"); // left out of every row, replayed or not
        no_fit.fit.clear();
        let report = rank_localizers(&[a, b, c, no_fit], &[], None, 7).unwrap();
        let row = |name: &str| report.rows.iter().find(|r| r.name == name).unwrap().clone();
        // Over a and b only, as if c were not in the study: a at 5 → 0.75, b never edits → 0.
        let edit = row("first edit");
        assert_eq!((edit.n, edit.not_measured), (2, 1));
        assert!(close(edit.vc0, 0.375));
        let sym = row("before first symptom");
        assert_eq!((sym.n, sym.not_measured), (2, 1));
        assert!(close(sym.vc0, 0.125));
        // Step 1 and the random step need no replay: every trajectory with a fit.
        assert_eq!((row("step 1").n, row("step 1").not_measured), (3, 0));
        assert_eq!(report.proposals.iter().filter(|p| p.localizer == "first edit").count(), 2);
    }

    #[test]
    fn the_random_step_is_reproducible_and_order_free() {
        let trajectories: Vec<CurveRecord> = (0..20).map(|i| cliff(&format!("t{i:02}"))).collect();
        let mut reversed = trajectories.clone();
        reversed.reverse();
        let steps = |ts: &[CurveRecord]| {
            let mut p: Vec<(String, Option<u32>)> = rank_localizers(ts, &[], None, 11)
                .unwrap()
                .proposals
                .into_iter()
                .filter(|p| p.localizer == "random step")
                .map(|p| (p.trajectory, p.step))
                .collect();
            p.sort();
            p
        };
        let forward = steps(&trajectories);
        assert_eq!(forward, steps(&reversed));
        assert!(forward.iter().all(|(_, s)| (1..=10).contains(&s.unwrap())));
        assert!(forward.iter().any(|(_, s)| *s != forward[0].1), "not constant");
    }
}
