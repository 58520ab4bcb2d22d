//! The `synthetic` runner: continuations whose outcomes are a pure function of their key, drawn
//! from a known true curve. It lets the whole distributed loop run end to end without containers,
//! and makes any run of a study, interrupted or not, end with identical points.
//!
//! # What it computes
//!
//! The trajectory payload's `curve` is `[v_0, …, v_{T−1}]`, the true `V(t)` at every prefix the
//! schedule can sample. With
//!
//! ```text
//! u(s) = (first 8 bytes of SHA-256(s), big-endian, as an integer) / 2^64
//! u    = u("{study_seed}/{trajectory}/{series}/{t}/{seed}")
//! ```
//!
//! a continuation succeeds iff `u < V(t)` (so `V(t) = 1` always succeeds but for a 2⁻⁵⁴ rounding
//! corner, `V(t) = 0` never does). The remaining fields are deterministic too:
//!
//! - `steps = 1 + ⌊1000·u⌋ mod budget` (0 when the budget is 0), so `1 ≤ steps ≤ budget`;
//! - `end_type = submitted` on success; on failure `step_cap` when `steps == budget`, else
//!   `submitted`; the patch counts as evaluated;
//! - `patch_sha256` = hex SHA-256 of `"{trajectory}/{series}/{t}/{seed}"`.
//!
//! # Options (the study spec's `runner:` map; unknown fields such as `kind` are ignored)
//!
//! - `duration_ms` (integer ≥ 0, default 0): simulated work, a sleep that stops when the job is
//!   cancelled.
//! - `no_outcome_rate` (number in `[0, 1]`, default 0): a no-outcome (reason `"injected"`) is
//!   reported iff `u("{study_seed}/{trajectory}/{series}/{t}/{seed}/{attempt}/no-outcome") <
//!   no_outcome_rate`. The attempt is in the hash, so a re-run of the key draws afresh and can
//!   succeed, while every run of the same attempt draws the same.
//!
//! Bad options, a missing curve, a curve too short for `t` or a value outside `[0, 1]` end in a
//! no-outcome whose reason says what is wrong; the runner never panics on its input.

use std::time::Duration;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use vcurve_record::jobs::{Judged, RunOutcome};
use vcurve_record::{EndType, TrajectoryPayload};

use crate::runners::no_outcome::NoOutcome;
use crate::runners::seam::{AgentRunner, ContinuationKey, JobReport, JobSpec};

/// The `synthetic` agent runner (see the module docs for the formulas).
#[derive(Debug, Clone, Copy, Default)]
pub struct SyntheticRunner;

impl SyntheticRunner {
    /// The runner kind, as named in study specs.
    pub const KIND: &'static str = "synthetic";
}

use vcurve_record::RunnerSpec;
pub use vcurve_record::runner::SyntheticOptions;

/// `u(s)`: the first 8 bytes of SHA-256 of `s`, big-endian, divided by 2^64.
pub fn unit_hash(s: &str) -> f64 {
    let digest = Sha256::digest(s.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) as f64 / 18_446_744_073_709_551_616.0 // 2^64
}

/// `u` of a continuation: the draw that decides its outcome.
pub fn outcome_draw(study_seed: u64, key: &ContinuationKey) -> f64 {
    unit_hash(&format!("{study_seed}/{}/{}/{}/{}", key.trajectory, key.series.as_str(), key.t, key.seed))
}

/// The draw that decides whether `attempt` of a continuation is an injected no-outcome.
pub fn no_outcome_draw(study_seed: u64, key: &ContinuationKey, attempt: u32) -> f64 {
    unit_hash(&format!(
        "{study_seed}/{}/{}/{}/{}/{attempt}/no-outcome",
        key.trajectory,
        key.series.as_str(),
        key.t,
        key.seed
    ))
}

