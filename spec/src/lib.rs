//! The study spec: the YAML file a user launches a study from, parsed once into a validated
//! `StudySpec` (the type lives in `vcurve-record`).
//!
//! Data flow: `vcurve launch SPEC.yaml` calls [`read_with_files`], which reads the spec
//! and every curve file it names; the client sends both to the coordinator, which calls
//! [`parse`] with a lookup into what it was sent. [`load`] does both in one
//! process (`vcurve demo`, tests). Nothing is stored until `parse` has accepted the whole spec; the
//! coordinator stores the result as JSON with the curves inlined, so a stored study never depends
//! on a file again.
//!
//! ```yaml
//! name: demo
//! seed: 7                  # the study seed (the synthetic runner hashes it into outcomes)
//! budget: 100              # optional: the step budget B (default: the thresholds' budget, 100)
//! schedule: paper          # optional: a schedule variant (default: paper)
//! runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}
//! thresholds: {k_screen: 8, epsilon: 0.15}                  # optional overrides of docs/method.md §8
//! controls: {sanity: 5, retest: 10, budget_control: 10}     # optional (default: all off)
//! admission: {mode: batch, batch_size: 10, pipeline_threshold: 3}   # optional (default: demand)
//! trajectories:
//!   - id: django-11555-s2
//!     task: django__django-11555          # optional (default: the id)
//!     length: 88
//!     curve: curves/django-11555-s2.csv   # header t,v; relative to the spec file
//!     labels: {gpt-5.5: 56, o3: 44, sol: none}
//!     base_runs: [{success: true, steps: 40}, {success: false, steps: 100}]
//! ```
//!
//! Decisions the issue left open:
//!
//! - Every error names its field (and its trajectory, by id, or by position when the id itself is
//!   the problem); the first error in document order is reported. Unknown fields are errors at
//!   every level, so a typo never silently falls back to a default. An explicit `null` (`field:`
//!   with nothing after it) counts as absent.
//! - `length` may be anything from 1 to [`MAX_LENGTH`]; a trajectory longer than the budget is
//!   legal (its continuations late in the run get a budget of 0, `R̂(x, B − t) = 0`).
//! - The budget, the control counts and the batch admission parameters each have one value: the
//!   top-level field (`budget`, `controls.*`, `admission.*`) or the matching `thresholds` field
//!   (`budget`, `*_trajectories`, `batch_size`, `pipeline_threshold`); giving both with different
//!   values is an error. The stored `StudySpec::thresholds` carries the values in effect.
//! - Controls are off unless asked for (the paper's 5/10/10 assumes a study of ~50 trajectories);
//!   a count may not exceed the number of trajectories, which would be a mistake, not a request.
//!   "Processing order" is the order of `trajectories` in the file.
//! - Batch admission needs `1 ≤ pipeline_threshold ≤ batch_size`: a threshold of 0 never admits
//!   anything, one above the batch size admits batch after batch at once.
//! - A curve file needs the columns `t` and `v` (extra columns are ignored) and exactly one row for
//!   each `t = 0..length−1`; `v` is the true value `V(h_t)` in `[0, 1]`, not necessarily monotone.
//!   A curve is required for the `synthetic` runner and validated the same way for any other.
//! - Labels are `source: step` with a 1-based step in `1..=length`, or `source: none` for "no
//!   mistake"; an empty label (`null`) is rejected rather than read as either.
//! - The options of the `synthetic` and `agent` runners are checked here (`agent`:
//!   `vcurve_record::runner::AgentOptions`); another kind's options are passed through untouched.
//! - Inputs are bounded ([`bounds`]): the spec and the files it names must be regular files, the
//!   spec at most [`MAX_SPEC_BYTES`] and each file it names at most [`MAX_FILE_BYTES`]; the YAML
//!   may nest at most [`MAX_YAML_DEPTH`] levels, which [`parse`] checks before parsing it: a text
//!   outside the limits is refused in milliseconds whatever its size or depth.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};
use vcurve_method::schedule::variants::{variant_by_name, variant_names};
use vcurve_method::{BaseRun, BaseRuns, Thresholds, ThresholdsError};
use vcurve_record::runner::{AgentOptions, SyntheticOptions, runs_containers};
pub use vcurve_record::study::{
    Admission, ControlCounts, DecoySpec, Label, RunnerSpec, SelectionSpec, StudySpec, TaskRuns, TrajectorySpec,
};
use vcurve_record::{Trajectory, TrajectoryPayload};

/// The longest trajectory a spec may declare.
pub const MAX_LENGTH: u32 = 100_000;

pub mod bounds;
pub mod restart_check;
mod swebench;
mod tasks;
pub use bounds::ReadError;

/// The largest study spec: 16 MiB, 40,000 trajectories or more (the demo's take 380 bytes each
/// with their labels; curves are files of their own, limited by [`MAX_FILE_BYTES`]).
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

