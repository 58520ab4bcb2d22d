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

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::curve::{BaseRun, BaseRuns};
use crate::params::Thresholds;
use crate::{meets_at_least, meets_at_most};

/// How a base run ended, as far as selection is concerned. From the record's end types:
/// `submitted` → [`Submit`](RunEnd::Submit), `step_cap` → [`Cap`](RunEnd::Cap), and `cost_limit`,
/// `context_window`, `format_error`, `error` → [`Other`](RunEnd::Other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunEnd {
    /// The agent submitted a patch (possibly empty).
    Submit,
    /// The agent used its whole step budget.
    Cap,
    /// Any other end.
    Other,
}

impl RunEnd {
    pub const ALL: [RunEnd; 3] = [RunEnd::Submit, RunEnd::Cap, RunEnd::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            RunEnd::Submit => "submit",
            RunEnd::Cap => "cap",
            RunEnd::Other => "other",
        }
    }

    fn index(self) -> u64 {
        match self {
            RunEnd::Submit => 0,
            RunEnd::Cap => 1,
            RunEnd::Other => 2,
        }
    }
}

/// A length tercile of the band's failed runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Tercile {
    L0,
    L1,
    L2,
}

impl Tercile {
    pub const ALL: [Tercile; 3] = [Tercile::L0, Tercile::L1, Tercile::L2];

    pub fn as_str(self) -> &'static str {
        match self {
            Tercile::L0 => "L0",
            Tercile::L1 => "L1",
            Tercile::L2 => "L2",
        }
    }

    fn index(self) -> u64 {
        match self {
            Tercile::L0 => 0,
            Tercile::L1 => 1,
            Tercile::L2 => 2,
        }
    }
}

/// A selection stratum: length tercile and end type, written `L0-submit`, `L2-cap`, `L1-other`.
/// Ordered canonically: by tercile, then submit, cap, other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Stratum {
    pub tercile: Tercile,
    pub end: RunEnd,
}

impl Stratum {
    /// The ChaCha20 stream of this stratum's processing order: `1 + 3·tercile + end`.
    pub fn stream(self) -> u64 {
        1 + 3 * self.tercile.index() + self.end.index()
    }
}

impl fmt::Display for Stratum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.tercile.as_str(), self.end.as_str())
    }
}

impl FromStr for Stratum {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (tercile, end) = s.split_once('-').ok_or_else(|| format!("not a stratum: {s:?}"))?;
        let tercile = Tercile::ALL.into_iter().find(|t| t.as_str() == tercile);
        let end = RunEnd::ALL.into_iter().find(|e| e.as_str() == end);
        match (tercile, end) {
            (Some(tercile), Some(end)) => Ok(Stratum { tercile, end }),
            _ => Err(format!("not a stratum (L0–L2, then submit, cap or other): {s:?}")),
        }
    }
}

impl From<Stratum> for String {
    fn from(s: Stratum) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for Stratum {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// A base run: its task and its seed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunId {
    pub task: String,
    pub seed: u32,
}

impl RunId {
    pub fn new(task: impl Into<String>, seed: u32) -> Self {
        RunId { task: task.into(), seed }
    }

    /// The id of the trajectory the run becomes when it is selected: `{task}-base{seed}`.
    pub fn trajectory_id(&self) -> String {
        format!("{}-base{}", self.task, self.seed)
    }
}

impl fmt::Display for RunId {
    /// The paper's `xarray-3305 s5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} s{}", self.task, self.seed)
    }
}

/// One base run with an outcome, as selection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedRun {
    /// The base run's seed (its index among the task's base runs).
    pub seed: u32,
    pub success: bool,
    /// Its length `T` in steps.
    pub steps: u32,
    pub end: RunEnd,
}

/// A task and its base runs (any order; they are taken in seed order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRuns {
    pub task: String,
    pub runs: Vec<SeedRun>,
}

impl TaskRuns {
    /// The task's base runs in seed order, for the pass rate and the restart value.
    pub fn base_runs(&self) -> BaseRuns {
        let mut runs = self.runs.clone();
        runs.sort_by_key(|r| r.seed);
        BaseRuns(runs.iter().map(|r| BaseRun { success: r.success, steps: r.steps }).collect())
    }
}

/// Why the input cannot be selected from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("task {0:?} is given twice")]
    DuplicateTask(String),
    #[error("task {task:?} has two base runs with seed {seed}")]
    DuplicateSeed { task: String, seed: u32 },
}

/// What a task's pass rate makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No base run with an outcome: nothing to judge.
    NoBaseRuns,
    /// `p ≤ ε₀`: nothing to localize.
    Doomed,
    /// Below the band's lower edge but not doomed.
    BelowBand,
    /// In the band: its failed runs are candidates, its successful runs decoys.
    Band,
    /// Above the band's upper edge.
    Saturated,
}

/// A task's verdict with its counts and reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskVerdict {
    pub task: String,
    pub runs: u32,
    pub successes: u32,
    /// `k / n`; `None` without base runs.
    pub pass_rate: Option<f64>,
    pub verdict: Verdict,
    pub reason: String,
}

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
    fn describe(&self, steps: u32) -> String {
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

/// What the initial selection did with a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Initial {
    /// Selected, at this position of the processing order.
    Selected { position: u32 },
    /// Left in the queue: its task had `trajectories_per_task` selected.
    TaskAtCap,
    /// Left in the queue: the target was reached first.
    TargetReached,
}

/// A failed run of a band task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: RunId,
    pub steps: u32,
    pub end: RunEnd,
    pub stratum: Stratum,
    /// Its place in its stratum's processing order (0 first).
    pub order: u32,
    pub initial: Initial,
    /// Why it is in its stratum.
    pub reason: String,
}

/// A stratum's fixed processing order and what remains of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StratumOrder {
    pub stratum: Stratum,
    /// Every candidate of the stratum, in the order drawn from the seed.
    pub order: Vec<RunId>,
    /// The candidates not (yet) selected, in that order: the back-fill queue.
    pub queue: Vec<RunId>,
}

/// A selected trajectory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pick {
    pub id: RunId,
    pub stratum: Stratum,
    /// Its place in the processing order (0 first; back-fills after the initial selection).
    pub position: u32,
    /// 0 for the initial selection; `r + 1` for the back-fill of a trajectory of round `r`.
    pub round: u32,
    /// The non-replayable trajectory it replaces.
    pub replaces: Option<RunId>,
    /// Dropped as non-replayable (it stays here, with its reason, but no longer counts).
    pub non_replayable: bool,
    pub reason: String,
}

