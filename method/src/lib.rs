//! # vcurve-method
//!
//! The method of the paper "Executable Prefix Values for Locating Agent Failures" as pure code:
//! no I/O, no async, no clock. Everything a study reports is computed here, so everything here is
//! tested with plain `#[test]`s and property tests.
//!
//! Layout, in the order data flows through it:
//!
//! - [`params`]: the parameters of docs/method.md §8 ([`Thresholds`]), parsed from YAML and validated.
//! - [`stats`]: Wilson score intervals and Fisher exact tests.
//! - [`isotonic`]: weighted isotonic regression (pool adjacent violators), non-increasing.
//! - [`curve`]: a trajectory's sampled [`Point`]s in, a [`CurveAnalysis`] out — the fit, resolved
//!   points, decisive interval and `t*`, concentration and shape, onset, point of no return,
//!   restart point and value captured (docs/method.md §2–3).
//! - [`bootstrap`]: the task-level cluster bootstrap used for shares over labels.
//! - [`selection`]: the study set from the base runs (docs/method.md §7): band, length terciles and
//!   strata, the seeded processing order, decoys and back-fill.
//! - [`schedule`]: the adaptive schedule of docs/method.md §4 as an order-free state machine per
//!   trajectory, and its variants.
//! - [`analyses`]: the paper's analyses of a study (docs/method.md §9): labels against curves, restart
//!   policies, localizers, checks and controls, stage costs.
//! - [`synthetic`] and [`bench`](mod@bench): curves with known truth, and the schedule benchmark on them.
//! - [`task_state`]: the task-state study's estimators (docs/method.md §10): eligibility, weighted
//!   accuracies and gaps per view, clustered and Student-t intervals, the telescoping decomposition,
//!   its tables and the call log's usage.
//!
//! Every comparison of a computed value with a threshold goes through [`meets_at_least`] or
//! [`meets_at_most`] ([`tolerance`]), which allow [`TOLERANCE`] in favour of meeting it (docs/method.md §3).

pub mod analyses;
pub mod bench;
pub mod bootstrap;
pub mod curve;
pub mod isotonic;
pub mod params;
pub mod schedule;
pub mod selection;
pub mod stats;
pub mod synthetic;
pub mod task_state;
pub mod tolerance;

pub use curve::{BaseRun, BaseRuns, CurveAnalysis, CurveError, FittedPoint, Point, Shape, analyze};
pub use params::{Thresholds, ThresholdsError};
pub use tolerance::{TOLERANCE, meets_at_least, meets_at_most, meets_below};