/// The largest file a spec may reference (a curve or a recorded trajectory). Recorded runs of
/// real agents with their message lists are megabytes to tens of megabytes.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// How deeply a spec's YAML may nest collections ([`bounds::yaml_depth`]). A study spec needs 5
/// (study → trajectories → trajectory → base runs → base run) and another runner's options a few
/// more. Checked before parsing: the parser would load every level of a deeper text before its
/// own limit of 128 refuses it, at microseconds a level ([`bounds`]).
pub const MAX_YAML_DEPTH: usize = 64;

/// The runner kind whose options this module validates.
pub use vcurve_record::runner::SYNTHETIC;

/// Which trajectory an error is about: its id, or its position when the id is the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrajectoryRef {
    Id(String),
    /// 0-based position in `trajectories`.
    Index(usize),
}

impl fmt::Display for TrajectoryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrajectoryRef::Id(id) => write!(f, "trajectory {id:?}"),
            TrajectoryRef::Index(i) => write!(f, "trajectories[{i}]"),
        }
    }
}

/// Why a study spec was rejected. Every variant is fatal: the user must fix the spec (or a file it
/// names); nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec file is not a regular file, too large, not UTF-8, or too deeply nested.
    #[error("cannot read the study spec {}: {source}", path.display())]
    Read { path: PathBuf, source: ReadError },
    /// The spec's text is too large or too deeply nested to be parsed.
    #[error("the study spec was not parsed: {0}")]
    Bounds(ReadError),
    #[error("the study spec is not valid YAML: {0}")]
    Yaml(String),
    /// A study-level field.
    #[error("{field} {message}")]
    Field { field: String, message: String },
    /// A field of one trajectory.
    #[error("{trajectory}: {field} {message}")]
    Trajectory { trajectory: TrajectoryRef, field: String, message: String },
    /// A trajectory's curve file as a whole (missing, no header, rows missing).
    #[error("{trajectory}: curve {path}: {message}")]
    CurveFile { trajectory: TrajectoryRef, path: String, message: String },
    /// One line of a trajectory's curve file (1-based; the header is line 1).
    #[error("{trajectory}: curve {path} line {line}: {message}")]
    CurveLine { trajectory: TrajectoryRef, path: String, line: u64, message: String },
}

/// A parsed spec with the recorded runs its trajectories name, by digest.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub spec: StudySpec,
    pub recorded: BTreeMap<String, Trajectory>,
}

impl Launch {
    /// What workers fetch for each trajectory, in the spec's order.
    pub fn payloads(&self) -> Vec<TrajectoryPayload> {
        self.spec
            .trajectories
            .iter()
            .map(|t| TrajectoryPayload {
                task: t.task.clone(),
                length: t.length,
                curve: t.curve.clone(),
                recorded: t.recorded.as_ref().and_then(|d| self.recorded.get(d)).cloned(),
                task_def: None,
            })
            .collect()
    }
}

/// Parse and validate a spec whose referenced files are looked up through `file` (a path
/// relative to the spec, as written in it → the file's contents). A text over [`MAX_SPEC_BYTES`]
/// or nested deeper than [`MAX_YAML_DEPTH`] is refused before it is parsed.
pub fn parse(yaml: &str, file: &dyn Fn(&str) -> Option<String>) -> Result<StudySpec, SpecError> {
    parse_launch(yaml, file).map(|l| l.spec)
}

/// What a spec asks to launch: a study, or an online restart check of a stored one.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Study(Box<Launch>),
    RestartCheck(restart_check::RestartCheckRequest),
}

/// [`parse`], keeping the recorded runs the trajectories name. A restart-check spec is refused:
/// it is completed from the checked study, which only a coordinator has ([`parse_request`]).
pub fn parse_launch(yaml: &str, file: &dyn Fn(&str) -> Option<String>) -> Result<Launch, SpecError> {
    match parse_request(yaml, file)? {
        Request::Study(launch) => Ok(*launch),
        Request::RestartCheck(_) => Err(top_error(problem(
            "restart_check",
            "makes this the spec of a restart check, which is launched on the coordinator that has the checked study",
        ))),
    }
}

/// Parse a spec of either kind (see [`Request`]).
pub fn parse_request(yaml: &str, file: &dyn Fn(&str) -> Option<String>) -> Result<Request, SpecError> {
    bounds::check_yaml(yaml, MAX_SPEC_BYTES, MAX_YAML_DEPTH).map_err(SpecError::Bounds)?;
    let mut doc: Value = serde_norway::from_str(yaml).map_err(|e| SpecError::Yaml(e.to_string()))?;
    doc.apply_merge().map_err(|e| SpecError::Yaml(e.to_string()))?;
    let top = match &doc {
        Value::Mapping(map) => map,
        Value::Null => return Err(top_error(problem("the study spec", "is empty"))),
        other => {
            return Err(top_error(problem(
                "the study spec",
                format!("must be a mapping of fields ({}), found {}", TOP_FIELDS.join(", "), show(other)),
            )));
        }
    };
    if get(top, "restart_check").is_some() {
        return restart_check::parse(top).map(Request::RestartCheck);
    }
    parse_study(top, file).map(|l| Request::Study(Box::new(l)))
}

