//! `vcurve worker`: run continuations leased from a coordinator, with the runners it is asked to
//! offer (`synthetic` always; with `--docker` the `agent` runner with the agents its operator
//! registers, and `mini-swe-agent` where its environment is; with `--model-endpoint` the model
//! calls of task-state studies on those endpoints), and its own Prometheus endpoint when asked.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};

use super::serving::{metrics_listener, shutdown_signal};
use crate::client;

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The coordinator's URL.
    #[arg(long, env = "VCURVE_COORDINATOR", default_value = "http://127.0.0.1:7070")]
    pub coordinator: String,
    /// Continuations run at once.
    #[arg(long, env = "VCURVE_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub slots: u32,
    /// The worker's name in progress reports [default: the host name].
    #[arg(long, env = "VCURVE_WORKER_NAME")]
    pub name: Option<String>,
    /// File holding the worker bearer token [default: $VCURVE_WORKER_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for an https:// coordinator.
    #[arg(long, env = "VCURVE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// On SIGTERM, let running continuations finish this long before releasing them.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_s: u64,
    /// Also offer the `agent` runner: real agents in Docker containers (replay, snapshots,
    /// continuations, evaluation). Needs a running Docker Engine and the studies' task images.
    #[arg(long, env = "VCURVE_DOCKER")]
    pub docker: bool,
    /// Disk budget of the snapshot cache (anchor and h_t images), in GiB; the least recently used
    /// snapshots are removed beyond it.
    #[arg(long, env = "VCURVE_SNAPSHOT_BUDGET_GB", default_value_t = 20.0, value_parser = parse_budget_gb)]
    pub snapshot_budget_gb: f64,
    /// With --docker, share snapshots with other workers through the registry at HOST:PORT: push
    /// every snapshot committed, pull one another worker pushed (its image id checked) instead of
    /// rebuilding it by replay, and tell the coordinator, which hands a worker continuations whose
    /// snapshots it holds first, then those whose snapshots are in its registry. The engine must
    /// trust the registry: a loopback one is trusted without TLS, any other needs TLS or an
    /// insecure-registries entry in the engine's daemon.json.
    #[arg(long, env = "VCURVE_SNAPSHOT_REGISTRY", value_name = "HOST:PORT")]
    pub snapshot_registry: Option<String>,
    /// With --docker, also offer the `mini-swe-agent` runner, run by this python of a
    /// mini-swe-agent 2.4.6 environment (scripts/mini-swe-agent-venv makes one and prints its
    /// path) [default: .venv/mini-swe-agent/bin/python, when it exists].
    #[arg(long, env = "VCURVE_MSA_PYTHON", value_name = "PYTHON")]
    pub mini_swe_agent_python: Option<PathBuf>,
    /// With --docker, judge tasks of the `swebench` evaluator with the SWE-bench harness 5.0.2 of
    /// this python (scripts/swebench-venv makes the environment and prints its path)
    /// [default: .venv/swebench/bin/python, when it exists].
    #[arg(long, env = "VCURVE_SWEBENCH_PYTHON", value_name = "PYTHON")]
    pub swebench_python: Option<PathBuf>,
    /// The folder holding the `vcurve_agents` package (the repository's agents/) [default: agents].
    #[arg(long, env = "VCURVE_AGENTS_DIR", value_name = "DIR")]
    pub agents_dir: Option<PathBuf>,
    /// With --docker, offer the agents of this registry file (YAML: `agents: {NAME: {command:
    /// [ARGV...], env: {VAR: VALUE}, allow_env: [VAR, PREFIX_*, *_SUFFIX]}}`): a study names one
    /// (`runner: {kind: agent, agent: NAME}`) and runs its command, never one of its own.
    #[arg(long, env = "VCURVE_AGENTS", value_name = "FILE")]
    pub agents: Option<PathBuf>,
    /// With --docker, also offer the agent NAME running COMMAND (split as a shell would, without
    /// running one; no variables from studies); `--agent scripted` offers the shipped scripted
    /// agent of --agents-dir. Repeat for several.
    #[arg(long = "agent", value_name = "NAME=COMMAND")]
    pub agent: Vec<String>,
    /// The user agent processes run as: a name or UID:GID, with no supplementary groups and a home
    /// of their own [default: nobody when the worker runs as root; otherwise the worker's user].
    #[arg(long, env = "VCURVE_AGENT_USER", value_name = "USER")]
    pub agent_user: Option<String>,
    /// With --docker, let agent containers of studies that ask for it have a network beyond
    /// `none` (their default): `bridge` (the Engine's default bridge: whatever this host reaches;
    /// mini-swe-agent studies default to it, as its own environment had it) or
    /// `proxy=DOCKER_NETWORK` (an internal Docker network holding only the deployment's package
    /// index or proxy). Repeat for several.
    #[arg(long = "network", value_name = "bridge|proxy=NETWORK")]
    pub network: Vec<String>,
    /// A variable every command in a container on the proxy network gets, pointing tools at the
    /// deployment's index, e.g. PIP_INDEX_URL=http://pypi-cache:3141/root/pypi/+simple/. Repeat
    /// for several.
    #[arg(long = "proxy-env", value_name = "NAME=VALUE")]
    pub proxy_env: Vec<String>,
    /// Offer this OpenAI-compatible model endpoint (its base URL up to /v1) for the model calls of
    /// task-state studies whose stages name it; `=KEY_ENV` names the environment variable holding
    /// its API key, the only one the worker reads for it (a study naming another variable is
    /// refused). Needs no Docker. Repeat for several.
    #[arg(long = "model-endpoint", value_name = "BASE_URL[=KEY_ENV]")]
    pub model_endpoint: Vec<String>,
    /// Also serve Prometheus metrics at http://ADDR/metrics (the client token as a bearer token
    /// when one is set; required on a non-loopback address).
    #[arg(long, env = "VCURVE_METRICS", value_name = "ADDR")]
    pub metrics: Option<String>,
    /// File holding the client bearer token a scrape of --metrics presents [default:
    /// $VCURVE_CLIENT_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub client_token_file: Option<PathBuf>,
}

