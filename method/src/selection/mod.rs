//! Selection of the study set (docs/method.md §7; the paper's §5 "Selection", §4 "Replay and anchors",
//! Appendices I, J and L) as pure code: every task's base runs and a seed in, every choice and its
//! reason out, and the back-fill of a non-replayable trajectory as a step on that record.
//!
//! # The rules
//!
//! 1. **Verdict per task.** With `k` successes of `n` base runs (pass rate `p = k/n`) and
//!    `N = base_runs_per_task`, checked in this order, each comparison with [`meets_at_most`] /
//!    [`meets_at_least`] (docs/method.md §3 tolerance):
//!    - no base run: [`Verdict::NoBaseRuns`];
//!    - `p ≤ doomed_threshold` (`ε₀ = 1/8`): [`Verdict::Doomed`] ("a task with `p(x) ≤ ε₀` is
//!      doomed from the start and has nothing to localize", Definition 4);
//!    - `p > band_max / N`: [`Verdict::Saturated`] (the paper's "Saturated (7–8 of 8)");
//!    - `p < band_min / N`: [`Verdict::BelowBand`] (possible only when the band's lower edge lies
//!      above `ε₀`, e.g. `band_min = 3`);
//!    - otherwise [`Verdict::Band`] ("Tasks with 2 to 6 successes of 8 form the band").
//!
//!    With `n = N` these are exactly the counts `k ≤ 1`, `k ≥ 7`, `2 ≤ k ≤ 6` of the paper; a task
//!    with another number of base runs is judged by its pass rate on the same scale.
//! 2. **Candidates** are the failed base runs of band tasks; the successful ones are the decoy pool.
//! 3. **Terciles** ("failed runs of band tasks are stratified by length tercile (L0–L2) and end type
//!    (submitted vs. step cap)", §5): the two cut points are the 1/3 and 2/3 quantiles of the lengths
//!    `T` of *all* failed runs of *all* band tasks pooled (the paper's "84 failed band runs"), by
//!    linear interpolation between order statistics (Hyndman–Fan type 7, the default of R and NumPy,
//!    and the one [`crate::bootstrap`] uses): for sorted lengths `x_0 ≤ … ≤ x_{n−1}` and `p`, with
//!    `h = (n − 1)p`, `q = x_⌊h⌋ + (h − ⌊h⌋)(x_⌊h⌋+1 − x_⌊h⌋)`. A run is **L0** if `T < q_1/3`,
//!    **L1** if `q_1/3 ≤ T < q_2/3`, **L2** if `T ≥ q_2/3`: a length equal to a cut point goes up.
//!    This is the reading under which the paper's own tables are consistent: its first policy's L2
//!    holds exactly the runs of 100 steps while L1 reaches 99 (Appendix W), and its second policy,
//!    whose failed band runs mostly hit the cap (both cuts at 100), has no L1 stratum at all and one
//!    "L2-submit" trajectory (Table 43); under "ties go down" (`T ≤ q → lower`) its every run would
//!    have been L0.
//! 4. **Strata** are (tercile, end type), named `L0-submit`, `L2-cap`, …: the product of the two
//!    stratifications. "Every capped run lies in the top tercile, so the strata are L0-submit,
//!    L1-submit and L2-cap" (§5) is what the product gives when capped runs are the longest, as they
//!    are (a run capped at `B` steps has the largest length, and a type-7 quantile never exceeds the
//!    largest length, so it is always L2); a run that submitted in the top tercile is **L2-submit**
//!    (Table 43 has one), not moved elsewhere. End types: [`RunEnd::Submit`] (the agent submitted a
//!    patch, possibly empty), [`RunEnd::Cap`] (the step budget ran out) and [`RunEnd::Other`] (any
//!    other end: cost limit, context window, format errors, a scaffold or model error), which forms
//!    its own strata (`L1-other`) rather than being mixed into the runs that submitted.
//! 5. **Processing order per stratum** ("sampled with a fixed seed"; "back-fills are drawn from the
//!    same strata in a fixed order", Appendix L): a stratum's candidates in canonical order (task id
//!    by bytes, then seed) are shuffled by Fisher–Yates with the stratum's own stream of draws (below),
//!    so that one stratum's order depends only on the seed and its own members.
//! 6. **Initial selection, round-robin**: the strata in canonical order (L0-submit, L0-cap, L0-other,
//!    L1-submit, …, L2-other; empty ones left out) take turns; on its turn a stratum takes the first
//!    candidate of its remaining order whose task has fewer than `trajectories_per_task` selected
//!    ("at most 3 per task"), passing over (and keeping in place) candidates of full tasks. It stops
//!    when `target` trajectories are selected (the paper's "target 60") or when a whole turn of every
//!    stratum took nothing. The order of taking is the study's **processing order** (position 0, 1,
//!    …), on whose first trajectories the controls run (§4 "Controls"); the round-robin spreads them
//!    over the strata. What a stratum did not take, in its order, is its **back-fill queue**.
//! 7. **Decoys** ("Ten successful runs of band tasks are included blind as decoys", §5): all successful
//!    runs of band tasks in canonical order, shuffled by Fisher–Yates with the decoy stream; the first
//!    `decoys` of them (all, if fewer). Decoys are judged, never continued and never back-filled.
//! 8. **Back-fill** ([`Selection::back_fill`]; "On the first mismatch the trajectory is
//!    non-replayable: it is dropped and the selection is back-filled from the same stratum", §4): the
//!    dropped trajectory stops counting against its task's cap, and its stratum's queue gives its
//!    first candidate whose task has fewer than `trajectories_per_task` *active* (selected and not
//!    dropped) trajectories; none: [`BackFill::StratumExhausted`], and the study goes on with one
//!    trajectory fewer. Never from another stratum. A back-fill is appended to the processing order.
//!    **Rounds**: the initial selection is round 0; the back-fill of a trajectory of round `r` is of
//!    round `r + 1`; [`Selection::rounds`] is the largest round of a back-fill made (the paper's "6
//!    back-fills in 1 round(s)", "21 back-fills in 3 round(s)"). The paper's first policy shows why the
//!    cap counts active trajectories: 58 initial selections (the most the cap allows on its 21 tasks)
//!    plus 6 back-fills make 64 selected, more than 3 × 21 = 63.
//!
//! # The draws
//!
//! All randomness comes from the selection seed `s` (a `u64`), so that another implementation can
//! reproduce a selection exactly:
//!
//! - The generator is ChaCha20 (Bernstein's original layout: 64-bit block counter from 0 in words
//!   12–13, 64-bit nonce in words 14–15) with the 32-byte key `s` as 8 little-endian bytes, then the
//!   19 ASCII bytes `vcurve/selection/v1`, then 5 zero bytes, and nonce (`rand_chacha`'s *stream*)
//!   `1 + 3·tercile + end` for a stratum (tercile L0 = 0, L1 = 1, L2 = 2; end submit = 0, cap = 1,
//!   other = 2: L0-submit is 1, L2-cap is 8) and `10` for the decoys. The keystream is read as
//!   little-endian `u32` words, and a `u64` draw is two consecutive words, the first the low half
//!   (`rand_chacha::ChaCha20Rng::next_u64`).
//! - A uniform integer in `[0, m)` takes `u64` draws `x` until `x < m·⌊2^64 / m⌋` and answers `x mod m`.
//! - Fisher–Yates: for `i` from `len − 1` down to `1`, swap item `i` with item `j`, `j` uniform in
//!   `[0, i]`.
//!
//! # Layout
//!
//! - `strata`: the input (a task's [`SeedRun`]s) and the strata: [`RunEnd`], [`Tercile`], [`Stratum`].
//! - `terciles`: the length cut points ([`Terciles`], rule 3).
//! - `draws`: the seeded draws (ChaCha20, rejection sampling, Fisher–Yates).
//! - `choices`: what a selection records ([`Selection`] and its parts) and its back-fills (rule 8).
//! - `select`: the verdicts and the initial selection ([`select`], rules 1–7).

mod choices;
mod draws;
mod select;
mod strata;
mod terciles;

pub use choices::{
    BackFill, BackFillEvent, Candidate, Decoy, Initial, Pick, Selection, SelectionError, SelectionParams, StratumOrder,
    TaskVerdict, Verdict,
};
pub use draws::DECOY_STREAM;
pub use select::select;
pub use strata::{RunEnd, RunId, SeedRun, Stratum, TaskRuns, Tercile};
pub use terciles::Terciles;

#[cfg(test)]
mod tests;