/// Read a spec file and every file it references, for a client that sends them to the
/// coordinator: the YAML, and a map from each path as written in the spec to its contents.
/// Problems other than unreadable files (and YAML nested too deeply to look into) are left to
/// [`parse`].
pub fn read_with_files(path: &Path) -> Result<(String, BTreeMap<String, String>), SpecError> {
    let refused = |source| SpecError::Read { path: path.into(), source };
    let yaml = bounds::read_text(path, MAX_SPEC_BYTES).map_err(refused)?;
    bounds::check_yaml(&yaml, MAX_SPEC_BYTES, MAX_YAML_DEPTH).map_err(refused)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut files = BTreeMap::new();
    for (trajectory, field, path) in file_references(&yaml) {
        if files.contains_key(&path) {
            continue;
        }
        let text = read_limited(&dir.join(&path)).map_err(|message| match field {
            "curve" => SpecError::CurveFile { trajectory, path: path.clone(), message },
            _ => SpecError::Trajectory { trajectory, field: field.into(), message: format!("{path}: {message}") },
        })?;
        files.insert(path, text);
    }
    let doc = serde_norway::from_str::<Value>(&yaml).ok().and_then(|mut d| d.apply_merge().ok().map(|()| d));
    for (index, field, path) in doc.as_ref().map(tasks::task_references).unwrap_or_default() {
        if files.contains_key(&path) {
            continue;
        }
        let text = read_limited(&dir.join(&path)).map_err(|message| SpecError::Field {
            field: format!("tasks[{index}].{field}"),
            message: format!("{path}: {message}"),
        })?;
        files.insert(path, text);
    }
    if let Some(path) = doc.as_ref().and_then(swebench::dataset_reference).filter(|p| !files.contains_key(p)) {
        let text = read_limited(&dir.join(&path)).map_err(|message| SpecError::Field {
            field: "swebench.dataset".into(),
            message: format!("{path}: {message}"),
        })?;
        files.insert(path, text);
    }
    Ok((yaml, files))
}

/// Read and validate a spec file; curve paths resolve against the spec's directory.
pub fn load(path: &Path) -> Result<StudySpec, SpecError> {
    load_launch(path).map(|l| l.spec)
}

/// [`load`], keeping the recorded runs.
pub fn load_launch(path: &Path) -> Result<Launch, SpecError> {
    let (yaml, files) = read_with_files(path)?;
    parse_launch(&yaml, &|name| files.get(name).cloned())
}

// ---------------------------------------------------------------------------------------------
// The study

const TOP_FIELDS: &[&str] = &[
    "name",
    "seed",
    "budget",
    "schedule",
    "runner",
    "thresholds",
    "controls",
    "admission",
    "trajectories",
    "decoys",
    "tasks",
    "base_runs",
    "selection",
    "swebench",
];
/// The most base runs a study may ask of one task.
pub const MAX_BASE_RUNS: u32 = 1000;
const TRAJECTORY_FIELDS: &[&str] = &["id", "task", "length", "curve", "labels", "base_runs", "recorded"];
const DECOY_FIELDS: &[&str] = &["id", "task", "length", "labels"];
const CONTROL_FIELDS: &[&str] = &["sanity", "retest", "budget_control"];
const ADMISSION_FIELDS: &[&str] = &["mode", "batch_size", "pipeline_threshold"];
const ADMISSION_MODES: &[&str] = &["demand", "batch"];
const BASE_RUN_FIELDS: &[&str] = &["success", "steps"];