/// What runners a worker offers beyond `synthetic`.
#[derive(Debug, Clone, Default)]
pub struct WorkerRunners {
    /// `--docker`: the snapshot budget in GiB.
    pub docker: Option<f64>,
    /// `--snapshot-registry`.
    pub snapshot_registry: Option<String>,
    /// `--mini-swe-agent-python`.
    pub mini_swe_agent_python: Option<PathBuf>,
    /// `--swebench-python`.
    pub swebench_python: Option<PathBuf>,
    /// `--agents-dir`.
    pub agents_dir: Option<PathBuf>,
    /// `--agents`.
    pub agents_file: Option<PathBuf>,
    /// `--agent`, each.
    pub agent_flags: Vec<String>,
    /// `--agent-user`.
    pub agent_user: Option<String>,
    /// `--network`, each.
    pub networks: Vec<String>,
    /// `--proxy-env`, each.
    pub proxy_env: Vec<String>,
    /// `--model-endpoint`, each.
    pub model_endpoints: Vec<String>,
}

impl WorkerArgs {
    /// The runners these arguments ask for.
    pub fn runners(&self) -> WorkerRunners {
        WorkerRunners {
            docker: self.docker.then_some(self.snapshot_budget_gb),
            snapshot_registry: self.snapshot_registry.clone(),
            mini_swe_agent_python: self.mini_swe_agent_python.clone(),
            swebench_python: self.swebench_python.clone(),
            agents_dir: self.agents_dir.clone(),
            agents_file: self.agents.clone(),
            agent_flags: self.agent.clone(),
            agent_user: self.agent_user.clone(),
            networks: self.network.clone(),
            proxy_env: self.proxy_env.clone(),
            model_endpoints: self.model_endpoint.clone(),
        }
    }
}

