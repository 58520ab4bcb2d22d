//! The coordinator's [`Renderer`], built on `vcurve-report`: the binary wires it in, so the
//! coordinator serves exports and dashboard figures without linking the plotting stack.

use std::collections::BTreeMap;
use std::sync::Arc;

use vcurve_coordinator::Renderer;
use vcurve_coordinator::render::{RenderError, TrajectorySummary};
use vcurve_method::schedule::Series;
use vcurve_record::{RestartCheckRow, StudyRecord, TrajectoryRecord};
use vcurve_report::figures::CurveFigure;
use vcurve_report::{export, restart_check};

/// Exports, dashboard rows and figures from `vcurve-report`. A restart-check study (Appendix Q)
/// has no trajectories of its own: its export is [`restart_check::files`], and it has no dashboard
/// rows and no figure.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportRenderer;

impl ReportRenderer {
    /// The renderer as the coordinator takes it.
    pub fn shared() -> Arc<dyn Renderer> {
        Arc::new(ReportRenderer)
    }
}

fn failed(e: impl std::fmt::Display) -> RenderError {
    RenderError(e.to_string())
}

impl Renderer for ReportRenderer {
    fn export(&self, study: &StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        // A task-state study has no curves: its files are `task_state_export`'s.
        if study.spec.task_state.is_some() {
            return Ok(BTreeMap::new());
        }
        if study.spec.restart_check.is_some() {
            return restart_check::files(study).map_err(failed);
        }
        export::files(study).map_err(failed)
    }

    fn export_parts(
        &self,
        head: StudyRecord,
        trajectories: &mut dyn Iterator<Item = TrajectoryRecord>,
    ) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        if head.spec.task_state.is_some() {
            return Ok(BTreeMap::new());
        }
        if head.spec.restart_check.is_some() {
            let mut study = head;
            study.trajectories.extend(trajectories);
            return restart_check::files(&study).map_err(failed);
        }
        export::files_from(&head, trajectories).map_err(failed)
    }

    fn task_state_export(
        &self,
        data: &vcurve_record::task_state::TaskStateData,
    ) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        vcurve_report::task_state::export::files(data).map_err(failed)
    }

    fn summaries(&self, study: &StudyRecord) -> Result<Vec<TrajectorySummary>, RenderError> {
        if study.spec.restart_check.is_some() {
            return Ok(Vec::new());
        }
        let results = export::results(study).map_err(failed)?;
        Ok(results
            .trajectories
            .into_iter()
            .map(|t| TrajectorySummary {
                trajectory: t.trajectory,
                state: t.state,
                stage: t.stage,
                length: t.length,
                shape: t.shape,
                t_star: t.t_star,
                pnr: t.pnr,
                pnr_certified: t.pnr_certified,
                continuations: t.continuations,
            })
            .collect())
    }

    fn figure_svg(&self, study: &StudyRecord) -> Result<Option<String>, RenderError> {
        if study.spec.restart_check.is_some() {
            return Ok(None);
        }
        let results = export::results(study).map_err(failed)?;
        Ok(results.trajectories.first().and_then(CurveFigure::from_result).map(|f| f.svg()))
    }

    fn restart_check_rows(&self, study: &StudyRecord) -> Result<Vec<RestartCheckRow>, RenderError> {
        let results = export::results(study).map_err(failed)?;
        let budget = study.spec.budget;
        let mut rows = Vec::new();
        for t in &results.trajectories {
            let Some(t_r) = t.restart_point else { continue };
            let point = t.series.get(&Series::Main).and_then(|points| points.iter().find(|p| p.t == t_r));
            let (Some(point), Some(predicted)) =
                (point, t.base_runs.restart_value(i64::from(budget - t_r.min(budget))))
            else {
                return Err(RenderError(format!(
                    "{}: restart point {t_r} has no fitted value or restart value to check",
                    t.trajectory
                )));
            };
            rows.push(RestartCheckRow {
                trajectory: t.trajectory.clone(),
                task: t.task.clone(),
                restart_point: t_r,
                predicted,
                continuing: point.v_fit,
            });
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcurve_record::{BaseRunRecord, EndType, StudySpec, StudyState};

    /// A restart check of one trajectory, one of its two fresh runs finished.
    fn restart_check_study() -> StudyRecord {
        let spec: StudySpec = serde_json::from_value(serde_json::json!({
            "name": "s-restart-check", "seed": 1, "budget": 100, "schedule": "none",
            "runner": {"kind": "synthetic", "options": {}},
            "thresholds": vcurve_method::Thresholds { bootstrap_resamples: 100, ..Default::default() },
            "controls": {"sanity": 0, "retest": 0, "budget_control": 0}, "admission": {"mode": "demand"},
            "trajectories": [],
            "restart_check": {"of": "s", "runs": 2, "rows": [
                {"trajectory": "t s1", "task": "t", "restart_point": 3, "predicted": 0.5, "continuing": 0.25}
            ]},
        }))
        .unwrap();
        let run =
            BaseRunRecord { subject: "t s1".into(), seed: 0, success: true, steps: 9, end_type: EndType::Submitted };
        StudyRecord {
            id: "c".into(),
            state: StudyState::Running,
            spec,
            trajectories: Vec::new(),
            evaluation: Default::default(),
            base_runs: vec![run],
            selection: None,
            retired: Vec::new(),
            calls: Vec::new(),
        }
    }

    #[test]
    fn a_restart_check_study_exports_its_check_and_has_no_rows_or_figure() {
        let study = restart_check_study();
        let files = ReportRenderer.export(&study).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["report.html", "restart_check.csv", "restart_check.json"]);
        assert!(String::from_utf8_lossy(&files["restart_check.csv"]).contains("\nt s1,3,1,1,1.0000,"));
        assert_eq!(ReportRenderer.summaries(&study).unwrap(), Vec::new());
        assert_eq!(ReportRenderer.figure_svg(&study).unwrap(), None);
    }
}
