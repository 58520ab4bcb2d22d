//! Restart policies evaluated offline: the paper's Table 23 (every policy), Table 24 (the judge
//! policies on successful decoys), Tables 26–27 (per trajectory) and Table 25 (a subset — filter
//! the records).
//!
//! A policy that restarts a failed run after `h_t` obtains `R̂(x, B − t)` from the task's base runs.
//! The policies: never; at the restart point `t_r`; at the point of no return `t_pnr`; at the
//! decisive step `t*`; at each source's label `m`; at a fixed step `t` (10, 20, 30, 50).
//!
//! - A failed run is restarted at `t` only if `t < T`: a run of length `T ≤ t` has ended by then
//!   and keeps its outcome (the paper's second policy prints `t* = T` and an uncertified
//!   `t_pnr = T` as "no restart"; fixed `t = 50` restarts the 43 of 47 runs longer than 50).
//! - Value-based policies never restart a successful run (curves exist for failed runs only).
//! - A judge restarts at its labelled step `m` itself (Table 27's steps are the labels), and
//!   restarts a successful run whenever it labels it: a labelled decoy loses `1 − R̂(x, B − m)`.
//!   The loss `L` of Table 24 is the mean over every decoy the judge answered on, an unlabelled
//!   decoy losing 0 (the only reading under which Table 24's losses give Table 23's judge rows).
//!   A judge that answered no decoy has its loss not measured, and with it the expected success of
//!   the runs it would restart: its *random* and *gain* columns are not measured (its restarts and
//!   failed-run column need no decoys). A decoy label at or after the decoy's length (when
//!   known) is no restart. A judge's row covers the trajectories it answered on ("no mistake"
//!   included), so a source that labelled a subset is compared with "never" on that subset.
//! - A fixed-`t` policy restarts every run still going after step `t`, successful ones included:
//!   a successful base run that finished by step `t` keeps its success.
//!
//! The columns: *restarts* (failed runs restarted, of all), *mean restart step* (over the
//! restarts), *failed* (mean over failed trajectories of the outcome: `R̂(x, B − t)` when restarted,
//! 0 otherwise), *random* (mean over failed trajectories of `p(x)·s + (1 − p(x))·f`: each
//! trajectory stands for a random run of its task, `f` its failed-run outcome and `s` the expected
//! success of a run that would have succeeded: 1 for value-based policies, `1 − L` for a judge,
//! `[R̂(x, t) + (p − R̂(x, t))·R̂(x, B − t)] / p` for fixed `t`), and *gain* (random minus the mean
//! pass rate of the same trajectories, which is "never"). Averaging over trajectories, not tasks,
//! is what gives the paper's 0.44 for "never" (over tasks: 0.47). A row over no trajectory has its
//! columns not measured (`null`), not 0.
//!
//! [`evaluate_policy`] computes a row from per-trajectory outcomes, so a table can be rebuilt from
//! published per-trajectory steps and values (Tables 26–27); [`restart_policies`] derives those
//! outcomes from curves, labels, decoys and base runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    AnalysisError, CurveRecord, DecoyLabel, Label, Measured, index_trajectories, sources_in_order, validate_labels,
};
use crate::{BaseRuns, Thresholds};

/// A restart policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Policy {
    Never,
    RestartPoint,
    PointOfNoReturn,
    DecisiveStep,
    Label { source: String },
    Fixed { step: u32 },
}

impl Policy {
    /// The row name, as the paper prints it.
    pub fn name(&self) -> String {
        match self {
            Policy::Never => "never".into(),
            Policy::RestartPoint => "restart point t_r".into(),
            Policy::PointOfNoReturn => "t_pnr".into(),
            Policy::DecisiveStep => "t*".into(),
            Policy::Label { source } => format!("label, {source}"),
            Policy::Fixed { step } => format!("fixed t={step}"),
        }
    }

    /// Value-based policies never restart a successful run.
    pub fn is_value_based(&self) -> bool {
        matches!(self, Policy::Never | Policy::RestartPoint | Policy::PointOfNoReturn | Policy::DecisiveStep)
    }
}

/// One failed trajectory under one policy (a cell of Tables 26–27).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyOutcome {
    pub policy: String,
    pub trajectory: String,
    pub task: String,
    /// `p(x)`.
    pub pass_rate: f64,
    /// The step the run is restarted at; `None`: not restarted.
    pub restart_step: Option<u32>,
    /// `R̂(x, B − t)` at the restart.
    pub restart_value: Option<f64>,
    /// Expected success of a run of this task that would have succeeded on its own; not measured
    /// for a judge that answered no decoy.
    pub success_kept: Measured<f64>,
}