impl WorkerRunners {
    /// The agents `--agents` and `--agent` register, run as the agent user: `--agent-user`, or
    /// [`vcurve_worker::runners::agents::DEFAULT_AGENT_USER`] when the worker runs as root. The
    /// error names the flag and what is wrong.
    pub fn agent_registry(&self) -> anyhow::Result<vcurve_worker::AgentRegistry> {
        let mut registry = vcurve_worker::AgentRegistry::new();
        if let Some(file) = &self.agents_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| anyhow::anyhow!("--agents {}: cannot read it: {e}", file.display()))?;
            registry.register_file(&text, &format!("--agents {}", file.display())).map_err(anyhow::Error::msg)?;
        }
        let agents_dir = self.agents_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_AGENTS_DIR));
        for flag in &self.agent_flags {
            registry.register_flag(flag, &agents_dir).map_err(anyhow::Error::msg)?;
        }
        registry.run_as(self.agent_user()?);
        Ok(registry)
    }

    /// The user agent processes run as (see [`WorkerRunners::agent_registry`]); `None`: the
    /// worker's own, which only a worker that is not root may keep.
    pub fn agent_user(&self) -> anyhow::Result<Option<vcurve_worker::AgentUser>> {
        use vcurve_worker::runners::agents::DEFAULT_AGENT_USER;
        let root = vcurve_worker::runners::agents::running_as_root();
        match (&self.agent_user, root) {
            (Some(user), true) => {
                let user = vcurve_worker::AgentUser::lookup(user).map_err(|e| anyhow::anyhow!("--agent-user: {e}"))?;
                if user.uid == 0 {
                    bail!("--agent-user: agent processes may not run as root (uid 0): name an unprivileged user");
                }
                Ok(Some(user))
            }
            (Some(user), false) => bail!(
                "--agent-user {user}: only a worker running as root can run agents as another user; \
                 without the flag they run as this worker's user"
            ),
            (None, true) => Ok(Some(
                vcurve_worker::AgentUser::lookup(DEFAULT_AGENT_USER)
                    .map_err(|e| anyhow::anyhow!("the default agent user: {e}; name one with --agent-user"))?,
            )),
            (None, false) => Ok(None),
        }
    }
}

/// The folder holding `vcurve_agents` when `--agents-dir` names none.
const DEFAULT_AGENTS_DIR: &str = "agents";

fn parse_budget_gb(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of GiB"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1e6) {
        return Err(format!("{s} GiB is not a budget: give a number above 0"));
    }
    Ok(v)
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "worker".into())
}

/// `vcurve worker`: its arguments (and tokens) read, run until SIGTERM or Ctrl-C.
pub async fn run(a: WorkerArgs) -> anyhow::Result<()> {
    let offer = a.runners();
    let mut config = vcurve_worker::WorkerConfig::new(a.coordinator);
    config.slots = a.slots;
    config.name = a.name.unwrap_or_else(host_name);
    config.token = client::read_token(a.token_file.as_deref(), "VCURVE_WORKER_TOKEN")?;
    config.tls_ca = a.tls_ca;
    config.shutdown_grace = std::time::Duration::from_secs(a.shutdown_grace_s);
    let metrics = match a.metrics {
        Some(addr) => Some(WorkerMetricsSettings {
            addr,
            token: client::read_token(a.client_token_file.as_deref(), "VCURVE_CLIENT_TOKEN")?,
        }),
        None => None,
    };
    run_worker(config, offer, metrics).await
}

/// `vcurve worker --metrics ADDR`, and the token a scrape must present (`--client-token-file`).
#[derive(Clone)]
pub struct WorkerMetricsSettings {
    pub addr: String,
    pub token: Option<String>,
}

