//! `screen-bisect`: screening and bisection only (the paper's Table 29): no confirmation and no
//! point-of-no-return stage. Label probes and controls still run where a study asks for them.

use crate::schedule::points::Stage;
use crate::schedule::variant::Variant;

#[derive(Debug, Clone, Copy)]
pub struct ScreenBisect;

impl Variant for ScreenBisect {
    fn name(&self) -> &'static str {
        "screen-bisect"
    }

    fn summary(&self) -> &'static str {
        "screening and bisection only: no confirmation, no point-of-no-return search"
    }

    fn stages(&self) -> &'static [Stage] {
        &[Stage::Screen, Stage::Bisect, Stage::Labels, Stage::Controls]
    }
}
