//! `vcurve report`: a study's report — one self-contained HTML file with every table and figure,
//! and the tables as CSV beside it — from a coordinator's export or an export folder.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::export::write_files;
use crate::client::at;
use crate::client::{self, Remote};
use crate::output;

/// Where a study's results come from: a coordinator's export, or an export folder.
#[derive(Debug, clap::Args)]
pub struct StudySource {
    /// The study id `vcurve launch` printed (its export is fetched from the coordinator).
    #[arg(required_unless_present = "from")]
    pub study: Option<String>,
    /// Read an export folder (`vcurve export --out DIR`) instead.
    #[arg(long, value_name = "DIR", conflicts_with = "study")]
    pub from: Option<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub source: StudySource,
    /// Folder to write report.html, the tables as CSV and figures/ into.
    #[arg(long)]
    pub out: PathBuf,
}

/// `vcurve report`: prints the path of the report written.
pub async fn run(a: &ReportArgs) -> anyhow::Result<()> {
    let path = report(&a.source, &a.out).await?;
    output::println(path.display().to_string())
}

/// A task-state study's `task_state.json`, when the source is one: the export folder's, or the
/// coordinator's export of a study whose progress has task-state stages.
async fn task_state_export(source: &StudySource) -> anyhow::Result<Option<Vec<u8>>> {
    match (source.study.as_deref(), source.from.as_deref()) {
        (_, Some(dir)) => {
            let path = dir.join("task_state.json");
            if !path.exists() {
                return Ok(None);
            }
            Ok(Some(crate::input::read_export_json(&path).with_context(|| format!("cannot read {}", path.display()))?))
        }
        (Some(study), None) => {
            let connection = source.remote.connection()?;
            let mut client = client::study_client(&connection).await?;
            let request = vcurve_proto::v1::ProgressRequest { study: study.to_string() };
            let progress = client.get_progress(request).await.with_context(at(&connection))?.into_inner();
            // A curve study with judges has the one call stage `label`; a task-state study's
            // stages begin with its sessions.
            if !progress.call_stages.iter().any(|s| s.stage == "session") {
                return Ok(None);
            }
            let files = client::export(&mut client, study).await.with_context(at(&connection))?;
            let found = files.into_iter().find(|(n, _)| n == "task_state.json").map(|(_, bytes)| bytes);
            found.map(Some).context("the task-state study's export has no task_state.json")
        }
        (None, None) => Ok(None),
    }
}

/// What a report is built from: a study's results and analyses, and its online restart check
/// when its export holds one (`restart_check.json`).
pub(super) type ReportInputs = (
    vcurve_report::export::Results,
    vcurve_report::analyses::StudyAnalyses,
    Option<vcurve_report::restart_check::RestartCheckResults>,
);

/// A study's results and analyses (and restart check): from a coordinator's export of `study`, or
/// from an export folder.
pub(super) async fn results_and_analyses(source: &StudySource) -> anyhow::Result<ReportInputs> {
    Ok(match (source.study.as_deref(), source.from.as_deref()) {
        (_, Some(dir)) => {
            let read = |name: &str| {
                let path = dir.join(name);
                crate::input::read_export_json(&path).with_context(|| format!("cannot read {}", path.display()))
            };
            let results: vcurve_report::export::Results = serde_json::from_slice(&read("results.json")?)
                .with_context(|| format!("{}/results.json is not a vcurve export", dir.display()))?;
            let analyses = match read("analyses.json") {
                Ok(bytes) => serde_json::from_slice(&bytes)
                    .with_context(|| format!("{}/analyses.json is not a vcurve export", dir.display()))?,
                Err(_) => vcurve_report::analyses::analyses(&results)?,
            };
            let check = match dir.join("restart_check.json").exists() {
                true => Some(
                    serde_json::from_slice(&read("restart_check.json")?)
                        .with_context(|| format!("{}/restart_check.json is not a vcurve export", dir.display()))?,
                ),
                false => None,
            };
            (results, analyses, check)
        }
        (Some(study), None) => {
            let connection = source.remote.connection()?;
            let mut client = client::study_client(&connection).await?;
            let files = client::export(&mut client, study).await.with_context(at(&connection))?;
            let find = |name: &str| files.iter().find(|(n, _)| n == name).map(|(_, contents)| contents.clone());
            let get = |name: &str| find(name).with_context(|| format!("the export has no {name}"));
            let check = find("restart_check.json").map(|b| serde_json::from_slice(&b)).transpose()?;
            (serde_json::from_slice(&get("results.json")?)?, serde_json::from_slice(&get("analyses.json")?)?, check)
        }
        (None, None) => bail!("name a STUDY (with --coordinator) or an export folder with --from"),
    })
}

pub async fn report(source: &StudySource, out: &Path) -> anyhow::Result<PathBuf> {
    if let Some(task_state) = task_state_export(source).await? {
        let files = vcurve_report::task_state::report_files(&task_state).map_err(anyhow::Error::msg)?;
        write_files(out, files)?;
        return Ok(out.join("report.html"));
    }
    let (results, analyses, check) = results_and_analyses(source).await?;
    let report = vcurve_report::html::build(&results, &analyses, check.as_ref())?;
    write_files(out, report.files)?;
    Ok(out.join("report.html"))
}
