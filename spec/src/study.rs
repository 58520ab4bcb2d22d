//! The study as a whole: its top-level fields, runner, parameters (thresholds, controls,
//! admission) and decoys.

use std::collections::{BTreeMap, HashMap};

use serde_norway::{Mapping, Value};
use vcurve_method::schedule::variants::{variant_by_name, variant_names};
use vcurve_method::{Thresholds, ThresholdsError};
use vcurve_record::runner::{SYNTHETIC, SyntheticOptions};
use vcurve_record::study::{
    Admission, ControlCounts, DecoySpec, RunnerSpec, SelectionSpec, StudySpec, TaskRuns, TrajectorySpec,
};

use crate::error::{SpecError, TrajectoryRef};
use crate::fields::{ADMISSION_MODES, MAX_LENGTH};
use crate::launch::Launch;
use crate::raw::{RawAdmission, RawControls, RawDecoy, RawStudy, level, required};
use crate::task::twin;
use crate::trajectory::{parse_labels, parse_trajectory};
use crate::value::{Problem, missing, number, problem, real, show, text, top_error, uint};
use crate::{swebench, tasks};

pub(crate) fn parse_study(top: &Mapping, file: &dyn Fn(&str) -> Option<String>) -> Result<Launch, SpecError> {
    let raw: RawStudy = level(top, "", "a study spec").map_err(top_error)?;

    let name = text(required(&raw.name, "name").map_err(top_error)?, "name").map_err(top_error)?;
    let seed = uint(required(&raw.seed, "seed").map_err(top_error)?, "seed", 0, u64::MAX).map_err(top_error)?;

    let schedule = match &raw.schedule {
        None => "paper".to_string(),
        Some(v) => {
            let name = text(v, "schedule").map_err(top_error)?;
            if variant_by_name(&name).is_none() {
                return Err(top_error(problem(
                    "schedule",
                    format!("= {name:?} is not a schedule; expected one of: {}", variant_names().join(", ")),
                )));
            }
            name
        }
    };

    let runner = parse_runner(required(&raw.runner, "runner").map_err(top_error)?)?;

    let task_state = match &raw.task_state {
        None => None,
        Some(section) => {
            crate::task_state::check_alone(top).map_err(top_error)?;
            if !runner.runs_containers() {
                return Err(top_error(problem(
                    "runner.kind",
                    "must run an agent in containers (agent or mini-swe-agent) in a task-state study: its sessions \
                     are the agent's own runs on its tasks",
                )));
            }
            Some(crate::task_state::parse(section).map_err(top_error)?)
        }
    };
    let mut task_entries = tasks::parse_tasks(raw.tasks.as_ref(), &runner, file)?;
    if task_state.is_some() && task_entries.is_empty() && raw.swebench.is_none() {
        return Err(top_error(problem(
            "tasks",
            "is missing: a task-state study records a session of each of its tasks",
        )));
    }
    let dataset = swebench::parse(raw.swebench.as_ref(), raw.trajectories.is_some(), &runner, file, &mut task_entries)?;
    // The trajectory count bounds the control counts, so look at the list's shape first. Every
    // base run may fail and become a trajectory.
    let no_entries: &[Value] = &[];
    let entries: &[Value] = match &raw.trajectories {
        None if !task_entries.is_empty() => no_entries,
        None => return Err(top_error(missing("trajectories"))),
        Some(Value::Sequence(entries)) if entries.is_empty() && task_entries.is_empty() => {
            return Err(top_error(problem(
                "trajectories",
                "is empty; a study needs at least one trajectory, or tasks to make base runs of",
            )));
        }
        Some(Value::Sequence(entries)) => entries,
        Some(other) => {
            return Err(top_error(problem(
                "trajectories",
                format!("must be a list of trajectories, found {}", show(other)),
            )));
        }
    };
    if task_state.is_some()
        && let Some((i, _)) = task_entries.iter().enumerate().find(|(_, e)| e.base_runs.is_some())
    {
        return Err(top_error(problem(
            format!("tasks[{i}].base_runs"),
            "is not a field of a task-state study's task: it records one session of each task",
        )));
    }
    let (thresholds, controls, admission, selection) = parse_parameters(&raw, entries.len(), &task_entries, seed)?;
    let budget = thresholds.budget;
    // A task-state study makes no base runs and selects nothing: its jobs are sessions.
    let selection = if task_state.is_some() { None } else { selection };
    let tasks: Vec<TaskRuns> = task_entries
        .into_iter()
        .map(|e| TaskRuns {
            base_runs: if task_state.is_some() { 0 } else { e.base_runs.unwrap_or(thresholds.base_runs_per_task) },
            task: e.task,
        })
        .collect();

    let synthetic = matches!(runner, RunnerSpec::Synthetic(_));
    let mut trajectories: Vec<TrajectorySpec> = Vec::with_capacity(entries.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut recorded = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let (trajectory, run) = parse_trajectory(index, entry, synthetic, file)?;
        if let (RunnerSpec::MiniSweAgent(_), Some(policy)) = (&runner, run.as_ref().and_then(|r| r.policy.as_ref()))
            && policy.text_format()
        {
            return Err(SpecError::Trajectory {
                trajectory: TrajectoryRef::Id(trajectory.id),
                field: "recorded".into(),
                message: format!(
                    "was recorded by mini-swe-agent {}'s text scaffold ({}: one fenced bash block per reply); the \
                     mini-swe-agent runner resumes the tool-call scaffold of mini-swe-agent {} only, whose \
                     continuations of this prefix would not be the recorded agent's: leave the run out, or \
                     resume it with kind: agent and an adapter of its own scaffold",
                    policy.version.as_deref().unwrap_or("1.x"),
                    policy.format,
                    vcurve_record::policy::MINI_SWE_AGENT_VERSION,
                ),
            });
        }
        if let Some(run) = run {
            recorded.insert(run.digest(), run);
        }
        if let Some(first) = seen.insert(trajectory.id.clone(), index) {
            return Err(SpecError::Trajectory {
                trajectory: TrajectoryRef::Id(trajectory.id),
                field: "id".into(),
                message: format!("appears twice (trajectories[{first}] and trajectories[{index}]); ids must be unique"),
            });
        }
        trajectories.push(trajectory);
    }
    swebench::fill_recorded(dataset, &mut trajectories, &mut recorded)?;

    let decoys = match &raw.decoys {
        None => Vec::new(),
        Some(Value::Sequence(entries)) => {
            let tasks: std::collections::HashSet<&str> =
                trajectories.iter().map(|t| t.task.as_str()).chain(tasks.iter().map(|t| t.task.id.as_str())).collect();
            let mut decoys = Vec::with_capacity(entries.len());
            let mut seen: HashMap<String, usize> = HashMap::new();
            for (index, entry) in entries.iter().enumerate() {
                let (decoy, run) = parse_decoy(index, entry, file)?;
                if let Some(run) = run {
                    recorded.insert(run.digest(), run);
                }
                let at = |field: &str, message: String| SpecError::Field {
                    field: format!("decoys[{index}].{field}"),
                    message,
                };
                if !tasks.contains(decoy.task.as_str()) {
                    return Err(at(
                        "task",
                        format!(
                            "= {:?} is not the task of any trajectory; a decoy is scored against its task's base runs",
                            decoy.task
                        ),
                    ));
                }
                if let Some(first) = seen.insert(decoy.id.clone(), index) {
                    return Err(at(
                        "id",
                        format!("= {:?} appears twice (decoys[{first}] and decoys[{index}])", decoy.id),
                    ));
                }
                decoys.push(decoy);
            }
            decoys
        }
        Some(other) => {
            return Err(top_error(problem("decoys", format!("must be a list of decoys, found {}", show(other)))));
        }
    };

    let judges = match &raw.judges {
        None => Default::default(),
        Some(value) => crate::judges::parse(value, &trajectories, &decoys)?,
    };

    let spec = StudySpec {
        name,
        seed,
        budget,
        schedule,
        runner,
        thresholds,
        controls,
        admission,
        trajectories,
        decoys,
        tasks,
        selection,
        restart_check: None,
        task_state,
        judges,
    };
    Ok(Launch { spec, recorded })
}

