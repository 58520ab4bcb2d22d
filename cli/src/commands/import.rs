//! `vcurve import mini-swe-agent FILES… --out DIR`: mini-swe-agent `.traj.json` files into
//! `vcurve.trajectory.v1` files, one per trajectory, and `DIR/import.csv`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use vcurve_record::import::{ImportOptions, Imported, SwebenchReport, import_mini_swe_agent};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// mini-swe-agent `.traj.json` files (formats mini-swe-agent-1 and mini-swe-agent-1.1).
    MiniSweAgent(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The `.traj.json` files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The folder the trajectories and `import.csv` are written into.
    #[arg(long)]
    pub out: PathBuf,
    /// A SWE-bench report (`resolved_ids`, `unresolved_ids`, `empty_patch_ids`, …) the outcomes
    /// are taken from.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// The task image, `{instance_id}` replaced by the instance id (default: the SWE-bench
    /// harness's `swebench/sweb.eval.x86_64.<id>:latest`).
    #[arg(long)]
    pub image: Option<String>,
    /// A vcurve task file (`{id, image, workdir, evaluator, problem_statement}`, as a study's
    /// `tasks:` take) for the trajectories of instance `id`, in place of the SWE-bench task the
    /// import derives (for runs on your own tasks and images). Repeat it for several tasks.
    #[arg(long = "task", value_name = "FILE")]
    pub tasks: Vec<PathBuf>,
}

/// The end type `import.csv` gives a run a model-server outage ended (no outcome).
const INFRASTRUCTURE: &str = "infrastructure";

/// The folder, inside `--out`, the trajectories of infrastructure runs are written to.
const INFRASTRUCTURE_DIR: &str = "infrastructure";

/// The `--task` files by task id.
fn read_tasks(paths: &[PathBuf]) -> anyhow::Result<std::collections::BTreeMap<String, vcurve_record::Task>> {
    let mut tasks = std::collections::BTreeMap::new();
    for path in paths {
        let bytes = crate::input::read_small_file(path).with_context(|| format!("--task {}", path.display()))?;
        let task: vcurve_record::Task = serde_json::from_slice(&bytes).with_context(|| {
            format!("--task {}: not a vcurve task (id, image, workdir, evaluator, problem_statement)", path.display())
        })?;
        if let Some(first) = tasks.insert(task.id.clone(), task) {
            anyhow::bail!("--task {}: a second task {} (one task per id)", path.display(), first.id);
        }
    }
    Ok(tasks)
}

/// A file name for an instance that no other trajectory of this import took.
fn file_name(instance_id: &str, taken: &mut BTreeSet<String>) -> String {
    let base: String = instance_id.chars().map(|c| if c == '/' || c == '\\' { '_' } else { c }).collect();
    let mut name = format!("{base}.json");
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}.{n}.json");
        n += 1;
    }
    name
}

