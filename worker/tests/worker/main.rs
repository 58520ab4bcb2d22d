//! The worker as a library, in one test binary (`worker`), one module per subject: the lease loop
//! against a fake coordinator (`lease_loop`), the agent process driver with the scripted agent
//! (`agent_process`), the Docker runtime (`docker_runtime`), snapshots across hosts through a
//! registry (`snapshot_registry`), the SWE-bench evaluator (`swebench`), what an agent process
//! sees of its worker (`agent_environment`), what a dead worker leaves behind (`reaping`), the
//! agent's network (`network`), mini-swe-agent's own environment side by side
//! (`recorded_environment`), the model call layer against the deterministic model server
//! (`model_calls`) and a task-state study's session and model-call jobs (`task_state_jobs`). Tests that need Docker, an image or a registry say so in their first line
//! (`vcurve_testkit::require!`).

mod agent_environment;
mod agent_process;
mod docker_runtime;
mod lease_loop;
mod model_calls;
mod network;
mod reaping;
mod recorded_environment;
mod snapshot_registry;
mod support;
mod swebench;
mod task_state_jobs;
