//! The interface every schedule variant implements ([`Variant`]), whose defaults are the paper's
//! schedule ([`paper_lanes`]); the variants themselves are in [`variants`](super::variants).

use super::lanes::{self, Lane, LaneContext, Memory};
use super::points::{Points, Stage};
use crate::Thresholds;

/// A schedule: which stages run, under which parameters, with which lanes.
pub trait Variant: Send + Sync {
    /// The name users select it by (`--schedule NAME`, `schedule:` in a study spec).
    fn name(&self) -> &'static str;

    /// One line for `--help` and reports.
    fn summary(&self) -> &'static str;

    /// The parameters the variant runs under, from the study's.
    fn params(&self, study: &Thresholds) -> Thresholds {
        study.clone()
    }

    /// The stages, in order.
    fn stages(&self) -> &'static [Stage] {
        &[Stage::Screen, Stage::Bisect, Stage::Confirm, Stage::Pnr, Stage::Labels, Stage::Controls]
    }

    /// The lanes of `stage`, given the trajectory and what earlier stages learned. An empty list
    /// skips the stage.
    fn lanes(&self, stage: Stage, ctx: &LaneContext, memory: &Memory, points: &Points) -> Vec<Box<dyn Lane>> {
        paper_lanes(stage, ctx, memory, points)
    }
}

/// The lanes of the paper's schedule (docs/method.md §4). A stage's lanes are made when it starts, when
/// every continuation of the stages before it has an outcome, so `points` are final for them.
pub fn paper_lanes(stage: Stage, ctx: &LaneContext, _memory: &Memory, points: &Points) -> Vec<Box<dyn Lane>> {
    match stage {
        Stage::Screen => vec![Box::new(lanes::Screen::new(ctx))],
        Stage::Bisect => lanes::bisection_pairs(ctx, points)
            .into_iter()
            .map(|pair| Box::new(lanes::Bisect::new(ctx, pair)) as Box<dyn Lane>)
            .collect(),
        Stage::Confirm => vec![Box::new(lanes::Confirm::new(ctx))],
        Stage::Pnr => vec![Box::new(lanes::PointOfNoReturn::new(ctx))],
        Stage::Labels => vec![Box::new(lanes::LabelProbes::new(ctx))],
        Stage::Controls if ctx.controls.retest || ctx.controls.budget_control => {
            vec![Box::new(lanes::ControlRuns::new(ctx))]
        }
        Stage::Controls | Stage::Done => Vec::new(),
    }
}