/// A decoy: a successful run of a band task, judged and never continued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decoy {
    pub id: RunId,
    pub steps: u32,
    pub end: RunEnd,
    pub reason: String,
}

/// What a back-fill did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum BackFill {
    /// The replacement, from the same stratum, now selected.
    Replaced { replacement: RunId, stratum: Stratum, round: u32 },
    /// The stratum has no candidate whose task has room: the study goes on with one fewer.
    StratumExhausted { stratum: Stratum, round: u32 },
    /// The run is not a selected trajectory (unknown, a decoy, or a queued candidate): nothing done.
    NotSelected,
    /// The trajectory was already dropped: nothing done.
    AlreadyNonReplayable,
}

/// A back-fill as it happened (only those that dropped a trajectory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackFillEvent {
    pub non_replayable: RunId,
    pub result: BackFill,
}

/// The parameters selection used (docs/method.md §8), kept with the selection for the export.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SelectionParams {
    pub base_runs_per_task: u32,
    pub band_min: u32,
    pub band_max: u32,
    pub doomed_threshold: f64,
    pub trajectories_per_task: u32,
    pub decoys: u32,
}

impl From<&Thresholds> for SelectionParams {
    fn from(t: &Thresholds) -> Self {
        SelectionParams {
            base_runs_per_task: t.base_runs_per_task,
            band_min: t.band_min,
            band_max: t.band_max,
            doomed_threshold: t.doomed_threshold,
            trajectories_per_task: t.trajectories_per_task,
            decoys: t.decoys,
        }
    }
}

/// A selection with every choice and its reason; serializable, and the state of its back-fills.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub seed: u64,
    pub target: Option<u32>,
    pub params: SelectionParams,
    /// Every task, by task id.
    pub tasks: Vec<TaskVerdict>,
    /// Over the band's failed runs; `None` when there are none.
    pub terciles: Option<Terciles>,
    /// Every failed run of a band task, by task id and seed.
    pub candidates: Vec<Candidate>,
    /// The non-empty strata in canonical order.
    pub strata: Vec<StratumOrder>,
    /// Every selected trajectory in processing order, dropped ones included.
    pub picks: Vec<Pick>,
    /// In the decoy order.
    pub decoys: Vec<Decoy>,
    /// Successful runs of band tasks the decoys were drawn from.
    pub decoy_pool: u32,
    pub back_fills: Vec<BackFillEvent>,
}

/// The draws of one stream (see the module documentation).
struct Draws(ChaCha20Rng);

/// Bytes 8..27 of the key.
const KEY_TAG: &[u8; 19] = b"vcurve/selection/v1";
/// The stream of the decoy order.
pub const DECOY_STREAM: u64 = 10;

