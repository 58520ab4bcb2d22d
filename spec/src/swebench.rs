//! `swebench:` — tasks by SWE-bench instance id from a local dataset file, and the dataset rows of
//! the study's other SWE-bench tasks and recorded runs (issue 12, item 7).
//!
//! ```yaml
//! runner: {kind: mini-swe-agent, …}                # any runner but the synthetic one
//! swebench:
//!   dataset: data/swe-bench-verified.jsonl         # JSON Lines, one instance a line; relative to the spec file
//!   instances: [django__django-10999, astropy__astropy-14309]   # or `all`; optional (see below)
//!   image: "registry.local:5000/{harness}"         # optional (default: the harness's image, below); or
//!   image_field: image_name                        #   the row's field that names the image
//!   workdir: /testbed                              # optional (default /testbed, as in SWE-bench images)
//!   base_runs: 8                                   # optional: each instance's count (default: base_runs)
//! selection: {band: [2, 6], per_task: 3}           # as for `tasks:`
//! ```
//!
//! Each instance becomes a task like an entry of `tasks:` ([`super::tasks`]): id = `instance_id`,
//! the image, the workdir, the row's `problem_statement`, and the evaluator
//! `{kind: swebench, instance_id, instance: <the whole row>}`, so base runs, the selection, the
//! controls and the decoys treat it as any task.
//!
//! Decisions the issue left open:
//!
//! - The dataset is JSON Lines, as the Hugging Face `datasets` library writes SWE-bench Verified
//!   (`to_json`); blank lines are skipped. A file that is one JSON array is refused with a hint.
//!   Every line must be a JSON object with a unique, name-like `instance_id`, whether or not the
//!   study uses it (a dataset with two rows of one instance is ambiguous). The file is read like a
//!   task file, through the spec's file reader, and may be as large as any referenced file
//!   ([`super::MAX_FILE_BYTES`]; Verified is 500 rows, ~10 MB).
//! - A row the study uses must carry what the `swebench` evaluator needs to judge a patch, checked
//!   at launch so that a row it cannot use fails there rather than as an invalid task at every
//!   evaluation after the agent runs: swebench 5.0.2 reads the v5 fields `repo`, `version`,
//!   `log_parser`, `eval_type` (`pass_and_fail` or `fail_only`) and `eval_script` (text) and
//!   `FAIL_TO_PASS`, `PASS_TO_PASS` (a list of test names, or that list JSON-encoded as in the
//!   Hugging Face dataset) — `docs/swebench-evaluator.md`. A SWE-bench 4 row, without
//!   `log_parser`, `eval_type` and `eval_script`, is refused naming what it lacks. `image`,
//!   `base_commit`, `test_patch` and `environment_setup_commit` must be text when present. A row
//!   that becomes a task needs a `problem_statement` (text). The row is stored as read.
//! - `instances` is a list of ids, in the order base runs are queued, or `all` (every row in file
//!   order). It may be left out: the dataset then only gives rows to the study's other SWE-bench
//!   tasks and recorded runs (below), and at least one of them must be in it. Ids not in the file
//!   are named by their positions in the list (the first six, and how many more).
//! - The image is the SWE-bench harness's: `swebench/sweb.eval.x86_64.<id with "__" → "_1776_",
//!   lowercased>:latest` ([`vcurve_record::import::swebench_image`], the rule `vcurve import`
//!   uses). `image` is a template instead, where `{instance_id}` is the instance id and
//!   `{harness}` the harness's image name (for a mirror); `image_field` takes the image from a
//!   field of each row. Giving both is an error. The harness judges a patch in the row's `image`
//!   when the row has one, so a row's `image` must be the task's (as Docker reads the names:
//!   `docker.io/` implied, `:latest` by default), or the agent would run in one image and be
//!   judged in another; `image_field: image` takes the row's.
//! - `swebench` and `tasks` may be given together: the study's tasks are the `tasks` entries, then
//!   the instances; an id in both is an error. A study with `swebench` is a study from tasks: it
//!   needs no `trajectories`, and `base_runs` and `selection` apply to its instances.
//! - Rows for the rest of the study: every task of `tasks:` and every recorded run of
//!   `trajectories:` judged by the `swebench` evaluator without a row (as `vcurve import
//!   mini-swe-agent` makes them) gets its instance's row from the dataset. One the dataset has no
//!   row of is an error, since none of its patches could be judged; one that carries a row already
//!   keeps it if the dataset's is the same and is an error if it differs. The image, workdir and
//!   problem statement of a recorded run are left as recorded: it ran there.
//! - A recorded run's digest is taken over the run with its row filled in, since that is the run
//!   the study replays, resumes and judges: `TrajectorySpec::recorded`, the payload workers fetch
//!   and the snapshots all agree on it. It is therefore not the digest `vcurve import` printed for
//!   the file (which has no row); the trajectory's id and task are unchanged.
//! - The runner is not checked here beyond refusing the synthetic one (which neither makes base
//!   runs nor judges patches): the agent settings of the paper (mini-swe-agent, temperature 0.70,
//!   top-p 0.80) are the runner's options, validated with the runner.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value as Json;
use serde_norway::Value;
use vcurve_record::import::swebench_image;
use vcurve_record::{Evaluator, RunnerSpec, Task, Trajectory, TrajectorySpec};

