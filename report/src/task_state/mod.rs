//! A task-state study's report (the CTXGAP study, docs/method.md "Task-state recoverability"):
//! its Figure 2 and its tables, rendered from the estimators' [`TaskStateReport`] as pure code.
//!
//! - [`figure`]: Figure 2, accuracy by reading depth, as SVG and PNG ([`figure_svg`],
//!   [`figure_png`]).
//! - [`tables`](mod@tables): Tables 1, 4, 5, 10, 13, 14, 15, the task-equal means and usage by stage, as
//!   [`Table`]s ([`tables()`]) and as Markdown ([`tables_markdown`]).
//! - [`html_section`]: the figure and the tables as one section of an HTML page.
//!
//! A value the study has not measured is never drawn or printed as 0: the figure leaves the view
//! out and its legend names it, the tables print "not measured".

pub mod export;
pub mod figure;
pub mod tables;

use std::fmt::Write as _;

use vcurve_method::task_state::{TaskStateReport, UsageRow};

pub use figure::{HEIGHT, WIDTH, figure_caption, figure_png, figure_svg, figure_title};
pub use tables::{tables, tables_markdown};

use crate::figures::FigureError;
use crate::table::{Table, esc};

/// The figure (inline SVG with its caption) and every table, as one `<section>` of an HTML page
/// whose stylesheet is the report's.
pub fn html_section(report: &TaskStateReport, usage_by_stage: Option<&[UsageRow]>) -> Result<String, FigureError> {
    let svg = figure_svg(report)?;
    // Inline without the XML declaration, so the page stays one document.
    let inline =
        svg.trim_start().strip_prefix("<?xml").and_then(|s| s.split_once("?>")).map_or(svg.as_str(), |(_, rest)| rest);
    let tables: Vec<Table> = tables(report, usage_by_stage);
    let mut html = format!(
        "<section id=\"task_state\">\n<h2 id=\"task_state_figure\">Task-state recovery by reading depth</h2>\n<p>Contents: {}.</p>\n<figure class=\"task-state\">{inline}<figcaption class=\"caption\">{}</figcaption></figure>\n",
        tables.iter().map(|t| format!("<a href=\"#{}\">{}</a>", t.name, esc(&t.title))).collect::<Vec<_>>().join(", "),
        esc(&figure_caption(report)),
    );
    for t in &tables {
        html.push_str(&t.html());
    }
    let _ = writeln!(html, "</section>");
    Ok(html)
}

#[cfg(test)]
mod tests;

/// A task-state study's report page from its export's `task_state.json`: the figure and every
/// table as one self-contained HTML file, with the tables as CSV and the figure as SVG and PNG
/// beside it (file name → bytes).
pub fn report_files(task_state_json: &[u8]) -> Result<std::collections::BTreeMap<String, Vec<u8>>, String> {
    #[derive(serde::Deserialize)]
    struct Export {
        report: TaskStateReport,
        #[serde(default)]
        usage_by_stage: Option<Vec<UsageRow>>,
        #[serde(default)]
        settings: Option<serde_json::Value>,
    }
    let export: Export = serde_json::from_slice(task_state_json)
        .map_err(|e| format!("task_state.json is not a task-state export: {e}"))?;
    let usage = export.usage_by_stage.as_deref();
    let section = html_section(&export.report, usage).map_err(|e| e.to_string())?;
    let name = export
        .settings
        .as_ref()
        .and_then(|s| s.get("version"))
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| "task-state study".to_string(), |v| format!("task-state study ({v})"));
    let page = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vcurve report: {}</title><style>{}</style></head><body>\n<h1>vcurve report: {}</h1>\n{section}\n</body></html>\n",
        esc(&name),
        crate::table::STYLE,
        esc(&name)
    );
    let mut files = std::collections::BTreeMap::new();
    files.insert("report.html".to_string(), page.into_bytes());
    for t in tables(&export.report, usage) {
        files.insert(format!("{}.csv", t.name), t.csv().into_bytes());
    }
    files.insert("figures/task_state.svg".into(), figure_svg(&export.report).map_err(|e| e.to_string())?.into_bytes());
    files.insert("figures/task_state.png".into(), figure_png(&export.report).map_err(|e| e.to_string())?);
    Ok(files)
}