impl Draws {
    fn new(seed: u64, stream: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..8 + KEY_TAG.len()].copy_from_slice(KEY_TAG);
        Draws::from_key(key, stream)
    }

    fn from_key(key: [u8; 32], stream: u64) -> Self {
        let mut rng = ChaCha20Rng::from_seed(key);
        rng.set_stream(stream);
        Draws(rng)
    }

    /// Uniform in `[0, m)` by rejection; `0` for `m = 0`.
    fn below(&mut self, m: u64) -> u64 {
        if m == 0 {
            return 0;
        }
        let zone = (1u128 << 64) / u128::from(m) * u128::from(m);
        loop {
            let x = self.0.next_u64();
            if u128::from(x) < zone {
                return x % m;
            }
        }
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn verdict(task: &str, runs: &[&SeedRun], p: &SelectionParams) -> TaskVerdict {
    let n = count(runs.len());
    let k = count(runs.iter().filter(|r| r.success).count());
    let per = p.base_runs_per_task.max(1);
    let band = format!("the band ({}–{} of {per})", p.band_min, p.band_max);
    let (verdict, pass_rate, reason) = if n == 0 {
        (Verdict::NoBaseRuns, None, "no base run with an outcome".to_string())
    } else {
        let rate = f64::from(k) / f64::from(n);
        let head = format!("{k} of {n} base runs succeeded (pass rate {rate:.3})");
        let (lo, hi) = (f64::from(p.band_min) / f64::from(per), f64::from(p.band_max) / f64::from(per));
        let (verdict, why) = if meets_at_most(rate, p.doomed_threshold) {
            (
                Verdict::Doomed,
                format!("at or below the doomed threshold {:.3}: nothing to localize", p.doomed_threshold),
            )
        } else if !meets_at_most(rate, hi) {
            (Verdict::Saturated, format!("above {band}"))
        } else if !meets_at_least(rate, lo) {
            (Verdict::BelowBand, format!("below {band}, above the doomed threshold {:.3}", p.doomed_threshold))
        } else {
            (Verdict::Band, format!("in {band}"))
        };
        (verdict, Some(rate), format!("{head}: {why}"))
    };
    TaskVerdict { task: task.to_string(), runs: n, successes: k, pass_rate, verdict, reason }
}

/// Select the study set from every task's base runs (module documentation: the rules and the draws).
/// A pure function of its input: the order of `tasks` and of each task's runs does not matter.
/// `target` bounds the initial selection (the paper's 60); `None` takes all the cap allows.
pub fn select(
    tasks: &[TaskRuns],
    thresholds: &Thresholds,
    seed: u64,
    target: Option<u32>,
) -> Result<Selection, SelectionError> {
    let params = SelectionParams::from(thresholds);
    let cap = params.trajectories_per_task;

    let mut sorted: Vec<&TaskRuns> = tasks.iter().collect();
    sorted.sort_by(|a, b| a.task.cmp(&b.task));
    if let Some(w) = sorted.windows(2).find(|w| w[0].task == w[1].task) {
        return Err(SelectionError::DuplicateTask(w[0].task.clone()));
    }

    let mut verdicts = Vec::with_capacity(sorted.len());
    // Failed and successful runs of band tasks, in canonical order.
    let mut failed: Vec<(RunId, SeedRun)> = Vec::new();
    let mut succeeded: Vec<(RunId, SeedRun)> = Vec::new();
    for task in sorted {
        let mut runs: Vec<&SeedRun> = task.runs.iter().collect();
        runs.sort_by_key(|r| r.seed);
        if let Some(w) = runs.windows(2).find(|w| w[0].seed == w[1].seed) {
            return Err(SelectionError::DuplicateSeed { task: task.task.clone(), seed: w[0].seed });
        }
        let v = verdict(&task.task, &runs, &params);
        if v.verdict == Verdict::Band {
            for r in runs {
                let entry = (RunId::new(task.task.as_str(), r.seed), *r);
                if r.success { succeeded.push(entry) } else { failed.push(entry) }
            }
        }
        verdicts.push(v);
    }

    let lengths: Vec<u32> = failed.iter().map(|(_, r)| r.steps).collect();
    let terciles = Terciles::of(&lengths);

    // Strata, each in canonical order, then shuffled with its own stream.
    let mut members: BTreeMap<Stratum, Vec<usize>> = BTreeMap::new();
    let mut stratum_of = Vec::with_capacity(failed.len());
    for (i, (_, r)) in failed.iter().enumerate() {
        let tercile = terciles.map_or(Tercile::L0, |t| t.tercile(r.steps));
        let stratum = Stratum { tercile, end: r.end };
        stratum_of.push(stratum);
        members.entry(stratum).or_default().push(i);
    }
    let mut strata: Vec<StratumOrder> = Vec::with_capacity(members.len());
    let mut order_of = vec![0u32; failed.len()];
    for (stratum, mut idx) in members {
        Draws::new(seed, stratum.stream()).shuffle(&mut idx);
        for (k, &i) in idx.iter().enumerate() {
            order_of[i] = count(k);
        }
        let order: Vec<RunId> = idx.iter().map(|&i| failed[i].0.clone()).collect();
        strata.push(StratumOrder { stratum, queue: order.clone(), order });
    }

    // The round-robin.
    let limit = target.map_or(usize::MAX, |t| t as usize);
    let mut selected: BTreeMap<String, u32> = BTreeMap::new();
    let mut picks: Vec<Pick> = Vec::new();
    let mut turn = 0u32;
    'turns: loop {
        turn = turn.saturating_add(1);
        let mut took = false;
        for s in &mut strata {
            if picks.len() >= limit {
                break 'turns;
            }
            let has_room = |id: &RunId| selected.get(&id.task).copied().unwrap_or(0) < cap;
            let Some(k) = s.queue.iter().position(has_room) else {
                continue;
            };
            let id = s.queue.remove(k);
            *selected.entry(id.task.clone()).or_default() += 1;
            let rank = s.order.iter().position(|o| *o == id).unwrap_or(0);
            let reason = format!(
                "turn {turn} of the round-robin: {} of {}'s processing order, the first left whose task had fewer \
                 than {cap} selected",
                rank + 1,
                s.stratum
            );
            picks.push(Pick {
                id,
                stratum: s.stratum,
                position: count(picks.len()),
                round: 0,
                replaces: None,
                non_replayable: false,
                reason,
            });
            took = true;
        }
        if !took {
            break;
        }
    }

    let position: BTreeMap<&RunId, u32> = picks.iter().map(|p| (&p.id, p.position)).collect();
    let candidates: Vec<Candidate> = failed
        .iter()
        .enumerate()
        .map(|(i, (id, r))| {
            let stratum = stratum_of[i];
            let initial = match position.get(id) {
                Some(&position) => Initial::Selected { position },
                None if selected.get(&id.task).copied().unwrap_or(0) >= cap => Initial::TaskAtCap,
                None => Initial::TargetReached,
            };
            let place = terciles.map(|t| t.describe(r.steps)).unwrap_or_default();
            let end = match r.end {
                RunEnd::Submit => "submitted",
                RunEnd::Cap => "hit the step cap",
                RunEnd::Other => "ended otherwise",
            };
            let reason = format!("failed run of a band task, {place}, {end}: {stratum}");
            Candidate { id: id.clone(), steps: r.steps, end: r.end, stratum, order: order_of[i], initial, reason }
        })
        .collect();

    // Decoys.
    let mut pool: Vec<usize> = (0..succeeded.len()).collect();
    Draws::new(seed, DECOY_STREAM).shuffle(&mut pool);
    let decoy_pool = count(succeeded.len());
    let decoys = pool
        .iter()
        .take(params.decoys as usize)
        .enumerate()
        .map(|(k, &i)| {
            let (id, r) = &succeeded[i];
            let reason = format!(
                "successful run of band task {}: {} of the decoy order of {decoy_pool} drawn from the seed",
                id.task,
                k + 1
            );
            Decoy { id: id.clone(), steps: r.steps, end: r.end, reason }
        })
        .collect();

    Ok(Selection {
        seed,
        target,
        params,
        tasks: verdicts,
        terciles,
        candidates,
        strata,
        picks,
        decoys,
        decoy_pool,
        back_fills: Vec::new(),
    })
}

impl Selection {
    /// The trajectories in the study now (selected, not dropped), in processing order.
    pub fn active(&self) -> impl Iterator<Item = &Pick> {
        self.picks.iter().filter(|p| !p.non_replayable)
    }

    /// Trajectories of the initial selection.
    pub fn initial(&self) -> u32 {
        count(self.picks.iter().filter(|p| p.round == 0).count())
    }

    /// How many the initial selection fell short of the target (0 without one).
    pub fn shortfall(&self) -> u32 {
        self.target.map_or(0, |t| t.saturating_sub(self.initial()))
    }

    /// Back-fills made (replacements, not exhaustions).
    pub fn back_fill_count(&self) -> u32 {
        count(self.back_fills.iter().filter(|e| matches!(e.result, BackFill::Replaced { .. })).count())
    }

    /// Back-fills that found their stratum exhausted.
    pub fn exhausted_count(&self) -> u32 {
        count(self.back_fills.iter().filter(|e| matches!(e.result, BackFill::StratumExhausted { .. })).count())
    }

    /// The largest round of a back-fill made; 0 without back-fills.
    pub fn rounds(&self) -> u32 {
        self.picks.iter().filter(|p| p.replaces.is_some()).map(|p| p.round).max().unwrap_or(0)
    }