pub async fn run_worker(
    config: vcurve_worker::WorkerConfig,
    offer: WorkerRunners,
    metrics_at: Option<WorkerMetricsSettings>,
) -> anyhow::Result<()> {
    let stop_metrics = tokio_util::sync::CancellationToken::new();
    let (metrics, metrics_task) = match metrics_at {
        Some(at) => {
            let listener = metrics_listener(&at.addr, at.token.is_some(), "client").await?;
            if !listener.local_addr()?.ip().is_loopback() && at.token.is_some() && at.token == config.token {
                bail!(
                    "refusing to serve metrics with the worker token: a scraper could act as a worker; give it its own"
                );
            }
            let metrics = Arc::new(vcurve_worker::metrics::WorkerMetrics::new());
            let stop = stop_metrics.clone();
            let task = tokio::spawn(vcurve_worker::metrics::serve(metrics.clone(), listener, at.token, async move {
                stop.cancelled().await
            }));
            (Some(metrics), Some(task))
        }
        None => (None, None),
    };
    let mut runners = vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner);
    let endpoints = vcurve_worker::ModelEndpoints::from_flags(&offer.model_endpoints).map_err(anyhow::Error::msg)?;
    if !endpoints.is_empty() {
        endpoints.check_keys().map_err(anyhow::Error::msg)?;
        tracing::info!(endpoints = ?endpoints.wire(), "offering these model endpoints for task-state model calls");
        runners.set_model_calls(Arc::new(vcurve_worker::ModelCallRunner::new(endpoints)));
    }
    let located =
        vcurve_worker::MiniSweAgent::locate(offer.mini_swe_agent_python.as_deref(), offer.agents_dir.as_deref());
    match offer.docker {
        Some(budget_gb) => {
            let agents = offer.agent_registry()?;
            let registry = offer.snapshot_registry.clone();
            let agent = agent_runner(&config.name, budget_gb, registry, metrics.as_ref()).await?;
            agent.use_swebench(swebench_harness(&offer).await?);
            let user = agents.user().cloned();
            tracing::info!(
                agents = ?agents.names(),
                user = user.as_ref().map(|u| u.name.as_str()).unwrap_or("the worker's"),
                "offering the agents its operator registered"
            );
            agent.use_agents(agents);
            let networks =
                vcurve_worker::runners::networks::NetworkOffer::from_flags(&offer.networks, &offer.proxy_env)
                    .map_err(anyhow::Error::msg)?;
            if let Some(proxy) = &networks.proxy {
                vcurve_worker::sandbox::container::docker::DockerRuntime::connect()
                    .await
                    .context("--docker: cannot reach the Docker Engine")?
                    .check_proxy_network(&proxy.network)
                    .await
                    .map_err(|e| anyhow::anyhow!("--network proxy={}: {e}", proxy.network))?;
            }
            tracing::info!(networks = ?networks.names(), "offering agent containers these networks beyond none");
            agent.use_networks(networks);
            match located.map_err(|e| anyhow::anyhow!("--mini-swe-agent-python: {e}"))? {
                Some(adapter) => {
                    let interpreter = adapter
                        .check(user.as_ref())
                        .await
                        .map_err(|e| anyhow::anyhow!("--mini-swe-agent-python: {e}"))?;
                    tracing::info!(python = %adapter.python.display(), "offering the mini-swe-agent runner");
                    runners.insert(std::sync::Arc::new(agent.mini_swe_agent(adapter.registry(user), interpreter)));
                }
                None => tracing::info!(
                    "not offering the mini-swe-agent runner: no {} (make it with scripts/mini-swe-agent-venv, \
                     or name one with --mini-swe-agent-python)",
                    vcurve_worker::runners::mini_swe_agent::DEFAULT_PYTHON
                ),
            }
            runners.insert(std::sync::Arc::new(agent));
        }
        None if offer.snapshot_registry.is_some() => {
            bail!("--snapshot-registry needs --docker: snapshots are container images")
        }
        None if offer.mini_swe_agent_python.is_some() => {
            bail!("--mini-swe-agent-python needs --docker: the mini-swe-agent runner runs agents in containers")
        }
        None if offer.agents_file.is_some() || !offer.agent_flags.is_empty() || offer.agent_user.is_some() => {
            bail!("--agents, --agent and --agent-user need --docker: agents run on tasks in containers")
        }
        None if !offer.networks.is_empty() || !offer.proxy_env.is_empty() => {
            bail!("--network and --proxy-env need --docker: they are the networks of agent containers")
        }
        None if offer.swebench_python.is_some() => {
            bail!("--swebench-python needs --docker: the SWE-bench harness judges patches in containers")
        }
        None => {}
    }
    let summary = vcurve_worker::run_with_metrics(config, runners, metrics, shutdown_signal()).await;
    stop_metrics.cancel();
    if let Some(task) = metrics_task {
        task.await??;
    }
    eprintln!("vcurve worker stopped: {:?}", summary?);
    Ok(())
}