/// The whole synthetic decision for one job, without the simulated work: a pure function of the
/// job. [`SyntheticRunner::run`] sleeps `duration_ms` and then returns this.
pub fn synthetic_result(job: &JobSpec) -> JobReport {
    let options = match options_of(job) {
        Ok(options) => options,
        Err(no) => return no.report(),
    };
    let Some(key) = job.key.continuation() else {
        return NoOutcome::BadJob(format!(
            "the synthetic runner runs continuations only, not a {}",
            job.key.kind().as_str()
        ))
        .report();
    };
    let v = match true_value(job.trajectory.as_deref(), key.t) {
        Ok(v) => v,
        Err(no) => return no.report(),
    };
    if no_outcome_draw(job.study_seed, key, job.attempt) < options.no_outcome_rate {
        return NoOutcome::Injected.report();
    }
    let u = outcome_draw(job.study_seed, key);
    let success = u < v;
    let steps = if job.budget == 0 { 0 } else { 1 + ((u * 1000.0) as u32) % job.budget };
    let end_type = if !success && steps == job.budget { EndType::StepCap } else { EndType::Submitted };
    let patch = format!("{}/{}/{}/{}", key.trajectory, key.series.as_str(), key.t, key.seed);
    JobReport::Outcome(RunOutcome {
        success,
        steps,
        end_type,
        patch_sha256: hex(&Sha256::digest(patch.as_bytes())),
        judged: Judged::Evaluated,
        recorded: None,
    })
}

/// The job's synthetic options (parsed and validated as the job arrived).
fn options_of(job: &JobSpec) -> Result<SyntheticOptions, NoOutcome> {
    match &job.runner {
        RunnerSpec::Synthetic(options) => Ok(*options),
        other => {
            Err(NoOutcome::BadJob(format!("the synthetic runner was handed a job of the {} runner", other.kind())))
        }
    }
}