use super::tasks::TaskEntry;
use crate::error::{SpecError, TrajectoryRef};
use crate::fields::MAX_BASE_RUNS;
use crate::raw::{RawSwebench, level, required};
use crate::task::check_task;
use crate::value::{Problem, problem, show, text, top_error, uint, valid_name};
/// The working directory of SWE-bench's images.
pub const DEFAULT_WORKDIR: &str = "/testbed";
/// Row fields the `swebench` evaluator needs as text: what swebench 5.0.2's `make_test_spec` reads
/// beside `instance_id` and `image` (`agents/vcurve_agents/swebench_eval.py`,
/// `docs/swebench-evaluator.md`).
const REQUIRED_TEXT: &[&str] = &["repo", "version", "log_parser", "eval_type", "eval_script"];
/// Row fields holding lists of test names (JSON-encoded in the Hugging Face dataset); required.
const TEST_LISTS: &[&str] = &["FAIL_TO_PASS", "PASS_TO_PASS"];
/// Row fields that must be text when present (`image` falls back to the task's image).
const OPTIONAL_TEXT: &[&str] = &["image", "base_commit", "test_patch", "environment_setup_commit"];
/// The harness's evaluation types.
const EVAL_TYPES: &[&str] = &["pass_and_fail", "fail_only"];

/// One row of the dataset: its 1-based line and the row as read.
struct Row {
    line: u64,
    value: Json,
}

/// The dataset file of a study's `swebench` block, indexed by instance id.
pub(super) struct Dataset {
    /// The path as written in the spec.
    path: String,
    rows: HashMap<String, Row>,
    /// Whether `instances` was given (then the dataset is used whatever else the study has).
    instances_given: bool,
    /// Tasks and recorded runs that got (or already had) their row from it.
    used: usize,
}

/// What a task's evaluator makes of the dataset.
enum Fill {
    /// Not judged by the SWE-bench harness.
    NotSwebench,
    /// The row was filled in, or was there already and is the dataset's.
    Filled { changed: bool },
}

/// The `swebench` block's path to its dataset, for [`super::read_with_files`].
pub(super) fn dataset_reference(doc: &Value) -> Option<String> {
    doc.get("swebench")?.get("dataset")?.as_str().map(str::to_string)
}

fn at(p: Problem) -> SpecError {
    SpecError::Field { field: format!("swebench.{}", p.field), message: p.message }
}