impl PolicyOutcome {
    /// The failed run's expected outcome: `R̂(x, B − t)` if restarted, else 0.
    pub fn failed_outcome(&self) -> f64 {
        self.restart_value.unwrap_or(0.0)
    }

    /// A random run of the task: `p·s + (1 − p)·f`; not measured when `s` is not.
    pub fn random_outcome(&self) -> Measured<f64> {
        self.success_kept.map(|kept| self.pass_rate * kept + (1.0 - self.pass_rate) * self.failed_outcome())
    }
}

/// A row of Table 23.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRow {
    pub policy: Policy,
    pub name: String,
    /// Failed trajectories restarted, of `trajectories`.
    pub restarts: u32,
    pub trajectories: u32,
    /// Mean restart step over the restarts (`None`: no restart).
    pub mean_restart_step: Option<f64>,
    /// Expected success on the failed runs; not measured over no trajectory.
    pub failed: Measured<f64>,
    /// Expected success on a random run of the task; not measured over no trajectory, or when a
    /// trajectory's kept success is not (a judge without decoys).
    pub random: Measured<f64>,
    /// `random` minus never restarting (the mean pass rate of the same trajectories).
    pub gain: Measured<f64>,
}

/// A row of Table 24.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecoyRow {
    pub source: String,
    /// Decoys the source answered on.
    pub decoys: u32,
    /// Decoys it labelled (restarted).
    pub restarted: u32,
    /// Mean loss `1 − R̂(x, B − m)` per decoy answered on (0 for an unlabelled one).
    pub loss: Option<f64>,
}

impl DecoyRow {
    /// Expected success of a successful run under this judge: `1 − L`, taking a loss that was not
    /// measured (no decoy answered) as none. [`DecoyRow::kept`] says when it is not measured.
    pub fn success_kept(&self) -> f64 {
        1.0 - self.loss.unwrap_or(0.0)
    }

    /// `1 − L`; not measured when the judge answered no decoy.
    pub fn kept(&self) -> Measured<f64> {
        Measured::from_option(self.loss).map(|loss| 1.0 - loss)
    }
}

/// Tables 23, 24 and 26–27.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartReport {
    pub policies: Vec<PolicyRow>,
    pub decoys: Vec<DecoyRow>,
    /// Every trajectory under every policy, in policy order.
    pub per_trajectory: Vec<PolicyOutcome>,
}

/// A row of Table 23 from per-trajectory outcomes.
pub fn evaluate_policy(policy: Policy, outcomes: &[PolicyOutcome]) -> PolicyRow {
    let n = outcomes.len();
    // The mean over the outcomes: not measured over none, or when any outcome's value is not.
    let mean = |f: &dyn Fn(&PolicyOutcome) -> Measured<f64>| {
        if n == 0 {
            return Measured::NotMeasured;
        }
        let mut sum = 0.0;
        for o in outcomes {
            let Measured::Value(v) = f(o) else { return Measured::NotMeasured };
            sum += v;
        }
        Measured::Value(sum / n as f64)
    };
    let steps: Vec<u32> = outcomes.iter().filter_map(|o| o.restart_step).collect();
    let random = mean(&PolicyOutcome::random_outcome);
    let never = mean(&|o| Measured::Value(o.pass_rate));
    PolicyRow {
        name: policy.name(),
        policy,
        restarts: steps.len() as u32,
        trajectories: n as u32,
        mean_restart_step: (!steps.is_empty())
            .then(|| steps.iter().map(|&s| f64::from(s)).sum::<f64>() / steps.len() as f64),
        failed: mean(&|o| Measured::Value(o.failed_outcome())),
        random,
        gain: match (random, never) {
            (Measured::Value(random), Measured::Value(never)) => Measured::Value(random - never),
            _ => Measured::NotMeasured,
        },
    }
}

