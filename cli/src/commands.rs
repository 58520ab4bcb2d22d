//! The commands of the `vcurve` binary, one module each with its clap arguments and its `run`:
//!
//! - serving: [`coordinator`] and [`worker`] (with [`serving`], what they share);
//! - clients of a coordinator: [`launch`], [`restart_check`], [`status`], [`studies`], [`cancel`],
//!   [`export`], and [`report`] and [`analyses`] (from a coordinator's export or an export folder);
//! - on files: [`analyze`], [`labels`], [`notes`], [`import`], [`inspect`].
//!
//! `vcurve demo` and `vcurve bench` are [`crate::demo`] and the `bench_*` modules. What those use
//! of the commands is re-exported here.

pub mod analyses;
pub mod analyze;
pub mod annotate;
pub mod cancel;
pub mod coordinator;
pub mod export;
pub mod import;
pub mod inspect;
pub mod labels;
pub mod launch;
pub mod notes;
pub mod report;
pub mod restart_check;
pub mod serving;
pub mod status;
pub mod studies;
pub mod worker;

pub use coordinator::{CoordinatorSettings, SharedCoordinator, run_coordinator};
pub use export::{export_into, write_files};
pub use launch::launch;
pub use serving::shutdown_signal;
pub use status::{ProgressBars, checks_text};
pub use worker::{WorkerMetricsSettings, WorkerRunners, agent_runner, run_worker};

pub use crate::store_url::{redact_url, split_password};