/// `swebench:` (the field's value): its instances as tasks appended to `tasks` (the `tasks:`
/// entries, whose SWE-bench evaluators get their rows here), and the dataset for the recorded runs
/// ([`fill_recorded`]). `has_trajectories`: whether the study lists trajectories.
pub(super) fn parse(
    swebench: Option<&Value>,
    has_trajectories: bool,
    runner: &RunnerSpec,
    file: &dyn Fn(&str) -> Option<String>,
    tasks: &mut Vec<TaskEntry>,
) -> Result<Option<Dataset>, SpecError> {
    let map = match swebench {
        None => return Ok(None),
        Some(Value::Mapping(map)) => map,
        Some(other) => {
            return Err(top_error(problem(
                "swebench",
                format!(
                    "must be a mapping like {{dataset: data/swe-bench-verified.jsonl, instances: \
                     [django__django-10999]}}; found {}",
                    show(other)
                ),
            )));
        }
    };
    let raw: RawSwebench = level(map, "", "swebench").map_err(at)?;
    if matches!(runner, RunnerSpec::Synthetic(_)) {
        return Err(top_error(problem(
            "swebench",
            "is given, but the synthetic runner neither makes base runs nor judges patches; use a runner that runs \
             the agent (agent, mini-swe-agent)",
        )));
    }
    let path = text(required(&raw.dataset, "dataset").map_err(at)?, "dataset").map_err(at)?;
    let Some(contents) = file(&path) else {
        return Err(at(problem(
            "dataset",
            format!("{path}: was not found (paths are relative to the spec file's directory)"),
        )));
    };
    let (rows, order) = read_dataset(&contents).map_err(|m| at(problem("dataset", format!("{path}: {m}"))))?;
    let mut dataset = Dataset { path, rows, instances_given: false, used: 0 };

    let image_choice = match (&raw.image, &raw.image_field) {
        (Some(_), Some(_)) => {
            return Err(at(problem("image_field", "and swebench.image are both given; give one of them")));
        }
        (Some(v), None) => {
            let template = text(v, "image").map_err(at)?;
            check_template(&template).map_err(at)?;
            Image::Template(template)
        }
        (None, Some(v)) => Image::Field(text(v, "image_field").map_err(at)?),
        (None, None) => Image::Harness,
    };
    let workdir = match &raw.workdir {
        None => DEFAULT_WORKDIR.to_string(),
        Some(v) => text(v, "workdir").map_err(at)?,
    };
    if !workdir.starts_with('/') {
        return Err(at(problem("workdir", format!("= {workdir:?} must be an absolute path"))));
    }
    let base_runs = match &raw.base_runs {
        None => None,
        Some(v) => Some(uint(v, "base_runs", 1, u64::from(MAX_BASE_RUNS)).map_err(at)? as u32),
    };

    // The `tasks:` entries judged by the harness get their rows first: they come first.
    for (index, entry) in tasks.iter_mut().enumerate() {
        let named = format!("task {:?}", entry.task.id);
        match dataset.fill(&mut entry.task).map_err(|m| SpecError::Field {
            field: format!("tasks[{index}].evaluator"),
            message: format!("of {named}: {m}"),
        })? {
            Fill::NotSwebench => {}
            Fill::Filled { .. } => dataset.used += 1,
        }
    }

    let instances: Vec<(String, String)> = match &raw.instances {
        None => Vec::new(),
        Some(Value::String(s)) if s == "all" => order
            .iter()
            .map(|id| {
                (format!("swebench.instances (all: line {} of {})", dataset.rows[id].line, dataset.path), id.clone())
            })
            .collect(),
        Some(Value::Sequence(ids)) if ids.is_empty() => {
            return Err(at(problem(
                "instances",
                "is empty; name instances of the dataset, write `all`, or leave it out to use the dataset only for \
                 the rows of the study's recorded runs",
            )));
        }
        Some(Value::Sequence(ids)) => {
            let mut out: Vec<(String, String)> = Vec::with_capacity(ids.len());
            for (i, id) in ids.iter().enumerate() {
                let field = format!("instances[{i}]");
                let id = text(id, &field).map_err(at)?;
                if let Some(first) = out.iter().position(|(_, other)| *other == id) {
                    return Err(at(problem(
                        field,
                        format!("= {id:?} appears twice (swebench.instances[{first}] and [{i}])"),
                    )));
                }
                out.push((format!("swebench.instances[{i}]"), id));
            }
            let absent: Vec<&(String, String)> = out.iter().filter(|(_, id)| !dataset.rows.contains_key(id)).collect();
            if let Some(((first_field, first), rest)) = absent.split_first() {
                let mut message = format!("= {first:?} is not in {}", dataset.path);
                if !rest.is_empty() {
                    const SHOWN: usize = 5;
                    let mut others: Vec<String> =
                        rest.iter().take(SHOWN).map(|(field, id)| format!("{field} = {id:?}")).collect();
                    if rest.len() > SHOWN {
                        others.push(format!("{} more", rest.len() - SHOWN));
                    }
                    message.push_str(&format!(" (nor are {})", others.join(", ")));
                }
                message.push_str(&format!("; it has {} rows", dataset.rows.len()));
                return Err(SpecError::Field { field: first_field.clone(), message });
            }
            out
        }
        Some(other) => {
            return Err(at(problem(
                "instances",
                format!("must be a list of instance ids like [django__django-10999], or `all`; found {}", show(other)),
            )));
        }
    };
    dataset.instances_given = raw.instances.is_some();
    if !dataset.instances_given && dataset.used == 0 && !has_trajectories {
        return Err(unused(&dataset));
    }

    for (place, id) in instances {
        if let Some(index) = tasks.iter().position(|t| t.task.id == id) {
            return Err(SpecError::Field {
                field: place,
                message: format!("= {id:?} is also the id of tasks[{index}]; a task is given once"),
            });
        }
        let row = &dataset.rows[&id];
        let where_ = format!("{}: line {} (instance {id:?})", dataset.path, row.line);
        let in_row = |m: String| at(problem("dataset", format!("{where_}: {m}")));
        check_row(&row.value).map_err(in_row)?;
        let problem_statement = match row.value.get("problem_statement") {
            None | Some(Json::Null) => return Err(in_row("problem_statement is missing".into())),
            Some(Json::String(s)) if s.trim().is_empty() => return Err(in_row("problem_statement is empty".into())),
            Some(Json::String(s)) => s.clone(),
            Some(other) => return Err(in_row(format!("problem_statement must be text, found {}", kind(other)))),
        };
        let image = match &image_choice {
            Image::Harness => swebench_image(&id),
            Image::Template(t) => t.replace("{instance_id}", &id).replace("{harness}", &swebench_image(&id)),
            Image::Field(field) => match row.value.get(field) {
                Some(Json::String(s)) if !s.trim().is_empty() => s.clone(),
                None | Some(Json::Null) => {
                    return Err(at(problem("image_field", format!("= {field:?}: {where_} has no such field"))));
                }
                Some(other) => {
                    return Err(at(problem(
                        "image_field",
                        format!("= {field:?}: in {where_} it is {}, not an image name", kind(other)),
                    )));
                }
            },
        };
        let source = match &image_choice {
            Image::Harness => "the harness's naming rule",
            Image::Template(_) => "swebench.image",
            Image::Field(_) => "swebench.image_field",
        };
        same_image(&row.value, &image).map_err(|m| {
            in_row(format!(
                "{m}, the image the task gets from {source}: its patches would be judged in another image than the \
                 agent ran in; take the row's with image_field: image"
            ))
        })?;
        let task = Task {
            id: id.clone(),
            image,
            workdir: workdir.clone(),
            evaluator: Evaluator::Swebench { instance_id: id.clone(), instance: Some(row.value.clone()) },
            problem_statement: Some(problem_statement),
        };
        check_task(&task).map_err(|m| SpecError::Field { field: place.clone(), message: format!("= {id:?}: {m}") })?;
        dataset.used += 1;
        tasks.push(TaskEntry { task, base_runs });
    }
    Ok(Some(dataset))
}