fn or_empty<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// One line per imported file on stdout, one per refused file on stderr; an error when any file
/// was refused.
pub fn run(args: &ImportArgs) -> anyhow::Result<()> {
    let report = match &args.report {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            Some(SwebenchReport::from_json(&bytes).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    let options = ImportOptions { image: args.image.clone(), report };
    let tasks = read_tasks(&args.tasks)?;
    let mut used = BTreeSet::new();
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut taken = BTreeSet::new();
    let mut table = csv::Writer::from_writer(Vec::new());
    table.write_record([
        "file",
        "instance_id",
        "format",
        "steps",
        "exit_status",
        "end_type",
        "outcome",
        "first_edit",
        "first_symptom",
        "digest",
        "outage",
        "model_name",
        "temperature",
        "agent_version",
        "environment",
    ])?;
    let mut failed = 0;
    for path in &args.files {
        let imported = std::fs::read(path)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| Ok(import_mini_swe_agent(&path.to_string_lossy(), &bytes, &options)?));
        let mut imported = match imported {
            Ok(i) => i,
            Err(e) => {
                eprintln!("vcurve: {}: not imported: {e:#}", path.display());
                failed += 1;
                continue;
            }
        };
        if let Some(task) = tasks.get(&imported.instance_id) {
            imported.trajectory.task = task.clone();
            used.insert(task.id.clone());
        }
        let name = file_name(&imported.instance_id, &mut taken);
        // A run a model-server outage ended is no run of the policy: it goes aside, where no
        // study's `trajectories` glob of the folder takes it, and is listed as `infrastructure`.
        let target = match &imported.outage {
            Some(_) => {
                let aside = args.out.join(INFRASTRUCTURE_DIR);
                std::fs::create_dir_all(&aside).with_context(|| format!("cannot create {}", aside.display()))?;
                aside.join(&name)
            }
            None => args.out.join(&name),
        };
        write_trajectory(&imported, &target)?;
        let t = &imported.trajectory;
        let policy = t.policy.as_ref();
        table.write_record([
            path.display().to_string(),
            imported.instance_id.clone(),
            imported.format.clone(),
            t.length().to_string(),
            imported.exit_status.clone(),
            if imported.outage.is_some() { INFRASTRUCTURE.to_string() } else { t.end_type.to_string() },
            or_empty(imported.outcome.map(|o| o.as_str())),
            or_empty(imported.first_edit.as_ref().map(|e| e.step)),
            or_empty(imported.first_symptom.as_ref().map(|s| s.step)),
            t.digest(),
            or_empty(imported.outage.as_deref()),
            or_empty(policy.and_then(|p| p.model_name.as_deref())),
            or_empty(policy.and_then(|p| p.model_kwargs.get("temperature"))),
            or_empty(policy.and_then(|p| p.version.as_deref())),
            or_empty(policy.and_then(|p| p.environment.as_deref())),
        ])?;
        output::println(line(path, &target, &imported))?;
        for warning in &imported.warnings {
            eprintln!("vcurve: {}: note: {warning}", path.display());
        }
    }
    for id in tasks.keys().filter(|id| !used.contains(*id)) {
        eprintln!("vcurve: note: --task {id}: no imported trajectory is of instance {id}");
    }
    let csv_path = args.out.join("import.csv");
    std::fs::write(&csv_path, table.into_inner()?).with_context(|| format!("cannot write {}", csv_path.display()))?;
    if failed > 0 {
        anyhow::bail!("{failed} of {} files were not imported", args.files.len());
    }
    Ok(())
}

fn write_trajectory(imported: &Imported, target: &Path) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(&imported.trajectory)?;
    bytes.push(b'\n');
    std::fs::write(target, bytes).with_context(|| format!("cannot write {}", target.display()))
}

fn line(path: &Path, target: &Path, imported: &Imported) -> String {
    let t = &imported.trajectory;
    let edit = imported.first_edit.as_ref().map_or("none".into(), |e| format!("{} (heuristic)", e.step));
    let symptom = imported.first_symptom.as_ref().map_or("none".into(), |s| format!("{} ({})", s.step, s.signal));
    if let Some(outage) = &imported.outage {
        return format!(
            "{} -> {}: {} {}, {} steps, {outage}: a model-server outage, an infrastructure run (no outcome; no \
             study takes it)",
            path.display(),
            target.display(),
            imported.instance_id,
            imported.format,
            t.length(),
        );
    }
    format!(
        "{} -> {}: {} {}, {} steps, {} ({}), outcome {}, first edit {edit}, first symptom {symptom}",
        path.display(),
        target.display(),
        imported.instance_id,
        imported.format,
        t.length(),
        imported.exit_status,
        t.end_type,
        imported.outcome.map_or("unknown", |o| o.as_str()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_instance_twice_gets_a_suffix() {
        let mut taken = BTreeSet::new();
        assert_eq!(file_name("a__b-1", &mut taken), "a__b-1.json");
        assert_eq!(file_name("a__b-1", &mut taken), "a__b-1.2.json");
        assert_eq!(file_name("a/b", &mut taken), "a_b.json");
    }
}