fn parse_study(top: &Mapping, file: &dyn Fn(&str) -> Option<String>) -> Result<Launch, SpecError> {
    check_keys(top, TOP_FIELDS, "", "a study spec").map_err(top_error)?;

    let name = text(required(top, "name", "")?, "name").map_err(top_error)?;
    let seed = uint(required(top, "seed", "")?, "seed", 0, u64::MAX).map_err(top_error)?;

    let schedule = match get(top, "schedule") {
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

    let runner = parse_runner(required(top, "runner", "")?)?;

    let mut task_entries = tasks::parse_tasks(top, &runner.kind, file)?;
    let dataset = swebench::parse(top, &runner.kind, file, &mut task_entries)?;
    // The trajectory count bounds the control counts, so look at the list's shape first. Every
    // base run may fail and become a trajectory.
    let no_entries: &[Value] = &[];
    let entries: &[Value] = match get(top, "trajectories") {
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
    let (thresholds, controls, admission, selection) = parse_parameters(top, entries.len(), &task_entries, seed)?;
    let budget = thresholds.budget;
    let tasks: Vec<TaskRuns> = task_entries
        .into_iter()
        .map(|e| TaskRuns { base_runs: e.base_runs.unwrap_or(thresholds.base_runs_per_task), task: e.task })
        .collect();

    let synthetic = runner.kind == SYNTHETIC;
    let mut trajectories: Vec<TrajectorySpec> = Vec::with_capacity(entries.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut recorded = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let (trajectory, run) = parse_trajectory(index, entry, synthetic, file)?;
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

    let decoys = match get(top, "decoys") {
        None => Vec::new(),
        Some(Value::Sequence(entries)) => {
            let tasks: std::collections::HashSet<&str> =
                trajectories.iter().map(|t| t.task.as_str()).chain(tasks.iter().map(|t| t.task.id.as_str())).collect();
            let mut decoys = Vec::with_capacity(entries.len());
            let mut seen: HashMap<String, usize> = HashMap::new();
            for (index, entry) in entries.iter().enumerate() {
                let decoy = parse_decoy(index, entry)?;
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
    };
    Ok(Launch { spec, recorded })
}

fn check_task(task: &vcurve_record::Task) -> Result<(), String> {
    if !valid_name(&task.id) {
        return Err(format!("id {:?} must be a non-empty name of letters, digits, and . _ - characters", task.id));
    }
    if task.image.trim().is_empty() {
        return Err("image is empty".into());
    }
    if !task.workdir.starts_with('/') {
        return Err(format!("workdir {:?} must be an absolute path", task.workdir));
    }
    match &task.evaluator {
        vcurve_record::Evaluator::Command { command, timeout_s } => {
            if command.trim().is_empty() {
                return Err("evaluator.command is empty".into());
            }
            if *timeout_s == 0 {
                return Err("evaluator.timeout_s must be at least 1".into());
            }
        }
        vcurve_record::Evaluator::Swebench { instance_id, .. } => {
            if instance_id.trim().is_empty() {
                return Err("evaluator.instance_id is empty".into());
            }
        }
    }
    Ok(())
}

fn parse_decoy(index: usize, entry: &Value) -> Result<DecoySpec, SpecError> {
    let at = |p: Problem| SpecError::Field { field: format!("decoys[{index}].{}", p.field), message: p.message };
    let Value::Mapping(map) = entry else {
        return Err(at(problem(
            "entry",
            format!("must be a mapping with id, task, length, labels; found {}", show(entry)),
        )));
    };
    check_keys(map, DECOY_FIELDS, "", "a decoy").map_err(at)?;
    let id = text(get(map, "id").ok_or_else(|| at(missing("id")))?, "id").map_err(at)?;
    let task = text(get(map, "task").ok_or_else(|| at(missing("task")))?, "task").map_err(at)?;
    let length = uint(get(map, "length").ok_or_else(|| at(missing("length")))?, "length", 1, u64::from(MAX_LENGTH))
        .map_err(at)? as u32;
    let labels = match get(map, "labels") {
        None => Vec::new(),
        Some(Value::Mapping(labels)) => parse_labels(labels, length).map_err(at)?,
        Some(other) => {
            return Err(at(problem("labels", format!("must be a mapping from source to step; found {}", show(other)))));
        }
    };
    Ok(DecoySpec { id, task, length, labels })
}

fn parse_runner(value: &Value) -> Result<RunnerSpec, SpecError> {
    let Value::Mapping(map) = value else {
        return Err(top_error(problem(
            "runner",
            format!(
                "must be a mapping with `kind` and the runner's options, e.g. {{kind: synthetic}}; found {}",
                show(value)
            ),
        )));
    };
    let kind = text(required(map, "kind", "runner.")?, "runner.kind").map_err(top_error)?;
    let mut options = serde_json::Map::new();
    for (key, value) in map {
        let Some(key) = key.as_str() else {
            return Err(top_error(problem("runner", format!("has a key that is not a name: {}", show(key)))));
        };
        if key == "kind" || value.is_null() {
            continue;
        }
        let field = format!("runner.{key}");
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
    let options = serde_json::Value::Object(options);
    if runs_containers(&kind) {
        AgentOptions::for_kind(&kind, &options).map_err(|e| top_error(problem("runner", e)))?;
    }
    if kind == SYNTHETIC {
        // The typed options the workers read: what passed the checks above must parse.
        SyntheticOptions::from_json(&options).map_err(|e| top_error(problem("runner", e)))?;
    }
    Ok(RunnerSpec { kind, options })
}

/// A parameter that may be set at the top level or in `thresholds`: its value, and the field it
/// came from (for later messages).
struct Twin {
    field: String,
    value: u32,
}

/// Pick the value of such a parameter; both given with different values is an error.
fn twin(
    top: Option<(String, u32)>,
    thresholds: Option<(String, u32)>,
    default: (&str, u32),
) -> Result<Twin, SpecError> {
    match (top, thresholds) {
        (Some((field, a)), Some((other, b))) if a != b => {
            Err(top_error(problem(field, format!("= {a} conflicts with {other} = {b}; give one of them"))))
        }
        (Some((field, value)), _) | (None, Some((field, value))) => Ok(Twin { field, value }),
        (None, None) => Ok(Twin { field: default.0.to_string(), value: default.1 }),
    }
}

/// The thresholds with the spec's overrides, the controls, the admission and the selection. The
/// controls are bounded by the trajectories the study may have: the `listed` ones, and every base
/// run of its tasks (each may fail and become one).
fn parse_parameters(
    top: &Mapping,
    listed: usize,
    tasks: &[tasks::TaskEntry],
    seed: u64,
) -> Result<(Thresholds, ControlCounts, Admission, Option<SelectionSpec>), SpecError> {
    let (mut thresholds, explicit) = parse_thresholds(get(top, "thresholds"))?;
    let selection = tasks::apply_selection(top, &mut thresholds, &explicit, !tasks.is_empty(), seed)?;
    let trajectory_count =
        listed + tasks.iter().map(|t| t.base_runs.unwrap_or(thresholds.base_runs_per_task) as usize).sum::<usize>();
    let given = |key: &str| explicit.get(key).map(|&v| (format!("thresholds.{key}"), v));
    let u32_field = |map: &Mapping, key: &str, prefix: &str| -> Result<Option<(String, u32)>, SpecError> {
        let Some(v) = get(map, key) else { return Ok(None) };
        let field = format!("{prefix}{key}");
        let value = uint(v, &field, 0, u64::from(u32::MAX)).map_err(top_error)? as u32;
        Ok(Some((field, value)))
    };

    let budget = twin(u32_field(top, "budget", "")?, given("budget"), ("budget", thresholds.budget))?;
    if !(1..=MAX_LENGTH).contains(&budget.value) {
        return Err(top_error(problem(budget.field, format!("= {} is outside 1..={MAX_LENGTH}", budget.value))));
    }
    thresholds.budget = budget.value;

    let controls_map = optional_mapping(top, "controls", "a mapping of counts like {sanity: 5, retest: 10}")?;
    if let Some(map) = controls_map {
        check_keys(map, CONTROL_FIELDS, "controls.", "controls").map_err(top_error)?;
    }
    let control = |key: &str, thresholds_key: &str| -> Result<u32, SpecError> {
        let top = match controls_map {
            Some(map) => u32_field(map, key, "controls.")?,
            None => None,
        };
        let picked = twin(top, given(thresholds_key), ("controls", 0))?;
        if usize::try_from(picked.value).map_or(true, |v| v > trajectory_count) {
            return Err(top_error(problem(
                picked.field,
                format!("= {} is more than the study's {trajectory_count} trajectories", picked.value),
            )));
        }
        Ok(picked.value)
    };
    let controls = ControlCounts {
        sanity: control("sanity", "sanity_trajectories")?,
        retest: control("retest", "retest_trajectories")?,
        budget_control: control("budget_control", "budget_control_trajectories")?,
    };
    thresholds.sanity_trajectories = controls.sanity;
    thresholds.retest_trajectories = controls.retest;
    thresholds.budget_control_trajectories = controls.budget_control;

    let admission = match optional_mapping(top, "admission", "a mapping like {mode: demand}")? {
        None => Admission::Demand,
        Some(map) => {
            check_keys(map, ADMISSION_FIELDS, "admission.", "admission").map_err(top_error)?;
            let mode = text(required(map, "mode", "admission.")?, "admission.mode").map_err(top_error)?;
            match mode.as_str() {
                "demand" => {
                    if let Some(key) = ["batch_size", "pipeline_threshold"].into_iter().find(|k| get(map, k).is_some())
                    {
                        return Err(top_error(problem(
                            format!("admission.{key}"),
                            "applies only to `mode: batch` (demand admission has no parameters)",
                        )));
                    }
                    Admission::Demand
                }
                "batch" => {
                    let batch_size = twin(
                        u32_field(map, "batch_size", "admission.")?,
                        given("batch_size"),
                        ("admission.batch_size", thresholds.batch_size),
                    )?;
                    let pipeline = twin(
                        u32_field(map, "pipeline_threshold", "admission.")?,
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
fn parse_thresholds(value: Option<&Value>) -> Result<(Thresholds, HashMap<String, u32>), SpecError> {
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

// ---------------------------------------------------------------------------------------------
// Trajectories

fn parse_trajectory(
    index: usize,
    entry: &Value,
    synthetic: bool,
    file: &dyn Fn(&str) -> Option<String>,
) -> Result<(TrajectorySpec, Option<Trajectory>), SpecError> {
    let Value::Mapping(map) = entry else {
        return Err(SpecError::Trajectory {
            trajectory: TrajectoryRef::Index(index),
            field: "entry".into(),
            message: format!("must be a mapping with id, length, curve, …; found {}", show(entry)),
        });
    };
    // Name the trajectory by its id when it has a usable one, so the user can find it.
    let named = match get(map, "id") {
        Some(Value::String(id)) if valid_name(id) => TrajectoryRef::Id(id.clone()),
        _ => TrajectoryRef::Index(index),
    };
    let at = |p: Problem| SpecError::Trajectory { trajectory: named.clone(), field: p.field, message: p.message };

    check_keys(map, TRAJECTORY_FIELDS, "", "a trajectory").map_err(at)?;
    let id = text(get(map, "id").ok_or_else(|| at(missing("id")))?, "id").map_err(at)?;
    let recorded = match get(map, "recorded") {
        None => None,
        Some(v) => {
            let path = text(v, "recorded").map_err(at)?;
            let Some(contents) = file(&path) else {
                return Err(at(problem(
                    "recorded",
                    format!("{path}: was not found (paths are relative to the spec file's directory)"),
                )));
            };
            if synthetic {
                return Err(at(problem(
                    "recorded",
                    "is given, but the synthetic runner cannot replay recorded runs; use a runner that replays in \
                     containers, or give the trajectory by length and curve",
                )));
            }
            let run = Trajectory::from_json(contents.as_bytes())
                .map_err(|e| at(problem("recorded", format!("{path}: {e}"))))?;
            Some(run)
        }
    };
    let task = match (get(map, "task"), &recorded) {
        (None, Some(run)) => run.task.id.clone(),
        (None, None) => id.clone(),
        (Some(v), _) => text(v, "task").map_err(at)?,
    };
    let length = match (get(map, "length"), &recorded) {
        (None, Some(run)) => run.length(),
        (None, None) => return Err(at(missing("length"))),
        (Some(v), run) => {
            let length = uint(v, "length", 1, u64::from(MAX_LENGTH)).map_err(at)? as u32;
            if let Some(run) = run
                && run.length() != length
            {
                return Err(at(problem(
                    "length",
                    format!("= {length} but the recorded run has {} steps", run.length()),
                )));
            }
            length
        }
    };
    if length > MAX_LENGTH {
        return Err(at(problem("length", format!("= {length} is more than {MAX_LENGTH} steps"))));
    }

    let curve = match get(map, "curve") {
        None if synthetic => {
            return Err(at(problem(
                "curve",
                "is missing; the synthetic runner needs each trajectory's true curve (a t,v CSV file)",
            )));
        }
        None => None,
        Some(v) => {
            let path = text(v, "curve").map_err(at)?;
            let Some(contents) = file(&path) else {
                return Err(SpecError::CurveFile {
                    trajectory: named.clone(),
                    path,
                    message: "was not found (curve paths are relative to the spec file's directory)".into(),
                });
            };
            let values = parse_curve(&contents, length).map_err(|(line, message)| match line {
                Some(line) => SpecError::CurveLine { trajectory: named.clone(), path: path.clone(), line, message },
                None => SpecError::CurveFile { trajectory: named.clone(), path: path.clone(), message },
            })?;
            Some(values)
        }
    };

    let labels = match get(map, "labels") {
        None => Vec::new(),
        Some(Value::Mapping(labels)) => parse_labels(labels, length).map_err(at)?,
        Some(other) => {
            return Err(at(problem(
                "labels",
                format!("must be a mapping from source to step, like {{o3: 44, sol: none}}; found {}", show(other)),
            )));
        }
    };

    let base_runs = match get(map, "base_runs") {
        None => BaseRuns::default(),
        Some(Value::Sequence(runs)) => {
            BaseRuns(runs.iter().enumerate().map(|(i, r)| parse_base_run(i, r)).collect::<Result<_, _>>().map_err(at)?)
        }
        Some(other) => {
            return Err(at(problem(
                "base_runs",
                format!("must be a list like [{{success: true, steps: 40}}]; found {}", show(other)),
            )));
        }
    };

    let digest = recorded.as_ref().map(Trajectory::digest);
    Ok((TrajectorySpec { id, task, length, curve, labels, base_runs, recorded: digest }, recorded))
}

fn parse_labels(labels: &Mapping, length: u32) -> Result<Vec<Label>, Problem> {
    let mut out = Vec::with_capacity(labels.len());
    for (source, step) in labels {
        let Some(source) = source.as_str().filter(|s| valid_name(s)) else {
            return Err(problem("labels", format!("has a source that is not a name: {} (quote it)", show(source))));
        };
        let field = format!("labels.{source}");
        let expected =
            format!("expected a step from 1 to {length} (the trajectory's length), or `none` for no mistake");
        let step = match step {
            Value::String(s) if s == "none" => None,
            Value::Number(n) => match n.as_u64() {
                Some(m) if (1..=u64::from(length)).contains(&m) => Some(m as u32),
                Some(m) => return Err(problem(field, format!("= {m} is outside 1..={length}; {expected}"))),
                None => return Err(problem(field, format!("= {n} is not a whole step; {expected}"))),
            },
            other => return Err(problem(field, format!("= {}: {expected}", show(other)))),
        };
        out.push(Label { source: source.to_string(), step });
    }
    Ok(out)
}

fn parse_base_run(index: usize, run: &Value) -> Result<BaseRun, Problem> {
    let prefix = format!("base_runs[{index}]");
    let Value::Mapping(map) = run else {
        return Err(problem(
            prefix,
            format!("must be a mapping like {{success: true, steps: 40}}; found {}", show(run)),
        ));
    };
    check_keys(map, BASE_RUN_FIELDS, &format!("{prefix}."), "a base run")?;
    let success = match get(map, "success") {
        None => return Err(missing(&format!("{prefix}.success"))),
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(problem(format!("{prefix}.success"), format!("must be true or false, found {}", show(other))));
        }
    };
    let steps_field = format!("{prefix}.steps");
    let steps =
        uint(get(map, "steps").ok_or_else(|| missing(&steps_field))?, &steps_field, 0, u64::from(u32::MAX))? as u32;
    Ok(BaseRun { success, steps })
}

/// Parse a curve file for a trajectory of length `length`: `v` for `t = 0..length−1`. Errors carry
/// the line (1-based, header = 1) when there is one.
fn parse_curve(contents: &str, length: u32) -> Result<Vec<f64>, (Option<u64>, String)> {
    let expected_rows = format!("one row for each t = 0..={} (the trajectory's length is {length})", length - 1);
    // Spreadsheets often save CSV with a byte-order mark, which would otherwise end up in `t`.
    let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(contents.as_bytes());
    let headers = reader.headers().map_err(|e| (Some(1), format!("cannot read the header: {e}")))?.clone();
    if headers.iter().all(str::is_empty) {
        return Err((None, format!("is empty; expected the header `t,v` and {expected_rows}")));
    }
    let column = |name: &str| -> Result<usize, (Option<u64>, String)> {
        let found: Vec<usize> = headers.iter().enumerate().filter(|(_, h)| *h == name).map(|(i, _)| i).collect();
        match found[..] {
            [i] => Ok(i),
            [] => Err((
                Some(1),
                format!(
                    "the header has no column `{name}` (expected `t,v`, found `{}`)",
                    headers.iter().collect::<Vec<_>>().join(",")
                ),
            )),
            _ => Err((Some(1), format!("the header has the column `{name}` twice"))),
        }
    };
    let (t_col, v_col) = (column("t")?, column("v")?);

    let mut values: Vec<Option<(f64, u64)>> = vec![None; length as usize];
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line());
            let message = match e.kind() {
                csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                    format!("has {len} fields where the header has {expected_len}")
                }
                _ => format!("cannot be read: {e}"),
            };
            (line, message)
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let at = |message: String| (Some(line), message);
        let raw_t = record.get(t_col).unwrap_or("");
        let t = match raw_t.parse::<u64>() {
            Ok(t) if t < u64::from(length) => t as usize,
            Ok(t) => return Err(at(format!("t = {t} is outside 0..={}; expected {expected_rows}", length - 1))),
            Err(_) => return Err(at(format!("t = {raw_t:?} is not a step (a whole number ≥ 0)"))),
        };
        let raw_v = record.get(v_col).unwrap_or("");
        let v = raw_v.parse::<f64>().map_err(|_| at(format!("v = {raw_v:?} is not a number")))?;
        if v.is_nan() {
            return Err(at("v = NaN is not a number".into()));
        }
        if !(0.0..=1.0).contains(&v) {
            return Err(at(format!("v = {raw_v} is outside [0, 1]")));
        }
        if let Some((_, first)) = values[t] {
            return Err(at(format!("t = {t} appears twice (first on line {first})")));
        }
        values[t] = Some((v, line));
    }

    let missing: Vec<usize> = values.iter().enumerate().filter(|(_, v)| v.is_none()).map(|(t, _)| t).collect();
    if missing.len() == length as usize {
        return Err((None, format!("has no rows; expected {expected_rows}")));
    }
    if !missing.is_empty() {
        const SHOWN: usize = 5;
        let mut list = missing.iter().take(SHOWN).map(ToString::to_string).collect::<Vec<_>>().join(", ");
        if missing.len() > SHOWN {
            list.push_str(&format!(" and {} more", missing.len() - SHOWN));
        }
        return Err((None, format!("has no row for t = {list}; expected {expected_rows}")));
    }
    Ok(values.into_iter().map(|v| v.map_or(0.0, |(v, _)| v)).collect())
}

/// Read a referenced file: a regular file of at most [`MAX_FILE_BYTES`], UTF-8.
fn read_limited(path: &Path) -> Result<String, String> {
    bounds::read_text(path, MAX_FILE_BYTES).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The files a spec names (`curve` and `recorded` of each trajectory), with the trajectory and
/// field naming each, for [`read_with_files`]. A spec too malformed to walk names none; `parse`
/// reports why.
fn file_references(yaml: &str) -> Vec<(TrajectoryRef, &'static str, String)> {
    let Ok(mut doc) = serde_norway::from_str::<Value>(yaml) else { return Vec::new() };
    if doc.apply_merge().is_err() {
        return Vec::new();
    }
    let Some(entries) = doc.get("trajectories").and_then(Value::as_sequence) else { return Vec::new() };
    let mut out = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let named = match entry.get("id").and_then(Value::as_str) {
            Some(id) if valid_name(id) => TrajectoryRef::Id(id.to_string()),
            _ => TrajectoryRef::Index(index),
        };
        for field in ["curve", "recorded"] {
            if let Some(path) = entry.get(field).and_then(Value::as_str) {
                out.push((named.clone(), field, path.to_string()));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading YAML values with messages that name the field

/// What is wrong, and where, before it is attributed to the study or a trajectory.
struct Problem {
    field: String,
    message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem { field: field.into(), message: message.into() }
}

fn missing(field: &str) -> Problem {
    problem(field, "is missing")
}

fn top_error(p: Problem) -> SpecError {
    SpecError::Field { field: p.field, message: p.message }
}

/// A field's value; an explicit `null` counts as absent.
fn get<'a>(map: &'a Mapping, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

/// A required study-level field (`prefix` is the path of the mapping it sits in, e.g. `runner.`).
fn required<'a>(map: &'a Mapping, key: &str, prefix: &str) -> Result<&'a Value, SpecError> {
    get(map, key).ok_or_else(|| top_error(missing(&format!("{prefix}{key}"))))
}

fn optional_mapping<'a>(top: &'a Mapping, key: &str, like: &str) -> Result<Option<&'a Mapping>, SpecError> {
    match get(top, key) {
        None => Ok(None),
        Some(Value::Mapping(map)) => Ok(Some(map)),
        Some(other) => Err(top_error(problem(key, format!("must be {like}; found {}", show(other))))),
    }
}

/// Reject keys outside `allowed` (typo protection). `prefix` is prepended to the offending key.
fn check_keys(map: &Mapping, allowed: &[&str], prefix: &str, what: &str) -> Result<(), Problem> {
    for key in map.keys() {
        let Some(name) = key.as_str() else {
            return Err(problem(
                prefix.trim_end_matches('.'),
                format!("has a key that is not a field name: {}", show(key)),
            ));
        };
        if !allowed.contains(&name) {
            return Err(problem(
                format!("{prefix}{name}"),
                format!("is not a field of {what} (expected one of: {})", allowed.join(", ")),
            ));
        }
    }
    Ok(())
}

/// A name-like string: not empty, no surrounding blanks, no control characters.
fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.trim() == s && !s.chars().any(char::is_control)
}

fn text(value: &Value, field: &str) -> Result<String, Problem> {
    match value {
        Value::String(s) if valid_name(s) => Ok(s.clone()),
        Value::String(s) if s.trim().is_empty() => Err(problem(field, "is empty")),
        Value::String(s) => Err(problem(field, format!("= {s:?} has surrounding blanks or control characters"))),
        other => Err(problem(field, format!("must be text, found {} (quote it)", show(other)))),
    }
}

/// A whole number in `lo..=hi`.
fn uint(value: &Value, field: &str, lo: u64, hi: u64) -> Result<u64, Problem> {
    let range = if lo == 0 && hi >= u64::from(u32::MAX) {
        "a whole number ≥ 0".to_string()
    } else {
        format!("a whole number from {lo} to {hi}")
    };
    let Value::Number(n) = value else {
        return Err(problem(field, format!("must be {range}, found {}", show(value))));
    };
    match (n.as_u64(), n.as_i64()) {
        (Some(v), _) if (lo..=hi).contains(&v) => Ok(v),
        (Some(v), _) => Err(problem(field, format!("= {v} is outside {lo}..={hi}"))),
        (None, Some(v)) => Err(problem(field, format!("= {v} is negative; expected {range}"))),
        (None, None) => Err(problem(field, format!("= {n} is not a whole number; expected {range}"))),
    }
}

/// Any number, as `f64`.
fn number(value: &Value, field: &str) -> Result<f64, Problem> {
    match value {
        Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
        other => Err(problem(field, format!("must be a number, found {}", show(other)))),
    }
}

/// A number in `[lo, hi]`.
fn real(value: &Value, field: &str, lo: f64, hi: f64) -> Result<f64, Problem> {
    let v = number(value, field)?;
    if v.is_nan() {
        Err(problem(field, "= NaN is not a number"))
    } else if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(problem(field, format!("= {v} is outside [{lo}, {hi}]")))
    }
}

/// A value as a user would recognize it in their file.
fn show(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

#[cfg(test)]
mod tests;
