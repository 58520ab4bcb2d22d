//! The study spec: the YAML file a user launches a study from, parsed once into a validated
//! `StudySpec` (the type lives in `vcurve-record`).
//!
//! Data flow: `vcurve launch SPEC.yaml` calls [`read_with_files`], which reads the spec
//! and every curve file it names; the client sends both to the coordinator, which calls
//! [`parse`] with a lookup into what it was sent. [`load`] does both in one process (`vcurve
//! demo`, tests). `parse` reads each level of the YAML into its derived raw struct (`raw`: the
//! fields each level may have) as it reaches it, and validates it in one pass into the types of
//! `vcurve-record`, with errors that name the trajectory, the field and, in a curve file, the line.
//! Nothing is stored until `parse` has accepted the whole spec; the coordinator stores the result
//! as JSON with the curves inlined (each task's problem statement apart, once, by digest), so a
//! stored study never depends on a user's file again.
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
//! - The runner's options are parsed here, once, into [`RunnerSpec`]: the `synthetic`, `agent` and
//!   `mini-swe-agent` runners' typed options (`vcurve_record::runner`), validated naming the option;
//!   another kind's options are carried as written (a coordinator accepts only the kinds it offers).
//! - Inputs are bounded ([`bounds`]): the spec and the files it names must be regular files, the
//!   spec at most [`MAX_SPEC_BYTES`] and each file it names at most [`MAX_FILE_BYTES`]; the YAML
//!   may nest at most [`MAX_YAML_DEPTH`] levels, which [`parse`] checks before parsing it: a text
//!   outside the limits is refused in milliseconds whatever its size or depth.
//! - Every file a spec names lies in the spec's folder after symbolic links are resolved, or in a
//!   folder the user allowed ([`folder`], `vcurve launch --allow-path DIR`): a spec from someone
//!   else cannot read the launching user's other files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_norway::Value;
pub use vcurve_record::study::{
    Admission, ControlCounts, DecoySpec, Label, RunnerSpec, SelectionSpec, StudySpec, TaskRuns, TrajectorySpec,
};

pub mod bounds;
mod error;
mod fields;
pub mod folder;
mod judges;
mod launch;
mod raw;
pub mod restart_check;
mod study;
mod swebench;
mod task;
pub mod task_state;
mod tasks;
mod trajectory;
mod value;
pub use bounds::ReadError;
pub use error::{SpecError, TrajectoryRef};
pub use fields::{MAX_BASE_RUNS, MAX_LENGTH};
use folder::{ConfineError, SpecFolder};
pub use launch::Launch;
use study::parse_study;
use value::{problem, show, top_error, valid_name};

/// The largest study spec: 16 MiB, 40,000 trajectories or more (the demo's take 380 bytes each
/// with their labels; curves are files of their own, limited by [`MAX_FILE_BYTES`]).
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

/// The largest file a spec may reference (a curve or a recorded trajectory). Recorded runs of
/// real agents with their message lists are megabytes to tens of megabytes.
pub const MAX_FILE_BYTES: u64 = vcurve_record::MAX_FILE_BYTES;

/// How deeply a spec's YAML may nest collections ([`bounds::yaml_depth`]). A study spec needs 5
/// (study → trajectories → trajectory → base runs → base run) and another runner's options a few
/// more. Checked before parsing: the parser would load every level of a deeper text before its
/// own limit of 128 refuses it, at microseconds a level ([`bounds`]).
pub const MAX_YAML_DEPTH: usize = 64;

/// The runner kind whose options this module validates.
pub use vcurve_record::runner::SYNTHETIC;

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
                format!(
                    "must be a mapping of fields ({}), found {}",
                    raw::fields_of::<raw::RawStudy>().join(", "),
                    show(other)
                ),
            )));
        }
    };
    if top.get("restart_check").is_some_and(|v| !v.is_null()) {
        return restart_check::parse(top).map(Request::RestartCheck);
    }
    parse_study(top, file).map(|l| Request::Study(Box::new(l)))
}

/// Read a spec file and every file it references, for a client that sends them to the
/// coordinator: the YAML, and a map from each path as written in the spec to its contents.
/// Every referenced file must lie in the spec's folder ([`folder`]). Problems other than
/// unreadable files (and YAML nested too deeply to look into) are left to [`parse`].
pub fn read_with_files(path: &Path) -> Result<(String, BTreeMap<String, String>), SpecError> {
    read_with_files_allowing(path, &[])
}

