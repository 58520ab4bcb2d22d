//! Continuations by schedule stage: the paper's Table 13 (and the cost of a curve beside it:
//! "331 continuations, median 344, range 200–496").
//!
//! Input: per trajectory, the continuations each stage asked for. The five curve stages are
//! tabulated; continuations of the controls (Appendix N) are not in the curves and are reported
//! apart, as the paper does. Rows are sorted by their total, largest first (ties in schedule
//! order), as the paper prints them; "per trajectory" is the stage's total over the number of
//! trajectories.
//!
//! Without any trajectory's stage counts (a study whose schedule cannot be rebuilt) the table is
//! not measured: [`measured_stage_table`] says so, rather than five rows of 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Measured;
use crate::schedule::Stage;

/// The continuations of one trajectory by stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageCounts {
    pub trajectory: String,
    pub counts: BTreeMap<Stage, u64>,
}

/// A row of Table 13.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRow {
    /// The stage's name, or `all`.
    pub stage: String,
    pub continuations: u64,
    /// Of all curve continuations.
    pub share: f64,
    pub per_trajectory: f64,
}

/// The continuations of one curve, over trajectories.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurveCost {
    pub mean: f64,
    pub median: f64,
    pub min: u64,
    pub max: u64,
}

/// Table 13.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTable {
    pub trajectories: u32,
    /// The curve stages, largest first.
    pub rows: Vec<StageRow>,
    pub all: StageRow,
    pub per_curve: Option<CurveCost>,
    /// Continuations of the controls (not in the curves).
    pub controls: u64,
}

/// The stages whose continuations make a curve.
pub const CURVE_STAGES: [Stage; 5] = [Stage::Screen, Stage::Bisect, Stage::Confirm, Stage::Pnr, Stage::Labels];

/// Tabulate continuations by stage.
pub fn stage_table(trajectories: &[StageCounts]) -> StageTable {
    let n = trajectories.len();
    let curve_total = |t: &StageCounts| CURVE_STAGES.iter().map(|s| t.counts.get(s).copied().unwrap_or(0)).sum::<u64>();
    let total: u64 = trajectories.iter().map(curve_total).sum();
    let row = |stage: &str, continuations: u64| StageRow {
        stage: stage.into(),
        continuations,
        share: if total == 0 { 0.0 } else { continuations as f64 / total as f64 },
        per_trajectory: if n == 0 { 0.0 } else { continuations as f64 / n as f64 },
    };
    let mut rows: Vec<StageRow> = CURVE_STAGES
        .iter()
        .map(|s| row(s.as_str(), trajectories.iter().map(|t| t.counts.get(s).copied().unwrap_or(0)).sum()))
        .collect();
    // Stable: equal totals keep schedule order.
    rows.sort_by_key(|r| std::cmp::Reverse(r.continuations));

    let mut per_curve: Vec<u64> = trajectories.iter().map(curve_total).collect();
    per_curve.sort_unstable();
    let per_curve = (!per_curve.is_empty()).then(|| {
        let mid = per_curve.len() / 2;
        CurveCost {
            mean: total as f64 / n as f64,
            median: if n % 2 == 1 { per_curve[mid] as f64 } else { (per_curve[mid - 1] + per_curve[mid]) as f64 / 2.0 },
            min: per_curve[0],
            max: per_curve[n - 1],
        }
    });
    StageTable {
        trajectories: n as u32,
        rows,
        all: row("all", total),
        per_curve,
        controls: trajectories.iter().map(|t| t.counts.get(&Stage::Controls).copied().unwrap_or(0)).sum(),
    }
}

/// [`stage_table`], or not measured when no trajectory's stage counts are known.
pub fn measured_stage_table(trajectories: &[StageCounts]) -> Measured<StageTable> {
    if trajectories.is_empty() { Measured::NotMeasured } else { Measured::Value(stage_table(trajectories)) }
}

#[cfg(test)]
mod tests {
    use super::super::testing::close;
    use super::*;

    fn counts(id: &str, list: &[(Stage, u64)]) -> StageCounts {
        StageCounts { trajectory: id.into(), counts: list.iter().copied().collect() }
    }

    #[test]
    fn stage_table_by_hand() {
        let table = stage_table(&[
            counts("a", &[(Stage::Screen, 96), (Stage::Bisect, 16), (Stage::Confirm, 48), (Stage::Controls, 24)]),
            counts("b", &[(Stage::Screen, 120), (Stage::Pnr, 40), (Stage::Labels, 64)]),
            counts("c", &[(Stage::Screen, 80), (Stage::Labels, 16)]),
        ]);
        assert_eq!(table.trajectories, 3);
        let order: Vec<(&str, u64)> = table.rows.iter().map(|r| (r.stage.as_str(), r.continuations)).collect();
        assert_eq!(order, [("screen", 296), ("labels", 80), ("confirm", 48), ("pnr", 40), ("bisect", 16)]);
        assert_eq!(table.all.continuations, 480);
        assert!(close(table.rows[0].share, 296.0 / 480.0));
        assert!(close(table.rows[0].per_trajectory, 296.0 / 3.0));
        assert!(close(table.all.share, 1.0));
        assert_eq!(table.controls, 24);
        let cost = table.per_curve.unwrap();
        // Curves: a 160, b 224, c 96.
        assert_eq!((cost.min, cost.max), (96, 224));
        assert!(close(cost.median, 160.0) && close(cost.mean, 160.0));
    }

    #[test]
    fn without_stage_counts_the_table_is_not_measured() {
        assert_eq!(measured_stage_table(&[]), Measured::NotMeasured);
        assert_eq!(serde_json::to_value(measured_stage_table(&[])).unwrap(), serde_json::Value::Null);
        let measured = [counts("a", &[(Stage::Screen, 96)])];
        assert_eq!(measured_stage_table(&measured), Measured::Value(stage_table(&measured)));
        assert_eq!(
            serde_json::to_value(measured_stage_table(&measured)).unwrap(),
            serde_json::to_value(stage_table(&measured)).unwrap()
        );
    }

    #[test]
    fn empty_study() {
        let table = stage_table(&[]);
        assert_eq!((table.all.continuations, table.per_curve), (0, None));
        assert_eq!(table.rows.len(), 5);
    }
}
