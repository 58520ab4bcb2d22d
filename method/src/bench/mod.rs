//! The schedule benchmark of issue 3 (the paper's Table 33): run a schedule on synthetic curves
//! with Bernoulli outcomes, analyze each curve, and compare with the truth. `vcurve bench
//! schedule` is this module behind its arguments, a clock and the machine's cores.
//!
//! In `simulate`: one curve simulated to the end ([`simulate`], [`simulate_supplied`]) and the
//! figures of a family or group ([`family_report`]). In `run`: every curve of a benchmark ([`run`],
//! [`run_supplied`], spread as the caller's [`Spread`] says) and the `--schedule` list
//! ([`schedule_list`]). In `curves`: supplied curves from CSV text ([`parse_supplied_curves`]).
//! In `table`: the reports as the human-readable table ([`table`], [`supplied_table`]).

mod curves;
mod run;
mod simulate;
mod table;

pub use curves::{CURVES_COLUMNS, CurvesError, parse_supplied_curves};
pub use run::{InOrder, ScheduleListError, Spread, run, run_families, run_supplied, schedule_list};
pub use simulate::{
    BIG_CLIFF, CurveResult, FamilyReport, HOLDING_VALUE, ScheduleReport, SuppliedCurve, SuppliedCurveError,
    SuppliedReport, family_report, group_reports, schedule_report, simulate, simulate_supplied,
};
pub use table::{supplied_table, table};
