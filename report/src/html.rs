//! `vcurve report`: one self-contained HTML file with a study's summary, every table of the
//! paper's analyses and the gallery of V-curve figures, plus the same tables as CSV beside it.
//!
//! Pure: the export's [`Results`] and [`StudyAnalyses`] in, files out. Each table is built once
//! and written both as HTML and as CSV, so the two never disagree.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use vcurve_method::analyses::labels::{PlacementSummary, Share};
use vcurve_method::analyses::restart::PolicyRow;
use vcurve_method::analyses::{Measured, NOT_MEASURED};

use crate::analyses::StudyAnalyses;
use crate::figures::{CurveFigure, FigureError};
use crate::results::{Results, TrajectoryResult};
pub use crate::table::Table;
use crate::table::{STYLE, esc};
use vcurve_record::TrajectoryState;

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_string(), |v| v.to_string())
}

fn f2(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

/// A count the study may not have measured.
fn count(v: Option<u32>) -> String {
    Measured::from_option(v).to_string()
}

/// A measured value as `show` writes it, or [`NOT_MEASURED`].
fn measured<T>(v: Measured<T>, show: impl FnOnce(T) -> String) -> String {
    v.value().map_or_else(|| NOT_MEASURED.to_string(), show)
}

fn share(s: &Share) -> String {
    match (s.share, s.wilson_lo, s.wilson_hi) {
        (Some(p), Some(lo), Some(hi)) => {
            let boot = match (s.bootstrap_lo, s.bootstrap_hi) {
                (Some(a), Some(b)) => format!("; bootstrap [{a:.2}, {b:.2}]"),
                _ => String::new(),
            };
            format!("{}/{} = {p:.2} (Wilson [{lo:.2}, {hi:.2}]{boot})", s.hits, s.total)
        }
        _ => format!("{}/{}", s.hits, s.total),
    }
}

fn trajectories_table(results: &Results) -> Table {
    let mut t = Table::new(
        "trajectories",
        "Every trajectory",
        "Curve quantities per trajectory (the paper's Table 9): shape, concentration C, decisive step t* and interval (a, b], onset, point of no return, restart point, continuations used.",
        &[
            "trajectory",
            "task",
            "state",
            "T",
            "V(h0)",
            "shape",
            "C",
            "t*",
            "(a, b]",
            "onset",
            "t_pnr",
            "certified",
            "t_r",
            "continuations",
        ],
    );
    for tr in &results.trajectories {
        let interval = match (tr.decisive_a, tr.decisive_b) {
            (Some(a), Some(b)) => format!("({a}, {b}]"),
            _ => "–".into(),
        };
        let shape = match (tr.state, tr.shape) {
            (TrajectoryState::Doomed, _) => "doomed".to_string(),
            (TrajectoryState::NonReplayable, _) => "non-replayable".to_string(),
            (_, Some(shape)) => shape.as_str().to_string(),
            // Never measured: no continuation of its main series has an outcome yet.
            (_, None) => "not measured".to_string(),
        };
        t.row(vec![
            tr.trajectory.clone(),
            tr.task.clone(),
            tr.state.as_str().into(),
            tr.length.to_string(),
            f2(tr.v0_fit),
            shape,
            f2(tr.concentration),
            opt(tr.t_star),
            interval,
            opt(tr.onset),
            opt(tr.pnr),
            opt(tr.pnr_certified),
            opt(tr.restart_point),
            tr.continuations.to_string(),
        ]);
    }
    t
}

/// The jobs retired without an outcome, a row per kind and reason; `None` when none was.
fn retired_table(results: &Results) -> Option<Table> {
    if results.retired_jobs.is_empty() {
        return None;
    }
    let mut t = Table::new(
        "retired",
        "Retired jobs",
        "Jobs retired after repeated no-outcomes (retries_before_retired), never run again: by kind, with the reasons of their last no-outcomes, the most frequent first (at most five per kind; the rest counted under \"other reasons\").",
        &["kind", "retired", "reason", "jobs"],
    );
    for r in &results.retired_jobs {
        let listed: u64 = r.reasons.iter().map(|x| x.count).sum();
        let other = (listed < r.count).then(|| ("other reasons".to_string(), r.count - listed));
        for (reason, n) in r.reasons.iter().map(|x| (x.reason.clone(), x.count)).chain(other) {
            t.row(vec![r.kind.as_str().into(), r.count.to_string(), reason, n.to_string()]);
        }
    }
    Some(t)
}

fn placement_row(name: &str, s: &PlacementSummary) -> Vec<String> {
    vec![
        name.to_string(),
        s.trajectories.to_string(),
        s.labels.to_string(),
        s.before.to_string(),
        s.inside.to_string(),
        s.after.to_string(),
        s.after_pnr.to_string(),
        s.no_mistake.to_string(),
        s.at_t_star.to_string(),
        count(s.zero_drop),
        count(s.large_drop),
        count(s.significant),
        share(&s.post_cause),
        measured(Measured::from_option(s.post_cause_or_zero_drop.as_ref()), share),
        measured(s.near_t_star_measured(), |r| format!("{}/{}", r.hits, r.total)),
    ]
}

fn labels_table(a: &StudyAnalyses) -> Table {
    let mut t = Table::new(
        "labels",
        "Labels against the curves",
        "Where each source's first-mistake labels fall against the decisive interval (a, b] and the point of no return (the paper's Tables 2 and 21): before (m ≤ a), inside (a < m ≤ b), after (b < m ≤ t_pnr), after the PNR (m > t_pnr), no mistake; the probed drop at the label; the share of labels that are post-cause, and that are post-cause or sit on no drop. Probe counts are not measured when no label was probed, the neighbourhood of t* when no trajectory's first symptom was measured (once replayed).",
        &[
            "source",
            "trajectories",
            "labels",
            "before",
            "inside",
            "after",
            "after PNR",
            "no mistake",
            "at t*",
            "zero drop",
            "drop ≥ 0.2",
            "significant",
            "post-cause",
            "post-cause or zero-drop",
            "within 1 of t* (runs with a symptom)",
        ],
    );
    for (source, s) in &a.labels.sources {
        t.row(placement_row(source, s));
    }
    t.row(placement_row("pooled", &a.labels.pooled));
    t
}

fn policy_row(p: &PolicyRow) -> Vec<String> {
    vec![
        p.name.clone(),
        format!("{}/{}", p.restarts, p.trajectories),
        p.mean_restart_step.map_or_else(|| "–".into(), |s| format!("{s:.0}")),
        // Not measured: over no trajectory, or a judge's random run without decoys.
        format!("{:.2}", p.failed),
        format!("{:.2}", p.random),
        format!("{:+.2}", p.gain),
    ]
}

fn restart_table(a: &StudyAnalyses) -> Table {
    Table::new(
        "restart_policies",
        "Restart policies, offline",
        "What each restart policy would obtain (the paper's Table 23): a restart of a failed run after h_t obtains R̂(x, B − t); value-based policies never restart a successful run. Expected success on failed runs, on a random run of the task, and the gain over never restarting. A judge's random run needs its decoys (successful runs it labelled): not measured without them. The table is not measured when a labelled task has no base runs.",
        &["policy", "restarts", "mean step", "failed runs", "random run", "gain"],
    )
    .fill(Measured::from_option(a.restart.as_ref()), |t, r| {
        for p in &r.policies {
            t.row(policy_row(p));
        }
    })
}

fn decoys_table(a: &StudyAnalyses) -> Table {
    Table::new(
        "decoys",
        "Judges on successful runs",
        "Decoys are successful runs the judges labelled (the paper's Table 24): a judge's restart policy restarts a decoy at its label and loses 1 − R̂(x, B − m) in expectation; not measured for a judge that answered no decoy.",
        &["source", "decoys", "restarted", "expected loss"],
    )
    .fill(Measured::from_option(a.restart.as_ref()), |t, r| {
        for d in &r.decoys {
            let loss = format!("{:.2}", Measured::from_option(d.loss));
            t.row(vec![d.source.clone(), d.decoys.to_string(), d.restarted.to_string(), loss]);
        }
    })
}

fn localizers_table(a: &StudyAnalyses) -> Table {
    let mut t = Table::new(
        "localizers",
        "Localizers by value captured",
        "The share of the curve's value V(h_0) − V(h_T) captured within k steps of the proposed step (the paper's Table 32), ranked; n trajectories scored. The first edit and the first symptom are measured once a trajectory is replayed: a trajectory without them is left out of those rows (counted as not measured), and a row that scores none is not measured.",
        &["localizer", "n", "VC_0", "VC_1", "VC_3"],
    );
    for r in &a.localizers.rows {
        let n = match r.not_measured {
            0 => r.n.to_string(),
            k => format!("{} ({k} {NOT_MEASURED})", r.n),
        };
        t.row(vec![r.name.clone(), n, format!("{:.2}", r.vc0), format!("{:.2}", r.vc1), format!("{:.2}", r.vc3)]);
    }
    t
}

fn evaluation_table(results: &Results) -> Table {
    Table::new(
        "evaluation",
        "Evaluation and the patch cache",
        "How the study's patches were judged (docs/method.md §6): runs whose patch was evaluated for them, runs judged by a verdict already in the cache, empty patches that fail without evaluation, distinct patches judged, evaluations carried out (the runs' own and the flake re-checks), re-evaluations of a judged patch and how many disagreed with its first verdict, the flake rate, and the share of judged runs the cache spared an evaluation. Not measured for a study whose runner judges no patch (synthetic); the flake rate is not measured until a flake check is made.",
        &[
            "evaluated runs",
            "cache hits",
            "empty patches",
            "unique patches",
            "evaluations",
            "flake checks",
            "flakes",
            "flake rate",
            "cache saved",
        ],
    )
    .fill(Measured::from_option(results.evaluation.as_ref()), |t, e| {
        let s = &e.stats;
        let percent = |v: Option<f64>| measured(Measured::from_option(v), |v| format!("{:.1}%", 100.0 * v));
        t.row(
            [s.evaluated_runs, s.cache_hits, s.empty_patches, s.unique_patches, s.evaluations, s.flake_checks, s.flakes]
                .iter()
                .map(u64::to_string)
                .chain([percent(e.flake_rate), percent(e.saved_share)])
                .collect(),
        );
    })
}

fn checks_table(a: &StudyAnalyses) -> Table {
    let mut t = Table::new(
        "checks",
        "Checks before any claim",
        "The criteria the method must meet before any claim is made (the paper's Table 4).",
        &["check", "criterion", "value", "status"],
    );
    for c in &a.checks.checks {
        let status =
            serde_json::to_value(c.status).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        t.row(vec![c.check.clone(), c.criterion.clone(), c.value.clone(), status]);
    }
    t
}

fn controls_tables(a: &StudyAnalyses) -> Vec<Table> {
    let sanity = Table::new(
        "sanity",
        "Control: t = 0 sanity",
        "Continuations from the empty history against the task's base runs, two-sided Fisher exact test (the paper's Table 18).",
        &["trajectory", "from h_0", "base runs", "p", "passes"],
    )
    .fill(a.sanity.as_ref(), |t, sanity| {
        for r in &sanity.rows {
            t.row(vec![
                r.trajectory.clone(),
                format!("{}/{}", r.at_h0.hits, r.at_h0.total),
                format!("{}/{}", r.base.hits, r.base.total),
                format!("{:.3}", r.p_value),
                r.passes.to_string(),
            ]);
        }
    });
    let retest = Table::new(
        "retest",
        "Control: test–retest",
        "Screening estimates from the main schedule (V̂1) and from fresh seeds (V̂2) at three anchors (the paper's Table 19).",
        &["trajectory", "t", "V̂1", "V̂2", "gap"],
    )
    .fill(a.retest.as_ref(), |t, retest| {
        for r in &retest.rows {
            t.row(vec![
                r.trajectory.clone(),
                r.t.to_string(),
                format!("{:.2}", r.v1),
                format!("{:.2}", r.v2),
                format!("{:.2}", r.gap),
            ]);
        }
    });
    let budget = Table::new(
        "budget_control",
        "Control: full budget",
        "The anchors screened with the remaining budget B − t and with the full budget B (the paper's Table 20).",
        &[
            "trajectory",
            "T",
            "t* (B − t)",
            "shape (B − t)",
            "t* (B)",
            "shape (B)",
            "final t*",
            "within 3",
            "same shape",
        ],
    )
    .fill(a.budget_control.as_ref(), |t, budget| {
        for r in &budget.rows {
            let i = &r.input;
            t.row(vec![
                i.trajectory.clone(),
                i.length.to_string(),
                opt(i.remaining.t_star),
                i.remaining.shape.as_str().into(),
                opt(i.full.t_star),
                i.full.shape.as_str().into(),
                opt(i.final_t_star),
                r.within_three.to_string(),
                r.shape_agrees.to_string(),
            ]);
        }
    });
    vec![sanity, retest, budget]
}

fn stages_table(a: &StudyAnalyses) -> Table {
    Table::new(
        "stages",
        "Continuations by schedule stage",
        "Where the schedule spent its continuations (the paper's Table 13); not measured when the study's schedule cannot be rebuilt.",
        &["stage", "continuations", "share", "per trajectory"],
    )
    .fill(a.stages.as_ref(), |t, stages| {
        for r in stages.rows.iter().chain(std::iter::once(&stages.all)) {
            t.row(vec![
                r.stage.clone(),
                r.continuations.to_string(),
                format!("{:.2}", r.share),
                format!("{:.1}", r.per_trajectory),
            ]);
        }
    })
}

/// Every table of the report, in order.
pub fn tables(results: &Results, analyses: &StudyAnalyses) -> Vec<Table> {
    let mut tables = vec![
        trajectories_table(results),
        labels_table(analyses),
        restart_table(analyses),
        decoys_table(analyses),
        localizers_table(analyses),
        evaluation_table(results),
        checks_table(analyses),
    ];
    tables.extend(controls_tables(analyses));
    tables.push(stages_table(analyses));
    if let Some(t) = retired_table(results) {
        tables.push(t);
    }
    tables.extend(crate::replay_table::tables(results));
    tables.extend(crate::selection_export::tables(results));
    tables
}

/// The report's files by name: `report.html`, one CSV per table, and `figures/*.svg|png`.
pub struct Report {
    pub files: BTreeMap<String, Vec<u8>>,
}

fn summary(results: &Results, analyses: &StudyAnalyses) -> String {
    let trs = &results.trajectories;
    let count = |f: &dyn Fn(&TrajectoryResult) -> bool| trs.iter().filter(|t| f(t)).count();
    let done = count(&|t| t.state == TrajectoryState::Done);
    let doomed = count(&|t| t.state == TrajectoryState::Doomed);
    // Neither doomed nor dropped, yet without a measured curve: waiting, replaying, or cut short.
    let unmeasured =
        count(&|t| !matches!(t.state, TrajectoryState::Doomed | TrajectoryState::NonReplayable) && !t.measured());
    let retired: Vec<String> = results.retired_jobs.iter().map(|r| esc(&r.text())).collect();
    let retired = if retired.is_empty() {
        String::new()
    } else {
        format!("<li>retired without an outcome: {}</li>", retired.join("; "))
    };
    let unmeasured = if unmeasured > 0 { format!(", {unmeasured} not measured") } else { String::new() };
    let cliffs = count(&|t| t.shape == Some(vcurve_method::Shape::Cliff));
    let erosions = count(&|t| t.shape == Some(vcurve_method::Shape::Erosion));
    let certified = count(&|t| t.pnr_certified == Some(true));
    let continuations: u32 = trs.iter().map(|t| t.continuations).sum();
    let verdict = serde_json::to_value(analyses.checks.verdict)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!(
        "<ul class=\"summary\"><li>schedule <b>{}</b>, step budget B = {}</li>\
         <li>{} trajectories: {} done, {} doomed{unmeasured}; {} cliffs, {} erosions; {} with a certified point of no return</li>\
         <li>{} continuations ({:.0} per trajectory)</li>{retired}\
         <li>checks before any claim: <b>{}</b></li></ul>",
        esc(&results.schedule),
        results.budget,
        trs.len(),
        done,
        doomed,
        cliffs,
        erosions,
        certified,
        continuations,
        f64::from(continuations) / trs.len().max(1) as f64,
        esc(&verdict)
    )
}

/// Build the report of a study; with its online restart check (the checked study's export holds
/// its newest finished one as `restart_check.json`), the check's table and pooled line too.
pub fn build(
    results: &Results,
    analyses: &StudyAnalyses,
    restart_check: Option<&crate::restart_check::RestartCheckResults>,
) -> Result<Report, FigureError> {
    let tables = tables(results, analyses);
    let check =
        restart_check.map(|c| (crate::restart_check::table(c), crate::restart_check::pooled_text(&c.check.pooled)));
    let mut files = BTreeMap::new();
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vcurve report: {name}</title><style>{STYLE}</style></head><body>\n<h1>vcurve report: {name}</h1>\n{}\n<p>Contents: {}, <a href=\"#figures\">V-curves</a>.</p>\n",
        summary(results, analyses),
        tables
            .iter()
            .chain(check.as_ref().map(|(t, _)| t))
            .map(|t| format!("<a href=\"#{}\">{}</a>", t.name, esc(&t.title)))
            .collect::<Vec<_>>()
            .join(", "),
        name = esc(&results.name),
    );
    for t in &tables {
        html.push_str(&t.html());
        files.insert(format!("{}.csv", t.name), t.csv().into_bytes());
    }
    // The check's rows are exported as `restart_check.csv` with the export's header; the page shows
    // them, and the pooled line under them.
    if let Some((table, pooled)) = check {
        html.push_str(&table.html());
        let _ = writeln!(html, "<p>{}</p>", esc(&pooled));
    }
    html.push_str("<h2 id=\"figures\">V-curves</h2>\n<p class=\"caption\">Raw estimates with Wilson 95% bars, the isotonic fit, the decisive interval shaded, the certified point of no return dotted, and each source's label as a triangle between h_{m−1} and h_m.</p>\n<div class=\"gallery\">\n");
    let notes: BTreeMap<String, String> =
        crate::notes::of_results(results)?.into_iter().map(|n| (n.trajectory.clone(), n.text())).collect();
    for tr in &results.trajectories {
        let Some(fig) = CurveFigure::from_result(tr) else { continue };
        let svg = fig.svg();
        // Inline without the XML declaration, so the page stays one self-contained document.
        let inline = svg
            .trim_start()
            .strip_prefix("<?xml")
            .and_then(|s| s.split_once("?>"))
            .map_or(svg.as_str(), |(_, rest)| rest);
        // The paper's diagnostic note under the figure (Appendix W).
        let note = notes
            .get(&tr.trajectory)
            .map_or_else(String::new, |n| format!("<figcaption class=\"note\">{}</figcaption>", esc(n)));
        let _ = writeln!(html, "<figure id=\"fig-{}\">{}{note}</figure>", esc(&tr.trajectory), inline);
        let stem = tr.trajectory.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_', "_");
        files.insert(format!("figures/{stem}.png"), fig.png()?);
        files.insert(format!("figures/{stem}.svg"), svg.into_bytes());
    }
    html.push_str("</div>\n</body></html>\n");
    files.insert("report.html".into(), html.into_bytes());
    Ok(Report { files })
}

#[cfg(test)]
mod tests;
