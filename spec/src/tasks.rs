//! `tasks:`, `base_runs:` and `selection:` — a study that starts from tasks (docs/method.md §7–§8).
//!
//! ```yaml
//! base_runs: 8                 # per task (default: thresholds.base_runs_per_task, 8)
//! selection: {band: [2, 6], per_task: 3, decoys: 10, target: 60, seed: 11}   # all optional
//! tasks:
//!   - task: tasks/calc-1.json  # a task file: {id, image, workdir, evaluator, problem_statement}
//!   - id: calc-2               # or the task inline
//!     image: vcurve-task-calc:47f73752771d
//!     workdir: /testbed
//!     evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}
//!     problem_statement_file: tasks/calc-2.md   # or problem_statement: "…"
//!     base_runs: 16            # this task's own count
//! ```
//!
//! Tasks may also come by SWE-bench instance id from a dataset file (`swebench:`,
//! [`super::swebench`]); they are appended after these entries and counted as they are.
//!
//! Decisions the issue left open:
//!
//! - Each selection parameter has one value: the `selection` field or its `thresholds` twin
//!   (`band_min`/`band_max`, `trajectories_per_task`, `decoys`); `base_runs` likewise with
//!   `thresholds.base_runs_per_task`. Both given with different values is an error.
//! - The selection seed defaults to the study seed; without a target the selection takes as many
//!   trajectories as the per-task cap allows. A `selection` block without `tasks` is an error:
//!   there would be nothing to select from.
//! - A task judged by its pass rate needs the same number of base runs as the band is stated in
//!   (`base_runs_per_task`); a task entry with its own `base_runs` is judged on the same scale
//!   (`vcurve_method::selection`, rule 1).

use std::collections::HashMap;

use serde_norway::Value;
use vcurve_method::Thresholds;
use vcurve_record::study::SelectionSpec;
use vcurve_record::{Evaluator, RunnerSpec, Task};

use crate::error::SpecError;
use crate::fields::MAX_BASE_RUNS;
use crate::raw::{RawEvaluator, RawInlineTask, RawSelection, RawStudy, RawTaskFile, level, required};
use crate::task::{Twin, check_task, twin};
use crate::value::{Problem, missing, problem, show, text, top_error, uint};

/// A `tasks` entry before the study's default base-run count is known.
pub(super) struct TaskEntry {
    pub task: Task,
    pub base_runs: Option<u32>,
}

/// `tasks:`, each entry a task file or a task written inline.
pub(super) fn parse_tasks(
    tasks: Option<&Value>,
    runner: &RunnerSpec,
    file: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<TaskEntry>, SpecError> {
    let entries = match tasks {
        None => return Ok(Vec::new()),
        Some(Value::Sequence(entries)) => entries,
        Some(other) => {
            return Err(top_error(problem(
                "tasks",
                format!("must be a list like [{{task: tasks/calc.json, base_runs: 8}}]; found {}", show(other)),
            )));
        }
    };
    if !entries.is_empty() && matches!(runner, RunnerSpec::Synthetic(_)) {
        return Err(top_error(problem(
            "tasks",
            "is given, but the synthetic runner cannot make base runs; use the agent runner",
        )));
    }
    let mut tasks: Vec<TaskEntry> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let at = |p: Problem| SpecError::Field { field: format!("tasks[{index}].{}", p.field), message: p.message };
        let Value::Mapping(map) = entry else {
            return Err(at(problem(
                "entry",
                format!(
                    "must be a mapping with a task file (task: FILE.json) or a task inline (id, image, …); found {}",
                    show(entry)
                ),
            )));
        };
        // An entry names a task file or writes the task inline; `task` tells which.
        let names_file = map.get("task").is_some_and(|v| !v.is_null());
        let (task, named, base_runs) = if names_file {
            let raw: RawTaskFile = level(map, "", "a task entry naming a task file").map_err(at)?;
            let path = text(required(&raw.task, "task").map_err(at)?, "task").map_err(at)?;
            let Some(contents) = file(&path) else {
                return Err(at(problem(
                    "task",
                    format!("{path}: was not found (paths are relative to the spec file's directory)"),
                )));
            };
            let task: Task = serde_json::from_str(&contents)
                .map_err(|e| at(problem("task", format!("{path}: not a task (id, image, workdir, evaluator): {e}"))))?;
            check_task(&task).map_err(|m| at(problem("task", format!("{path}: {m}"))))?;
            (task, format!("task {path}"), raw.base_runs)
        } else {
            let raw: RawInlineTask =
                level(map, "", "a task entry (or name a task file with task: FILE.json)").map_err(at)?;
            let task = inline_task(&raw, file).map_err(at)?;
            // The check's message starts with the field it is about ("workdir …", "evaluator.command …").
            check_task(&task).map_err(|m| at(problem(m.split_whitespace().next().unwrap_or("id").to_string(), m)))?;
            let named = format!("task {:?}", task.id);
            (task, named, raw.base_runs)
        };
        let base_runs = match &base_runs {
            None => None,
            Some(v) => Some(uint(v, "base_runs", 1, u64::from(MAX_BASE_RUNS)).map_err(at)? as u32),
        };
        if let Some(first) = tasks.iter().position(|t| t.task.id == task.id) {
            let field = if names_file { "task" } else { "id" };
            return Err(at(problem(
                field,
                format!("{named}: task {:?} appears twice (tasks[{first}] and tasks[{index}])", task.id),
            )));
        }
        tasks.push(TaskEntry { task, base_runs });
    }
    Ok(tasks)
}