/// One entry of `decoys`, with the recorded run it names (`recorded:`, read and checked as a
/// trajectory's; its length is the decoy's when `length` is left out, and must equal it when not).
pub(crate) fn parse_decoy(
    index: usize,
    entry: &Value,
    file: &dyn Fn(&str) -> Option<String>,
) -> Result<(DecoySpec, Option<vcurve_record::Trajectory>), SpecError> {
    let at = |p: Problem| SpecError::Field { field: format!("decoys[{index}].{}", p.field), message: p.message };
    let Value::Mapping(map) = entry else {
        return Err(at(problem(
            "entry",
            format!("must be a mapping with id, task, length, labels; found {}", show(entry)),
        )));
    };
    let raw: RawDecoy = level(map, "", "a decoy").map_err(at)?;
    let id = text(required(&raw.id, "id").map_err(at)?, "id").map_err(at)?;
    let task = text(required(&raw.task, "task").map_err(at)?, "task").map_err(at)?;
    let run = match &raw.recorded {
        None => None,
        Some(v) => Some(crate::trajectory::read_recorded(v, file).map_err(at)?),
    };
    let length = crate::trajectory::length_of(&raw.length, run.as_ref()).map_err(at)?;
    if length == 0 || length > MAX_LENGTH {
        return Err(at(problem("recorded", format!("has {length} steps; a decoy has 1 to {MAX_LENGTH}"))));
    }
    let labels = match &raw.labels {
        None => Vec::new(),
        Some(Value::Mapping(labels)) => parse_labels(labels, length).map_err(at)?,
        Some(other) => {
            return Err(at(problem("labels", format!("must be a mapping from source to step; found {}", show(other)))));
        }
    };
    let recorded = run.as_ref().map(vcurve_record::Trajectory::digest);
    Ok((DecoySpec { id, task, length, labels, recorded }, run))
}

