//! The container seam: everything the worker does with containers goes through
//! [`ContainerRuntime`]. [`docker::DockerRuntime`] is the one real implementation (bollard appears
//! nowhere else); `double::FakeRuntime` is the test double for unit tests of replay, snapshots and
//! agent runs, compiled only for this crate's tests and behind the `test-support` feature.
//!
//! A container is created *and started* by [`ContainerRuntime::create`] from a [`ContainerSpec`]:
//! on the network it names ([`ContainerNetwork`]: none unless a study asked for one its worker's
//! operator offers), memory and pids limits, no privileges, no new privileges, labelled so that
//! a worker restarted after a crash finds and removes what it left behind ([`labels`]).
//!
//! Commands run through [`ContainerRuntime::exec`] only: one path for recorded runs, replays,
//! continuations and evaluations. A command that outlives its timeout is killed inside the
//! container together with its whole process group, and the exec reports `timed_out`.

pub mod docker;
#[cfg(any(test, feature = "test-support"))]
pub mod double;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

/// Label keys every container and snapshot image of vcurve carries.
pub mod labels {
    /// Marks every container and image vcurve made (value `"1"`).
    pub const MANAGED: &str = "vcurve.managed";
    /// The worker's name (stable across restarts of the worker on one host), for people: reaping
    /// goes by [`INSTANCE`].
    pub const WORKER: &str = "vcurve.worker";
    /// The worker process that made the container (its random instance id,
    /// [`crate::sandbox::instance::Instance`]): what reaping matches, once that process is dead.
    pub const INSTANCE: &str = "vcurve.instance";
    /// On snapshot images: the lineage (the state directory) of the worker that committed it; a
    /// snapshot cache adopts and evicts only its own lineage's.
    pub const LINEAGE: &str = "vcurve.lineage";
    /// The job the container serves (its key as text).
    pub const JOB: &str = "vcurve.job";
    /// The study the container serves.
    pub const STUDY: &str = "vcurve.study";
    /// On snapshot images: the trajectory digest and the step `t` the image holds.
    pub const SNAPSHOT_TRAJECTORY: &str = "vcurve.snapshot.trajectory";
    pub const SNAPSHOT_T: &str = "vcurve.snapshot.t";
}

/// How to create a container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    /// The image (a task image or a snapshot).
    pub image: String,
    /// The memory limit in bytes (swap included: no swap beyond it).
    pub memory_bytes: u64,
    /// The largest number of processes.
    pub pids_limit: i64,
    /// Labels, [`labels`] among them.
    pub labels: BTreeMap<String, String>,
    /// The network the container is on.
    pub network: ContainerNetwork,
    /// Variables every command run in the container gets ([`Container::exec`]), under the
    /// command's own: what the deployment's package proxy needs (`PIP_INDEX_URL`, …). They are
    /// not part of the container's configuration, so no snapshot committed from it carries them.
    pub exec_env: BTreeMap<String, String>,
}

/// The network of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ContainerNetwork {
    /// Only the loopback interface (`network_mode: none`).
    #[default]
    None,
    /// The Engine's default bridge.
    Bridge,
    /// The Docker network of this name, which the worker's operator created (for `proxy`: an
    /// internal network holding only the deployment's package index or proxy).
    Named(String),
}

impl ContainerNetwork {
    /// The Engine's `network_mode` for it.
    pub fn mode(&self) -> &str {
        match self {
            ContainerNetwork::None => "none",
            ContainerNetwork::Bridge => "bridge",
            ContainerNetwork::Named(name) => name,
        }
    }
}

/// One command to run in a running container.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecRequest {
    /// The argument vector, e.g. `["bash", "-c", "ls"]`.
    pub argv: Vec<String>,
    /// Variables set for the command, on top of the image's environment.
    pub env: BTreeMap<String, String>,
    /// The working directory.
    pub workdir: String,
    /// The command, and everything it started, is killed when this runs out.
    pub timeout: Duration,
    /// As under a plain `docker exec` (the recording environment of mini-swe-agent's runs): at
    /// the timeout only the wait ends, the command keeps running; and what a command leaves in
    /// the background when it returns is not killed either.
    pub leave_running: bool,
    /// vcurve's own command that kills, before it returns, whatever it started
    /// ([`crate::sandbox::exec::REAP_TAIL`]): no second exec kills what is left of it when it
    /// returns (one at its timeout still does, unless `leave_running`).
    pub reaps_itself: bool,
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// stdout and stderr merged in the order they were written, as raw bytes.
    pub output: Vec<u8>,
    /// The exit code; `None` when the command was killed by its timeout.
    pub exit_code: Option<i64>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
}