/// A task written in the spec itself.
fn inline_task(raw: &RawInlineTask, file: &dyn Fn(&str) -> Option<String>) -> Result<Task, Problem> {
    let field = |value: &Option<Value>, key: &str| -> Result<String, Problem> { text(required(value, key)?, key) };
    let id = field(&raw.id, "id")?;
    let image = field(&raw.image, "image")?;
    let workdir = field(&raw.workdir, "workdir")?;
    let evaluator = match &raw.evaluator {
        None => return Err(missing("evaluator")),
        Some(Value::Mapping(e)) => {
            let e: RawEvaluator = level(e, "evaluator.", "an evaluator")?;
            let kind = field(&e.kind, "evaluator.kind")?;
            match kind.as_str() {
                "command" => Evaluator::Command {
                    command: field(&e.command, "evaluator.command")?,
                    timeout_s: uint(
                        required(&e.timeout_s, "evaluator.timeout_s")?,
                        "evaluator.timeout_s",
                        1,
                        u64::from(u32::MAX),
                    )? as u32,
                },
                "swebench" => {
                    Evaluator::Swebench { instance_id: field(&e.instance_id, "evaluator.instance_id")?, instance: None }
                }
                other => {
                    return Err(problem(
                        "evaluator.kind",
                        format!("= {other:?} is not an evaluator; expected command or swebench"),
                    ));
                }
            }
        }
        Some(other) => {
            return Err(problem(
                "evaluator",
                format!("must be a mapping like {{kind: command, command: …, timeout_s: 60}}; found {}", show(other)),
            ));
        }
    };
    let problem_statement = match (&raw.problem_statement, &raw.problem_statement_file) {
        (Some(_), Some(_)) => {
            return Err(problem("problem_statement_file", "and problem_statement are both given; give one of them"));
        }
        (Some(v), None) => Some(text(v, "problem_statement")?),
        (None, Some(v)) => {
            let path = text(v, "problem_statement_file")?;
            Some(file(&path).ok_or_else(|| {
                problem(
                    "problem_statement_file",
                    format!("{path}: was not found (paths are relative to the spec file's directory)"),
                )
            })?)
        }
        (None, None) => None,
    };
    Ok(Task { id, image, workdir, evaluator, problem_statement })
}

/// The files a spec's `tasks` entries name (task files and problem statements), with the entry's
/// index and the field naming each.
pub(super) fn task_references(doc: &Value) -> Vec<(usize, &'static str, String)> {
    let Some(entries) = doc.get("tasks").and_then(Value::as_sequence) else { return Vec::new() };
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        for field in ["task", "problem_statement_file"] {
            if let Some(p) = e.get(field).and_then(Value::as_str) {
                out.push((i, field, p.to_string()));
            }
        }
    }
    out
}

