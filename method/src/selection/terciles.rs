//! The two length cut points of the band's failed runs (rule 3 of [`selection`](crate::selection)).

use serde::{Deserialize, Serialize};

use super::strata::Tercile;

/// The two cut points of the band's failed runs' lengths (type-7 quantiles at 1/3 and 2/3).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Terciles {
    /// How many lengths they were computed over.
    pub failed_runs: u32,
    /// `q_1/3`: below it L0.
    pub lower: f64,
    /// `q_2/3`: at or above it L2.
    pub upper: f64,
}

impl Terciles {
    /// The cut points of `lengths` (any order); `None` for no lengths.
    pub fn of(lengths: &[u32]) -> Option<Terciles> {
        let mut sorted = lengths.to_vec();
        sorted.sort_unstable();
        let n = u32::try_from(sorted.len()).ok().filter(|&n| n > 0)?;
        Some(Terciles { failed_runs: n, lower: third_quantile(&sorted, 1), upper: third_quantile(&sorted, 2) })
    }

    /// The tercile of a run of `steps` steps: a length equal to a cut point goes up.
    pub fn tercile(&self, steps: u32) -> Tercile {
        let t = f64::from(steps);
        if t < self.lower {
            Tercile::L0
        } else if t < self.upper {
            Tercile::L1
        } else {
            Tercile::L2
        }
    }

    /// Where `steps` lies, in words, for a candidate's reason.
    pub(super) fn describe(&self, steps: u32) -> String {
        let (lo, hi) = (fmt_cut(self.lower), fmt_cut(self.upper));
        match self.tercile(steps) {
            Tercile::L0 => format!("T = {steps} < {lo} (lower cut)"),
            Tercile::L1 => format!("{lo} ≤ T = {steps} < {hi}"),
            Tercile::L2 => format!("T = {steps} ≥ {hi} (upper cut)"),
        }
    }
}

/// The type-7 quantile at `thirds / 3` of sorted, non-empty values, computed as
/// `(3·x_⌊h⌋ + f·(x_⌊h⌋+1 − x_⌊h⌋)) / 3` with `3h = thirds·(n − 1)` and `f = 3h mod 3`: an exact
/// integer numerator, so that a cut point that is a whole number is exactly that number.
fn third_quantile(sorted: &[u32], thirds: u64) -> f64 {
    let Some(&last) = sorted.last() else {
        return 0.0;
    };
    let h3 = thirds * (sorted.len() as u64 - 1);
    let lo = usize::try_from(h3 / 3).unwrap_or(usize::MAX);
    let frac = h3 % 3;
    let a = sorted.get(lo).copied().unwrap_or(last);
    let b = sorted.get(lo.saturating_add(1)).copied().unwrap_or(a);
    let numerator = 3 * u64::from(a) + frac * u64::from(b.saturating_sub(a));
    numerator as f64 / 3.0
}

/// A cut point for reading: whole numbers without decimals, others to two places.
fn fmt_cut(c: f64) -> String {
    if c.fract() == 0.0 { format!("{c:.0}") } else { format!("{c:.2}") }
}
