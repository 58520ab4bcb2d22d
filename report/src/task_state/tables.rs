//! The task-state study's tables as the report prints them: each a [`Table`], so the same rows
//! become HTML, CSV, aligned text and Markdown. Values print with three decimals as the study does
//! (Table 13's accuracies four, its steps six); a value the study has not measured prints
//! [`NOT_MEASURED`], never 0; an interval that was not drawn prints "–".

use vcurve_method::analyses::NOT_MEASURED;
use vcurve_method::task_state::estimate::{Ci, Estimate, MeanInterval};
use vcurve_method::task_state::tables::{Subset, ViewRow};
use vcurve_method::task_state::{TaskStateReport, UsageRow, View};

use crate::table::Table;

/// A value with three decimals, or [`NOT_MEASURED`].
pub(crate) fn f3(v: Option<f64>) -> String {
    v.map_or_else(|| NOT_MEASURED.to_string(), |v| format!("{v:.3}"))
}

fn interval(ci: Option<Ci>) -> String {
    ci.map_or_else(|| "–".to_string(), |c| format!("[{:.3}, {:.3}]", c.lo, c.hi))
}

/// An estimate's interval: [`NOT_MEASURED`] with its value, "–" when only the interval is missing.
fn est_ci(e: &Estimate) -> String {
    match e.value {
        Some(_) => interval(e.ci),
        None => NOT_MEASURED.into(),
    }
}

/// An estimate and its interval in one cell.
fn est(e: &Estimate) -> String {
    match e.value {
        Some(v) => format!("{v:.3} {}", interval(e.ci)),
        None => NOT_MEASURED.into(),
    }
}

fn mean_interval(m: Option<&MeanInterval>) -> String {
    m.map_or_else(|| NOT_MEASURED.to_string(), |m| format!("{:.3} {}", m.mean, interval(m.ci)))
}