/// Give the recorded runs judged by the harness their rows, re-keying `recorded` by the digests of
/// the filled runs; then check that the dataset was of use.
pub(super) fn fill_recorded(
    dataset: Option<Dataset>,
    trajectories: &mut [TrajectorySpec],
    recorded: &mut BTreeMap<String, Trajectory>,
) -> Result<(), SpecError> {
    let Some(mut dataset) = dataset else { return Ok(()) };
    let mut filled: BTreeMap<String, Trajectory> = BTreeMap::new();
    for t in trajectories.iter_mut() {
        let Some(digest) = t.recorded.clone() else { continue };
        let Some(run) = recorded.get(&digest) else { continue };
        let mut run = run.clone();
        let fill = dataset.fill(&mut run.task).map_err(|message| SpecError::Trajectory {
            trajectory: TrajectoryRef::Id(t.id.clone()),
            field: "recorded".into(),
            message: format!("run: {message}"),
        })?;
        let mut key = digest;
        if let Fill::Filled { changed } = fill {
            dataset.used += 1;
            if changed {
                key = run.digest();
                t.recorded = Some(key.clone());
            }
        }
        filled.insert(key, run);
    }
    // Every run of `recorded` is a trajectory's.
    *recorded = filled;
    if !dataset.instances_given && dataset.used == 0 {
        return Err(unused(&dataset));
    }
    Ok(())
}

