//! `screen-k4`: anchors screened at `K = 4` instead of 8 (the paper's Table 29); the rest as
//! `paper`. Bisection midpoints are still sampled at 8, and a point counts as resolved from
//! `n ≥ 4`, so screened anchors take part in the curve analysis.

use crate::Thresholds;
use crate::schedule::lanes::{self, Lane, LaneContext, Memory};
use crate::schedule::points::{Points, Stage};
use crate::schedule::variant::Variant;

#[derive(Debug, Clone, Copy)]
pub struct ScreenK4;

/// Screening `K` of this variant.
const K: u32 = 4;

impl Variant for ScreenK4 {
    fn name(&self) -> &'static str {
        "screen-k4"
    }

    fn summary(&self) -> &'static str {
        "screening at K = 4 (resolved from n ≥ 4), the rest as paper"
    }

    fn params(&self, study: &Thresholds) -> Thresholds {
        // `k_screen` is both the screening K and the resolution threshold of the estimator.
        Thresholds { k_screen: K.min(study.k_screen), ..study.clone() }
    }

    fn lanes(&self, stage: Stage, ctx: &LaneContext, memory: &Memory, points: &Points) -> Vec<Box<dyn Lane>> {
        // Everything but screening samples at the paper's K = 8.
        let paper_k = LaneContext { params: Thresholds { k_screen: 8, ..ctx.params.clone() }, ..ctx.clone() };
        match stage {
            Stage::Screen => vec![Box::new(lanes::Screen::new(ctx))],
            _ => crate::schedule::variant::paper_lanes(stage, &paper_k, memory, points),
        }
    }
}
