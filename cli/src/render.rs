//! The coordinator's [`Renderer`], built on `vcurve-report`: the binary wires it in, so the
//! coordinator serves exports and dashboard figures without linking the plotting stack.

use std::collections::BTreeMap;
use std::sync::Arc;

use vcurve_coordinator::Renderer;
use vcurve_coordinator::render::{RenderError, TrajectorySummary};
use vcurve_method::schedule::Series;
use vcurve_record::{RestartCheckRow, StudyRecord};
use vcurve_report::export;
use vcurve_report::figures::CurveFigure;

/// Exports, dashboard rows and figures from `vcurve-report`.
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
        export::files(study).map_err(failed)
    }

    fn summaries(&self, study: &StudyRecord) -> Result<Vec<TrajectorySummary>, RenderError> {
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