/// A dataset without `instances` that no task or recorded run takes a row from.
fn unused(dataset: &Dataset) -> SpecError {
    top_error(problem(
        "swebench.instances",
        format!(
            "is missing, and no task or recorded run of the study is a SWE-bench instance that would take its row \
             from {}; name the instances to make tasks of (or `all`)",
            dataset.path
        ),
    ))
}

enum Image {
    Harness,
    Template(String),
    Field(String),
}

impl Dataset {
    /// Fill a harness-judged task's row from the dataset.
    fn fill(&self, task: &mut Task) -> Result<Fill, String> {
        let Evaluator::Swebench { instance_id, instance } = &mut task.evaluator else { return Ok(Fill::NotSwebench) };
        let Some(row) = self.rows.get(instance_id.as_str()) else {
            return Err(format!(
                "{} has no row of SWE-bench instance {instance_id:?}; without it none of the patches could be judged",
                self.path
            ));
        };
        let where_ = format!("{}: line {} (instance {instance_id:?})", self.path, row.line);
        check_row(&row.value).map_err(|m| format!("{where_}: {m}"))?;
        same_image(&row.value, &task.image).map_err(|m| {
            format!(
                "{where_}: {m}, the task's image: its patches would be judged in another image than the agent ran in"
            )
        })?;
        match instance {
            None => {
                *instance = Some(row.value.clone());
                Ok(Fill::Filled { changed: true })
            }
            Some(own) if *own == row.value => Ok(Fill::Filled { changed: false }),
            Some(_) => Err(format!(
                "carries a dataset row of SWE-bench instance {instance_id:?} that differs from the row on line {} of \
                 {}; keep one of them",
                row.line, self.path
            )),
        }
    }
}

/// Index a JSON Lines dataset by instance id; also the ids in file order. Errors name the line.
fn read_dataset(contents: &str) -> Result<(HashMap<String, Row>, Vec<String>), String> {
    let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
    let mut rows: HashMap<String, Row> = HashMap::new();
    let mut order = Vec::new();
    for (i, line) in contents.lines().enumerate() {
        let line_no = i as u64 + 1;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let at = |m: String| format!("line {line_no}: {m}");
        // A file that is one JSON array, on one line or several, is a common near miss.
        let hint = if order.is_empty() && text.starts_with('[') {
            " (the file looks like one JSON array; expected JSON Lines, one row per line, as `datasets` writes with \
             to_json)"
        } else {
            ""
        };
        let value: Json = serde_json::from_str(text).map_err(|e| at(format!("not JSON: {e}{hint}")))?;
        let Json::Object(object) = &value else {
            return Err(at(format!(
                "is {}, not a row (a JSON object with instance_id, problem_statement, …){hint}",
                kind(&value)
            )));
        };
        let id = match object.get("instance_id") {
            None | Some(Json::Null) => return Err(at("instance_id is missing".into())),
            Some(Json::String(id)) if valid_name(id) => id.clone(),
            Some(Json::String(id)) => {
                return Err(at(format!("instance_id {id:?} is empty or has blanks or control characters")));
            }
            Some(other) => return Err(at(format!("instance_id must be text, found {}", kind(other)))),
        };
        if let Some(first) = rows.get(&id) {
            return Err(at(format!("instance_id {id:?} appears twice (lines {} and {line_no})", first.line)));
        }
        order.push(id.clone());
        rows.insert(id, Row { line: line_no, value });
    }
    if rows.is_empty() {
        return Err("has no rows; expected JSON Lines, one SWE-bench instance per line".into());
    }
    Ok((rows, order))
}