/// The SWE-bench harness a worker judges `swebench` tasks with: `--swebench-python` (checked:
/// an error when it cannot run the harness), or the default environment when it exists
/// (checked the same way); without either, SWE-bench tasks are not judged here (each such
/// evaluation is a no-outcome naming scripts/swebench-venv).
async fn swebench_harness(offer: &WorkerRunners) -> anyhow::Result<vcurve_worker::SwebenchHarness> {
    use vcurve_worker::runners::evaluate::swebench::{DEFAULT_AGENTS_DIR, DEFAULT_PYTHON};
    let agents = offer.agents_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_AGENTS_DIR));
    let python = offer.swebench_python.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_PYTHON));
    let harness = vcurve_worker::SwebenchHarness::new(&python, &agents);
    if offer.swebench_python.is_none() && !python.exists() {
        tracing::info!(
            "SWE-bench tasks are not judged on this worker: no {DEFAULT_PYTHON} (make it with scripts/swebench-venv, \
             or name one with --swebench-python)"
        );
        return Ok(harness);
    }
    harness.check().await.map_err(|e| anyhow::anyhow!("--swebench-python: {e}"))?;
    tracing::info!(python = %harness.python.display(), "judging SWE-bench tasks with the harness");
    Ok(harness)
}

/// The `agent` runner on this host's Docker Engine, for the worker `name`: reaps what a previous
/// run of the worker left behind and opens the snapshot cache (sharing snapshots through
/// `snapshot_registry`, `HOST:PORT`, when given). With `metrics`, its container operations are
/// timed and its snapshot cache's disk and counts are read at every scrape.
pub async fn agent_runner(
    name: &str,
    budget_gb: f64,
    snapshot_registry: Option<String>,
    metrics: Option<&Arc<vcurve_worker::metrics::WorkerMetrics>>,
) -> anyhow::Result<vcurve_worker::AgentProcessRunner> {
    use vcurve_worker::metrics::{MeteredRuntime, SnapshotUsage};
    let runtime = vcurve_worker::sandbox::container::docker::DockerRuntime::connect()
        .await
        .context("--docker: cannot reach the Docker Engine")?;
    let mut runtime: Arc<dyn vcurve_worker::sandbox::container::ContainerRuntime> = Arc::new(runtime);
    if let Some(m) = metrics {
        runtime = Arc::new(MeteredRuntime::new(runtime, m.clone()));
    }
    let budget = (budget_gb * f64::from(1u32 << 30)) as u64;
    let agent = vcurve_worker::AgentProcessRunner::start_with_registry(runtime, name, budget, snapshot_registry)
        .await
        .context("--docker: cannot start the agent runner")?;
    if let Some(m) = metrics {
        let cache = agent.clone();
        m.watch_snapshots(move || SnapshotUsage {
            bytes: cache.snapshot_bytes(),
            snapshots: cache.held_snapshots().len() as u64,
            budget_bytes: budget,
        });
        let counts = agent.clone();
        m.watch_snapshot_stats(move || counts.snapshot_stats());
    }
    Ok(agent)
}
