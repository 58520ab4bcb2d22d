//! # vcurve-cli
//!
//! The `vcurve` command line, and nothing else: every command parses its arguments here and calls
//! into the libraries — `vcurve-coordinator` (serve, launch, status, export), `vcurve-worker`
//! (run continuations), `vcurve-report` (results, analyses, report, figures) and `vcurve-method`
//! (analyze, bench schedule). `vcurve demo` wires all of them into one process.
//!
//! Layout: [`cli`] parses the command line and dispatches, and each command's module owns its
//! clap arguments: [`commands`] the networked commands, with [`client`] to reach a coordinator
//! (and the `--coordinator` arguments every client shares); [`demo`], [`labels_cmd`], [`analyze`]
//! (with [`input`] for users' files), [`bench_schedule`] and [`bench_dispatch`] one command each.
//! [`render`] is the [`Renderer`](vcurve_coordinator::Renderer) the coordinator is served with;
//! [`telemetry`] sets up logging; [`output`] writes results to standard output. `anyhow` is used
//! here and nowhere in the libraries.

pub mod analyze;
pub mod bench_cluster;
pub mod bench_containers;
pub mod bench_dispatch;
pub mod bench_memory;
pub mod bench_pgbench;
pub mod bench_schedule;
pub mod cli;
pub mod client;
pub mod commands;
pub mod demo;
pub mod demo_docker;
pub mod import_cmd;
pub mod input;
pub mod inspect_cmd;
pub mod labels_cmd;
pub mod output;
pub mod render;
pub mod restart_check_cmd;
pub mod telemetry;