pub(crate) fn parse_runner(value: &Value) -> Result<RunnerSpec, SpecError> {
    let Value::Mapping(map) = value else {
        return Err(top_error(problem(
            "runner",
            format!(
                "must be a mapping with `kind` and the runner's options, e.g. {{kind: synthetic}}; found {}",
                show(value)
            ),
        )));
    };
    // The runner's mapping is open: its keys besides `kind` are the options of the kind it names.
    let kind = match map.get("kind").filter(|v| !v.is_null()) {
        None => return Err(top_error(missing("runner.kind"))),
        Some(v) => text(v, "runner.kind").map_err(top_error)?,
    };
    let mut options = serde_json::Map::new();
    for (key, value) in map {
        let Some(key) = key.as_str() else {
            return Err(top_error(problem("runner", format!("has a key that is not a name: {}", show(key)))));
        };
        if key == "kind" || value.is_null() {
            continue;
        }
        let field = format!("runner.{key}");
        if key == "command" {
            return Err(top_error(problem(
                field,
                format!("is not allowed (the {kind} runner): {}", vcurve_record::runner::NO_COMMAND),
            )));
        }
        if kind == SYNTHETIC {
            match key {
                "duration_ms" => {
                    uint(value, &field, 0, u64::from(u32::MAX)).map_err(top_error)?;
                }
                "no_outcome_rate" => {
                    real(value, &field, 0.0, 1.0).map_err(top_error)?;
                }
                _ => {
                    return Err(top_error(problem(
                        field,
                        format!(
                            "is not an option of the synthetic runner (expected one of: {})",
                            SyntheticOptions::FIELDS.join(", ")
                        ),
                    )));
                }
            }
        }
        let json = serde_json::to_value(value)
            .map_err(|e| top_error(problem(field, format!("cannot be stored as JSON: {e}"))))?;
        options.insert(key.to_string(), json);
    }
    // Parsed once into the typed options the store and the workers carry; another kind's are
    // kept as written.
    RunnerSpec::parse(&kind, serde_json::Value::Object(options))
        .map_err(|e| top_error(problem("runner", e.to_string())))
}