/// [`read_with_files`], allowing referenced files in the folders (or files) `allowed` too
/// (`vcurve launch --allow-path DIR`).
pub fn read_with_files_allowing(
    path: &Path,
    allowed: &[PathBuf],
) -> Result<(String, BTreeMap<String, String>), SpecError> {
    let refused = |source| SpecError::Read { path: path.into(), source };
    let yaml = bounds::read_text(path, MAX_SPEC_BYTES).map_err(refused)?;
    bounds::check_yaml(&yaml, MAX_SPEC_BYTES, MAX_YAML_DEPTH).map_err(refused)?;
    let dir = SpecFolder::of(path, allowed)?;
    let mut files = BTreeMap::new();
    for (trajectory, field, path) in file_references(&yaml) {
        if files.contains_key(&path) {
            continue;
        }
        let text = read_limited(&dir, &path).map_err(|message| match field {
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
        let text = read_limited(&dir, &path).map_err(|message| SpecError::Field {
            field: format!("tasks[{index}].{field}"),
            message: format!("{path}: {message}"),
        })?;
        files.insert(path, text);
    }
    for (index, path) in doc.as_ref().map(decoy_references).unwrap_or_default() {
        if files.contains_key(&path) {
            continue;
        }
        let text = read_limited(&dir, &path).map_err(|message| SpecError::Field {
            field: format!("decoys[{index}].recorded"),
            message: format!("{path}: {message}"),
        })?;
        files.insert(path, text);
    }
    if let Some(path) = doc.as_ref().and_then(swebench::dataset_reference).filter(|p| !files.contains_key(p)) {
        let text = read_limited(&dir, &path).map_err(|message| SpecError::Field {
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

/// Read the file a spec names as `written`: a regular file of at most [`MAX_FILE_BYTES`] in the
/// spec's folder or an allowed one, UTF-8. What it is (a regular file, its size) is checked
/// before where it leads, and it is read from where it leads.
fn read_limited(dir: &SpecFolder, written: &str) -> Result<String, String> {
    let path = dir.join(written);
    let cannot = |e: ReadError| format!("cannot read {}: {e}", path.display());
    bounds::inspect(&path, MAX_FILE_BYTES).map_err(cannot)?;
    let resolved = dir.confine(&path).map_err(|e| match e {
        ConfineError::Io(e) => cannot(ReadError::Io(e)),
        ConfineError::Outside(outside) => outside.to_string(),
    })?;
    bounds::read_text(&resolved, MAX_FILE_BYTES).map_err(cannot)
}

/// The paths a spec names only as a `problem_statement_file` (not also as a curve, a recorded
/// run, a task file or the dataset): files whose text [`parse`] puts into a task's problem
/// statement untouched, so that a coordinator holding them by digest need not read them to parse
/// the spec.
pub fn problem_statement_files(yaml: &str) -> std::collections::BTreeSet<String> {
    let Ok(mut doc) = serde_norway::from_str::<Value>(yaml) else { return Default::default() };
    if doc.apply_merge().is_err() {
        return Default::default();
    }
    let mut statements = std::collections::BTreeSet::new();
    let mut others: std::collections::BTreeSet<String> =
        file_references(yaml).into_iter().map(|(_, _, path)| path).collect();
    others.extend(swebench::dataset_reference(&doc));
    others.extend(decoy_references(&doc).into_iter().map(|(_, path)| path));
    for (_, field, path) in tasks::task_references(&doc) {
        if field == "problem_statement_file" {
            statements.insert(path);
        } else {
            others.insert(path);
        }
    }
    statements.retain(|p| !others.contains(p));
    statements
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

/// The recorded runs the spec's decoys name (`decoys[i].recorded`), with each decoy's index.
fn decoy_references(doc: &Value) -> Vec<(usize, String)> {
    let Some(entries) = doc.get("decoys").and_then(Value::as_sequence) else { return Vec::new() };
    entries
        .iter()
        .enumerate()
        .filter_map(|(index, entry)| entry.get("recorded").and_then(Value::as_str).map(|p| (index, p.to_string())))
        .collect()
}

#[cfg(test)]
mod tests;