/// One entry of a container diff against its image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub path: String,
    pub kind: ChangeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    Modified,
    Added,
    Deleted,
}

/// The stamp of a writable layer read on the worker's host ([`ContainerRuntime::diff_stamped`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerStamp {
    /// A hash of every entry of the layer with its stat: equal hashes, the same state.
    pub hash: String,
    /// Whether every file of the image that the layer holds again with the image's size and
    /// modification second also holds the image's bytes: a check of sizes and whole-second times
    /// alone (git's `core.checkStat=minimal`) then misses no change the layer made to the image's
    /// files.
    pub stat_exact: bool,
}

/// A diff with the stamp of the writable layer it was read from, if it was
/// ([`ContainerRuntime::diff_stamped`]).
pub type StampedDiff = (Vec<Change>, Option<LayerStamp>);

/// An image vcurve made, as listed by [`ContainerRuntime::images`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// The reference it was committed under, e.g. `vcurve-snapshot:abc…-15`.
    pub reference: String,
    /// The image's id: one image listed under two references has the same id.
    pub id: String,
    /// Its own size on disk in bytes (the layer it adds over its parent).
    pub size_bytes: u64,
    pub labels: BTreeMap<String, String>,
}

/// Why a runtime operation failed. Every one of them is an infrastructure failure: the job that
/// met it has no outcome and is run again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// The image does not exist locally, or (for [`ContainerRuntime::pull_image`]) in the
    /// registry.
    #[error("no image {0:?}")]
    NoImage(String),
    /// The container is gone (removed, or killed by the kernel's OOM killer as a whole).
    #[error("container {0} is gone")]
    Gone(String),
    /// Anything else the engine answered, with its message.
    #[error("container runtime: {0}")]
    Engine(String),
}

/// An image being made from a container's state taken earlier
/// ([`ContainerRuntime::commit_later`]); resolves to the image's id.
pub type PendingImage = BoxFuture<'static, Result<String, RuntimeError>>;

/// The container runtime (Docker Engine through bollard in production).
///
/// Futures are boxed so that the trait stays dyn-compatible (`Arc<dyn ContainerRuntime>`).
pub trait ContainerRuntime: Send + Sync {
    /// Create and start a container; returns its id.
    fn create<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<String, RuntimeError>>;

    /// Run a command in a running container (see the module docs for timeouts).
    fn exec<'a>(
        &'a self,
        container: &'a str,
        request: &'a ExecRequest,
    ) -> BoxFuture<'a, Result<ExecOutput, RuntimeError>>;

    /// Write a file into a running container (parents created), owned by root with `mode`.
    fn put_file<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
        content: &'a [u8],
        mode: u32,
    ) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// The container's changes against its image, sorted by path.
    fn diff<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<Vec<Change>, RuntimeError>>;

    /// [`ContainerRuntime::diff`] with a stamp of the container's writable layer, where the
    /// runtime reads the layer itself: the stamp changes whenever anything is written to the
    /// layer, so two equal stamps mean the same state. `None` where it asks the engine.
    fn diff_stamped<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<StampedDiff, RuntimeError>> {
        Box::pin(async move { Ok((self.diff(container).await?, None)) })
    }

    /// Commit the container as the image `reference` (`repo:tag`) with `labels`; the container
    /// keeps running. Returns the image id.
    fn commit<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, RuntimeError>>;

    /// [`ContainerRuntime::commit`] in two halves: the container's state is taken when the
    /// returned future resolves (what the container does after does not change the image), and
    /// the image is made from it by the [`PendingImage`], which may run while the container goes
    /// on. By default the whole commit is the first half.
    fn commit_later<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<PendingImage, RuntimeError>> {
        Box::pin(async move {
            let id = self.commit(container, reference, labels).await?;
            Ok(Box::pin(std::future::ready(Ok(id))) as PendingImage)
        })
    }

    /// Name the local image `source` also `reference` (`repo:tag`): the same image, no new layer.
    fn tag<'a>(&'a self, source: &'a str, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// Kill and remove a container with its anonymous volumes; a container already gone is not an
    /// error.
    fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// Whether an image exists locally.
    fn image_exists<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<bool, RuntimeError>>;

    /// Remove an image; one already gone is not an error. An image listed under other references
    /// too loses only this one.
    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// The ids of the containers (running or not) carrying every label of `filter`.
    fn containers<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<String>, RuntimeError>>;

    /// The images carrying every label of `filter`.
    fn images<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<ImageInfo>, RuntimeError>>;

    /// Push the local image `reference` to a registry as `remote` (`HOST:PORT/repo:tag`); the
    /// local image keeps only its own reference. Returns the image's id (its content identity: the
    /// same after a pull on any host).
    fn push_image<'a>(&'a self, reference: &'a str, remote: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>>;

    /// Pull `remote` (`HOST:PORT/repo:tag`) from its registry and name it `reference` locally (only
    /// that: the remote name is not kept). Returns the image's id. An image the registry does not
    /// hold is [`RuntimeError::NoImage`].
    fn pull_image<'a>(&'a self, remote: &'a str, reference: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>>;
}