/// The thresholds with the spec's overrides, the controls, the admission and the selection. The
/// controls are bounded by the trajectories the study may have: the `listed` ones, and every base
/// run of its tasks (each may fail and become one).
pub(crate) fn parse_parameters(
    top: &RawStudy,
    listed: usize,
    tasks: &[tasks::TaskEntry],
    seed: u64,
) -> Result<(Thresholds, ControlCounts, Admission, Option<SelectionSpec>), SpecError> {
    let (mut thresholds, explicit) = parse_thresholds(top.thresholds.as_ref())?;
    let selection = tasks::apply_selection(top, &mut thresholds, &explicit, !tasks.is_empty(), seed)?;
    let trajectory_count =
        listed + tasks.iter().map(|t| t.base_runs.unwrap_or(thresholds.base_runs_per_task) as usize).sum::<usize>();
    let given = |key: &str| explicit.get(key).map(|&v| (format!("thresholds.{key}"), v));
    let u32_field = |value: &Option<Value>, field: &str| -> Result<Option<(String, u32)>, SpecError> {
        let Some(v) = value else { return Ok(None) };
        let value = uint(v, field, 0, u64::from(u32::MAX)).map_err(top_error)? as u32;
        Ok(Some((field.to_string(), value)))
    };

    let budget = twin(u32_field(&top.budget, "budget")?, given("budget"), ("budget", thresholds.budget))?;
    if !(1..=MAX_LENGTH).contains(&budget.value) {
        return Err(top_error(problem(budget.field, format!("= {} is outside 1..={MAX_LENGTH}", budget.value))));
    }
    thresholds.budget = budget.value;

    // No `controls` is every count left to its `thresholds` twin, or 0.
    let controls: RawControls =
        match optional_mapping(&top.controls, "controls", "a mapping of counts like {sanity: 5, retest: 10}")? {
            None => RawControls::default(),
            Some(map) => level(map, "controls.", "controls").map_err(top_error)?,
        };
    let control = |value: &Option<Value>, field: &str, thresholds_key: &str| -> Result<u32, SpecError> {
        let picked = twin(u32_field(value, field)?, given(thresholds_key), ("controls", 0))?;
        if usize::try_from(picked.value).map_or(true, |v| v > trajectory_count) {
            return Err(top_error(problem(
                picked.field,
                format!("= {} is more than the study's {trajectory_count} trajectories", picked.value),
            )));
        }
        Ok(picked.value)
    };
    let controls = ControlCounts {
        sanity: control(&controls.sanity, "controls.sanity", "sanity_trajectories")?,
        retest: control(&controls.retest, "controls.retest", "retest_trajectories")?,
        budget_control: control(&controls.budget_control, "controls.budget_control", "budget_control_trajectories")?,
    };
    thresholds.sanity_trajectories = controls.sanity;
    thresholds.retest_trajectories = controls.retest;
    thresholds.budget_control_trajectories = controls.budget_control;

    let admission = match optional_mapping(&top.admission, "admission", "a mapping like {mode: demand}")? {
        None => Admission::Demand,
        Some(map) => {
            let raw: RawAdmission = level(map, "admission.", "admission").map_err(top_error)?;
            let mode =
                text(required(&raw.mode, "admission.mode").map_err(top_error)?, "admission.mode").map_err(top_error)?;
            match mode.as_str() {
                "demand" => {
                    let given = [("batch_size", &raw.batch_size), ("pipeline_threshold", &raw.pipeline_threshold)];
                    if let Some((key, _)) = given.into_iter().find(|(_, v)| v.is_some()) {
                        return Err(top_error(problem(
                            format!("admission.{key}"),
                            "applies only to `mode: batch` (demand admission has no parameters)",
                        )));
                    }
                    Admission::Demand
                }
                "batch" => {
                    let batch_size = twin(
                        u32_field(&raw.batch_size, "admission.batch_size")?,
                        given("batch_size"),
                        ("admission.batch_size", thresholds.batch_size),
                    )?;
                    let pipeline = twin(
                        u32_field(&raw.pipeline_threshold, "admission.pipeline_threshold")?,
                        given("pipeline_threshold"),
                        ("admission.pipeline_threshold", thresholds.pipeline_threshold),
                    )?;
                    if !(1..=1_000_000).contains(&batch_size.value) {
                        return Err(top_error(problem(
                            batch_size.field,
                            format!("= {} is outside 1..=1000000", batch_size.value),
                        )));
                    }
                    if !(1..=batch_size.value).contains(&pipeline.value) {
                        return Err(top_error(problem(
                            pipeline.field,
                            format!(
                                "= {} is outside 1..={}: at least 1 (or nothing is ever admitted), at most the batch size",
                                pipeline.value, batch_size.value
                            ),
                        )));
                    }
                    thresholds.batch_size = batch_size.value;
                    thresholds.pipeline_threshold = pipeline.value;
                    Admission::Batch { batch_size: batch_size.value, pipeline_threshold: pipeline.value }
                }
                other => {
                    return Err(top_error(problem(
                        "admission.mode",
                        format!(
                            "= {other:?} is not an admission mode; expected one of: {}",
                            ADMISSION_MODES.join(", ")
                        ),
                    )));
                }
            }
        }
    };

    thresholds.validate().map_err(|e| match e {
        ThresholdsError::OutOfRange { field, value, allowed } => {
            top_error(problem(format!("thresholds.{field}"), format!("= {value} is out of range; expected {allowed}")))
        }
        ThresholdsError::Parse(message) => top_error(problem("thresholds", message)),
    })?;
    Ok((thresholds, controls, admission, selection))
}

