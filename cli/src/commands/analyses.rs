//! `vcurve analyses`: every table of a study's analyses (labels, restart policies, localizers,
//! checks, controls, stage costs) as text, or the analyses as JSON.

use super::report::{StudySource, results_and_analyses};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct AnalysesArgs {
    #[command(flatten)]
    pub source: StudySource,
    /// Print the analyses as JSON (as analyses.json).
    #[arg(long)]
    pub json: bool,
}

/// `vcurve analyses`.
pub async fn run(a: &AnalysesArgs) -> anyhow::Result<()> {
    print_analyses(&a.source, a.json).await
}

pub async fn print_analyses(source: &StudySource, json: bool) -> anyhow::Result<()> {
    let (results, analyses, _) = results_and_analyses(source).await?;
    if json {
        output::println(serde_json::to_string_pretty(&analyses)?)
    } else {
        let tables: Vec<String> =
            vcurve_report::html::tables(&results, &analyses).iter().map(|t| format!("{}\n", t.text())).collect();
        output::print(tables.concat())
    }
}
