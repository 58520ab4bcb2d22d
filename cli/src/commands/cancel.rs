//! `vcurve cancel STUDY`: stop handing out a study's work.

use anyhow::Context;
use vcurve_proto::v1;

use crate::client::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct StudyArgs {
    /// The study id `vcurve launch` printed.
    pub study: String,
    #[command(flatten)]
    pub remote: Remote,
}

/// `vcurve cancel`.
pub async fn run(a: &StudyArgs) -> anyhow::Result<()> {
    cancel(&a.study, &a.remote.connection()?).await
}

pub async fn cancel(study: &str, connection: &Connection) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let state = client
        .cancel(v1::CancelRequest { study: study.to_string() })
        .await
        .with_context(at(connection))?
        .into_inner()
        .state;
    output::println(format!("study {study}: {state}"))
}
