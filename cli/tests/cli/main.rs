//! The `vcurve` binary as a user runs it (and the CLI library's benches and inputs): one test
//! binary, one module per command or subject, [`common`] shared. Tests of the coordinator and
//! the worker as libraries are in `testkit/tests/cluster/`.

mod common;

mod analyze_cli;
mod annotate_cli;
mod bad_inputs;
mod bench_dispatch;
mod bench_schedule_cli;
mod demo_cli;
mod heldout;
mod import_cli;
mod labels_cli;
mod launch_refusals;
mod memory;
mod metrics;
mod notes_cli;
mod report_cli;
mod schedule_reference;
mod worker_cli;
