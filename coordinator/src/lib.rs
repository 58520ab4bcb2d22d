//! # vcurve-coordinator
//!
//! The coordinator: study specs, the durable store, the gRPC services workers and clients talk
//! to, and the data the live dashboard serves. The method itself (statistics, curve analysis,
//! schedule, analyses) lives in `vcurve-method` and does no I/O; a study's results (exports,
//! figures) are rendered by `vcurve-report`, which the binary wires in through [`Renderer`]. This
//! crate links neither Docker nor any plotting code.
//!
//! How a continuation flows: a study spec ([`spec`]) is launched through the study service
//! ([`server`], wire types converted in [`wire`] only; the files it names uploaded piece by piece,
//! [`upload`]) into the [`store`]; on every lease the
//! store admits trajectories and hands out continuation keys, and on every report it rebuilds
//! the trajectory's schedule from its outcomes ([`planner`]) and creates what the schedule asks
//! for next — one transaction each, so a coordinator can be killed at any moment. [`core`] is the
//! thin layer between the services and the store (clock, long-poll wake-ups, lease sweeping).
//! Results leave through the export call, rendered by the [`Renderer`] the binary supplies, and
//! are shown by the live [`dashboard`]; [`metrics`] serves the Prometheus endpoint. [`service`] runs
//! the gRPC, dashboard and metrics listeners together and stops them and the store as one.

pub mod core;
pub mod dashboard;
pub mod durations;
pub mod error;
pub mod http;
pub mod metrics;
pub mod model;
pub mod planner;
pub mod render;
pub mod server;
pub mod service;
pub use vcurve_spec as spec;
pub mod store;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod upload;
pub mod wire;

pub use render::Renderer;
