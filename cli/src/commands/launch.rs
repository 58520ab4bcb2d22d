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
    let mut client = client::study_client(connection).await?;
    client::upload_and_launch(&mut client, yaml, &files).await.with_context(at(connection))
}
