//! `paper`: the schedule of docs/method.md §4, as the paper ran it. The default.

use crate::schedule::variant::Variant;

#[derive(Debug, Clone, Copy)]
pub struct Paper;

impl Variant for Paper {
    fn name(&self) -> &'static str {
        "paper"
    }

    fn summary(&self) -> &'static str {
        "screen, bisect, confirm, point of no return, label probes (docs/method.md §4)"
    }
}
