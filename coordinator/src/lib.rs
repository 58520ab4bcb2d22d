//! # vcurve-coordinator
//!
//! The coordinator library and the `vcurve` command line. The method itself (statistics, curve
//! analysis, schedule, analyses) lives in `vcurve-method` and does no I/O; this crate owns every
//! file, socket and database the method's results pass through.
//!
//! How a continuation flows: a study spec ([`spec`]) is launched through the study service
//! ([`server`], wire types converted in [`wire`] only) into the [`store`]; on every lease the
//! store admits trajectories and hands out continuation keys, and on every report it rebuilds
//! the trajectory's schedule from its outcomes ([`planner`]) and creates what the schedule asks
//! for next — one transaction each, so a coordinator can be killed at any moment. [`core`] is the
//! thin layer between the services and the store (clock, long-poll wake-ups, lease sweeping).
//! Results leave through [`export`] (curves, trajectories, results, [`study_analyses`]), and are
//! shown by [`report`], [`figures`] and the live [`dashboard`].
//!
//! The command line: [`cli`] parses and dispatches ([`commands`] for the networked commands,
//! [`client`] to reach a coordinator, [`demo`], [`labels_cmd`], [`analyze`] with [`input`] for
//! users' files, [`bench_schedule`] and [`bench_dispatch`]); [`telemetry`] sets up logging.

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