/// Table 24's row of one judge from its decoy labels.
pub fn decoy_row(
    source: &str,
    decoys: &[DecoyLabel],
    base_runs: &BTreeMap<String, BaseRuns>,
    budget: u32,
) -> Result<DecoyRow, AnalysisError> {
    let (mut answered, mut restarted, mut loss) = (0u32, 0u32, 0.0);
    for decoy in decoys.iter().filter(|d| d.source == source) {
        answered += 1;
        let Some(m) = decoy.step else { continue };
        if m == 0 {
            return Err(AnalysisError::DecoyStepZero { decoy: decoy.decoy.clone(), label_source: source.into() });
        }
        if decoy.length.is_some_and(|length| m >= length) {
            continue;
        }
        restarted += 1;
        loss += 1.0 - restart_value(base_runs, &decoy.task, budget, m)?;
    }
    Ok(DecoyRow {
        source: source.into(),
        decoys: answered,
        restarted,
        loss: (answered > 0).then(|| loss / f64::from(answered)),
    })
}

fn runs_of<'a>(base_runs: &'a BTreeMap<String, BaseRuns>, task: &str) -> Result<&'a BaseRuns, AnalysisError> {
    base_runs
        .get(task)
        .filter(|runs| !runs.0.is_empty())
        .ok_or_else(|| AnalysisError::MissingBaseRuns { task: task.into() })
}

/// `R̂(x, B − t)`.
fn restart_value(
    base_runs: &BTreeMap<String, BaseRuns>,
    task: &str,
    budget: u32,
    t: u32,
) -> Result<f64, AnalysisError> {
    let runs = runs_of(base_runs, task)?;
    Ok(runs.restart_value(i64::from(budget) - i64::from(t)).unwrap_or(0.0))
}

/// What [`restart_policies`] evaluates.
#[derive(Debug, Clone, Copy)]
pub struct RestartStudy<'a> {
    /// The failed trajectories with their curves (`t_r`, `t_pnr`, `t*`). `t_r` is read from
    /// [`CurveRecord::restart_point`]: analyze the curve with the task's base runs, or set it.
    pub trajectories: &'a [CurveRecord],
    /// Labels on the failed trajectories.
    pub labels: &'a [Label],
    /// Labels on successful decoys.
    pub decoys: &'a [DecoyLabel],
    /// Base runs by task.
    pub base_runs: &'a BTreeMap<String, BaseRuns>,
    /// Sources evaluated as judge policies, in order; `None`: every source of `labels`.
    pub judges: Option<&'a [String]>,
    /// Fixed restart steps (the paper: 10, 20, 30, 50).
    pub fixed_steps: &'a [u32],
}

/// The paper's fixed restart steps.
pub const FIXED_STEPS: [u32; 4] = [10, 20, 30, 50];

