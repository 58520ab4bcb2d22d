//! Schedule variants behind one interface.
//!
//! A variant chooses its parameters, its stages and each stage's lanes; the default methods give
//! the paper's schedule. Adding a variant is one module here and one entry in [`VARIANTS`].

pub mod adaptive;
mod paper;
mod screen_bisect;
mod screen_k4;
mod sparse_anchors;

pub use super::variant::{Variant, paper_lanes};
pub use adaptive::Adaptive;
pub use paper::Paper;
pub use screen_bisect::ScreenBisect;
pub use screen_k4::ScreenK4;
pub use sparse_anchors::SparseAnchors;

/// Every variant, the default first.
pub static VARIANTS: &[&dyn Variant] = &[&Paper, &Adaptive, &ScreenBisect, &ScreenK4, &SparseAnchors];

/// The variant called `name`.
pub fn variant_by_name(name: &str) -> Option<&'static dyn Variant> {
    VARIANTS.iter().copied().find(|v| v.name() == name)
}

/// The names of every variant, for error messages.
pub fn variant_names() -> Vec<&'static str> {
    VARIANTS.iter().map(|v| v.name()).collect()
}
