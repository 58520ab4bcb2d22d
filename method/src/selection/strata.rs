//! The input of selection (a task's base runs) and its strata: tercile × end type.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::curve::{BaseRun, BaseRuns};

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
