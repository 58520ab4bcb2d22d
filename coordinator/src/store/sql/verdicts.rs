//! The patch cache (docs/method.md §6), inside the transactions of the reports that judge patches.
//!
//! A worker that ends a run with a non-empty patch asks for the verdict of `(study, task, patch)`
//! first ([`Store::verdict`](crate::store::Store::verdict)): a patch already judged is not
//! evaluated again (`judged = cached`). Otherwise the worker evaluates it, uploads the patch and
//! reports `judged = evaluated`; the report stores the verdict. The first verdict of a unique
//! patch is re-checked by an `evaluation` job (round 1) with probability `flake_recheck_rate`
//! (a draw from the study seed, the task and the patch, so every coordinator decides alike), or
//! always once the study's flake rate exceeds `flake_threshold`. An evaluation that disagrees
//! with the first verdict counts as a flake; the first verdict stands.

use sha2::{Digest, Sha256};
use sqlx::{Any, Row, Transaction};
use vcurve_record::EvaluationStats;
use vcurve_record::jobs::{JobKey, Judged, RunOutcome};

use super::handle::{SqlStore, StudyConfig};
use super::jobs::insert_job;
use crate::store::api::StoreError;

/// The flake-check parameters of a study: its runner's options, or docs/method.md §6's values.
fn flake_parameters(config: &StudyConfig) -> (f64, f64) {
    match config.runner.agent_options() {
        Some(o) => (o.flake_recheck_rate, o.flake_threshold),
        None => (0.10, 0.03),
    }
}

/// `u` in `[0, 1)` from the first 8 bytes of SHA-256 of `s`.
fn unit(s: &str) -> f64 {
    let digest = Sha256::digest(s.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) as f64 / 18_446_744_073_709_551_616.0
}

/// Whose run a judged patch is.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunOf<'a> {
    pub study: &'a str,
    pub task: &'a str,
    /// The payload that carries the task, for a re-check's worker.
    pub payload: Option<&'a str>,
}

impl SqlStore {
    /// The verdict of a patch already judged in the study.
    pub(super) async fn lookup_verdict(
        &self,
        study: &str,
        task: &str,
        patch_sha256: &vcurve_record::Digest,
    ) -> Result<Option<bool>, StoreError> {
        let row = sqlx::query("SELECT resolved FROM verdicts WHERE study = $1 AND task = $2 AND patch_sha256 = $3")
            .bind(study)
            .bind(task)
            .bind(patch_sha256.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok(r.try_get::<i64, _>("resolved")? != 0)).transpose()
    }

    /// Record how a run's patch was judged; returns whether it queued a flake re-check.
    pub(super) async fn judge_run(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        run: RunOf<'_>,
        outcome: &RunOutcome,
        now: i64,
    ) -> Result<bool, StoreError> {
        let RunOf { study, task, payload } = run;
        match outcome.judged {
            Judged::EmptyPatch => Ok(false),
            Judged::Cached => {
                sqlx::query("UPDATE verdicts SET hits = hits + 1 WHERE study = $1 AND task = $2 AND patch_sha256 = $3")
                    .bind(study)
                    .bind(task)
                    .bind(&outcome.patch_sha256)
                    .execute(&mut **tx)
                    .await?;
                Ok(false)
            }
            Judged::Evaluated => {
                let inserted = sqlx::query(
                    "INSERT INTO verdicts (study, task, patch_sha256, resolved, created_ms) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (study, task, patch_sha256) DO NOTHING",
                )
                .bind(study)
                .bind(task)
                .bind(&outcome.patch_sha256)
                .bind(i64::from(outcome.success))
                .bind(now)
                .execute(&mut **tx)
                .await?
                .rows_affected()
                    == 1;
                if !inserted {
                    // Another worker judged the same patch meanwhile: a free flake check.
                    self.add_evaluation(tx, study, task, &outcome.patch_sha256, outcome.success, false).await?;
                    return Ok(false);
                }
                let (rate, threshold) = flake_parameters(config);
                let stats = self.verdict_totals(&mut **tx, study).await?;
                let every = stats.flake_rate().is_some_and(|r| r > threshold + 1e-9);
                let draw = unit(&format!("{}/{task}/{}/recheck", config.seed, outcome.patch_sha256));
                if !(every || draw < rate) {
                    return Ok(false);
                }
                let key = JobKey::Evaluation {
                    study: study.to_string(),
                    task: task.to_string(),
                    patch_sha256: outcome.patch_sha256.clone(),
                    round: 1,
                };
                let created = insert_job(tx, &key, now).await?;
                if created {
                    super::jobs::set_job_payload(tx, &key, payload).await?;
                }
                Ok(created)
            }
        }
    }

    /// One more evaluation of a judged patch: a flake re-check (`recheck`), or a first
    /// evaluation another worker made at the same time; a verdict other than the first is a flake.
    pub(super) async fn add_evaluation(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        task: &str,
        patch_sha256: &str,
        resolved: bool,
        recheck: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE verdicts SET evaluations = evaluations + 1, rechecks = rechecks + $4, \
             disagreements = disagreements + (CASE WHEN resolved = $5 THEN 0 ELSE 1 END) \
             WHERE study = $1 AND task = $2 AND patch_sha256 = $3",
        )
        .bind(study)
        .bind(task)
        .bind(patch_sha256)
        .bind(i64::from(recheck))
        .bind(i64::from(resolved))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// What the verdicts table says of a study (no scan of its runs): everything but the empty
    /// patches and the base runs' outcomes, which only the runs know.
    pub(super) async fn verdict_totals<'e, E>(&self, executor: E, study: &str) -> Result<EvaluationStats, StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let r = sqlx::query(
            "SELECT COUNT(*) AS patches, CAST(COALESCE(SUM(evaluations), 0) AS BIGINT) AS evaluations, \
             CAST(COALESCE(SUM(rechecks), 0) AS BIGINT) AS rechecks, CAST(COALESCE(SUM(disagreements), 0) AS BIGINT) AS disagreements, \
             CAST(COALESCE(SUM(hits), 0) AS BIGINT) AS hits FROM verdicts WHERE study = $1",
        )
        .bind(study)
        .fetch_one(executor)
        .await?;
        let get = |c: &str| -> Result<u64, StoreError> { Ok(r.try_get::<i64, _>(c)?.max(0) as u64) };
        let (patches, evaluations, rechecks) = (get("patches")?, get("evaluations")?, get("rechecks")?);
        Ok(EvaluationStats {
            evaluated_runs: evaluations.saturating_sub(rechecks),
            cache_hits: get("hits")?,
            empty_patches: 0,
            unique_patches: patches,
            evaluations,
            flake_checks: evaluations.saturating_sub(patches),
            flakes: get("disagreements")?,
            // Counted from the runs, by the study record only (like `empty_patches`).
            base_run_outcomes: 0,
        })
    }
}
