//! The spec of an online restart check (Appendix Q): fresh runs from `h_0` with budget `B − t_r`
//! for every trajectory of a finished study that has a restart point `t_r`.
//!
//! ```yaml
//! name: calc-restart-check      # optional (default: the checked study's name + "-restart-check")
//! seed: 78                      # optional (default: the checked study's seed + 1)
//! restart_check: {of: STUDY_ID, runs: 8}   # runs optional (default 8)
//! ```
//!
//! Everything else — the runner and its options, the budget, the thresholds, the tasks and the
//! rows with their predictions — comes from the checked study as the coordinator stores it
//! ([`complete`]), so a check always runs the agent the study ran.

use serde_norway::{Mapping, Value};
use vcurve_record::study::{RestartCheckRow, RestartCheckSpec};
use vcurve_record::{ControlCounts, StudySpec, Task, TaskRuns};

use crate::error::SpecError;
use crate::fields::MAX_BASE_RUNS;
use crate::raw::{RawRestartCheck, RawRestartCheckSpec, level, required};
use crate::value::{problem, text, top_error, uint};
/// Fresh runs per trajectory unless the spec says otherwise (the paper's eight).
pub const DEFAULT_RUNS: u32 = 8;

/// A restart check as asked for, before the checked study is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartCheckRequest {
    pub name: Option<String>,
    pub seed: Option<u64>,
    /// The checked study's id.
    pub of: String,
    pub runs: u32,
}

/// The spec's top level, when it has a `restart_check` field.
pub(super) fn parse(top: &Mapping) -> Result<RestartCheckRequest, SpecError> {
    let raw: RawRestartCheckSpec =
        level(top, "", "a restart-check spec (everything else comes from the checked study)").map_err(top_error)?;
    let name = raw.name.as_ref().map(|v| text(v, "name")).transpose().map_err(top_error)?;
    let seed = raw.seed.as_ref().map(|v| uint(v, "seed", 0, u64::MAX)).transpose().map_err(top_error)?;
    let Value::Mapping(check) = required(&raw.restart_check, "restart_check").map_err(top_error)? else {
        return Err(top_error(problem("restart_check", "must be a mapping like {of: STUDY_ID, runs: 8}")));
    };
    let check: RawRestartCheck = level(check, "restart_check.", "restart_check").map_err(top_error)?;
    let of =
        text(required(&check.of, "restart_check.of").map_err(top_error)?, "restart_check.of").map_err(top_error)?;
    let runs = match &check.runs {
        None => DEFAULT_RUNS,
        Some(v) => uint(v, "restart_check.runs", 1, u64::from(MAX_BASE_RUNS)).map_err(top_error)? as u32,
    };
    Ok(RestartCheckRequest { name, seed, of, runs })
}

/// The check's spec from the checked study's spec, its rows (every trajectory with a restart
/// point), and the task of each row (`task_of` looks up a task the study does not list, from its
/// recorded runs).
pub fn complete(
    request: &RestartCheckRequest,
    checked: &StudySpec,
    rows: Vec<RestartCheckRow>,
    task_of: &dyn Fn(&str) -> Option<Task>,
) -> Result<StudySpec, SpecError> {
    let of = || format!("= {:?}", request.of);
    if checked.restart_check.is_some() {
        return Err(top_error(problem("restart_check.of", format!("{} is itself a restart check", of()))));
    }
    if matches!(checked.runner, vcurve_record::RunnerSpec::Synthetic(_)) {
        return Err(top_error(problem(
            "restart_check.of",
            format!("{} ran the synthetic runner, which cannot make fresh runs of a task", of()),
        )));
    }
    if rows.is_empty() {
        return Err(top_error(problem(
            "restart_check.of",
            format!("{}: no trajectory of the study has a restart point, so there is nothing to check", of()),
        )));
    }
    let mut tasks: Vec<TaskRuns> = Vec::new();
    for row in &rows {
        if tasks.iter().any(|t| t.task.id == row.task) {
            continue;
        }
        let task = checked
            .tasks
            .iter()
            .find(|t| t.task.id == row.task)
            .map(|t| t.task.clone())
            .or_else(|| task_of(&row.trajectory))
            .ok_or_else(|| {
                top_error(problem(
                    "restart_check.of",
                    format!(
                        "{}: the task {:?} of trajectory {:?} is not known (the study neither lists it under tasks nor has a recorded run of it)",
                        of(),
                        row.task,
                        row.trajectory
                    ),
                ))
            })?;
        tasks.push(TaskRuns { task, base_runs: request.runs });
    }
    Ok(StudySpec {
        name: request.name.clone().unwrap_or_else(|| format!("{}-restart-check", checked.name)),
        seed: request.seed.unwrap_or(checked.seed.wrapping_add(1)),
        budget: checked.budget,
        schedule: checked.schedule.clone(),
        runner: checked.runner.clone(),
        thresholds: checked.thresholds.clone(),
        controls: ControlCounts::default(),
        admission: checked.admission,
        trajectories: Vec::new(),
        decoys: Vec::new(),
        tasks,
        selection: None,
        restart_check: Some(RestartCheckSpec { of: request.of.clone(), runs: request.runs, rows }),
        task_state: None,
        judges: Default::default(),
    })
}