/// The paper's thresholds with the spec's overrides (not yet validated), and the integer
/// overrides by field name (some have a top-level twin).
pub(crate) fn parse_thresholds(value: Option<&Value>) -> Result<(Thresholds, HashMap<String, u32>), SpecError> {
    let mut explicit = HashMap::new();
    let Some(value) = value else { return Ok((Thresholds::default(), explicit)) };
    let Value::Mapping(map) = value else {
        return Err(top_error(problem(
            "thresholds",
            format!("must be a mapping of parameters like {{k_screen: 8, epsilon: 0.15}}, found {}", show(value)),
        )));
    };
    // The defaults as JSON give each field's name and whether it is an integer or a real.
    let serde_json::Value::Object(mut fields) =
        serde_json::to_value(Thresholds::default()).expect("thresholds serialize to JSON")
    else {
        unreachable!("Thresholds serializes as an object")
    };
    let names: Vec<String> = fields.keys().cloned().collect();
    for (key, value) in map {
        let Some(key) = key.as_str() else {
            return Err(top_error(problem("thresholds", format!("has a key that is not a field name: {}", show(key)))));
        };
        let field = format!("thresholds.{key}");
        let Some(default) = fields.get(key) else {
            return Err(top_error(problem(
                field,
                format!("is not a threshold (expected one of: {})", names.join(", ")),
            )));
        };
        if value.is_null() {
            continue;
        }
        let json = if default.is_u64() {
            let v = uint(value, &field, 0, u64::from(u32::MAX)).map_err(top_error)? as u32;
            explicit.insert(key.to_string(), v);
            serde_json::Value::from(v)
        } else {
            let v = number(value, &field).map_err(top_error)?;
            if !v.is_finite() {
                return Err(top_error(problem(field, format!("= {v} is not a finite number"))));
            }
            serde_json::Value::from(v)
        };
        fields.insert(key.to_string(), json);
    }
    let thresholds = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| top_error(problem("thresholds", format!("cannot be read: {e}"))))?;
    Ok((thresholds, explicit))
}

/// An optional field that must be a mapping when given (`like` shows one).
fn optional_mapping<'a>(value: &'a Option<Value>, field: &str, like: &str) -> Result<Option<&'a Mapping>, SpecError> {
    match value {
        None => Ok(None),
        Some(Value::Mapping(map)) => Ok(Some(map)),
        Some(other) => Err(top_error(problem(field, format!("must be {like}; found {}", show(other))))),
    }
}
