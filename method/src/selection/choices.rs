//! What a selection records: every task's verdict, every candidate, the strata's orders, the picks
//! and decoys with their reasons, and the back-fills made since (rule 8 of
//! [`selection`](crate::selection)).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::strata::{RunEnd, RunId, Stratum};
use super::terciles::Terciles;
use crate::params::Thresholds;

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

/// `n` as a count (saturating).
pub(super) fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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

    /// Drop `non_replayable` from the study and back-fill from its stratum (rule 8 of
    /// [`selection`](crate::selection)). Recorded in [`Selection::back_fills`] unless nothing was done.
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
