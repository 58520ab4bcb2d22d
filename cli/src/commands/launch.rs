//! `vcurve launch SPEC`: launch a study from a spec file (checked here first); prints the study id.

use std::path::{Path, PathBuf};

use anyhow::Context;
use vcurve_coordinator::spec;

use crate::client::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// The study spec (YAML); the files it names are read relative to it, and must lie in its
    /// folder (symbolic links resolved) or in a folder given with --allow-path.
    pub spec: PathBuf,
    /// Also let the spec name files in DIR (a folder, or a single file); repeatable. Only for a
    /// spec you trust to read there: its files are sent to the coordinator and its workers.
    #[arg(long = "allow-path", value_name = "DIR")]
    pub allow_paths: Vec<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

/// `vcurve launch`.
pub async fn run(a: &LaunchArgs) -> anyhow::Result<()> {
    output::println(launch(&a.spec, &a.allow_paths, &a.remote.connection()?).await?)
}

/// Launch the spec at `spec_path`, whose files may lie in its folder or in `allow_paths`.
pub async fn launch(spec_path: &Path, allow_paths: &[PathBuf], connection: &Connection) -> anyhow::Result<String> {
    // Validate locally first: a bad spec is reported with its file's path, before any network. A
    // restart check is completed on the coordinator, from the study it checks.
    let (yaml, files) = spec::read_with_files_allowing(spec_path, allow_paths)?;
    let request =
        spec::parse_request(&yaml, &|p| files.get(p).cloned()).with_context(|| format!("{}", spec_path.display()))?;
    if let spec::Request::Study(launch) = &request {
        for note in launch.policy_notes() {
            eprintln!("vcurve: warning: {note}");
        }
    }
    let estimate = match &request {
        spec::Request::Study(launch) => {
            launch.spec.task_state.as_ref().map(|s| expected_calls(s, launch.spec.tasks.len() as u64))
        }
        spec::Request::RestartCheck(_) => None,
    };
    let mut client = client::study_client(connection).await?;
    let study = client::upload_and_launch(&mut client, yaml, &files).await.with_context(at(connection))?;
    if let Some(estimate) = estimate {
        eprint!("{estimate}");
    }
    Ok(study)
}

/// The mean probes per checkpoint a launch estimate assumes before any is generated: the study's
/// main sample (4,799 probes at 148 checkpoints).
const PROBES_PER_CHECKPOINT: f64 = 4_799.0 / 148.0;

/// What a task-state study of `tasks` tasks is expected to call, per stage, printed at launch.
fn expected_calls(s: &vcurve_record::task_state::TaskStateSettings, tasks: u64) -> String {
    let checkpoints = tasks * s.instructions.len() as u64;
    let readers = checkpoints * s.views.len() as u64 * u64::from(s.samples);
    let actor =
        if s.actor { (checkpoints as f64 * PROBES_PER_CHECKPOINT * f64::from(s.samples)).round() as u64 } else { 0 };
    let rows = [
        ("sessions", tasks, "one per task, of the agent's own model (not counted below)".to_string()),
        (
            "atoms",
            checkpoints,
            format!("one per checkpoint ({} turns), {}", s.instructions.len(), s.atoms.endpoint.model),
        ),
        ("probes", checkpoints, format!("at most one per checkpoint, {}", s.probes.endpoint.model)),
        (
            "reader",
            readers,
            format!("{} views × {} samples per checkpoint, {}", s.views.len(), s.samples, s.reader.endpoint.model),
        ),
        (
            "actor",
            actor,
            format!(
                "~{PROBES_PER_CHECKPOINT:.1} probes per checkpoint × {} samples (the study's mean), {}",
                s.samples, s.actor_model.endpoint.model
            ),
        ),
        ("judge", readers + actor, format!("one per reader and actor call, {}", s.judge.endpoint.model)),
    ];
    let mut out = String::from(
        "vcurve: expected model calls by stage (tokens are counted per stage as calls end: vcurve status):\n",
    );
    for (stage, n, how) in rows {
        out.push_str(&format!("  {stage:<8} {n:>8}  {how}\n"));
    }
    out
}
