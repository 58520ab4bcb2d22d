//! # vcurve-coordinator
//!
//! The coordinator library and the `vcurve` command line.
//!
//! - [`input`]: reading users' files (points, base runs, thresholds) into the method's types,
//!   with errors that name the file, the line and the problem.
//! - [`analyze`]: `vcurve analyze`, the estimator of SPEC.md §3 on points a user already has.
//! - [`bench_schedule`]: `vcurve bench schedule`, the schedule on synthetic curves.
//! - [`cli`]: argument parsing and dispatch; the binary's `main` only calls [`cli::main`].
//!
//! The method itself (statistics, curve analysis, schedule) lives in `vcurve-method` and does no
//! I/O; this crate owns every file, socket and database the method's results pass through.

pub mod analyze;
pub mod bench_dispatch;
pub mod bench_schedule;
pub mod cli;
pub mod client;
pub mod commands;
pub mod core;
pub mod dashboard;
pub mod demo;
pub mod error;
pub mod export;
pub mod figures;
pub mod input;
pub mod labels_cmd;
pub mod model;
pub mod planner;
pub mod report;
pub mod server;
pub mod spec;
pub mod store;
pub mod study_analyses;
pub mod telemetry;
pub mod wire;
