//! # vcurve-worker
//!
//! A worker leases jobs from the coordinator — continuations `(study, trajectory, series, t, seed)`,
//! replays, evaluations and base runs — runs each through an agent runner, and reports its typed
//! result with the job's attempt number. A job names its trajectory by digest; the worker fetches
//! each payload once and keeps it. `vcurve demo` (which runs several workers in one process) calls
//! [`run`]; the `vcurve worker` command calls [`run_with_metrics`], which also feeds its Prometheus
//! endpoint.
//!
//! ## Flow
//!
//! 1. **Register** with the worker's name, slots, capabilities (the kinds of its [`Runners`]), the
//!    model endpoints its operator offers (each the capability `model:BASE_URL` at the
//!    coordinator) and [`PROTOCOL_VERSION`]. While the coordinator is unreachable (it may be restarting) the worker
//!    retries with capped exponential backoff, logging at `warn`.
//! 2. **Lease** up to the number of free slots, waiting up to `lease_wait` for work (long poll).
//!    Each job runs on its own tokio task and holds its slot until its result is reported.
//! 3. **Heartbeat** every `heartbeat_interval_ms` (from the registration), listing every held job
//!    as `(key, attempt)`. Jobs the coordinator answers as `revoked` are cancelled and never
//!    reported; `unknown_worker` makes the worker register again.
//! 4. **Report** each result (an outcome, or a no-outcome with its reason). A report that does not
//!    go through is retried with backoff until it does — a finished outcome is never dropped
//!    silently. `accepted = false` (a late or duplicate report) changed nothing and is not an
//!    error. A job whose runner kind the worker lacks is reported as the no-outcome
//!    `"unsupported runner <kind>"`.
//! 5. **Shut down** when the `shutdown` future resolves: lease no more, give running jobs
//!    `shutdown_grace` to finish and be reported, cancel the rest and give them back with
//!    `Release`, and return a [`WorkerSummary`].
//!
//! Transport errors on any RPC are retried for as long as it takes; only the fatal
//! [`WorkerError`]s (rejected token, refused registration such as a protocol-version mismatch,
//! bad configuration) end [`run`] with an error.
//!
//! ## Layout
//!
//! Three rooms, with arrows one way (`lease` → `runners` → `sandbox`; nothing in a room imports a
//! room before it, and no module imports its parent's items back):
//!
//! - [`lease`]: talking to the coordinator — [`run`] and its tasks (lease loop, heartbeat loop,
//!   one task per job), the gRPC client (channel, TLS, bearer token, deadlines, backoff), the one
//!   module converting `vcurve.v1` wire types, the trajectory cache, [`WorkerConfig`],
//!   [`WorkerError`] and the TLS checks the command line shares ([`lease::tls`]).
//! - [`runners`]: the agent-runner seam ([`AgentRunner`], [`Runners`], [`JobSpec`],
//!   [`JobReport`], [`JobServices`]) and the runners: [`SyntheticRunner`] (outcomes a pure
//!   function of the key), [`AgentProcessRunner`] (agent processes in containers: base runs,
//!   replays, continuations, evaluations, task-state sessions), [`MiniSweAgent`],
//!   [`ModelCallRunner`] (a task-state study's model calls, routed by their job kind, on the
//!   endpoints of [`ModelEndpoints`]) and the evaluators ([`runners::evaluate`]).
//! - [`sandbox`]: the container runtime seam and the Docker Engine behind it ([`DockerRuntime`]),
//!   the one exec path, replay with its checks, and the snapshot images of trajectory states
//!   (on this host and across hosts through a registry).
//! - [`llm`]: the model call layer of the task-state study — the OpenAI-compatible chat-completions
//!   client ([`llm::OpenAiClient`]) behind [`llm::ModelClient`], with retries, concurrency limits and
//!   a call log record per call. It sits beside the rooms and imports none of them.
//! - [`metrics`]: the Prometheus endpoint (`vcurve worker --metrics`): jobs, container operations
//!   timed by a wrapper of the runtime, the snapshot cache's disk. It sits beside the rooms: the
//!   lease loop feeds it, and it names the runners' and the sandbox's types.
//!
//! The crate root re-exports what running a worker takes: [`run`] and [`run_with_metrics`], their
//! configuration, summary and errors, the runner seam and the runners, and the Docker runtime.
//! The rooms' public modules hold the rest, which the binary's other parts (the TLS checks of the
//! command line, the metrics endpoint, the container benchmarks) and the tests reach directly:
//! [`lease::tls`], [`metrics`], [`runners::agent`], [`runners::evaluate`], [`sandbox::replay`],
//! [`sandbox::snapshots`]. The fake container runtime of the tests (`sandbox::container::double`)
//! is compiled only behind the `test-support` feature.

pub mod lease;
pub mod llm;
pub mod metrics;
pub mod runners;
pub mod sandbox;

pub use lease::{WorkerConfig, WorkerError, WorkerSummary, run, run_with_metrics};
pub use runners::evaluate::SwebenchHarness;
pub use runners::{
    AgentProcessRunner, AgentRegistry, AgentRunner, AgentUser, ContinuationKey, HeldJob, JobKey, JobKind, JobReport,
    JobServices, JobSpec, MiniSweAgent, ModelCallRunner, ModelEndpoints, NoOutcome, RegisteredAgent, Runners,
    SyntheticRunner,
};
pub use sandbox::container::ContainerRuntime;
pub use sandbox::container::docker::DockerRuntime;
pub use vcurve_proto::PROTOCOL_VERSION;
pub use vcurve_record::jobs::{CompareLevel, Judged, NonReplayable, Replayed, RunOutcome};
