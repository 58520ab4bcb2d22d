//! A task-state study's export files, from what its store holds
//! ([`TaskStateData`]): the estimators' input assembled from the sessions and the calls
//! (`vcurve_record::task_state::assemble`), every table, Figure 2, and the rows behind them.
//!
//! - `task_state.json`: the settings, the `accuracy` of every measured view by key (`"reports"`,
//!   `"full"`, …, `"actor"`), every table (`report`), the estimators' `input`, the `views`
//!   index (task, checkpoint, view → the digest of its text, its characters and tokens), each
//!   probe's question and reference (`probes`), and usage by stage.
//! - `probes.csv`, `answers.csv`, `scores.csv`: a row per probe, per answer sample, per credit.
//! - `calls.csv`: a row per request of every model call (its stage, template and hash, sampling,
//!   tokens, latency, outcome).
//! - `views/DIGEST.txt`: each rendered view's text, once per distinct text.
//! - `task_state_*.csv`: the tables; `figures/task_state.svg` and `.png`: Figure 2.

use std::collections::BTreeMap;

use serde::Serialize;
use vcurve_method::task_state::analyze;
use vcurve_method::task_state::usage::{GroupBy, usage};
use vcurve_record::task_state::TaskStateData;
use vcurve_record::task_state::assemble::assemble;

use super::{figure_png, figure_svg, tables};

/// Why an export could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("the task-state study's records do not assemble: {0}")]
    Assemble(String),
    #[error("the task-state estimators refused the study's records: {0}")]
    Estimate(String),
    #[error("Figure 2: {0}")]
    Figure(String),
    #[error("{0}")]
    Write(String),
}

fn csv_of<T: Serialize>(rows: &[T]) -> Result<Vec<u8>, ExportError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in rows {
        w.serialize(row).map_err(|e| ExportError::Write(e.to_string()))?;
    }
    w.into_inner().map_err(|e| ExportError::Write(e.to_string()))
}

/// Every export file of a task-state study, by name.
pub fn files(data: &TaskStateData) -> Result<BTreeMap<String, Vec<u8>>, ExportError> {
    let mut assembled =
        assemble(&data.settings, &data.sessions, &data.calls).map_err(|e| ExportError::Assemble(e.to_string()))?;
    let settings = vcurve_record::task_state::estimator_settings(&data.settings);
    let report = analyze(&assembled.input, &settings).map_err(|e| ExportError::Estimate(e.to_string()))?;
    let requests: Vec<_> = assembled.calls.iter().flat_map(|c| c.requests()).collect();
    let usage_by_stage = usage(&requests, GroupBy::Stage).map_err(|e| ExportError::Estimate(e.to_string()))?;

    let mut files = BTreeMap::new();
    // The views each checkpoint's calls read, as the assembly rendered them: the index of their
    // texts, each stored once.
    let mut views = Vec::new();
    for (task, v) in std::mem::take(&mut assembled.views) {
        views.push(serde_json::json!({"task": task, "checkpoint": v.checkpoint, "view": v.view,
            "version": v.version, "digest": v.sha256, "chars": v.chars, "tokens": v.tokens}));
        files.entry(format!("views/{}.txt", v.sha256)).or_insert_with(|| v.text.into_bytes());
    }
    let probes: Vec<serde_json::Value> = assembled
        .probes
        .iter()
        .map(|p| serde_json::json!({"probe": p.probe, "question": p.question, "reference": p.reference}))
        .collect();
    let json = serde_json::json!({
        "format": "vcurve.task-state.v1",
        "settings": data.settings,
        "estimator_settings": settings,
        "accuracy": report.accuracy(),
        "report": report,
        "usage_by_stage": usage_by_stage,
        "input": assembled.input,
        "views": views,
        "probes": probes,
    });
    files.insert(
        "task_state.json".into(),
        serde_json::to_vec_pretty(&json).map_err(|e| ExportError::Write(e.to_string()))?,
    );
    files.insert("probes.csv".into(), csv_of(&assembled.probes)?);
    files.insert("answers.csv".into(), csv_of(&assembled.answers)?);
    files.insert("scores.csv".into(), csv_of(&assembled.scores)?);
    files
        .insert("calls.csv".into(), crate::calls::calls_csv(&requests).map_err(|e| ExportError::Write(e.to_string()))?);
    for t in tables(&report, Some(&usage_by_stage)) {
        files.insert(format!("{}.csv", t.name), t.csv().into_bytes());
    }
    files.insert(
        "figures/task_state.svg".into(),
        figure_svg(&report).map_err(|e| ExportError::Figure(e.to_string()))?.into_bytes(),
    );
    files.insert("figures/task_state.png".into(), figure_png(&report).map_err(|e| ExportError::Figure(e.to_string()))?);
    Ok(files)
}