/// `V(t)` from the payload's `curve`.
fn true_value(trajectory: Option<&TrajectoryPayload>, t: u32) -> Result<f64, NoOutcome> {
    let curve = trajectory
        .and_then(|p| p.curve.as_ref())
        .ok_or_else(|| NoOutcome::BadJob("synthetic trajectory has no curve".to_owned()))?;
    let value = *curve
        .get(t as usize)
        .ok_or_else(|| NoOutcome::BadJob(format!("synthetic curve has {} values, none for t = {t}", curve.len())))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(NoOutcome::BadJob(format!("synthetic curve value at t = {t} is {value}, not a number in [0, 1]")))
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl AgentRunner for SyntheticRunner {
    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn run(&self, job: JobSpec, cancel: CancellationToken) -> BoxFuture<'static, JobReport> {
        Box::pin(async move {
            // Bad options are reported before any simulated work: nothing would come of it.
            let duration = match options_of(&job) {
                Ok(options) => Duration::from_millis(options.duration_ms),
                Err(no) => return no.report(),
            };
            if !duration.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(duration) => {}
                    () = cancel.cancelled() => return NoOutcome::Cancelled.report(),
                }
            }
            synthetic_result(&job)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::runners::seam::JobKey;
    use serde_json::json;

    fn key(trajectory: &str, series: &str, t: u32, seed: u32) -> ContinuationKey {
        ContinuationKey {
            study: "00000000-0000-0000-0000-000000000000".into(),
            trajectory: trajectory.into(),
            series: vcurve_method::schedule::Series::parse(series).unwrap(),
            t,
            seed,
        }
    }

    /// A job of the synthetic runner whose options (JSON, as the wire carries them) are valid.
    fn job(key: ContinuationKey, attempt: u32, options: serde_json::Value, curve: Vec<f64>) -> JobSpec {
        let length = curve.len() as u32;
        JobSpec {
            key: key.into(),
            attempt,
            budget: 88,
            runner: RunnerSpec::parse(SyntheticRunner::KIND, options).expect("valid synthetic options"),
            study_seed: 7,
            trajectory_digest: None,
            trajectory: Some(Arc::new(TrajectoryPayload {
                task: "task".into(),
                length,
                curve: Some(curve),
                recorded: None,
                task_def: None,
                problem_statement_sha256: None,
                instructions: None,
            })),
            anchors: vec![],
            registry_snapshot: None,
        }
    }

    // Expected values computed independently with Python:
    //   import hashlib
    //   d = hashlib.sha256(b"7/django-11555-s2/main/12/3").digest()
    //   int.from_bytes(d[:8], "big")            -> 13580612134237709875
    //   int.from_bytes(d[:8], "big") / 2**64    -> 0.7362064589811764
    //   hashlib.sha256(b"django-11555-s2/main/12/3").hexdigest()
    //   the same of b"7/django-11555-s2/main/12/3/1/no-outcome" -> 6577977621947048449 (0.3566)
    //   and of b"7/django-11555-s2/main/12/3/2/no-outcome"  -> 10048304643928845541 (0.5447)
    #[test]
    fn hash_formula_matches_an_independent_computation() {
        let k = key("django-11555-s2", "main", 12, 3);
        assert_eq!(outcome_draw(7, &k), 13_580_612_134_237_709_875u64 as f64 / 2f64.powi(64));
        assert!((outcome_draw(7, &k) - 0.736_206_458_981_176_4).abs() < 1e-15);
        assert_eq!(no_outcome_draw(7, &k, 1), 6_577_977_621_947_048_449u64 as f64 / 2f64.powi(64));
        assert_eq!(no_outcome_draw(7, &k, 2), 10_048_304_643_928_845_541u64 as f64 / 2f64.powi(64));

        let mut curve = vec![0.0; 20];
        curve[12] = 0.74; // u = 0.7362 < 0.74: success
        let result = synthetic_result(&job(k.clone(), 1, json!({}), curve.clone()));
        assert_eq!(
            result,
            JobReport::Outcome(RunOutcome {
                success: true,
                steps: 1 + 736 % 88,
                end_type: EndType::Submitted,
                patch_sha256: "d15a4ada167cd6a4cb1c433432b331304bf97b1c0ef6cb09d9acfa224163cc64".into(),
                judged: Judged::Evaluated,
                recorded: None,
            })
        );
        curve[12] = 0.73; // u > 0.73: failure
        let result = synthetic_result(&job(k, 1, json!({}), curve));
        assert!(matches!(result, JobReport::Outcome(RunOutcome { success: false, .. })), "{result:?}");
    }

    #[test]
    fn outcome_depends_only_on_the_key_not_the_attempt_or_study() {
        let curve = vec![0.5; 10];
        for seed in 0..50 {
            let mut a = job(key("tr", "main", 4, seed), 1, json!(null), curve.clone());
            let first = synthetic_result(&a);
            a.attempt = 3;
            if let JobKey::Continuation(k) = &mut a.key {
                k.study = "another study id".into();
            }
            assert_eq!(synthetic_result(&a), first);
        }
    }

    #[test]
    fn success_rate_is_close_to_v() {
        for &v in &[0.0, 0.1, 0.5, 0.9, 1.0] {
            let n = 4000;
            let successes = (0..n)
                .filter(|&seed| {
                    let j = job(key("traj-a", "main", 3, seed), 1, json!({}), vec![v; 5]);
                    matches!(synthetic_result(&j), JobReport::Outcome(RunOutcome { success: true, .. }))
                })
                .count();
            let rate = successes as f64 / f64::from(n);
            // 4 standard errors at n = 4000 is at most 0.032.
            assert!((rate - v).abs() < 0.032, "V = {v}: observed {rate}");
        }
    }

    #[test]
    fn steps_and_end_type_are_consistent_with_the_budget() {
        for seed in 0..500 {
            let mut j = job(key("traj-b", "retest", 0, seed), 1, json!({}), vec![0.3]);
            j.budget = 7;
            match synthetic_result(&j) {
                JobReport::Outcome(RunOutcome { success, steps, end_type, .. }) => {
                    assert!((1..=7).contains(&steps));
                    let expected = if !success && steps == 7 { EndType::StepCap } else { EndType::Submitted };
                    assert_eq!(end_type, expected);
                }
                other => panic!("{other:?}"),
            }
        }
        let mut j = job(key("traj-b", "main", 0, 0), 1, json!({}), vec![0.0]);
        j.budget = 0;
        assert!(matches!(
            synthetic_result(&j),
            JobReport::Outcome(RunOutcome { success: false, steps: 0, end_type: EndType::StepCap, .. })
        ));
    }

    #[test]
    fn no_outcome_injection_depends_on_the_attempt() {
        let options = json!({ "no_outcome_rate": 0.5 });
        let k = key("django-11555-s2", "main", 12, 3);
        let curve = vec![1.0; 13];
        // Draws 0.357 (attempt 1) and 0.545 (attempt 2) against a rate of 0.5.
        assert_eq!(
            synthetic_result(&job(k.clone(), 1, options.clone(), curve.clone())),
            JobReport::no_outcome("injected")
        );
        assert!(matches!(
            synthetic_result(&job(k, 2, options, curve)),
            JobReport::Outcome(RunOutcome { success: true, .. })
        ));

        // Over many keys: the injected share is close to the rate, and each key's attempts draw
        // independently.
        let options = json!({ "no_outcome_rate": 0.2 });
        let injected = |seed: u32, attempt: u32| {
            let j = job(key("traj-c", "main", 0, seed), attempt, options.clone(), vec![0.5]);
            synthetic_result(&j) == JobReport::no_outcome("injected")
        };
        let n = 4000;
        let first = (0..n).filter(|&s| injected(s, 1)).count() as f64 / f64::from(n);
        let both = (0..n).filter(|&s| injected(s, 1) && injected(s, 2)).count() as f64 / f64::from(n);
        assert!((first - 0.2).abs() < 0.026, "{first}");
        assert!((both - 0.04).abs() < 0.013, "{both}");

        // Rates 0 and 1 are exact.
        let always = json!({ "no_outcome_rate": 1.0 });
        let never = json!({ "no_outcome_rate": 0 });
        for seed in 0..100 {
            let k = key("traj-d", "main", 0, seed);
            assert_eq!(
                synthetic_result(&job(k.clone(), 1, always.clone(), vec![0.5])),
                JobReport::no_outcome("injected")
            );
            assert!(matches!(synthetic_result(&job(k, 1, never.clone(), vec![0.5])), JobReport::Outcome(_)));
        }
    }

    fn reason(result: JobReport) -> String {
        match result {
            JobReport::NoOutcome { reason } => reason,
            other => panic!("expected a no-outcome, got {other:?}"),
        }
    }

    #[test]
    fn bad_options_and_curves_are_no_outcomes_with_a_reason() {
        let k = key("traj-e", "main", 2, 0);
        let ok_curve = vec![0.5; 3];
        // Bad options are refused as the job arrives (`lease::wire`), also a no-outcome.
        let cases = [
            (json!({}), vec![0.5, 0.5], "synthetic curve has 2 values, none for t = 2"),
            (json!({}), vec![0.5, 0.5, 1.5], "not a number in [0, 1]"),
        ];
        for (options, curve, expected) in cases {
            let r = reason(synthetic_result(&job(k.clone(), 1, options.clone(), curve)));
            assert!(r.contains(expected), "{options}: {r}");
        }
        let mut j = job(k.clone(), 1, json!({}), ok_curve.clone());
        j.trajectory = Some(Arc::new(TrajectoryPayload {
            task: "t".into(),
            length: 3,
            curve: None,
            recorded: None,
            task_def: None,
            problem_statement_sha256: None,
            instructions: None,
        }));
        assert!(reason(synthetic_result(&j)).contains("no curve"));
        j.trajectory = None;
        assert!(reason(synthetic_result(&j)).contains("no curve"));
        j.key = JobKey::Replay { study: "s".into(), trajectory: "traj-e".into() };
        assert!(reason(synthetic_result(&j)).contains("continuations only"));

        // Unknown option fields (the spec's `kind`) are fine.
        let mut j = job(k, 1, json!({ "kind": "synthetic", "duration_ms": 0 }), ok_curve);
        assert!(matches!(synthetic_result(&j), JobReport::Outcome(_)));
        // A job of another runner is not run.
        j.runner = RunnerSpec::Other { kind: "probe".into(), options: json!({}) };
        assert!(reason(synthetic_result(&j)).contains("a job of the probe runner"));
    }

    #[tokio::test]
    async fn simulated_work_sleeps_and_honours_cancel() {
        let runner = SyntheticRunner;
        let j = job(key("traj-f", "main", 0, 0), 1, json!({ "duration_ms": 30 }), vec![0.5]);
        let started = std::time::Instant::now();
        let result = runner.run(j.clone(), CancellationToken::new()).await;
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(result, synthetic_result(&j));

        let long = job(key("traj-f", "main", 0, 0), 1, json!({ "duration_ms": 60_000 }), vec![0.5]);
        let cancel = CancellationToken::new();
        let run = tokio::spawn(runner.run(long, cancel.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
        let result = tokio::time::timeout(Duration::from_secs(2), run).await.unwrap().unwrap();
        assert_eq!(result, JobReport::no_outcome("cancelled"));
    }
}