/// Evaluate every policy on a study.
pub fn restart_policies(study: &RestartStudy<'_>, params: &Thresholds) -> Result<RestartReport, AnalysisError> {
    validate_labels(study.trajectories, study.labels)?;
    let index = index_trajectories(study.trajectories)?;
    let budget = params.budget;
    let judges: Vec<String> = match study.judges {
        Some(judges) => judges.to_vec(),
        None => sources_in_order(study.labels.iter().map(|l| l.source.as_str())),
    };

    // One outcome of a failed run restarted at `step` (if any, and if the run is still going).
    let outcome = |policy: &Policy, record: &CurveRecord, step: Option<u32>, success_kept: Measured<f64>| {
        let pass_rate = runs_of(study.base_runs, &record.task)?.pass_rate().unwrap_or(0.0);
        let step = step.filter(|&t| t < record.length);
        Ok::<_, AnalysisError>(PolicyOutcome {
            policy: policy.name(),
            trajectory: record.trajectory.clone(),
            task: record.task.clone(),
            pass_rate,
            restart_step: step,
            restart_value: step.map(|t| restart_value(study.base_runs, &record.task, budget, t)).transpose()?,
            success_kept,
        })
    };

    let mut policies = Vec::new();
    let mut per_trajectory = Vec::new();
    let mut push = |policy: Policy, outcomes: Vec<PolicyOutcome>| {
        policies.push(evaluate_policy(policy, &outcomes));
        per_trajectory.extend(outcomes);
    };

    let value_based = [
        (Policy::Never, (|_| None) as fn(&CurveRecord) -> Option<u32>),
        (Policy::RestartPoint, |r| r.restart_point),
        (Policy::PointOfNoReturn, |r| Some(r.pnr)),
        (Policy::DecisiveStep, |r| r.t_star),
    ];
    for (policy, step) in value_based {
        let outcomes = study
            .trajectories
            .iter()
            .map(|r| outcome(&policy, r, step(r), 1.0.into()))
            .collect::<Result<Vec<_>, _>>()?;
        push(policy, outcomes);
    }

    let mut decoys = Vec::new();
    for source in &judges {
        let row = decoy_row(source, study.decoys, study.base_runs, budget)?;
        let policy = Policy::Label { source: source.clone() };
        let outcomes = study
            .labels
            .iter()
            .filter(|l| &l.source == source)
            .map(|l| outcome(&policy, index[l.trajectory.as_str()], l.step, row.kept()))
            .collect::<Result<Vec<_>, _>>()?;
        push(policy, outcomes);
        decoys.push(row);
    }

    for &t in study.fixed_steps {
        let policy = Policy::Fixed { step: t };
        let outcomes = study
            .trajectories
            .iter()
            .map(|r| {
                let runs = runs_of(study.base_runs, &r.task)?;
                let p = runs.pass_rate().unwrap_or(0.0);
                // Successes that finished by step t keep; the others restart at t.
                let finished = runs.restart_value(i64::from(t)).unwrap_or(0.0);
                let again = runs.restart_value(i64::from(budget) - i64::from(t)).unwrap_or(0.0);
                let kept = if p > 0.0 { (finished + (p - finished) * again) / p } else { 1.0 };
                outcome(&policy, r, Some(t), kept.into())
            })
            .collect::<Result<Vec<_>, _>>()?;
        push(policy, outcomes);
    }

    Ok(RestartReport { policies, decoys, per_trajectory })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::BaseRun;

    fn runs(list: &[(bool, u32)]) -> BaseRuns {
        BaseRuns(list.iter().map(|&(success, steps)| BaseRun { success, steps }).collect())
    }

    /// Task x: 4 successes of 8, finishing at steps 8, 30, 60 and 85.
    /// R̂(x, b): 0.5 for b ≥ 85, 0.375 for b ≥ 60, 0.25 for b ≥ 30, 0.125 for b ≥ 8.
    fn base() -> BTreeMap<String, BaseRuns> {
        let x =
            runs(&[(true, 8), (true, 30), (true, 60), (true, 85), (false, 100), (false, 40), (false, 50), (false, 20)]);
        let y = runs(&[(true, 50), (false, 10), (false, 10), (false, 10)]); // p = 0.25
        BTreeMap::from([("x".to_owned(), x), ("y".to_owned(), y)])
    }

    fn study_records() -> Vec<CurveRecord> {
        let mut a = record("a", "x", 60, 9, 10, 20);
        a.restart_point = Some(5);
        let mut b = record("b", "y", 45, 44, 45, 45); // t* = T, uncertified PNR
        b.restart_point = None;
        vec![a, b]
    }

    #[test]
    fn policy_arithmetic_on_hand_made_runs() {
        let records = study_records();
        let labels = vec![label("a", "J", Some(12)), label("b", "J", None)];
        let decoys = vec![
            DecoyLabel { decoy: "d1".into(), task: "x".into(), source: "J".into(), step: Some(15), length: None },
            DecoyLabel { decoy: "d2".into(), task: "x".into(), source: "J".into(), step: None, length: None },
        ];
        let base = base();
        let study = RestartStudy {
            trajectories: &records,
            labels: &labels,
            decoys: &decoys,
            base_runs: &base,
            judges: None,
            fixed_steps: &[10, 50],
        };
        let report = restart_policies(&study, &Thresholds::default()).unwrap();
        let row = |name: &str| report.policies.iter().find(|r| r.name == name).unwrap().clone();
        let never_random = (0.5 + 0.25) / 2.0;

        let never = row("never");
        assert_eq!((never.restarts, never.trajectories, never.mean_restart_step), (0, 2, None));
        assert!(close(never.failed, 0.0) && close(never.random, never_random) && close(never.gain, 0.0));

        // t_r: a at 5 → R̂(x, 95) = 0.5; b has none.
        let tr = row("restart point t_r");
        assert_eq!((tr.restarts, tr.mean_restart_step), (1, Some(5.0)));
        assert!(close(tr.failed, 0.25));
        assert!(close(tr.random, (0.5 + 0.5 * 0.5 + 0.25) / 2.0));
        assert!(close(tr.gain, tr.random - never_random));

        // t_pnr: a at 20 → R̂(x, 80) = 0.375; b's t_pnr = T is no restart.
        let pnr = row("t_pnr");
        assert_eq!((pnr.restarts, pnr.mean_restart_step), (1, Some(20.0)));
        assert!(close(pnr.failed, 0.375 / 2.0));
        // t*: a at 10 → R̂(x, 90) = 0.5; b's t* = 45 = T is no restart.
        let ts = row("t*");
        assert_eq!((ts.restarts, ts.mean_restart_step), (1, Some(10.0)));
        assert!(close(ts.failed, 0.25));

        // The judge: a at 12 → R̂(x, 88) = 0.5; "no mistake" on b. Decoys: d1 labelled at 15 →
        // loss 1 − R̂(x, 85) = 0.5; d2 not labelled → 0; L = 0.25 per decoy.
        assert_eq!(report.decoys, vec![DecoyRow { source: "J".into(), decoys: 2, restarted: 1, loss: Some(0.25) }]);
        let j = row("label, J");
        assert_eq!((j.restarts, j.trajectories, j.mean_restart_step), (1, 2, Some(12.0)));
        assert!(close(j.failed, 0.25));
        let random_a = 0.5 * 0.75 + 0.5 * 0.5;
        let random_b = 0.25 * 0.75;
        assert!(close(j.random, (random_a + random_b) / 2.0));
        assert!(close(j.gain, j.random - never_random));

        // Fixed t = 10: both restart. a: R̂(x, 90) = 0.5; a success of x kept: the run finishing
        // at 8 keeps (R̂(x, 10) = 0.125), the other 0.375 restart at 0.5 → p·s = 0.3125.
        // b: R̂(y, 90) = 0.25; y's success ran 50 steps, restarted → p·s = 0.25·0.25.
        let f10 = row("fixed t=10");
        assert_eq!((f10.restarts, f10.mean_restart_step), (2, Some(10.0)));
        assert!(close(f10.failed, (0.5 + 0.25) / 2.0));
        assert!(close(f10.random, (0.3125 + 0.5 * 0.5 + 0.0625 + 0.75 * 0.25) / 2.0));
        // Fixed t = 50: b (T = 45) has ended — no restart, keeps its failure. a: R̂(x, 50) = 0.25;
        // successes kept: R̂(x, 50) = 0.25 finished, 0.25 restart at 0.25.
        let f50 = row("fixed t=50");
        assert_eq!(f50.restarts, 1);
        assert!(close(f50.failed, 0.125));
        assert!(close(f50.random, (0.25 + 0.25 * 0.25 + 0.5 * 0.25 + 0.25 * 1.0) / 2.0));

        // Per-trajectory outcomes: every policy × trajectory.
        assert_eq!(report.per_trajectory.len(), 2 * (4 + 1 + 2));
        let b_tstar = report.per_trajectory.iter().find(|o| o.policy == "t*" && o.trajectory == "b").unwrap();
        assert_eq!((b_tstar.restart_step, b_tstar.restart_value), (None, None));
    }

    #[test]
    fn evaluate_policy_from_published_cells() {
        let cell = |step: Option<u32>, value: Option<f64>, p: f64| PolicyOutcome {
            policy: "t*".into(),
            trajectory: "t".into(),
            task: "x".into(),
            pass_rate: p,
            restart_step: step,
            restart_value: value,
            success_kept: Measured::Value(1.0),
        };
        let row = evaluate_policy(
            Policy::DecisiveStep,
            &[cell(Some(6), Some(0.5), 0.5), cell(None, None, 0.25), cell(Some(30), Some(0.0), 0.75)],
        );
        assert_eq!((row.restarts, row.trajectories, row.mean_restart_step), (2, 3, Some(18.0)));
        assert!(close(row.failed, 0.5 / 3.0));
        assert!(close(row.random, (0.75 + 0.25 + 0.75) / 3.0));
        assert!(close(row.gain, 0.25 / 3.0));
        assert_eq!(evaluate_policy(Policy::Never, &[]).mean_restart_step, None);
    }

    #[test]
    fn a_judge_without_decoys_has_its_random_run_not_measured() {
        let records = study_records();
        let labels = vec![label("a", "J", Some(12)), label("b", "J", None)];
        let base = base();
        let study = RestartStudy {
            trajectories: &records,
            labels: &labels,
            decoys: &[],
            base_runs: &base,
            judges: None,
            fixed_steps: &[10],
        };
        let report = restart_policies(&study, &Thresholds::default()).unwrap();
        let row = |name: &str| report.policies.iter().find(|r| r.name == name).unwrap().clone();
        assert_eq!(report.decoys, vec![DecoyRow { source: "J".into(), decoys: 0, restarted: 0, loss: None }]);
        assert_eq!(report.decoys[0].kept(), Measured::NotMeasured);
        // What happens to the failed runs needs no decoys: measured as with them.
        let j = row("label, J");
        assert_eq!((j.restarts, j.trajectories, j.mean_restart_step), (1, 2, Some(12.0)));
        assert!(close(j.failed, 0.25));
        // What happens to a run that would have succeeded is not known: not 1 − 0.
        assert_eq!((j.random, j.gain), (Measured::NotMeasured, Measured::NotMeasured));
        let json = serde_json::to_value(&j).unwrap();
        assert_eq!((json["random"].clone(), json["gain"].clone()), (serde_json::Value::Null, serde_json::Value::Null));
        assert_eq!(json["failed"], 0.25);
        let cells: Vec<&PolicyOutcome> = report.per_trajectory.iter().filter(|o| o.policy == "label, J").collect();
        assert!(cells.iter().all(|o| o.success_kept == Measured::NotMeasured && !o.random_outcome().is_measured()));
        assert_eq!(serde_json::to_value(cells[0]).unwrap()["success_kept"], serde_json::Value::Null);
        // The value-based and fixed policies do not depend on decoys.
        let never = row("never");
        assert!(close(never.random, (0.5 + 0.25) / 2.0) && close(never.gain, 0.0));
        assert!(row("fixed t=10").random.is_measured());
        // Round trip.
        assert_eq!(serde_json::from_value::<PolicyRow>(json).unwrap(), j);
    }

    #[test]
    fn a_policy_over_no_trajectory_measures_nothing() {
        let row = evaluate_policy(Policy::Label { source: "J".into() }, &[]);
        assert_eq!((row.restarts, row.trajectories, row.mean_restart_step), (0, 0, None));
        assert_eq!(
            (row.failed, row.random, row.gain),
            (Measured::NotMeasured, Measured::NotMeasured, Measured::NotMeasured)
        );
        let json = serde_json::to_value(&row).unwrap();
        for field in ["failed", "random", "gain"] {
            assert_eq!(json[field], serde_json::Value::Null, "{field}");
        }
        // As the tables print it.
        assert_eq!(format!("{:.2} {:+.2}", row.failed, row.gain), "not measured not measured");
        // A measured 0 stays 0.
        let never = evaluate_policy(
            Policy::Never,
            &[PolicyOutcome {
                policy: "never".into(),
                trajectory: "t".into(),
                task: "x".into(),
                pass_rate: 0.5,
                restart_step: None,
                restart_value: None,
                success_kept: Measured::Value(1.0),
            }],
        );
        assert_eq!(format!("{:.2} {:.2} {:+.2}", never.failed, never.random, never.gain), "0.00 0.50 +0.00");
        assert_eq!(serde_json::to_value(&never).unwrap()["failed"], 0.0);
    }

    #[test]
    fn missing_base_runs_and_bad_decoys_are_refused() {
        let records = vec![record("a", "z", 60, 9, 10, 20)];
        let base = base();
        let study = RestartStudy {
            trajectories: &records,
            labels: &[],
            decoys: &[],
            base_runs: &base,
            judges: None,
            fixed_steps: &FIXED_STEPS,
        };
        let err = restart_policies(&study, &Thresholds::default()).unwrap_err();
        assert_eq!(err, AnalysisError::MissingBaseRuns { task: "z".into() });
        let decoys =
            vec![DecoyLabel { decoy: "d".into(), task: "x".into(), source: "J".into(), step: Some(0), length: None }];
        assert!(matches!(decoy_row("J", &decoys, &base, 100), Err(AnalysisError::DecoyStepZero { .. })));
        // A label at or after the decoy's end is no restart.
        let decoys = vec![DecoyLabel {
            decoy: "d".into(),
            task: "x".into(),
            source: "J".into(),
            step: Some(40),
            length: Some(40),
        }];
        assert_eq!(decoy_row("J", &decoys, &base, 100).unwrap().restarted, 0);
        assert_eq!(decoy_row("K", &decoys, &base, 100).unwrap().loss, None);
    }

    #[test]
    fn policy_names_and_serialization() {
        assert_eq!(Policy::Label { source: "GPT-5.5".into() }.name(), "label, GPT-5.5");
        assert_eq!(Policy::Fixed { step: 10 }.name(), "fixed t=10");
        let json = serde_json::to_value(Policy::Fixed { step: 30 }).unwrap();
        assert_eq!(json, serde_json::json!({"kind": "fixed", "step": 30}));
        assert!(Policy::PointOfNoReturn.is_value_based() && !Policy::Fixed { step: 1 }.is_value_based());
    }
}