/// A number with thousands separators and `decimals` decimals: 2,565.1.
pub(crate) fn thousands(v: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = text.split_once('.').map_or((text.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if v < 0.0 { "-" } else { "" };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

fn row(report: &TaskStateReport, view: View) -> Option<&ViewRow> {
    report.views.iter().find(|r| r.view == view)
}

fn accuracy(report: &TaskStateReport, view: View) -> Option<&Estimate> {
    row(report, view).map(|r| &r.accuracy)
}

const UNMEASURED: Estimate = Estimate { probes: 0, tasks: 0, value: None, ci: None };

fn or_unmeasured(e: Option<&Estimate>) -> &Estimate {
    e.unwrap_or(&UNMEASURED)
}

/// Table 1: the headline rows.
fn headline(report: &TaskStateReport) -> Table {
    let mut t = Table::new(
        "task_state_headline",
        "Task-state recoverability",
        "The study's Table 1: accuracy of the reports U and the scrollback V against the full context T, Gap = Acc(T) − Acc(view) with its 95% issue-clustered bootstrap interval; the actor fork A (auxiliary); the final checkpoints of the tasks fixed there.",
        &["view / setting", "accuracy", "Acc(T)", "Gap", "95% CI"],
    );
    let full = accuracy(report, View::Full).and_then(|e| e.value);
    for (name, view) in [("Reports U", View::Reports), ("Scrollback V", View::Scrollback)] {
        let r = row(report, view);
        let gap = or_unmeasured(r.map(|r| &r.gap_view));
        t.row(vec![name.into(), f3(r.and_then(|r| r.accuracy.value)), f3(full), f3(gap.value), est_ci(gap)]);
    }
    let actor = or_unmeasured(accuracy(report, View::Actor));
    t.row(vec!["Actor fork A (aux.)".into(), f3(actor.value), String::new(), String::new(), est_ci(actor)]);
    if let Some(o) = report.outcomes.iter().find(|o| o.subset == Subset::FixedAtFinal) {
        t.row(vec![
            format!("Fixed at final k ({} tasks, {} probes)", o.gap_view.tasks, o.gap_view.probes),
            f3(o.accuracy_reports),
            f3(o.accuracy_full),
            f3(o.gap_view.value),
            est_ci(&o.gap_view),
        ]);
    }
    t
}

/// Table 5: the main weighted accuracies and gaps.
fn main_estimates(report: &TaskStateReport) -> Table {
    let mut t = Table::new(
        "task_state_main",
        "Main weighted accuracies and gaps",
        "The study's Table 5: category-weighted pooled estimates with issue-clustered percentile bootstrap intervals; the gaps are of the reports U.",
        &["measurement", "estimate", "95% CI"],
    );
    let u = row(report, View::Reports);
    let rows = [
        ("Actor A", accuracy(report, View::Actor)),
        ("Full context T", accuracy(report, View::Full)),
        ("Scrollback V", accuracy(report, View::Scrollback)),
        ("Reports U", u.map(|r| &r.accuracy)),
        ("Gap_actor", u.map(|r| &r.gap_actor)),
        ("Gap_view", u.map(|r| &r.gap_view)),
    ];
    for (name, e) in rows {
        let e = or_unmeasured(e);
        t.row(vec![name.into(), f3(e.value), est_ci(e)]);
    }
    t
}

/// Table 14: every view.
fn views(report: &TaskStateReport) -> Table {
    let mut t = Table::new(
        "task_state_views",
        "Reading views",
        "The study's Table 14 (and Figure 2's points), every view in order of reading depth: mean characters of its text, probes scored in it, accuracy with its 95% interval, Gap_view = Acc(T) − Acc(view) and Gap_actor = Acc(A) − Acc(view) with theirs.",
        &["view", "mean chars", "probes", "accuracy", "95% CI", "Gap_view", "Gap_actor", "Gap_actor 95% CI"],
    );
    for view in View::ALL {
        let r = row(report, view);
        let e = |f: fn(&ViewRow) -> &Estimate| or_unmeasured(r.map(f));
        t.row(vec![
            view.symbol().into(),
            r.and_then(|r| r.mean_chars).map_or_else(|| NOT_MEASURED.into(), |c| thousands(c, 1)),
            r.map_or_else(|| NOT_MEASURED.into(), |r| r.accuracy.probes.to_string()),
            f3(e(|r| &r.accuracy).value),
            est_ci(e(|r| &r.accuracy)),
            est(e(|r| &r.gap_view)),
            f3(e(|r| &r.gap_actor).value),
            est_ci(e(|r| &r.gap_actor)),
        ]);
    }
    t
}

/// Table 52's estimator: task-equal means with Student-t intervals.
fn task_equal(report: &TaskStateReport) -> Table {
    let mut t = Table::new(
        "task_state_task_equal",
        "Task-equal means",
        "Every task weighs the same (the study's cross-harness estimator): the mean over tasks with its Student-t 95% interval (df = tasks − 1).",
        &["view", "tasks", "accuracy", "Gap_view", "Gap_actor"],
    );
    for r in &report.task_equal {
        let tasks = r.accuracy.as_ref().map_or_else(|| NOT_MEASURED.into(), |m| m.tasks.to_string());
        t.row(vec![
            r.view.symbol().into(),
            tasks,
            mean_interval(r.accuracy.as_ref()),
            mean_interval(r.gap_view.as_ref()),
            mean_interval(r.gap_actor.as_ref()),
        ]);
    }
    t
}

/// Table 13: the telescoping decomposition.
fn decomposition(report: &TaskStateReport) -> Table {
    let caption = match &report.decomposition {
        Some(d) => format!(
            "The study's Table 13: the gap from the reports to the full context split into the steps between views, on the {} probes ({} tasks) scored in every view of the chain. Each share is the step over the gap ({:.6}); the steps add up to the gap exactly. Share intervals: {} paired task-cluster resamples.",
            d.probes, d.tasks, d.gap, report.settings.decomposition_draws
        ),
        None => "The study's Table 13: not measured until some probe is scored in every view of the chain.".into(),
    };
    let mut t = Table::new(
        "task_state_decomposition",
        "Telescoping decomposition",
        &caption,
        &["view", "accuracy", "step", "share", "95% CI"],
    );
    match &report.decomposition {
        None => t.not_measured = true,
        Some(d) => {
            let percent = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| format!("{:.1}%", 100.0 * v));
            for r in &d.rows {
                let ci = r
                    .share_ci
                    .map_or_else(|| "–".to_string(), |c| format!("[{:.1}, {:.1}]", 100.0 * c.lo, 100.0 * c.hi));
                t.row(vec![
                    r.view.symbol().into(),
                    format!("{:.4}", r.accuracy),
                    r.step.map_or_else(|| "–".into(), |s| format!("{s:.6}")),
                    percent(r.share),
                    ci,
                ]);
            }
            let last = d.rows.last().map_or("T", |r| r.view.symbol());
            let first = d.rows.first().map_or("U", |r| r.view.symbol());
            t.row(vec![
                format!("{last} − {first} gap"),
                format!("{:.4}", d.gap),
                format!("{:.6}", d.gap),
                "100%".into(),
                String::new(),
            ]);
        }
    }
    t
}

/// Table 15: per checkpoint.
fn checkpoints(report: &TaskStateReport) -> Table {
    let mut t = Table::new(
        "task_state_checkpoints",
        "By checkpoint",
        "The study's Tables 15 and 50, per checkpoint k (the end of turn k): sessions and probes, unaligned atoms per checkpoint (recovered better from the reference view than from U) that arose in this turn (fresh) or earlier, the accuracies of U, T and A, Gap_view and Gap_actor of U with their 95% intervals.",
        &[
            "k",
            "sessions",
            "probes",
            "fresh",
            "earlier",
            "unaligned",
            "Acc(U)",
            "Acc(T)",
            "Acc(A)",
            "Gap_view",
            "Gap_actor",
            "95% CI",
        ],
    );
    for r in &report.checkpoints {
        t.row(vec![
            r.checkpoint.to_string(),
            r.sessions.to_string(),
            r.probes.to_string(),
            format!("{:.3}", r.fresh),
            format!("{:.3}", r.earlier),
            format!("{:.3}", r.unaligned),
            f3(r.accuracy_reports),
            f3(r.accuracy_full),
            f3(r.accuracy_actor),
            est(&r.gap_view),
            f3(r.gap_actor.value),
            est_ci(&r.gap_actor),
        ]);
    }
    t
}

fn subset_name(subset: Subset) -> &'static str {
    match subset {
        Subset::FixedAllCheckpoints => "Fixed; all k",
        Subset::FixedAtFinal => "Fixed; final k",
        Subset::AllAtFinal => "All runs; final k",
    }
}

/// Table 10 (and Table 1's last row): by outcome.
fn outcomes(report: &TaskStateReport) -> Table {
    let mut t = Table::new(
        "task_state_outcomes",
        "By outcome",
        "The study's Table 10: the tasks judged fixed at their final checkpoint, over every checkpoint and at the final one, and every task at its final checkpoint; Gap_view and Gap_actor of U with their 95% intervals.",
        &["subset", "probes", "tasks", "Acc(U)", "Acc(T)", "Gap_view", "95% CI", "Gap_actor", "Gap_actor 95% CI"],
    );
    let order = [Subset::FixedAllCheckpoints, Subset::FixedAtFinal, Subset::AllAtFinal];
    for subset in order {
        let Some(o) = report.outcomes.iter().find(|o| o.subset == subset) else { continue };
        t.row(vec![
            subset_name(subset).into(),
            o.gap_view.probes.to_string(),
            o.gap_view.tasks.to_string(),
            f3(o.accuracy_reports),
            f3(o.accuracy_full),
            f3(o.gap_view.value),
            est_ci(&o.gap_view),
            f3(o.gap_actor.value),
            est_ci(&o.gap_actor),
        ]);
    }
    t
}

/// Table 4 for this study, with the eligibility filter (Table 2's first row).
fn inventory(report: &TaskStateReport) -> Table {
    let inv = &report.inventory;
    let mut t = Table::new(
        "task_state_inventory",
        "Inventory",
        "The study's Table 4 for this study: tasks (issue ids, the bootstrap clusters), checkpoints and probes; probes left out by the first reason that applies; scored answer samples per view; and how much the eligibility filter moves Gap_view(U) (Table 2: +0.56 pp).",
        &["quantity", "value"],
    );
    t.row(vec!["tasks".into(), inv.tasks.to_string()]);
    t.row(vec!["checkpoints".into(), inv.checkpoints.to_string()]);
    t.row(vec!["probes generated".into(), inv.probes_generated.to_string()]);
    t.row(vec!["probes eligible".into(), inv.probes_eligible.to_string()]);
    for (why, n) in &inv.exclusions {
        let why = serde_json::to_value(why).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        t.row(vec![format!("left out: {}", why.replace('_', " ")), n.to_string()]);
    }
    for view in View::ALL {
        let samples = inv.scored_samples.get(&view).map_or_else(|| NOT_MEASURED.into(), u64::to_string);
        t.row(vec![format!("scored samples: {}", view.symbol()), samples]);
    }
    let effect = inv.eligibility_effect.map_or_else(|| NOT_MEASURED.into(), |e| format!("{:+.2} pp", 100.0 * e));
    t.row(vec!["eligibility filter on Gap_view(U)".into(), effect]);
    t
}

/// Tables 12 and 59: model-call usage by stage.
fn usage(rows: &[UsageRow]) -> Table {
    let mut t = Table::new(
        "task_state_usage",
        "Model calls by stage",
        "The study's Tables 12 and 59: logical calls and requests (retries included), calls without a successful request, requests that reported no usage; effective tokens (each call's final successful request) and actual tokens (every request that reported usage) as input / output / cache reads; latency; calls by the temperature their request sent (\"unknown\": omitted, not zero).",
        &[
            "stage",
            "calls",
            "requests",
            "failed calls",
            "without usage",
            "effective in / out / cached",
            "actual in / out / cached",
            "mean latency (ms)",
            "temperatures",
        ],
    );
    for r in rows {
        let tokens = |t: vcurve_method::task_state::usage::Tokens| {
            format!(
                "{} / {} / {}",
                thousands(t.input as f64, 0),
                thousands(t.output as f64, 0),
                thousands(t.cached as f64, 0)
            )
        };
        let temperatures: Vec<String> = r.temperatures.iter().map(|(t, n)| format!("{t}: {n}")).collect();
        t.row(vec![
            r.group.clone(),
            r.calls.to_string(),
            r.requests.to_string(),
            r.failed_calls.to_string(),
            r.requests_without_usage.to_string(),
            tokens(r.effective),
            tokens(r.actual),
            r.latency_ms_mean.map_or_else(|| NOT_MEASURED.into(), |m| format!("{m:.0}")),
            temperatures.join(", "),
        ]);
    }
    t
}

/// Every table of a task-state study, in the order the report prints them; the usage table when
/// the call log's rows by stage are given.
pub fn tables(report: &TaskStateReport, usage_by_stage: Option<&[UsageRow]>) -> Vec<Table> {
    let mut tables = vec![
        headline(report),
        main_estimates(report),
        views(report),
        decomposition(report),
        checkpoints(report),
        outcomes(report),
        task_equal(report),
        inventory(report),
    ];
    if let Some(rows) = usage_by_stage {
        tables.push(usage(rows));
    }
    tables
}

/// Every table as Markdown, for `vcurve report` to print and write.
pub fn tables_markdown(report: &TaskStateReport, usage_by_stage: Option<&[UsageRow]>) -> String {
    let mut out = format!(
        "# Task-state study\n\nEstimator settings `{}`: {} bootstrap draws, seed {}, {:.0}% intervals.\n",
        report.settings.version,
        report.settings.bootstrap_draws,
        report.settings.seed,
        100.0 * report.settings.confidence
    );
    for t in tables(report, usage_by_stage) {
        out.push('\n');
        out.push_str(&t.markdown());
    }
    out
}
