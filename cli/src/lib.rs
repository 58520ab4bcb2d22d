//! # vcurve-cli
//!
//! The `vcurve` command line, and nothing else: every command parses its arguments here and calls
//! into the libraries — `vcurve-coordinator` (serve, launch, status, export), `vcurve-worker`
//! (run continuations), `vcurve-report` (results, analyses, report, figures) and `vcurve-method`
//! (analyze, bench schedule). `vcurve demo` wires all of them into one process.
//!
//! Layout: [`cli`] parses the command line and dispatches; [`commands`] holds one module per
//! command, each with its clap arguments and its run function, with [`client`] to reach a
//! coordinator (and the `--coordinator` arguments every client shares) and [`input`] for users'
//! files; [`demo`] (and [`demo_docker`]) and the `bench_*` modules are `vcurve demo` and
//! `vcurve bench` (`bench_cluster` is the command over the simulator of `vcurve_testkit::sim`).
//! [`render`] is the [`Renderer`](vcurve_coordinator::Renderer) the coordinator
//! is served with; [`store_url`] keeps a store's password out of messages; [`telemetry`] sets up
//! logging; [`output`] writes results to standard output. `anyhow` is used
//! here (and in `vcurve_testkit::sim`, which the binary links) and nowhere in the libraries.

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
pub mod demo_task_state;
pub mod input;
pub mod output;
pub mod render;
pub mod store_url;
pub mod telemetry;
