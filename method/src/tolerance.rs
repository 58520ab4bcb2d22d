//! Comparisons of computed values with thresholds, allowing [`TOLERANCE`] in favour of meeting
//! them (docs/method.md §3). Every module of the method compares through these.

/// Slack allowed in favour of meeting a threshold: `R̂ − V = 0.09999999999999998` meets `μ = 0.10`.
pub const TOLERANCE: f64 = 1e-9;

/// `value ≥ threshold`, allowing [`TOLERANCE`] in favour of meeting it.
pub fn meets_at_least(value: f64, threshold: f64) -> bool {
    value >= threshold - TOLERANCE
}

/// `value ≤ threshold`, allowing [`TOLERANCE`] in favour of meeting it.
pub fn meets_at_most(value: f64, threshold: f64) -> bool {
    value <= threshold + TOLERANCE
}

/// `value < threshold` (a strict bound such as `p < α`), allowing [`TOLERANCE`] in favour of meeting it.
pub fn meets_below(value: f64, threshold: f64) -> bool {
    value < threshold + TOLERANCE
}