/// Set the base-run count and the selection parameters from `base_runs` and `selection`, each
/// against its `thresholds` twin; the selection spec, when the study has tasks.
pub(super) fn apply_selection(
    top: &RawStudy,
    thresholds: &mut Thresholds,
    explicit: &HashMap<String, u32>,
    has_tasks: bool,
    study_seed: u64,
) -> Result<Option<SelectionSpec>, SpecError> {
    let given = |key: &str| explicit.get(key).map(|&v| (format!("thresholds.{key}"), v));
    let count = |v: &Value, field: &str| -> Result<(String, u32), SpecError> {
        Ok((field.to_string(), uint(v, field, 0, u64::from(u32::MAX)).map_err(top_error)? as u32))
    };
    let base_runs = twin(
        top.base_runs.as_ref().map(|v| count(v, "base_runs")).transpose()?,
        given("base_runs_per_task"),
        ("base_runs", thresholds.base_runs_per_task),
    )?;
    if !(1..=MAX_BASE_RUNS).contains(&base_runs.value) {
        return Err(top_error(problem(
            base_runs.field,
            format!("= {} is outside 1..={MAX_BASE_RUNS}", base_runs.value),
        )));
    }
    thresholds.base_runs_per_task = base_runs.value;

    let map = match &top.selection {
        None => None,
        Some(Value::Mapping(map)) => Some(map),
        Some(other) => {
            return Err(top_error(problem(
                "selection",
                format!(
                    "must be a mapping like {{band: [2, 6], per_task: 3, decoys: 10, seed: 1}}; found {}",
                    show(other)
                ),
            )));
        }
    };
    let Some(map) = map else {
        return Ok(has_tasks.then_some(SelectionSpec { seed: study_seed, target: None }));
    };
    if !has_tasks {
        return Err(top_error(problem(
            "selection",
            "is given, but the study has no tasks to make base runs of and select from",
        )));
    }
    let raw: RawSelection = level(map, "selection.", "selection").map_err(top_error)?;
    let (band_min, band_max) = match &raw.band {
        None => (None, None),
        Some(Value::Sequence(pair)) if pair.len() == 2 => {
            (Some(count(&pair[0], "selection.band[0]")?), Some(count(&pair[1], "selection.band[1]")?))
        }
        Some(other) => {
            return Err(top_error(problem(
                "selection.band",
                format!("must be [lowest, highest] successes of the base runs, like [2, 6]; found {}", show(other)),
            )));
        }
    };
    let pick = |top: Option<(String, u32)>, key: &str, value: u32| -> Result<Twin, SpecError> {
        twin(top, given(key), (key, value))
    };
    let band_min = pick(band_min, "band_min", thresholds.band_min)?;
    let band_max = pick(band_max, "band_max", thresholds.band_max)?;
    let per_task = pick(
        raw.per_task.as_ref().map(|v| count(v, "selection.per_task")).transpose()?,
        "trajectories_per_task",
        thresholds.trajectories_per_task,
    )?;
    let decoys =
        pick(raw.decoys.as_ref().map(|v| count(v, "selection.decoys")).transpose()?, "decoys", thresholds.decoys)?;
    if band_min.value > band_max.value || band_max.value > base_runs.value {
        return Err(top_error(problem(
            "selection.band",
            format!(
                "= [{}, {}] must satisfy lowest ≤ highest ≤ the {} base runs per task",
                band_min.value, band_max.value, base_runs.value
            ),
        )));
    }
    if per_task.value == 0 {
        return Err(top_error(problem(per_task.field, "= 0 would select nothing; at least 1")));
    }
    thresholds.band_min = band_min.value;
    thresholds.band_max = band_max.value;
    thresholds.trajectories_per_task = per_task.value;
    thresholds.decoys = decoys.value;
    let target = match &raw.target {
        None => None,
        Some(v) => Some(uint(v, "selection.target", 1, u64::from(u32::MAX)).map_err(top_error)? as u32),
    };
    let seed = match &raw.seed {
        None => study_seed,
        Some(v) => uint(v, "selection.seed", 0, u64::MAX).map_err(top_error)?,
    };
    Ok(Some(SelectionSpec { seed, target }))
}
