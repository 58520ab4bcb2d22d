//! `sparse-anchors`: anchors every 10 steps plus `T − 1` (the paper's Table 29); the rest as
//! `paper`.

use crate::Thresholds;
use crate::schedule::variant::Variant;

#[derive(Debug, Clone, Copy)]
pub struct SparseAnchors;

impl Variant for SparseAnchors {
    fn name(&self) -> &'static str {
        "sparse-anchors"
    }

    fn summary(&self) -> &'static str {
        "anchors every 10 steps plus T − 1, the rest as paper"
    }

    fn params(&self, study: &Thresholds) -> Thresholds {
        Thresholds { anchor_dense_step: 10, anchor_sparse_step: 10, ..study.clone() }
    }
}