/// The shapes of the fields the harness reads, where a row has them.
fn check_row(row: &Json) -> Result<(), String> {
    let absent = |field: &str| matches!(row.get(field), None | Some(Json::Null)) || row[field] == "";
    let lacking: Vec<&str> = REQUIRED_TEXT.iter().chain(TEST_LISTS).copied().filter(|f| absent(f)).collect();
    if !lacking.is_empty() {
        return Err(format!(
            "lacks {}, which the swebench evaluator needs (swebench 5.0.2 reads the v5 fields repo, version, \
             FAIL_TO_PASS, PASS_TO_PASS, log_parser, eval_type, eval_script; docs/swebench-evaluator.md): give a \
             dataset whose rows carry them",
            lacking.join(", ")
        ));
    }
    for field in REQUIRED_TEXT.iter().chain(OPTIONAL_TEXT) {
        match row.get(field) {
            None | Some(Json::Null | Json::String(_)) => {}
            Some(other) => return Err(format!("{field} must be text, found {}", kind(other))),
        }
    }
    if let Some(t) = row["eval_type"].as_str().filter(|t| !EVAL_TYPES.contains(t)) {
        return Err(format!("eval_type = {t:?} is not an evaluation type of the harness ({})", EVAL_TYPES.join(", ")));
    }
    for field in TEST_LISTS {
        let expected = "a list of test names, or that list JSON-encoded";
        let names = |list: &Json| list.as_array().is_some_and(|l| l.iter().all(Json::is_string));
        match &row[*field] {
            list @ Json::Array(_) if names(list) => {}
            Json::String(s) => match serde_json::from_str::<Json>(s) {
                Ok(list) if names(&list) => {}
                Ok(_) => return Err(format!("{field} must be {expected}; the text does not decode to a list of text")),
                Err(e) => return Err(format!("{field} must be {expected}; the text is not JSON: {e}")),
            },
            other => return Err(format!("{field} must be {expected}, found {}", kind(other))),
        }
    }
    Ok(())
}

/// A row's `image` (the harness judges in it, swebench 5) must be the task's, the image the agent
/// runs in; names are compared as Docker reads them (`docker.io/` implied, `:latest` by default).
fn same_image(row: &Json, image: &str) -> Result<(), String> {
    fn normalized(name: &str) -> String {
        let name = name.strip_prefix("docker.io/").or_else(|| name.strip_prefix("index.docker.io/")).unwrap_or(name);
        let name = name.strip_prefix("library/").unwrap_or(name);
        let last = name.rsplit('/').next().unwrap_or(name);
        if last.contains([':', '@']) { name.to_string() } else { format!("{name}:latest") }
    }
    match row.get("image") {
        Some(Json::String(own)) if normalized(own) != normalized(image) => {
            Err(format!("the row's image {own:?} is not {image:?}"))
        }
        _ => Ok(()),
    }
}

/// An image template's placeholders are `{instance_id}` and `{harness}`.
fn check_template(template: &str) -> Result<(), Problem> {
    let rest = template.replace("{instance_id}", "").replace("{harness}", "");
    if rest.contains(['{', '}']) {
        return Err(problem(
            "image",
            format!("= {template:?} has a placeholder other than {{instance_id}} and {{harness}}"),
        ));
    }
    Ok(())
}

/// A JSON value's kind, as a message names it.
fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "text",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