    /// Drop `non_replayable` from the study and back-fill from its stratum (rule 8 of the module
    /// documentation). Recorded in [`Selection::back_fills`] unless nothing was done.
    pub fn back_fill(&mut self, non_replayable: &RunId) -> BackFill {
        let Some(dropped) = self.picks.iter_mut().find(|p| p.id == *non_replayable) else {
            return BackFill::NotSelected;
        };
        if dropped.non_replayable {
            return BackFill::AlreadyNonReplayable;
        }
        dropped.non_replayable = true;
        let (stratum, round) = (dropped.stratum, dropped.round.saturating_add(1));

        let cap = self.params.trajectories_per_task;
        let mut active: BTreeMap<&str, u32> = BTreeMap::new();
        for p in self.picks.iter().filter(|p| !p.non_replayable) {
            *active.entry(p.id.task.as_str()).or_default() += 1;
        }
        let found = self.strata.iter().position(|s| s.stratum == stratum).and_then(|si| {
            let queue = &self.strata[si].queue;
            let k = queue.iter().position(|id| active.get(id.task.as_str()).copied().unwrap_or(0) < cap)?;
            Some((si, k))
        });
        let result = match found {
            None => BackFill::StratumExhausted { stratum, round },
            Some((si, k)) => {
                let s = &mut self.strata[si];
                let id = s.queue.remove(k);
                let rank = s.order.iter().position(|o| *o == id).unwrap_or(0);
                let reason = format!(
                    "back-fill of round {round} for {non_replayable} (non-replayable): {} of {stratum}'s processing \
                     order, the first left whose task had fewer than {cap} active",
                    rank + 1
                );
                self.picks.push(Pick {
                    id: id.clone(),
                    stratum,
                    position: count(self.picks.len()),
                    round,
                    replaces: Some(non_replayable.clone()),
                    non_replayable: false,
                    reason,
                });
                BackFill::Replaced { replacement: id, stratum, round }
            }
        };
        self.back_fills.push(BackFillEvent { non_replayable: non_replayable.clone(), result: result.clone() });
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(seed: u32, success: bool, steps: u32, end: RunEnd) -> SeedRun {
        SeedRun { seed, success, steps, end }
    }

    /// A task of `successes` successful runs (30 steps, submitted) and the given failures, seeds in order.
    fn task(name: &str, successes: u32, failures: &[(u32, RunEnd)]) -> TaskRuns {
        let mut runs: Vec<SeedRun> = (0..successes).map(|i| run(i, true, 30, RunEnd::Submit)).collect();
        runs.extend(failures.iter().enumerate().map(|(i, &(steps, end))| run(successes + i as u32, false, steps, end)));
        TaskRuns { task: name.to_string(), runs }
    }

    fn failures(lengths: &[u32]) -> Vec<(u32, RunEnd)> {
        lengths.iter().map(|&t| (t, if t >= 100 { RunEnd::Cap } else { RunEnd::Submit })).collect()
    }

    fn sel(tasks: &[TaskRuns], seed: u64, target: Option<u32>) -> Selection {
        select(tasks, &Thresholds::default(), seed, target).unwrap()
    }

    fn st(s: &str) -> Stratum {
        s.parse().unwrap()
    }

    fn verdict_of(s: &Selection, task: &str) -> Verdict {
        s.tasks.iter().find(|t| t.task == task).unwrap().verdict
    }

    #[test]
    fn selection_band_edges_of_eight() {
        let tasks: Vec<TaskRuns> =
            (0..=8).map(|k| task(&format!("k{k}"), k, &failures(&vec![50; (8 - k) as usize]))).collect();
        let s = sel(&tasks, 1, None);
        let expected = [
            Verdict::Doomed,
            Verdict::Doomed,
            Verdict::Band,
            Verdict::Band,
            Verdict::Band,
            Verdict::Band,
            Verdict::Band,
            Verdict::Saturated,
            Verdict::Saturated,
        ];
        for (k, v) in expected.iter().enumerate() {
            assert_eq!(verdict_of(&s, &format!("k{k}")), *v, "{k} of 8");
        }
        let one = s.tasks.iter().find(|t| t.task == "k1").unwrap();
        assert_eq!(
            one.reason,
            "1 of 8 base runs succeeded (pass rate 0.125): at or below the doomed threshold 0.125: nothing to localize"
        );
        assert!(s.tasks.iter().find(|t| t.task == "k7").unwrap().reason.contains("above the band (2–6 of 8)"));
        assert!(s.tasks.iter().find(|t| t.task == "k2").unwrap().reason.ends_with("in the band (2–6 of 8)"));
        // Only band tasks give candidates and decoys.
        let band = ["k2", "k3", "k4", "k5", "k6"];
        assert!(s.candidates.iter().all(|c| band.contains(&c.id.task.as_str())));
        assert_eq!(s.candidates.len(), 6 + 5 + 4 + 3 + 2);
        assert_eq!(s.decoy_pool, 2 + 3 + 4 + 5 + 6);
    }

    #[test]
    fn selection_below_band_saturated_and_no_runs() {
        let t = Thresholds { band_min: 3, band_max: 5, ..Thresholds::default() };
        let tasks = vec![
            task("two", 2, &failures(&[50; 6])),
            task("six", 6, &failures(&[50; 2])),
            task("four", 4, &failures(&[50; 4])),
            TaskRuns { task: "none".into(), runs: vec![] },
        ];
        let s = select(&tasks, &t, 1, None).unwrap();
        assert_eq!(verdict_of(&s, "two"), Verdict::BelowBand);
        assert_eq!(verdict_of(&s, "six"), Verdict::Saturated);
        assert_eq!(verdict_of(&s, "four"), Verdict::Band);
        assert_eq!(verdict_of(&s, "none"), Verdict::NoBaseRuns);
        assert_eq!(s.tasks.iter().find(|t| t.task == "none").unwrap().pass_rate, None);
        // Another number of base runs is judged by its pass rate: 6 of 6 is saturated, 2 of 7 in the band.
        let s = sel(&[task("six-of-six", 6, &[]), task("two-of-seven", 2, &failures(&[50; 5]))], 1, None);
        assert_eq!(verdict_of(&s, "six-of-six"), Verdict::Saturated);
        assert_eq!(verdict_of(&s, "two-of-seven"), Verdict::Band);
    }

    #[test]
    fn selection_terciles_hand_computed() {
        // n = 10: h = 3 and 6 exactly, the cuts are x_3 = 40 and x_6 = 70; ties go up.
        let t = Terciles::of(&[100, 90, 80, 70, 60, 50, 40, 30, 20, 10]).unwrap();
        assert_eq!((t.failed_runs, t.lower, t.upper), (10, 40.0, 70.0));
        assert_eq!([39, 40, 69, 70].map(|s| t.tercile(s)), [Tercile::L0, Tercile::L1, Tercile::L1, Tercile::L2]);
        // n = 5: h = 4/3 → 20 + (30 − 20)/3; h = 8/3 → 30 + 2(40 − 30)/3.
        let t = Terciles::of(&[10, 20, 30, 40, 100]).unwrap();
        assert!((t.lower - 70.0 / 3.0).abs() < 1e-12 && (t.upper - 110.0 / 3.0).abs() < 1e-12, "{t:?}");
        assert_eq!(
            [20, 23, 24, 36, 37].map(|s| t.tercile(s)),
            [Tercile::L0, Tercile::L0, Tercile::L1, Tercile::L1, Tercile::L2]
        );
        // Mostly capped (the paper's second policy): both cuts at 100, no L1, 100 steps is L2.
        let t = Terciles::of(&[50, 60, 100, 100, 100, 100, 100, 100, 100]).unwrap();
        assert_eq!((t.lower, t.upper), (100.0, 100.0));
        assert_eq!([60, 99, 100].map(|s| t.tercile(s)), [Tercile::L0, Tercile::L0, Tercile::L2]);
        // One length: both cuts on it, so it is L2; none: no terciles.
        let t = Terciles::of(&[7]).unwrap();
        assert_eq!((t.lower, t.upper, t.tercile(7)), (7.0, 7.0, Tercile::L2));
        assert_eq!(Terciles::of(&[]), None);
        // The cuts of a selection are over the failed runs of all band tasks pooled.
        let s = sel(
            &[task("a", 2, &failures(&[10, 20, 30, 40, 50, 60])), task("b", 4, &failures(&[70, 80, 90, 100]))],
            1,
            None,
        );
        assert_eq!(s.terciles, Some(Terciles { failed_runs: 10, lower: 40.0, upper: 70.0 }));
    }

    #[test]
    fn selection_strata_of_each_kind() {
        let tasks = vec![
            task("a", 2, &failures(&[10, 20, 30, 40, 50, 60])),
            task(
                "b",
                2,
                &[
                    (70, RunEnd::Submit),
                    (100, RunEnd::Cap),
                    (100, RunEnd::Submit),
                    (15, RunEnd::Cap),
                    (45, RunEnd::Other),
                    (80, RunEnd::Other),
                ],
            ),
        ];
        let s = sel(&tasks, 1, None);
        // Lengths 10..60, 70, 100, 100, 15, 45, 80: sorted 10 15 20 30 40 45 50 60 70 80 100 100,
        // h = 11/3 → 30 + 2(40 − 30)/3 = 36.67; h = 22/3 → 60 + (70 − 60)/3 = 63.33.
        let t = s.terciles.unwrap();
        assert!((t.lower - 110.0 / 3.0).abs() < 1e-12 && (t.upper - 190.0 / 3.0).abs() < 1e-12, "{t:?}");
        let of = |task: &str, seed: u32| {
            s.candidates.iter().find(|c| c.id == RunId::new(task, seed)).map(|c| c.stratum.to_string()).unwrap()
        };
        assert_eq!([2, 3, 4].map(|i| of("a", i)), ["L0-submit"; 3]);
        assert_eq!([5, 6, 7].map(|i| of("a", i)), ["L1-submit"; 3]);
        assert_eq!(of("b", 2), "L2-submit"); // 70 steps, submitted, in the top tercile
        assert_eq!(of("b", 3), "L2-cap");
        assert_eq!(of("b", 4), "L2-submit"); // submitted at the last step
        assert_eq!(of("b", 5), "L0-cap"); // capped early (a smaller budget): by its length
        assert_eq!(of("b", 6), "L1-other");
        assert_eq!(of("b", 7), "L2-other");
        let c = s.candidates.iter().find(|c| c.id == RunId::new("b", 3)).unwrap();
        assert_eq!(c.reason, "failed run of a band task, T = 100 ≥ 63.33 (upper cut), hit the step cap: L2-cap");
        let names: Vec<String> = s.strata.iter().map(|o| o.stratum.to_string()).collect();
        assert_eq!(names, ["L0-submit", "L0-cap", "L1-submit", "L1-other", "L2-submit", "L2-cap", "L2-other"]);
        // Streams 1 + 3·tercile + end.
        assert_eq!([st("L0-submit"), st("L1-submit"), st("L2-cap"), st("L2-other")].map(Stratum::stream), [1, 4, 8, 9]);
        assert!("L3-cap".parse::<Stratum>().is_err() && "L1".parse::<Stratum>().is_err());
    }

    #[test]
    fn selection_paper_strata_when_caps_are_longest() {
        // Capped runs are the longest: the strata come out as the paper's L0-submit, L1-submit, L2-cap.
        let tasks = vec![
            task("a", 2, &failures(&[40, 50, 60, 70, 100, 100])),
            task("b", 3, &failures(&[45, 55, 65, 100, 100])),
            task("c", 5, &failures(&[52, 75, 100])),
        ];
        let s = sel(&tasks, 20260928, None);
        let names: Vec<String> = s.strata.iter().map(|o| o.stratum.to_string()).collect();
        assert_eq!(names, ["L0-submit", "L1-submit", "L2-cap"]);
    }

    #[test]
    fn selection_per_task_cap() {
        let s = sel(&[task("a", 2, &failures(&[10, 20, 30, 40, 50, 60]))], 3, None);
        assert_eq!(s.picks.len(), 3);
        assert!(s.picks.iter().all(|p| p.id.task == "a"));
        let queued: Vec<Initial> =
            s.candidates.iter().map(|c| c.initial).filter(|i| !matches!(i, Initial::Selected { .. })).collect();
        assert_eq!(queued, [Initial::TaskAtCap; 3]);
        // A cap of one per task, from three tasks.
        let t = Thresholds { trajectories_per_task: 1, ..Thresholds::default() };
        let tasks =
            [task("a", 2, &failures(&[10; 6])), task("b", 3, &failures(&[20; 5])), task("c", 6, &failures(&[30; 2]))];
        let s = select(&tasks, &t, 3, None).unwrap();
        let mut picked: Vec<&str> = s.picks.iter().map(|p| p.id.task.as_str()).collect();
        picked.sort_unstable();
        assert_eq!(picked, ["a", "b", "c"]);
    }

    #[test]
    fn selection_round_robin_and_target() {
        // Three strata of 8 (lengths 10, 50 and 90 in each task), a cap that never binds, target 5.
        let t = Thresholds { trajectories_per_task: 10, ..Thresholds::default() };
        let tasks: Vec<TaskRuns> =
            ["a", "b", "c", "d"].iter().map(|n| task(n, 2, &failures(&[10, 10, 50, 50, 90, 90]))).collect();
        let s = select(&tasks, &t, 9, Some(5)).unwrap();
        let strata: Vec<String> = s.picks.iter().map(|p| p.stratum.to_string()).collect();
        assert_eq!(strata, ["L0-submit", "L1-submit", "L2-submit", "L0-submit", "L1-submit"]);
        for p in &s.picks {
            let order = &s.strata.iter().find(|o| o.stratum == p.stratum).unwrap().order;
            let nth = s.picks.iter().filter(|q| q.stratum == p.stratum && q.position < p.position).count();
            assert_eq!(p.id, order[nth], "each stratum takes its own order from the front");
        }
        assert_eq!(s.picks.iter().map(|p| p.position).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert!(
            s.picks[3].reason.starts_with("turn 2 of the round-robin: 2 of L0-submit's processing order"),
            "{}",
            s.picks[3].reason
        );
        assert_eq!(s.candidates.iter().filter(|c| c.initial == Initial::TargetReached).count(), 24 - 5);
        let queue: usize = s.strata.iter().map(|o| o.queue.len()).sum();
        assert_eq!(queue, 19);
        assert_eq!(s.shortfall(), 0);
        // Fewer candidates than the target: all that the cap allows, and the shortfall said.
        let s = sel(&[task("a", 5, &failures(&[10, 50, 90]))], 9, Some(60));
        assert_eq!((s.picks.len(), s.initial(), s.shortfall()), (3, 3, 57));
        // Target 0 selects nothing.
        let s = sel(&tasks, 9, Some(0));
        assert!(s.picks.is_empty() && s.candidates.iter().all(|c| c.initial == Initial::TargetReached));
    }

    #[test]
    fn selection_decoys() {
        let tasks = vec![
            task("a", 2, &failures(&[50; 6])),
            task("b", 3, &failures(&[50; 5])),
            task("c", 4, &failures(&[50; 4])),
            task("sat", 8, &[]),
            task("doom", 1, &failures(&[50; 7])),
        ];
        let s = sel(&tasks, 5, None);
        assert_eq!((s.decoy_pool, s.decoys.len()), (9, 9));
        let t = Thresholds { decoys: 4, ..Thresholds::default() };
        let s = select(&tasks, &t, 5, None).unwrap();
        assert_eq!((s.decoy_pool, s.decoys.len()), (9, 4));
        let mut ids: Vec<&RunId> = s.decoys.iter().map(|d| &d.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 4);
        for d in &s.decoys {
            assert!(["a", "b", "c"].contains(&d.id.task.as_str()), "{d:?}");
            assert!(tasks.iter().find(|t| t.task == d.id.task).unwrap().runs[d.id.seed as usize].success);
        }
        assert!(
            s.decoys[0].reason.ends_with("1 of the decoy order of 9 drawn from the seed"),
            "{}",
            s.decoys[0].reason
        );
        // The decoys are the front of one seeded order: 4 of them are the first 4 of all 9.
        let all = sel(&tasks, 5, None);
        assert_eq!(s.decoys[..], all.decoys[..4]);
        let t = Thresholds { decoys: 0, ..Thresholds::default() };
        assert!(select(&tasks, &t, 5, None).unwrap().decoys.is_empty());
        // A decoy is never back-filled.
        let mut s = s;
        let decoy = s.decoys[0].id.clone();
        assert_eq!(s.back_fill(&decoy), BackFill::NotSelected);
        assert!(s.back_fills.is_empty());
    }

    #[test]
    fn selection_fixed_order_from_the_seed() {
        let tasks: Vec<TaskRuns> =
            ["a", "b", "c", "d"].iter().map(|n| task(n, 2, &failures(&[10, 20, 30, 40, 50, 60]))).collect();
        let one = sel(&tasks, 1, Some(6));
        assert_eq!(one, sel(&tasks, 1, Some(6)));
        let two = sel(&tasks, 2, Some(6));
        assert_ne!(one.strata[0].order, two.strata[0].order);
        assert_ne!(one.picks, two.picks);
        // Each stratum is a permutation of its members in canonical order.
        for o in &one.strata {
            let mut sorted = o.order.clone();
            sorted.sort();
            let members: Vec<RunId> =
                one.candidates.iter().filter(|c| c.stratum == o.stratum).map(|c| c.id.clone()).collect();
            assert_eq!(sorted, members);
        }
        // The order of the input does not matter.
        let mut reversed: Vec<TaskRuns> = tasks.iter().rev().cloned().collect();
        for t in &mut reversed {
            t.runs.reverse();
        }
        assert_eq!(one, sel(&reversed, 1, Some(6)));
    }

    #[test]
    fn selection_draws_are_chacha20_as_documented() {
        // ChaCha20, zero key, zero nonce: keystream 76 b8 e0 ad a0 f1 3d 90 …, read as little-endian
        // words, low word first.
        assert_eq!(Draws::from_key([0; 32], 0).0.next_u64(), 0x903d_f1a0_ade0_b876);
        // Pinned: a change of generator, key, stream or shuffle changes every selection.
        let mut items: Vec<u32> = (0..10).collect();
        Draws::new(0, 1).shuffle(&mut items);
        assert_eq!(items, PINNED_SHUFFLE);
        let mut d = Draws::new(0, 1);
        assert!((0..1000).all(|_| d.below(7) < 7));
        assert_eq!(d.below(1), 0);
        assert_eq!(d.below(0), 0);
    }

    /// Computed by an independent ChaCha20 (Python, from the recipe in the module documentation).
    const PINNED_SHUFFLE: [u32; 10] = [6, 8, 3, 7, 4, 5, 2, 1, 0, 9];

    #[test]
    fn selection_known_answer_from_an_independent_implementation() {
        // Seed 4. One stratum, L2-submit (stream 7): a's failures s2–s7 and b's s4–s7, all 50 steps.
        // Its order, from the independent implementation: b7 b4 b5 b6 a5 a4 a6 a2 a3 a7.
        let mut s = sel(&[task("a", 2, &failures(&[50; 6])), task("b", 4, &failures(&[50; 4]))], 4, None);
        let ids = |v: &[(&str, u32)]| v.iter().map(|&(t, i)| RunId::new(t, i)).collect::<Vec<_>>();
        let order =
            ids(&[("b", 7), ("b", 4), ("b", 5), ("b", 6), ("a", 5), ("a", 4), ("a", 6), ("a", 2), ("a", 3), ("a", 7)]);
        assert_eq!(s.strata[0].order, order);
        // Cap 3: b6 is passed over (b full) and stays first in the queue.
        let picks: Vec<RunId> = s.picks.iter().map(|p| p.id.clone()).collect();
        assert_eq!(picks, ids(&[("b", 7), ("b", 4), ("b", 5), ("a", 5), ("a", 4), ("a", 6)]));
        assert_eq!(s.strata[0].queue, ids(&[("b", 6), ("a", 2), ("a", 3), ("a", 7)]));
        let b6 = s.candidates.iter().find(|c| c.id == RunId::new("b", 6)).unwrap();
        assert_eq!((b6.order, b6.initial), (3, Initial::TaskAtCap));
        // Dropping a trajectory of a takes a2, passing over b6 (b still full).
        assert_eq!(
            s.back_fill(&RunId::new("a", 4)),
            BackFill::Replaced { replacement: RunId::new("a", 2), stratum: st("L2-submit"), round: 1 }
        );
        // Decoys (stream 10) over a s0 a s1 b s0 … b s3: a1 b2 b1 a0 b3 b0.
        let decoys: Vec<RunId> = s.decoys.iter().map(|d| d.id.clone()).collect();
        assert_eq!(decoys, ids(&[("a", 1), ("b", 2), ("b", 1), ("a", 0), ("b", 3), ("b", 0)]));
    }

    #[test]
    fn selection_back_fill_from_the_stratum_with_rounds_and_exhaustion() {
        // One stratum (equal lengths), one task of six failures: three selected, three queued.
        let mut s = sel(&[task("a", 2, &failures(&[50; 6]))], 4, None);
        assert_eq!(s.strata.len(), 1);
        let queue = s.strata[0].queue.clone();
        assert_eq!((s.picks.len(), queue.len()), (3, 3));
        let first = s.picks[0].id.clone();
        assert_eq!(
            s.back_fill(&first),
            BackFill::Replaced { replacement: queue[0].clone(), stratum: st("L2-submit"), round: 1 }
        );
        assert_eq!(s.back_fill(&first), BackFill::AlreadyNonReplayable);
        // The back-fill of a back-fill is of round 2, and so on.
        assert_eq!(
            s.back_fill(&queue[0]),
            BackFill::Replaced { replacement: queue[1].clone(), stratum: st("L2-submit"), round: 2 }
        );
        assert_eq!(
            s.back_fill(&queue[1]),
            BackFill::Replaced { replacement: queue[2].clone(), stratum: st("L2-submit"), round: 3 }
        );
        assert_eq!(s.back_fill(&queue[2]), BackFill::StratumExhausted { stratum: st("L2-submit"), round: 4 });
        let second = s.picks[1].id.clone();
        assert_eq!(s.back_fill(&second), BackFill::StratumExhausted { stratum: st("L2-submit"), round: 1 });
        assert_eq!((s.back_fill_count(), s.exhausted_count(), s.rounds()), (3, 2, 3));
        assert_eq!(s.active().count(), 1);
        let last = s.picks.last().unwrap();
        assert_eq!((last.position, last.round, last.replaces.as_ref()), (5, 3, Some(&queue[1])));
        assert!(
            last.reason
                .starts_with(&format!("back-fill of round 3 for {} (non-replayable): 6 of L2-submit's", queue[1])),
            "{}",
            last.reason
        );
        assert_eq!(s.back_fill(&RunId::new("a", 99)), BackFill::NotSelected);
        assert_eq!(s.back_fills.len(), 5);
    }

    #[test]
    fn selection_back_fill_respects_the_cap_and_stays_in_its_stratum() {
        // One stratum: a has six failures, b four; cap 3: three of each selected, queue a a a b.
        let mut s = sel(&[task("a", 2, &failures(&[50; 6])), task("b", 4, &failures(&[50; 4]))], 8, None);
        assert_eq!(s.picks.len(), 6);
        let b: Vec<RunId> = s.picks.iter().filter(|p| p.id.task == "b").map(|p| p.id.clone()).collect();
        let spare_b = s.strata[0].queue.iter().find(|id| id.task == "b").cloned().unwrap();
        // Dropping a b takes the queued b, whatever a's place in the queue: a is at its cap.
        assert_eq!(s.back_fill(&b[0]), BackFill::Replaced { replacement: spare_b, stratum: st("L2-submit"), round: 1 });
        assert_eq!(s.back_fill(&b[1]), BackFill::StratumExhausted { stratum: st("L2-submit"), round: 1 });
        assert_eq!(s.strata[0].queue.iter().filter(|id| id.task == "a").count(), 3);
        // Dropping an a takes the first queued a.
        let a0 = s.picks.iter().find(|p| p.id.task == "a").unwrap().id.clone();
        let next_a = s.strata[0].queue[0].clone();
        assert_eq!(s.back_fill(&a0), BackFill::Replaced { replacement: next_a, stratum: st("L2-submit"), round: 1 });

        // Two strata: the one exhausted does not borrow from the other.
        let mut s = sel(&[task("a", 2, &failures(&[10, 10, 10, 90, 90, 90]))], 8, None);
        // n = 6: both 10s and the lower cut (x_1 + 2(x_2 − x_1)/3 = 10) coincide, so the 10s are L1
        // (ties go up) and the 90s L2; the round-robin took L1, L2, L1.
        let l1 = s.picks.iter().filter(|p| p.stratum == st("L1-submit")).count();
        assert_eq!((l1, s.picks.len()), (2, 3));
        let l2 = s.picks.iter().find(|p| p.stratum == st("L2-submit")).unwrap().id.clone();
        let result = s.back_fill(&l2);
        assert_eq!(
            result,
            BackFill::Replaced { replacement: s.strata[1].order[1].clone(), stratum: st("L2-submit"), round: 1 }
        );
        assert_eq!(s.strata[0].queue.len(), 1, "L0's queue untouched");
    }

    #[test]
    fn selection_edge_inputs_do_not_panic() {
        let s = sel(&[], 0, Some(60));
        assert!(s.tasks.is_empty() && s.picks.is_empty() && s.terciles.is_none() && s.strata.is_empty());
        assert_eq!(s.shortfall(), 60);
        let doomed = [task("x", 0, &failures(&[100; 8])), task("y", 1, &failures(&[40; 7]))];
        let s = sel(&doomed, 0, None);
        assert!(s.candidates.is_empty() && s.decoys.is_empty() && s.terciles.is_none());
        let t = Thresholds {
            trajectories_per_task: 0,
            base_runs_per_task: 0,
            band_min: 5,
            band_max: 1,
            ..Thresholds::default()
        };
        let s = select(&[task("a", 2, &failures(&[10; 6]))], &t, 0, None).unwrap();
        assert!(s.picks.is_empty());
        assert_eq!(
            select(&[task("a", 2, &[]), task("a", 3, &[])], &Thresholds::default(), 0, None),
            Err(SelectionError::DuplicateTask("a".into()))
        );
        let dup =
            TaskRuns { task: "a".into(), runs: vec![run(1, true, 3, RunEnd::Submit), run(1, false, 4, RunEnd::Cap)] };
        assert_eq!(
            select(&[dup], &Thresholds::default(), 0, None),
            Err(SelectionError::DuplicateSeed { task: "a".into(), seed: 1 })
        );
        let extremes = [task("e", 2, &[(0, RunEnd::Submit), (u32::MAX, RunEnd::Cap), (u32::MAX, RunEnd::Other)])];
        let s =
            select(&extremes, &Thresholds { base_runs_per_task: 5, ..Thresholds::default() }, u64::MAX, None).unwrap();
        assert_eq!(s.picks.len(), 3);
    }

    #[test]
    fn selection_serializes_for_the_export() {
        let mut s = sel(
            &[task("a", 2, &failures(&[10, 20, 30, 40, 50, 100])), task("b", 3, &failures(&[60, 70, 100, 100, 100]))],
            11,
            Some(4),
        );
        let first = s.picks[0].id.clone();
        s.back_fill(&first);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["picks"][0]["stratum"], serde_json::json!(s.picks[0].stratum.to_string()));
        assert_eq!(json["candidates"][0]["end"], "submit");
        assert!(json["back_fills"][0]["result"]["result"].is_string());
        let back: Selection = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }

    fn arb_tasks() -> impl Strategy<Value = Vec<TaskRuns>> {
        let end = prop_oneof![Just(RunEnd::Submit), Just(RunEnd::Cap), Just(RunEnd::Other)];
        let run = (any::<bool>(), 0u32..=120, end);
        prop::collection::vec(prop::collection::vec(run, 0..10), 0..8).prop_map(|tasks| {
            tasks
                .into_iter()
                .enumerate()
                .map(|(i, runs)| TaskRuns {
                    task: format!("t{i}"),
                    runs: runs
                        .into_iter()
                        .enumerate()
                        .map(|(seed, (success, steps, end))| SeedRun { seed: seed as u32, success, steps, end })
                        .collect(),
                })
                .collect()
        })
    }

    fn arb_thresholds() -> impl Strategy<Value = Thresholds> {
        (0u32..5, 0u32..5, 0u32..9, prop_oneof![Just(0.0), Just(0.125), Just(0.3)], 0u32..12).prop_map(
            |(cap, band_min, width, doomed, decoys)| Thresholds {
                trajectories_per_task: cap,
                band_min,
                band_max: band_min + width,
                doomed_threshold: doomed,
                decoys,
                ..Thresholds::default()
            },
        )
    }

    fn check_invariants(s: &Selection, tasks: &[TaskRuns]) -> Result<(), TestCaseError> {
        let band: Vec<&str> = s.tasks.iter().filter(|t| t.verdict == Verdict::Band).map(|t| t.task.as_str()).collect();
        let run_of = |id: &RunId| {
            tasks.iter().find(|t| t.task == id.task).and_then(|t| t.runs.iter().find(|r| r.seed == id.seed))
        };
        let mut active: BTreeMap<&str, u32> = BTreeMap::new();
        for p in s.active() {
            *active.entry(p.id.task.as_str()).or_default() += 1;
        }
        prop_assert!(active.values().all(|&n| n <= s.params.trajectories_per_task), "cap exceeded: {active:?}");
        for p in &s.picks {
            prop_assert!(band.contains(&p.id.task.as_str()), "{p:?} is not of a band task");
            prop_assert!(!run_of(&p.id).unwrap().success, "{p:?} succeeded");
            prop_assert_eq!(s.candidates.iter().find(|c| c.id == p.id).map(|c| c.stratum), Some(p.stratum));
        }
        for d in &s.decoys {
            prop_assert!(band.contains(&d.id.task.as_str()) && run_of(&d.id).unwrap().success);
        }
        prop_assert_eq!(s.decoys.len(), (s.params.decoys as usize).min(s.decoy_pool as usize));
        if let Some(t) = s.target {
            prop_assert!(s.initial() <= t);
        }
        // Every candidate is either picked or queued in its stratum, exactly once.
        for o in &s.strata {
            let mut seen: Vec<&RunId> =
                o.queue.iter().chain(s.picks.iter().filter(|p| p.stratum == o.stratum).map(|p| &p.id)).collect();
            seen.sort();
            let mut order: Vec<&RunId> = o.order.iter().collect();
            order.sort();
            prop_assert_eq!(seen, order);
        }
        for p in s.picks.iter().filter(|p| p.replaces.is_some()) {
            let dropped = s.picks.iter().find(|q| Some(&q.id) == p.replaces.as_ref()).unwrap();
            prop_assert!(dropped.non_replayable && dropped.stratum == p.stratum && p.round == dropped.round + 1);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn selection_invariants_hold_through_back_fills(
            tasks in arb_tasks(),
            thresholds in arb_thresholds(),
            seed in any::<u64>(),
            target in prop::option::of(0u32..20),
            drops in prop::collection::vec(0usize..64, 0..12),
        ) {
            let mut s = select(&tasks, &thresholds, seed, target).unwrap();
            check_invariants(&s, &tasks)?;
            for d in drops {
                let active: Vec<RunId> = s.active().map(|p| p.id.clone()).collect();
                if active.is_empty() {
                    break;
                }
                let id = active[d % active.len()].clone();
                let before = s.active().count();
                match s.back_fill(&id) {
                    BackFill::Replaced { .. } => prop_assert_eq!(s.active().count(), before),
                    BackFill::StratumExhausted { .. } => prop_assert_eq!(s.active().count(), before - 1),
                    other => prop_assert!(false, "an active trajectory gave {other:?}"),
                }
                check_invariants(&s, &tasks)?;
            }
            prop_assert_eq!(s.rounds(), s.picks.iter().map(|p| p.round).max().unwrap_or(0));
        }

        #[test]
        fn selection_is_a_pure_function_of_its_input(
            tasks in arb_tasks(),
            thresholds in arb_thresholds(),
            seed in any::<u64>(),
            target in prop::option::of(0u32..20),
        ) {
            let s = select(&tasks, &thresholds, seed, target).unwrap();
            prop_assert_eq!(&s, &select(&tasks, &thresholds, seed, target).unwrap());
            let mut shuffled: Vec<TaskRuns> = tasks.iter().rev().cloned().collect();
            for t in &mut shuffled {
                t.runs.reverse();
            }
            prop_assert_eq!(&s, &select(&shuffled, &thresholds, seed, target).unwrap());
        }
    }
}
