//! `vcurve studies`: list the coordinator's studies.

use anyhow::Context;
use vcurve_proto::v1;

use super::status::progress_json;
use crate::client::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct StudiesArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `vcurve studies`.
pub async fn run(a: &StudiesArgs) -> anyhow::Result<()> {
    studies(&a.remote.connection()?, a.json).await
}

pub async fn studies(connection: &Connection, json: bool) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let studies =
        client.list_studies(v1::ListStudiesRequest {}).await.with_context(at(connection))?.into_inner().studies;
    if json {
        let all: Vec<_> = studies.iter().map(progress_json).collect();
        output::println(serde_json::to_string_pretty(&all)?)
    } else {
        let lines: Vec<String> = studies
            .iter()
            .map(|p| {
                format!(
                    "{}  {:<10} {:<20} {}/{} trajectories\n",
                    p.study, p.state, p.name, p.trajectories_done, p.trajectories
                )
            })
            .collect();
        output::print(lines.concat())
    }
}
