//! The benchmark's reports as a human-readable table.

use std::fmt::Write as _;

use super::simulate::{FamilyReport, ScheduleReport, SuppliedReport};

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

/// The table of `(schedule, family or group, figures)` rows; `column` heads the second column.
fn rows_table<'a>(column: &str, rows: impl Iterator<Item = (&'a str, &'a str, &'a FamilyReport)>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<15} {:<14} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5} {:>6} {:>6} {:>6} {:>6}",
        "schedule",
        column,
        "curves",
        "shape",
        "cliff",
        "drop",
        "onset",
        "pnr",
        "cont",
        "median",
        "p90",
        "big",
        "bigerr",
        "big±1",
        "hold",
        "fpnr"
    );
    for (schedule, group, f) in rows {
        let _ = writeln!(
            out,
            "{:<15} {:<14} {:>6} {:>6} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.1} {:>7.1} {:>7.1} {:>5} {:>6} {:>6} {:>6} {:>6}",
            schedule,
            group,
            f.curves,
            cell(f.shape_accuracy, 3),
            f.cliff_share,
            f.drop_found,
            f.onset_found,
            f.pnr_certified,
            f.continuations_mean,
            f.continuations_median,
            f.continuations_p90,
            f.big_cliff_n,
            cell(f.big_cliff_median_abs_error, 1),
            cell(f.big_cliff_within_one, 3),
            f.holding_curves,
            cell(f.false_pnr, 3),
        );
    }
    out.push_str(
        "\nshape: shape accuracy (flat excluded); cliff: share estimated cliff; drop: confirmed drop ≥ 0.25 at\n\
         K_confirm (32; 16 under adaptive); onset: significant onset found; pnr: certified point of no return;\n\
         cont/median/p90: continuations per curve; big: curves with a true drop ≥ 0.4; bigerr: median |t̂* − t*|\n\
         on them; big±1: share within one step; hold: curves whose true value stays ≥ 0.2 before T;\n\
         fpnr: share of them certifying a point of no return before T (false certification; –: no such curve,\n\
         not measured).\n",
    );
    out
}

/// The human-readable table of one or more schedules on the synthetic families.
pub fn table(reports: &[ScheduleReport]) -> String {
    let rows = reports.iter().flat_map(|r| r.families.iter().map(|(g, f)| (r.schedule, g.as_str(), f)));
    rows_table("family", rows)
}

/// The human-readable table of one or more schedules on supplied curves, by group.
pub fn supplied_table(reports: &[SuppliedReport]) -> String {
    let rows = reports.iter().flat_map(|r| r.groups.iter().map(|(g, f)| (r.schedule, g.as_str(), f)));
    rows_table("group", rows)
}
