//! The sandbox room: containers and what runs in them.
//!
//! - [`container`]: the [`ContainerRuntime`](container::ContainerRuntime) seam, the Docker Engine
//!   behind it ([`container::docker`]), and the container guard that removes a container when its
//!   job ends. `container::double`, the fake runtime of the tests, is compiled only for this
//!   crate's unit tests and behind the `test-support` feature (worker/tests, cli/tests).
//! - [`exec`]: the one path every command runs through.
//! - [`instance`]: this worker process's instance id and liveness lock, and reaping what dead
//!   predecessors left (containers, agent processes).
//! - [`replay`]: re-executing a trajectory's recorded actions step by step, with the checks of
//!   replay (outputs at three levels, fingerprints).
//! - [`snapshots`]: the snapshot images of trajectory states on this host and across hosts
//!   through a registry, and preparing a continuation's container at `h_t`.
//! - [`replay_job`]: the `replay` job, a whole trajectory replayed and committed at its anchors.
//!
//! Arrows go one way: `replay_job` → `snapshots` → `replay` → `exec` → `container`.

pub mod container;
pub mod exec;
pub mod instance;
pub mod replay;
pub mod replay_job;
pub mod snapshots;
