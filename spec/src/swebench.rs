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
use serde_norway::{Mapping, Value};
use vcurve_record::import::swebench_image;
use vcurve_record::runner::SYNTHETIC;
use vcurve_record::{Evaluator, Task, Trajectory, TrajectorySpec};

use super::tasks::TaskEntry;
use super::{
    MAX_BASE_RUNS, Problem, SpecError, TrajectoryRef, check_keys, check_task, get, missing, problem, show, text,
    top_error, uint, valid_name,
};

const FIELDS: &[&str] = &["dataset", "instances", "image", "image_field", "workdir", "base_runs"];
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

/// `swebench:`: its instances as tasks appended to `tasks` (the `tasks:` entries, whose SWE-bench
/// evaluators get their rows here), and the dataset for the recorded runs ([`fill_recorded`]).
pub(super) fn parse(
    top: &Mapping,
    runner_kind: &str,
    file: &dyn Fn(&str) -> Option<String>,
    tasks: &mut Vec<TaskEntry>,
) -> Result<Option<Dataset>, SpecError> {
    let map = match get(top, "swebench") {
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
    check_keys(map, FIELDS, "", "swebench").map_err(at)?;
    if runner_kind == SYNTHETIC {
        return Err(top_error(problem(
            "swebench",
            "is given, but the synthetic runner neither makes base runs nor judges patches; use a runner that runs \
             the agent (agent, mini-swe-agent)",
        )));
    }
    let path = text(get(map, "dataset").ok_or_else(|| at(missing("dataset")))?, "dataset").map_err(at)?;
    let Some(contents) = file(&path) else {
        return Err(at(problem(
            "dataset",
            format!("{path}: was not found (paths are relative to the spec file's directory)"),
        )));
    };
    let (rows, order) = read_dataset(&contents).map_err(|m| at(problem("dataset", format!("{path}: {m}"))))?;
    let mut dataset = Dataset { path, rows, instances_given: false, used: 0 };

    let image_choice = match (get(map, "image"), get(map, "image_field")) {
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
    let workdir = match get(map, "workdir") {
        None => DEFAULT_WORKDIR.to_string(),
        Some(v) => text(v, "workdir").map_err(at)?,
    };
    if !workdir.starts_with('/') {
        return Err(at(problem("workdir", format!("= {workdir:?} must be an absolute path"))));
    }
    let base_runs = match get(map, "base_runs") {
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

    let instances: Vec<(String, String)> = match get(map, "instances") {
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
    dataset.instances_given = get(map, "instances").is_some();
    if !dataset.instances_given && dataset.used == 0 && get(top, "trajectories").is_none() {
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
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value as Json;
    use vcurve_record::{Evaluator, StudySpec, Trajectory};

    use crate::{Launch, SpecError, load, parse_launch};

    /// Three rows shaped like SWE-bench Verified's (short stand-in text).
    const DATASET: &str = include_str!("../../coordinator/tests/fixtures/swebench/verified-3.jsonl");
    /// A real mini-swe-agent run of django__django-10999 (format `mini-swe-agent-1`).
    const DJANGO_RUN: &[u8] =
        include_bytes!("../../record/tests/fixtures/mini-swe-agent/django__django-10999.v1.traj.json");

    const SPEC: &str = "name: swe\nseed: 7\nrunner: {kind: agent, command: [python3, -m, agent]}\n";
    const BLOCK: &str = "swebench:\n  dataset: data/verified.jsonl\n";

    fn with_block(block: &str) -> String {
        format!("{SPEC}{BLOCK}{block}")
    }

    fn files(dataset: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("data/verified.jsonl".to_string(), dataset.to_string())])
    }

    fn launch(yaml: &str, files: &BTreeMap<String, String>) -> Result<Launch, SpecError> {
        parse_launch(yaml, &|p| files.get(p).cloned())
    }

    fn parsed(yaml: &str) -> StudySpec {
        launch(yaml, &files(DATASET)).unwrap_or_else(|e| panic!("{e}\n{yaml}")).spec
    }

    fn rejected_with(yaml: &str, files: &BTreeMap<String, String>) -> String {
        match launch(yaml, files) {
            Err(e) => e.to_string(),
            Ok(l) => panic!("accepted:\n{yaml}\n{:?}", l.spec.tasks),
        }
    }

    fn assert_mentions(message: &str, parts: &[&str]) {
        for part in parts {
            assert!(message.contains(part), "{message:?} does not mention {part:?}");
        }
    }

    fn row(line: usize) -> Json {
        serde_json::from_str(DATASET.lines().nth(line).unwrap()).unwrap()
    }

    /// The dataset with one row's field set (`None` removes it).
    fn with_field(line: usize, field: &str, value: Option<Json>) -> String {
        with_field_of(DATASET, line, field, value)
    }

    fn with_field_of(dataset: &str, line: usize, field: &str, value: Option<Json>) -> String {
        dataset
            .lines()
            .enumerate()
            .map(|(i, l)| {
                let mut r: Json = serde_json::from_str(l).unwrap();
                if i == line {
                    let o = r.as_object_mut().unwrap();
                    match &value {
                        Some(v) => o.insert(field.to_string(), v.clone()),
                        None => o.remove(field),
                    };
                }
                format!("{r}\n")
            })
            .collect()
    }

    #[test]
    fn instances_become_tasks_with_the_harness_images_and_their_rows() {
        let spec = parsed(&with_block("  instances: [django__django-10999, astropy__astropy-14309]\n  base_runs: 4\n"));
        assert!(spec.trajectories.is_empty(), "a study from tasks");
        let ids: Vec<&str> = spec.tasks.iter().map(|t| t.task.id.as_str()).collect();
        assert_eq!(ids, ["django__django-10999", "astropy__astropy-14309"], "in the order of instances");
        let django = &spec.tasks[0];
        assert_eq!(django.base_runs, 4);
        assert_eq!(django.task.image, "swebench/sweb.eval.x86_64.django_1776_django-10999:latest");
        assert_eq!(spec.tasks[1].task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest");
        assert_eq!(django.task.workdir, "/testbed");
        assert_eq!(
            django.task.problem_statement.as_deref(),
            Some("Fix parse_duration() for some negative durations\n")
        );
        assert_eq!(
            django.task.evaluator,
            Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(0)) }
        );
        let Evaluator::Swebench { instance: Some(stored), .. } = &spec.tasks[1].task.evaluator else { panic!() };
        assert_eq!(stored["FAIL_TO_PASS"], row(2)["FAIL_TO_PASS"], "the row as read, lists still JSON-encoded");
        assert_eq!(spec.selection, Some(vcurve_record::SelectionSpec { seed: 7, target: None }));
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<StudySpec>(&json).unwrap(), spec);
    }

    #[test]
    fn all_takes_every_row_in_file_order_and_the_study_parameters_apply() {
        let yaml = format!(
            "{}base_runs: 6\nselection: {{band: [1, 5], per_task: 2}}\ncontrols: {{sanity: 18}}\n",
            with_block("  instances: all\n")
        );
        let spec = parsed(&yaml);
        let ids: Vec<&str> = spec.tasks.iter().map(|t| t.task.id.as_str()).collect();
        assert_eq!(ids, ["django__django-10999", "astropy__astropy-13236", "astropy__astropy-14309"]);
        assert!(spec.tasks.iter().all(|t| t.base_runs == 6), "base_runs: 6 for every instance");
        assert_eq!(
            (spec.thresholds.band_min, spec.thresholds.band_max, spec.thresholds.trajectories_per_task),
            (1, 5, 2)
        );
        // 3 × 6 base runs may all fail and become trajectories; 19 may not.
        assert_mentions(
            &rejected_with(&yaml.replace("sanity: 18", "sanity: 19"), &files(DATASET)),
            &["controls.sanity", "18"],
        );
    }

    #[test]
    fn the_image_may_be_a_template_or_a_field_of_the_row_and_the_workdir_another_directory() {
        let spec = parsed(&with_block(
            "  instances: [django__django-10999]\n  image: \"mirror:5000/{harness}\"\n  workdir: /work\n",
        ));
        let task = &spec.tasks[0].task;
        assert_eq!(task.image, "mirror:5000/swebench/sweb.eval.x86_64.django_1776_django-10999:latest");
        assert_eq!(task.workdir, "/work");
        let spec = parsed(&with_block("  instances: [django__django-10999]\n  image: \"local/{instance_id}:v1\"\n"));
        assert_eq!(spec.tasks[0].task.image, "local/django__django-10999:v1");
        let dataset = with_field(0, "image_name", Some(Json::from("ghcr.io/x/django-10999:1")));
        let yaml = with_block("  instances: [django__django-10999]\n  image_field: image_name\n");
        let spec = launch(&yaml, &files(&dataset)).unwrap().spec;
        assert_eq!(spec.tasks[0].task.image, "ghcr.io/x/django-10999:1");
    }

    #[test]
    fn a_row_that_names_its_image_must_name_the_one_the_agent_runs_in() {
        // The harness judges in the row's image: the last row's is the harness's name, untagged.
        let spec = parsed(&with_block("  instances: [astropy__astropy-14309]\n"));
        assert_eq!(spec.tasks[0].task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest");
        let spec = parsed(&with_block("  instances: [astropy__astropy-14309]\n  image_field: image\n"));
        assert_eq!(spec.tasks[0].task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309");
        let mirror = with_block("  instances: [astropy__astropy-14309]\n  image: \"mirror:5000/{harness}\"\n");
        assert_mentions(
            &rejected_with(&mirror, &files(DATASET)),
            &[
                "swebench.dataset data/verified.jsonl: line 3 (instance \"astropy__astropy-14309\"): the row's image",
                "is not \"mirror:5000/swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest\"",
                "from swebench.image",
                "image_field: image",
            ],
        );
        // Nor may a task's or a recorded run's differ from its row's.
        let dataset = with_field(0, "image", Some(Json::from("docker.io/other/django:1")));
        let yaml = format!("{}{INLINE}", with_block(""));
        assert_mentions(
            &rejected_with(&yaml, &files(&dataset)),
            &["tasks[1].evaluator of task \"dj\"", "the row's image \"docker.io/other/django:1\" is not \"dj:1\""],
        );
        let dataset = with_field(0, "image", Some(Json::from("dj:1")));
        assert_eq!(launch(&yaml, &files(&dataset)).unwrap().spec.tasks.len(), 2);
    }

    const INLINE: &str = "tasks:\n  - id: calc-1\n    image: calc:1\n    workdir: /testbed\n    \
                          evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}\n  - id: dj\n    \
                          image: dj:1\n    workdir: /testbed\n    \
                          evaluator: {kind: swebench, instance_id: django__django-10999}\n";

    #[test]
    fn tasks_and_instances_combine_and_tasks_judged_by_the_harness_get_their_rows() {
        let spec = parsed(&format!("{}{INLINE}", with_block("  instances: [astropy__astropy-13236]\n")));
        let ids: Vec<&str> = spec.tasks.iter().map(|t| t.task.id.as_str()).collect();
        assert_eq!(ids, ["calc-1", "dj", "astropy__astropy-13236"], "the tasks entries, then the instances");
        assert!(matches!(spec.tasks[0].task.evaluator, Evaluator::Command { .. }));
        assert_eq!(
            spec.tasks[1].task.evaluator,
            Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(0)) }
        );
        assert_eq!(spec.tasks[1].task.image, "dj:1", "a task's own image is kept");
        // The dataset alone, for the rows of `tasks:`.
        assert_eq!(parsed(&format!("{}{INLINE}", with_block(""))).tasks.len(), 2);
        // An id in both is given twice; a harness task the dataset lacks could never be judged.
        let both = format!("{}{INLINE}", with_block("  instances: [django__django-10999]\n"));
        let both = both.replace("id: dj\n", "id: django__django-10999\n");
        assert_mentions(
            &rejected_with(&both, &files(DATASET)),
            &["swebench.instances[0]", "django__django-10999", "tasks[1]"],
        );
        assert_mentions(
            &rejected_with(&both.replace("instances: [django__django-10999]", "instances: all"), &files(DATASET)),
            &["swebench.instances (all: line 1 of data/verified.jsonl) = \"django__django-10999\"", "tasks[1]"],
        );
        let absent =
            format!("{}{INLINE}", with_block("")).replace("instance_id: django__django-10999", "instance_id: a__b-1");
        assert_mentions(
            &rejected_with(&absent, &files(DATASET)),
            &["tasks[1].evaluator of task \"dj\": data/verified.jsonl has no row of SWE-bench instance \"a__b-1\""],
        );
    }

    fn imported_run() -> String {
        let options = vcurve_record::import::ImportOptions::default();
        let imported =
            vcurve_record::import::import_mini_swe_agent("django__django-10999.v1.traj.json", DJANGO_RUN, &options)
                .unwrap();
        serde_json::to_string_pretty(&imported.trajectory).unwrap()
    }

    #[test]
    fn an_imported_run_gets_its_row_and_is_digested_with_it() {
        let run_json = imported_run();
        let unfilled = Trajectory::from_json(run_json.as_bytes()).unwrap();
        assert_eq!(
            unfilled.task.evaluator,
            Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: None }
        );
        let mut files = files(DATASET);
        files.insert("runs/django.json".into(), run_json.clone());
        let yaml = format!("{}trajectories:\n  - id: dj-1\n    recorded: runs/django.json\n", with_block(""));
        let launch = launch(&yaml, &files).unwrap();
        assert!(launch.spec.tasks.is_empty(), "without instances the dataset only gives rows");
        let digest = launch.spec.trajectories[0].recorded.clone().unwrap();
        assert_ne!(digest, unfilled.digest(), "digested with the row filled in");
        assert_eq!(launch.recorded.keys().collect::<Vec<_>>(), [&digest]);
        let run = &launch.recorded[&digest];
        assert_eq!(run.digest(), digest);
        assert_eq!(
            run.task.evaluator,
            Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(0)) }
        );
        let mut expected = unfilled.clone();
        expected.task.evaluator = run.task.evaluator.clone();
        assert_eq!(*run, expected, "nothing else changes: the image, workdir and steps are as recorded");
        let payload = &launch.payloads()[0];
        assert_eq!(payload.task_def(), Some(&run.task), "workers judge the run with its row");
        assert_eq!(launch.spec.trajectories[0].task, "django__django-10999");

        // A run that carries the dataset's row keeps its digest; one that carries another is refused.
        files.insert("runs/django.json".into(), serde_json::to_string(run).unwrap());
        let again = crate::parse_launch(&yaml, &|p| files.get(p).cloned()).unwrap();
        assert_eq!(again.spec.trajectories[0].recorded.as_deref(), Some(digest.as_str()));
        let mut other = run.clone();
        other.task.evaluator =
            Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(1)) };
        files.insert("runs/django.json".into(), serde_json::to_string(&other).unwrap());
        assert_mentions(
            &rejected_with(&yaml, &files),
            &[
                "trajectory \"dj-1\": recorded run: carries a dataset row",
                "differs from the row on line 1 of data/verified.jsonl",
            ],
        );
        // A run whose instance the dataset lacks could never be judged.
        files.insert("runs/django.json".into(), run_json.clone());
        let dataset: String = DATASET.lines().skip(1).map(|l| format!("{l}\n")).collect();
        files.insert("data/verified.jsonl".into(), dataset);
        assert_mentions(
            &rejected_with(&yaml, &files),
            &[
                "trajectory \"dj-1\": recorded run: data/verified.jsonl has no row of SWE-bench instance",
                "\"django__django-10999\"",
            ],
        );
        // Base runs of instances and recorded runs together.
        files.insert("data/verified.jsonl".into(), DATASET.into());
        let both = yaml.replace(BLOCK, &format!("{BLOCK}  instances: [astropy__astropy-14309]\n"));
        let spec = crate::parse_launch(&both, &|p| files.get(p).cloned()).unwrap().spec;
        assert_eq!((spec.tasks.len(), spec.trajectories.len()), (1, 1));
        assert_eq!(spec.trajectories[0].recorded.as_deref(), Some(digest.as_str()));
    }

    #[test]
    fn a_bad_dataset_is_refused_naming_the_line() {
        let yaml = with_block("  instances: [django__django-10999]\n");
        let line = |n: usize, text: &str| -> String {
            let mut lines: Vec<String> = DATASET.lines().map(str::to_string).collect();
            lines.insert(n - 1, text.to_string());
            lines.join("\n")
        };
        let first = DATASET.lines().next().unwrap();
        for (dataset, parts) in [
            (line(3, "{\"instance_id\": "), &["swebench.dataset data/verified.jsonl: line 3: not JSON"][..]),
            (line(2, "[1, 2]"), &["line 2", "is a list, not a row"][..]),
            (line(1, "{\"problem_statement\": \"x\"}"), &["line 1: instance_id is missing"][..]),
            (line(1, "{\"instance_id\": 12}"), &["line 1: instance_id must be text, found a number"][..]),
            (line(4, first), &["line 4: instance_id \"django__django-10999\" appears twice (lines 1 and 4)"][..]),
            (format!("[{first}]"), &["line 1: is a list, not a row", "one JSON array", "JSON Lines"][..]),
            (format!("[\n{first},\n]"), &["line 1: not JSON", "one JSON array", "JSON Lines"][..]),
            ("\n \n".to_string(), &["swebench.dataset data/verified.jsonl: has no rows"][..]),
            (
                with_field(0, "problem_statement", None),
                &["swebench.dataset", "line 1 (instance \"django__django-10999\"): problem_statement is missing"][..],
            ),
            (with_field(0, "problem_statement", Some(Json::from(3))), &["problem_statement must be text"][..]),
            (with_field(0, "FAIL_TO_PASS", Some(Json::from("[\"a\", 1]"))), &["line 1", "FAIL_TO_PASS"][..]),
            (with_field(0, "PASS_TO_PASS", Some(Json::from("not json"))), &["PASS_TO_PASS", "not JSON"][..]),
            (with_field(0, "version", Some(Json::from(3.0))), &["version must be text, found a number"][..]),
            (with_field(0, "eval_type", Some(Json::from("all"))), &["eval_type = \"all\"", "pass_and_fail"][..]),
            (with_field(0, "FAIL_TO_PASS", None), &["line 1", "lacks FAIL_TO_PASS, which the swebench evaluator"][..]),
            (with_field(0, "image", Some(Json::from(2))), &["image must be text"][..]),
            (
                // A SWE-bench 4 row: swebench 5.0.2 could not judge its patches.
                ["log_parser", "eval_type", "eval_script"]
                    .into_iter()
                    .fold(DATASET.to_string(), |d, f| with_field_of(&d, 0, f, None)),
                &["line 1 (instance \"django__django-10999\"): lacks log_parser, eval_type, eval_script", "v5"][..],
            ),
        ] {
            assert_mentions(&rejected_with(&yaml, &files(&dataset)), parts);
        }
        // Lists of test names as lists, blank lines, a byte-order mark and CRLF are read.
        let lists = with_field(0, "FAIL_TO_PASS", Some(serde_json::json!(["a", "b"])));
        let lists = format!("\u{feff}{}", lists.replace('\n', "\r\n\r\n"));
        assert_eq!(launch(&yaml, &files(&lists)).unwrap().spec.tasks.len(), 1);
    }

    #[test]
    fn bad_swebench_blocks_are_refused_naming_the_field() {
        let ok = files(DATASET);
        for (yaml, parts) in [
            (
                with_block("  instances: [django__django-10999, x__y-1]\n"),
                &["swebench.instances[1] = \"x__y-1\" is not in data/verified.jsonl"][..],
            ),
            (
                with_block("  instances: [x__y-1, django__django-10999, x__y-2]\n"),
                &["swebench.instances[0] = \"x__y-1\"", "nor are swebench.instances[2] = \"x__y-2\"", "3 rows"][..],
            ),
            (
                with_block("  instances: [django__django-10999, django__django-10999]\n"),
                &["swebench.instances[1]", "twice", "[0]"][..],
            ),
            (with_block("  instances: []\n"), &["swebench.instances", "empty", "all"][..]),
            (with_block("  instances: every\n"), &["swebench.instances", "list of instance ids"][..]),
            (with_block("  instances: [12]\n"), &["swebench.instances[0]", "text"][..]),
            (with_block(""), &["swebench.instances", "missing", "no task or recorded run"][..]),
            (
                with_block("  instances: all\n  image: x\n  image_field: image_name\n"),
                &["swebench.image_field", "both"][..],
            ),
            (with_block("  instances: all\n  image: \"x/{id}\"\n"), &["swebench.image", "{id}", "placeholder"][..]),
            (
                with_block("  instances: all\n  image_field: image_name\n"),
                &["swebench.image_field = \"image_name\"", "line 1", "no such field"][..],
            ),
            (with_block("  instances: all\n  workdir: testbed\n"), &["swebench.workdir", "absolute"][..]),
            (with_block("  instances: all\n  base_runs: 0\n"), &["swebench.base_runs = 0", "1..=1000"][..]),
            (with_block("  instance: all\n"), &["swebench.instance", "not a field", "instances"][..]),
            (format!("{SPEC}swebench:\n  instances: all\n"), &["swebench.dataset is missing"][..]),
            (format!("{SPEC}swebench: data/verified.jsonl\n"), &["swebench", "mapping"][..]),
            (
                with_block("  instances: all\n").replace("data/verified.jsonl", "data/none.jsonl"),
                &["swebench.dataset data/none.jsonl: was not found", "relative to the spec"][..],
            ),
            (
                with_block("  instances: all\n")
                    .replace("kind: agent, command: [python3, -m, agent]", "kind: synthetic"),
                &["swebench", "synthetic"][..],
            ),
        ] {
            assert_mentions(&rejected_with(&yaml, &ok), parts);
        }
    }

    #[test]
    fn loading_a_spec_reads_its_dataset_relative_to_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/verified.jsonl"), DATASET).unwrap();
        std::fs::write(dir.path().join("study.yaml"), with_block("  instances: all\n")).unwrap();
        assert_eq!(load(&dir.path().join("study.yaml")).unwrap().tasks.len(), 3);
        std::fs::remove_file(dir.path().join("data/verified.jsonl")).unwrap();
        let e = load(&dir.path().join("study.yaml")).unwrap_err().to_string();
        assert_mentions(&e, &["swebench.dataset data/verified.jsonl: cannot read"]);
    }

    #[test]
    fn the_papers_agent_settings_run_a_swebench_study_with_their_options_kept() {
        // mini-swe-agent 2.4.6 on vLLM at temperature 0.70, top-p 0.80: the runner's to validate.
        let runner = "runner: {kind: mini-swe-agent, model: {model_name: openai/Qwen/Qwen3-32B, \
                      base_url: \"http://127.0.0.1:8000/v1\", temperature: 0.7, top_p: 0.8}}\n";
        let yaml =
            with_block("  instances: all\n").replace("runner: {kind: agent, command: [python3, -m, agent]}\n", runner);
        let spec = parsed(&yaml);
        assert_eq!((spec.runner.kind.as_str(), spec.tasks.len()), ("mini-swe-agent", 3));
        assert_eq!(spec.runner.options["model"]["temperature"], 0.7);
        assert_eq!(spec.runner.options["model"]["top_p"], 0.8);
    }

    #[test]
    fn a_dataset_the_size_of_verified_is_read() {
        // 500 rows of 20 kB, like SWE-bench Verified's 500 instances in ~10 MB.
        let text = "x".repeat(20_000);
        let dataset: String = (0..500)
            .map(|i| {
                let row = serde_json::json!({
                    "instance_id": format!("org__repo-{i}"), "repo": "org/repo", "problem_statement": text,
                    "FAIL_TO_PASS": "[\"t\"]", "PASS_TO_PASS": "[]", "version": "1.0",
                    "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail", "eval_script": "pytest",
                });
                format!("{row}\n")
            })
            .collect();
        assert!(dataset.len() > 10_000_000);
        let spec = launch(&with_block("  instances: all\n  base_runs: 2\n"), &files(&dataset)).unwrap().spec;
        assert_eq!(spec.tasks.len(), 500);
        assert_eq!(spec.tasks[499].task.image, "swebench/sweb.eval.x86_64.org_1776_repo-499:latest");
    }
}
