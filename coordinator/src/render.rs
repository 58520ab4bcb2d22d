//! The seam between the coordinator and whatever renders a study's results.
//!
//! The coordinator stores outcomes; turning them into export files, dashboard rows and figures is
//! the job of `vcurve-report`, which links the plotting stack the coordinator must not. The
//! binary hands the coordinator a [`Renderer`] built on it. Rendering is study-sized work (the
//! analyses alone draw 10,000 bootstrap resamples), so the coordinator calls it on the blocking
//! pool, never on the async runtime.

use std::collections::BTreeMap;

use serde::Serialize;
use vcurve_method::Shape;
use vcurve_method::schedule::Stage;
use vcurve_record::{RestartCheckRow, StudyRecord, TrajectoryRecord, TrajectoryState};

/// Why a study could not be rendered: its stored outcomes or labels cannot be analyzed (a
/// corrupted store). Fatal for the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

/// One trajectory's headline numbers, as the dashboard lists them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrajectorySummary {
    pub trajectory: String,
    pub state: TrajectoryState,
    pub stage: Stage,
    pub length: u32,
    pub shape: Option<Shape>,
    pub t_star: Option<u32>,
    pub pnr: Option<u32>,
    pub pnr_certified: Option<bool>,
    /// Continuations with an outcome or retired, all series.
    pub continuations: u32,
}

/// Renders a study's results. Every method is pure and synchronous: a record in, bytes out.
pub trait Renderer: Send + Sync + 'static {
    /// The export's files by name; the same outcomes always give the same bytes.
    fn export(&self, study: &StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, RenderError>;

    /// Every trajectory's headline numbers, in processing order.
    fn summaries(&self, study: &StudyRecord) -> Result<Vec<TrajectorySummary>, RenderError>;

    /// The V-curve figure (SVG) of the record's only trajectory; `None` when it has no curve yet.
    fn figure_svg(&self, study: &StudyRecord) -> Result<Option<String>, RenderError>;

    /// What an online restart check of the study checks (Appendix Q): every trajectory with a
    /// restart point `t_r`, in processing order, with `R̂(x, B − t_r)` and `V(h_{t_r})`.
    fn restart_check_rows(&self, study: &StudyRecord) -> Result<Vec<RestartCheckRow>, RenderError>;

    /// A task-state study's own export files (its probes, answers, scores, calls, views and
    /// tables; docs/task-state.md), beside [`Renderer::export`]'s. None by default.
    fn task_state_export(
        &self,
        data: &vcurve_record::task_state::TaskStateData,
    ) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        let _ = data;
        Ok(BTreeMap::new())
    }

    /// [`Renderer::export`] of a study read in parts: `head` is its record without its
    /// trajectories, which `trajectories` yields in processing order (a renderer that can should
    /// not hold them all at once). The same bytes as [`Renderer::export`] of the whole record; by
    /// default, it is that.
    fn export_parts(
        &self,
        head: StudyRecord,
        trajectories: &mut dyn Iterator<Item = TrajectoryRecord>,
    ) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        let mut study = head;
        study.trajectories.extend(trajectories);
        self.export(&study)
    }
}