/// A running container that is removed when its job ends, whatever the outcome.
///
/// Call [`Container::remove`] on the normal path. When the guard is dropped without it (the job's
/// future was cancelled, the worker is shutting down) the removal is spawned on the current tokio
/// runtime, so no container outlives its job.
pub struct Container {
    runtime: Arc<dyn ContainerRuntime>,
    id: Option<String>,
    /// [`ContainerSpec::exec_env`].
    exec_env: BTreeMap<String, String>,
}

impl Container {
    /// Create and start a container from `spec`.
    pub async fn start(runtime: Arc<dyn ContainerRuntime>, spec: &ContainerSpec) -> Result<Container, RuntimeError> {
        let id = runtime.create(spec).await?;
        Ok(Container { runtime, id: Some(id), exec_env: spec.exec_env.clone() })
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        self.id.as_deref().expect("a container guard holds its id until it is removed")
    }

    pub fn runtime(&self) -> &Arc<dyn ContainerRuntime> {
        &self.runtime
    }

    /// Run `request` in the container, with the container's [`ContainerSpec::exec_env`] under
    /// the request's own variables.
    pub async fn exec(&self, request: &ExecRequest) -> Result<ExecOutput, RuntimeError> {
        if self.exec_env.is_empty() {
            return self.runtime.exec(self.id(), request).await;
        }
        let mut with_env = request.clone();
        for (name, value) in &self.exec_env {
            with_env.env.entry(name.clone()).or_insert_with(|| value.clone());
        }
        self.runtime.exec(self.id(), &with_env).await
    }

    pub async fn put_file(&self, path: &str, content: &[u8], mode: u32) -> Result<(), RuntimeError> {
        self.runtime.put_file(self.id(), path, content, mode).await
    }

    pub async fn diff(&self) -> Result<Vec<Change>, RuntimeError> {
        self.runtime.diff(self.id()).await
    }

    /// [`ContainerRuntime::diff_stamped`].
    pub async fn diff_stamped(&self) -> Result<StampedDiff, RuntimeError> {
        self.runtime.diff_stamped(self.id()).await
    }

    pub async fn commit(&self, reference: &str, labels: &BTreeMap<String, String>) -> Result<String, RuntimeError> {
        self.runtime.commit(self.id(), reference, labels).await
    }

    /// [`ContainerRuntime::commit_later`].
    pub async fn commit_later(
        &self,
        reference: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<PendingImage, RuntimeError> {
        self.runtime.commit_later(self.id(), reference, labels).await
    }

    /// Remove the container now.
    pub async fn remove(mut self) -> Result<(), RuntimeError> {
        match self.id.take() {
            Some(id) => self.runtime.remove(&id).await,
            None => Ok(()),
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let runtime = self.runtime.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(async move {
                        if let Err(e) = runtime.remove(&id).await {
                            tracing::warn!(container = %id, error = %e, "cannot remove a container whose job ended");
                        }
                    });
                }
                Err(_) => {
                    tracing::warn!(container = %id, "container left behind: no runtime to remove it; the worker reaps it at its next start")
                }
            }
        }
    }
}

/// Remove every container a worker named `worker` left behind (labelled [`labels::MANAGED`]` = 1`
/// and [`labels::WORKER`]` = worker`): what a worker killed with SIGKILL could not remove. Call it
/// when the worker starts, before it leases work. Returns how many were removed.
pub async fn reap(runtime: &dyn ContainerRuntime, worker: &str) -> Result<usize, RuntimeError> {
    let filter =
        BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned()), (labels::WORKER.to_owned(), worker.to_owned())]);
    let ids = runtime.containers(&filter).await?;
    for id in &ids {
        runtime.remove(id).await?;
    }
    Ok(ids.len())
}
