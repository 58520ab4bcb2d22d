//! `vcurve launch SPEC`: launch a study from a spec file (checked here first); prints the study id.

use std::path::{Path, PathBuf};

use anyhow::Context;
use vcurve_coordinator::spec;

use super::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// The study spec (YAML); curve files are read relative to it.
    pub spec: PathBuf,
    #[command(flatten)]
    pub remote: Remote,
}

/// `vcurve launch`.
pub async fn run(a: &LaunchArgs) -> anyhow::Result<()> {
    output::println(launch(&a.spec, &a.remote.connection()?).await?)
}

pub async fn launch(spec_path: &Path, connection: &Connection) -> anyhow::Result<String> {
    // Validate locally first: a bad spec is reported with its file's path, before any network. A
    // restart check is completed on the coordinator, from the study it checks.
    let (yaml, files) = spec::read_with_files(spec_path)?;
    spec::parse_request(&yaml, &|p| files.get(p).cloned()).with_context(|| format!("{}", spec_path.display()))?;
    let mut client = client::study_client(connection).await?;
    client::upload_and_launch(&mut client, yaml, &files).await.with_context(at(connection))
}
