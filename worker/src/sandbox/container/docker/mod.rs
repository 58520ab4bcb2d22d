//! Docker Engine through bollard: the one real [`ContainerRuntime`]. bollard appears nowhere else.
//!
//! # Containers
//!
//! [`DockerRuntime::create`] makes a container from the spec's image that does not depend on the
//! image's `CMD`: its main process is [`KEEPER`], a `sh` loop that waits on a `sleep`, so the
//! container stays up between commands and, as the namespace's init, reaps orphans (the timeout
//! kill below waits for them to be gone). Docker's own init (`init: true`, docker-init/tini) would
//! do too, but its bind mount adds `/usr/sbin/docker-init` (and changes `/usr`, `/usr/sbin`) to every
//! container's diff and commit. The container has no network (`network_mode: none`: only `lo`), a memory
//! limit with no swap beyond it (`memory = memory_swap`), a pids limit, no privileges,
//! `no-new-privileges`, and drops the capabilities no offline git/python/build work needs
//! ([`CAP_DROP`]); it keeps the ones root needs to own, chmod and chown files and to switch users.
//!
//! # Commands
//!
//! [`DockerRuntime::exec`] runs the argv through a small `sh` wrapper ([`WRAPPER`]) that
//!
//! 1. makes sure the command leads its own process group: an exec's process is normally already
//!    a session and group leader (runc calls `setsid` for it); when it is not, the wrapper starts
//!    the command under util-linux's `setsid -w`;
//! 2. prints one header line, `vcurve-exec <pgid> pipe:[<inode>]`, on the exec's stdout before the
//!    command starts: the group id and the output pipe. The header travels in the exec's own
//!    output stream, which is stripped of it, so it is written nowhere inside the container: the
//!    command cannot see or disturb it and a container diff shows nothing of it;
//! 3. sends stderr into the stdout pipe (`exec 2>&1`), so the output is merged in exactly the
//!    order it was written (what `subprocess.run(stderr=STDOUT)` of the recording agent sees), and
//!    `exec`s the argv: nothing of the wrapper stays in the process tree.
//!
//! When the timeout runs out, a second exec ([`KILL_SCRIPT`]) sends `SIGKILL` to the whole group,
//! and to any process that left the group but still holds the output pipe (`setsid cmd &`), and
//! waits until none of them exists any more (init reaps them). So `sleep 1000` or
//! `sleep 1000 & echo started` (which keeps the pipe open after the shell exits) leaves no process
//! behind. A process that left the group *and* let go of the pipe (a daemon that detached itself
//! fully) is out of reach, as it is for any shell. The exec then reports `timed_out`, no exit
//! code, and the output collected so far.
//!
//! A command bounds its children: when it *returns*, the same kill runs for what is left of it,
//! so `sleep 1000 & echo started` returns `started` and leaves no `sleep` for the next command to
//! meet (docs/decisions.md, "Processes a command leaves behind"). While the output is still open,
//! the exec asks the engine whether the command's own process has ended (after 50 ms, then at
//! doubling intervals up to 1 s); once it has, the kill runs at once, which closes the output,
//! instead of waiting the ~2 s the engine gives a stream held open by a child. The kill costs one
//! more exec per command, except after vcurve's own scripts (`reaps_itself`: a fingerprint's git),
//! which do the same kill themselves before they return ([`crate::sandbox::exec::REAP_TAIL`]).
//!
//! A request with `leave_running` (the recorded environment of mini-swe-agent's runs, a plain
//! `docker exec` killed at its timeout by its caller) skips both kills: at the timeout the exec
//! returns what was printed so far and the command runs on; a command that returns leaving a
//! background child holding its output ends when the engine gives up on the stream (~2 s here),
//! and the child runs on.
//!
//! An exec the engine could not start at all (`OCI runtime exec failed`: the pids limit reached by
//! a fork bomb) is [`RuntimeError::Engine`], never the command's output; so is a kill that cannot
//! run. Either makes the job a no-outcome.
//!
//! Output is capped at [`OUTPUT_CAP`] bytes (64 MiB): what a command prints beyond it is read and
//! dropped, so the command is never blocked on a full pipe.
//!
//! A missing working directory fails as under `docker exec`: exit code 126 and the runtime's
//! message as output. An exec whose future is dropped leaves its command running; the container
//! guard removes the container anyway.
//!
//! An exec in a container that died (the OOM killer took its init, or it was removed) is
//! [`RuntimeError::Gone`].
//!
//! # Images
//!
//! [`DockerRuntime::commit`] does not pause the container: every commit is taken between two
//! commands, when no exec of vcurve runs, and freezing and thawing the container's cgroup is a
//! cost paid on every anchor (a background process an agent left running may write during the
//! commit; its writes were never part of a step's recorded state either). Docker merges the
//! container's labels into the image's (the given labels win), so a snapshot also carries the
//! labels of the container it was taken from, and the base image's own.
//!
//! [`DockerRuntime::images`] reports as `size_bytes` an image's own layer: the newest entry of its
//! history. Docker 20.10's image list reports `Size` as the whole image with its parents
//! (`SharedSize` is -1 unless asked for, and then only counts sharing), so a 3-byte snapshot of a
//! 243 MB base lists as 243 MB there. An untagged image is listed under its id.
//!
//! [`DockerRuntime::push_image`] tags the image with the remote name, pushes it (an error the
//! engine reports inside the progress stream — an unreachable registry, a refused blob — fails
//! the push) and removes the remote name again, so the local image keeps one name and
//! [`DockerRuntime::images`] lists it once. [`DockerRuntime::pull_image`] pulls the remote name,
//! tags the image with the local one and drops the remote one. Both return the image id, the
//! digest of the image's configuration, which names its layers by content: the engine checks
//! every pulled layer against its digest, and an image pulled elsewhere has the id it had where it
//! was pushed. A registry on a loopback address is trusted without TLS by the engine; any other
//! must serve TLS or be listed in the engine's `insecure-registries`.
//!
//! [`DockerRuntime::remove_image`] forces the removal. An image that a running container uses, or
//! that is the parent of another image, loses only its tag: Docker keeps it untagged (listed by
//! [`DockerRuntime::images`] under its id, so that it can be collected later), and the parent of
//! another image goes with its last child. Given by id, an image a running container uses is
//! refused by the engine ([`RuntimeError::Engine`], "cannot be forced"). An image that only
//! stopped containers use is deleted.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{ChangeType, ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, ContainerArchiveInfoOptionsBuilder, CreateImageOptionsBuilder,
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, PushImageOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, TagImageOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures::StreamExt;
use futures::future::BoxFuture;

use super::{
    Change, ChangeKind, ContainerRuntime, ContainerSpec, ExecOutput, ExecRequest, ImageInfo, LayerStamp, PendingImage,
    RuntimeError, StampedDiff,
};

mod engine;
mod exec;
pub mod layer;
mod load;
mod output;
mod registry;

use engine::{
    container_error, engine, engine_message, label_filters, max_version_in, one_file_tar, parse_version,
    split_reference, status,
};
pub use exec::{KILL_SCRIPT, WRAPPER};
pub use output::OUTPUT_CAP;

/// Capabilities dropped from Docker's default set. Kept: CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
/// SETUID, SETGID, KILL, SYS_CHROOT (what root needs for files, users and its own processes).
pub const CAP_DROP: &[&str] = &["NET_RAW", "NET_BIND_SERVICE", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SETPCAP"];

/// The socket used when `DOCKER_HOST` does not name a `unix://` one.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// The container's main process: keeps it alive and, being PID 1, reaps every orphan (`wait` is a
/// `waitpid(-1)` loop in dash and bash). Signals from inside the container cannot kill it.
pub const KEEPER: &str = "while :; do sleep 86400 & wait $!; done";

/// Per-request timeout of the client (headers of a response; streams are not cut by it).
const REQUEST_TIMEOUT_S: u64 = 600;
/// How long [`DockerRuntime::connect`] waits for the engine to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Docker Engine behind a local Unix socket.
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    socket: String,
    /// Each container's writable layer on this host ([`layer`]), once looked up; `None` where
    /// the driver has none or this process cannot read it (the engine's diff is used there).
    layers: Arc<Mutex<HashMap<String, Option<layer::Layers>>>>,
    /// Whether to read writable layers at all ([`DockerRuntime::engine_only`]).
    read_layers: bool,
}

/// The storage drivers whose `GraphDriver.Data` name an upper directory of overlay form.
const OVERLAY_DRIVERS: &[&str] = &["overlay2", "overlay", "fuse-overlayfs"];

/// The socket bollard's local defaults use: `DOCKER_HOST` when it is `unix://…`, else
/// [`DEFAULT_SOCKET`].
fn local_socket() -> String {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if host.starts_with("unix://") => host.trim_start_matches("unix://").to_owned(),
        _ => DEFAULT_SOCKET.to_owned(),
    }
}

impl DockerRuntime {
    /// A client of the local engine (`Docker::connect_with_local_defaults`: `DOCKER_HOST` when it is
    /// `unix://…`, else `/var/run/docker.sock`) that has not talked to it yet; it speaks bollard's
    /// newest API version, which older engines refuse. Prefer [`DockerRuntime::connect`].
    pub fn new() -> Result<DockerRuntime, RuntimeError> {
        let socket = local_socket();
        let docker = Docker::connect_with_local_defaults()
            .map_err(|e| RuntimeError::Engine(format!("cannot use the Docker Engine socket {socket}: {e}")))?
            .with_timeout(Duration::from_secs(REQUEST_TIMEOUT_S));
        Ok(DockerRuntime { docker, socket, layers: Arc::default(), read_layers: true })
    }

    /// Connect to the local engine and check that it answers (`/_ping`), settling on the API
    /// version it speaks (Docker 20.10 speaks at most 1.41 and refuses newer clients). The error
    /// names the socket.
    pub async fn connect() -> Result<DockerRuntime, RuntimeError> {
        let mut runtime = DockerRuntime::new()?;
        let socket = runtime.socket.clone();
        let unreachable = |e: String| {
            RuntimeError::Engine(format!(
                "the Docker Engine at {socket} does not answer: {e} (is dockerd running, and may this user use its socket?)"
            ))
        };
        let version = match tokio::time::timeout(CONNECT_TIMEOUT, runtime.docker.version()).await {
            Err(_) => return Err(unreachable(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))),
            Ok(Ok(v)) => v.api_version,
            // An engine older than the client names the newest version it speaks.
            Ok(Err(BollardError::DockerResponseServerError { status_code: 400, message })) => {
                match max_version_in(&message) {
                    Some(v) => Some(v),
                    None => return Err(unreachable(message)),
                }
            }
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
        };
        if let Some(version) = version.as_deref().and_then(parse_version) {
            let current = runtime.docker.client_version();
            if version < current {
                runtime.docker = Docker::connect_with_local(&runtime.socket, REQUEST_TIMEOUT_S, &version)
                    .map_err(|e| unreachable(e.to_string()))?;
            }
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, runtime.docker.ping()).await {
            Err(_) => Err(unreachable(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))),
            Ok(Err(e)) => Err(unreachable(engine_message(&e))),
            Ok(Ok(_)) => Ok(runtime),
        }
    }

    /// Check that the Docker network `name` exists and is internal (no route out of it): the
    /// network `proxy` puts agent containers on, where only the deployment's package index or
    /// proxy should be reachable. The error says what is wrong and how to make one.
    pub async fn check_proxy_network(&self, name: &str) -> Result<(), RuntimeError> {
        let make =
            format!("make one with: docker network create --internal {name}, and attach the package index to it");
        match self.docker.inspect_network(name, None).await {
            Ok(network) if network.internal == Some(true) => Ok(()),
            Ok(_) => Err(RuntimeError::Engine(format!(
                "the network {name} is not internal: agent containers on it could reach anything the host reaches; {make}"
            ))),
            Err(e) if status(&e) == Some(404) => {
                Err(RuntimeError::Engine(format!("there is no Docker network {name}; {make}")))
            }
            Err(e) => Err(engine(e)),
        }
    }

    /// This runtime, asking the engine for every diff and commit instead of reading writable
    /// layers (what a worker that cannot read the engine's data directory does anyway).
    pub fn engine_only(mut self) -> DockerRuntime {
        self.read_layers = false;
        self
    }

    /// The writable layer of `container` and its image's layers, if the storage driver has them
    /// in overlay form and this process can read them; looked up once per container.
    async fn layers_of(&self, container: &str) -> Result<Option<layer::Layers>, RuntimeError> {
        if !self.read_layers {
            return Ok(None);
        }
        if let Some(known) = self.layers.lock().unwrap_or_else(|e| e.into_inner()).get(container) {
            return Ok(known.clone());
        }
        let inspect =
            self.docker.inspect_container(container, None).await.map_err(|e| container_error(container, e))?;
        let found = inspect.graph_driver.and_then(|driver| {
            if !OVERLAY_DRIVERS.contains(&driver.name.as_str()) {
                return None;
            }
            let upper = std::path::PathBuf::from(driver.data.get("UpperDir")?);
            let lowers: Vec<std::path::PathBuf> = driver
                .data
                .get("LowerDir")
                .map(|l| l.split(':').filter(|p| !p.is_empty()).map(std::path::PathBuf::from).collect())
                .unwrap_or_default();
            // Unreadable here (a worker in a container given only the socket): the engine's diff.
            if std::fs::read_dir(&upper).is_err() || lowers.iter().any(|l| std::fs::read_dir(l).is_err()) {
                tracing::debug!(container, driver = %driver.name, "the writable layer is not readable here; using the engine's diff");
                return None;
            }
            Some(layer::Layers { upper, lowers })
        });
        self.layers.lock().unwrap_or_else(|e| e.into_inner()).insert(container.to_owned(), found.clone());
        Ok(found)
    }

    /// The engine's own diff of `container` (`docker diff`), sorted by path.
    pub async fn engine_diff(&self, container: &str) -> Result<Vec<Change>, RuntimeError> {
        self.diff_impl(container).await
    }

    /// The diff read from the writable layer where it can be, with its stamp; else the engine's.
    async fn diff_stamped_impl(&self, container: &str) -> Result<StampedDiff, RuntimeError> {
        if let Some(layers) = self.layers_of(container).await? {
            let read = tokio::task::spawn_blocking(move || layers.changes()).await;
            match read {
                Ok(Ok(state)) => {
                    return Ok((state.changes, Some(LayerStamp { hash: state.stamp, stat_exact: state.stat_exact })));
                }
                Ok(Err(e)) => {
                    // A container removed meanwhile takes its layer with it: the engine says so.
                    if self.running(container).await? {
                        tracing::warn!(container, error = %e, "cannot read the writable layer; using the engine's diff for this container");
                        self.layers.lock().unwrap_or_else(|e| e.into_inner()).insert(container.to_owned(), None);
                    }
                }
                Err(e) => return Err(RuntimeError::Engine(format!("reading the writable layer of {container}: {e}"))),
            }
        }
        Ok((self.diff_impl(container).await?, None))
    }

    /// The socket this runtime talks to.
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// The API version in use, e.g. `1.41`.
    pub fn api_version(&self) -> String {
        let v = self.docker.client_version();
        format!("{}.{}", v.major_version, v.minor_version)
    }

    async fn create_impl(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let memory = i64::try_from(spec.memory_bytes)
            .map_err(|_| RuntimeError::Engine(format!("memory limit {} bytes is too large", spec.memory_bytes)))?;
        let host_config = HostConfig {
            memory: Some(memory),
            memory_swap: Some(memory),
            pids_limit: Some(spec.pids_limit),
            network_mode: Some(spec.network.mode().to_owned()),
            privileged: Some(false),
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            cap_drop: Some(CAP_DROP.iter().map(|c| (*c).to_owned()).collect()),
            init: Some(false),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: Some(vec!["sh".to_owned(), "-c".to_owned(), KEEPER.to_owned()]),
            cmd: Some(Vec::new()),
            labels: Some(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            tty: Some(false),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            host_config: Some(host_config),
            ..Default::default()
        };
        let created = self.docker.create_container(None, body).await.map_err(|e| match status(&e) {
            Some(404) => RuntimeError::NoImage(spec.image.clone()),
            _ => engine(e),
        })?;
        for warning in &created.warnings {
            tracing::warn!(container = %created.id, %warning, "Docker Engine warning on create");
        }
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let _ = self.remove_impl(&created.id).await;
            return Err(engine(e));
        }
        Ok(created.id)
    }

    async fn put_file_impl(&self, container: &str, path: &str, content: &[u8], mode: u32) -> Result<(), RuntimeError> {
        let file = Path::new(path);
        let (Some(parent), Some(name)) = (file.parent(), file.file_name()) else {
            return Err(RuntimeError::Engine(format!("cannot write {path:?}: not a file path")));
        };
        if !file.is_absolute() {
            return Err(RuntimeError::Engine(format!("cannot write {path:?}: the path is not absolute")));
        }
        let parent = parent.to_string_lossy().into_owned();
        let info = ContainerArchiveInfoOptionsBuilder::default().path(&parent).build();
        match self.docker.get_container_archive_info(container, Some(info)).await {
            Ok(_) => {}
            Err(e) if status(&e) == Some(404) => {
                if !self.running(container).await? {
                    return Err(RuntimeError::Gone(container.to_owned()));
                }
                let argv = vec!["mkdir".to_owned(), "-p".to_owned(), "--".to_owned(), parent.clone()];
                let (output, code) = self.run_plain(container, argv).await?;
                if code != Some(0) {
                    return Err(RuntimeError::Engine(format!(
                        "cannot create {parent:?} in container {container}: {}",
                        String::from_utf8_lossy(&output).trim()
                    )));
                }
            }
            Err(e) => return Err(container_error(container, e)),
        }
        let archive = one_file_tar(name, content, mode)
            .map_err(|e| RuntimeError::Engine(format!("cannot pack {path:?} for upload: {e}")))?;
        let options = UploadToContainerOptionsBuilder::default().path(&parent).build();
        self.docker
            .upload_to_container(container, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(|e| container_error(container, e))
    }

    async fn diff_impl(&self, container: &str) -> Result<Vec<Change>, RuntimeError> {
        let changes = self.docker.container_changes(container).await.map_err(|e| container_error(container, e))?;
        let mut changes: Vec<Change> = changes
            .unwrap_or_default()
            .into_iter()
            .map(|c| Change {
                path: c.path,
                kind: match c.kind {
                    ChangeType::_0 => ChangeKind::Modified,
                    ChangeType::_1 => ChangeKind::Added,
                    ChangeType::_2 => ChangeKind::Deleted,
                },
            })
            .collect();
        changes.sort();
        Ok(changes)
    }

    /// A snapshot of `container`: its writable layer loaded as an image where it can be read here
    /// ([`load`]), else the engine's commit.
    async fn commit_impl(
        &self,
        container: &str,
        reference: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, RuntimeError> {
        self.commit_later_impl(container, reference, labels).await?.await
    }

    /// The writable layer's state packed now and loaded by the returned future
    /// ([`DockerRuntime::load_later`]); where it cannot be, the engine's commit, made now.
    async fn commit_later_impl(
        &self,
        container: &str,
        reference: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<PendingImage, RuntimeError> {
        if let Some(layers) = self.layers_of(container).await?
            && let Some(pending) = self.load_later(container, layers, reference, labels).await?
        {
            return Ok(pending);
        }
        let id = self.engine_commit(container, reference, labels).await?;
        Ok(Box::pin(std::future::ready(Ok(id))))
    }

    /// The engine's own commit of `container` (`docker commit`, not paused).
    pub async fn engine_commit(
        &self,
        container: &str,
        reference: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, RuntimeError> {
        let (repo, tag) = split_reference(reference);
        let mut options = CommitContainerOptionsBuilder::default().container(container).repo(repo).pause(false);
        if let Some(tag) = tag {
            options = options.tag(tag);
        }
        let config = ContainerConfig {
            labels: Some(labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            ..Default::default()
        };
        let id =
            self.docker.commit_container(options.build(), config).await.map_err(|e| container_error(container, e))?;
        Ok(id.id)
    }

    async fn remove_impl(&self, container: &str) -> Result<(), RuntimeError> {
        self.layers.lock().unwrap_or_else(|e| e.into_inner()).remove(container);
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.docker.remove_container(container, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            // Another removal of it is under way: wait for it to be gone.
            Err(e) if status(&e) == Some(409) && engine_message(&e).contains("already in progress") => {
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(30) {
                    match self.docker.inspect_container(container, None).await {
                        Err(e) if status(&e) == Some(404) => return Ok(()),
                        _ => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                Err(RuntimeError::Engine(format!("container {container} is still being removed after 30 s")))
            }
            Err(e) => Err(engine(e)),
        }
    }

    async fn image_exists_impl(&self, reference: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_image(reference).await {
            Ok(_) => Ok(true),
            Err(e) if status(&e) == Some(404) => Ok(false),
            Err(e) => Err(engine(e)),
        }
    }

    async fn remove_image_impl(&self, reference: &str) -> Result<(), RuntimeError> {
        let options = RemoveImageOptionsBuilder::default().force(true).noprune(false).build();
        match self.docker.remove_image(reference, Some(options), None).await {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(engine(e)),
        }
    }

    async fn containers_impl(&self, filter: &BTreeMap<String, String>) -> Result<Vec<String>, RuntimeError> {
        let filters = label_filters(filter);
        let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let list = self.docker.list_containers(Some(options)).await.map_err(engine)?;
        let mut ids: Vec<String> = list.into_iter().filter_map(|c| c.id).collect();
        ids.sort();
        Ok(ids)
    }

    async fn images_impl(&self, filter: &BTreeMap<String, String>) -> Result<Vec<ImageInfo>, RuntimeError> {
        let filters = label_filters(filter);
        let options = ListImagesOptionsBuilder::default().all(false).filters(&filters).build();
        let list = self.docker.list_images(Some(options)).await.map_err(engine)?;
        let mut images = Vec::new();
        for image in list {
            // The list's Size counts the parents' layers too; the image's own layer is the newest
            // entry of its history.
            let size_bytes = match self.docker.image_history(&image.id).await {
                Ok(history) => history.first().map(|h| h.size).unwrap_or(image.size),
                Err(e) if status(&e) == Some(404) => continue, // removed meanwhile
                Err(e) => return Err(engine(e)),
            };
            let size_bytes = u64::try_from(size_bytes).unwrap_or(0);
            let labels: BTreeMap<String, String> = image.labels.into_iter().collect();
            let tags: Vec<String> = image.repo_tags.into_iter().filter(|t| t != "<none>:<none>").collect();
            if tags.is_empty() {
                images.push(ImageInfo { reference: image.id.clone(), id: image.id.clone(), size_bytes, labels });
            } else {
                for reference in tags {
                    images.push(ImageInfo { reference, id: image.id.clone(), size_bytes, labels: labels.clone() });
                }
            }
        }
        images.sort_by(|a, b| a.reference.cmp(&b.reference));
        Ok(images)
    }
}

impl ContainerRuntime for DockerRuntime {
    fn create<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(self.create_impl(spec))
    }

    fn exec<'a>(
        &'a self,
        container: &'a str,
        request: &'a ExecRequest,
    ) -> BoxFuture<'a, Result<ExecOutput, RuntimeError>> {
        Box::pin(self.exec_impl(container, request))
    }

    fn put_file<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
        content: &'a [u8],
        mode: u32,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(self.put_file_impl(container, path, content, mode))
    }

    fn diff<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<Vec<Change>, RuntimeError>> {
        Box::pin(async move { Ok(self.diff_stamped_impl(container).await?.0) })
    }

    fn diff_stamped<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<StampedDiff, RuntimeError>> {
        Box::pin(self.diff_stamped_impl(container))
    }

    fn commit<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(self.commit_impl(container, reference, labels))
    }

    fn commit_later<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<PendingImage, RuntimeError>> {
        Box::pin(self.commit_later_impl(container, reference, labels))
    }

    fn tag<'a>(&'a self, source: &'a str, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(DockerRuntime::tag(self, source, reference))
    }

    fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(self.remove_impl(container))
    }

    fn image_exists<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<bool, RuntimeError>> {
        Box::pin(self.image_exists_impl(reference))
    }

    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(self.remove_image_impl(reference))
    }

    fn containers<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<String>, RuntimeError>> {
        Box::pin(self.containers_impl(filter))
    }

    fn images<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<ImageInfo>, RuntimeError>> {
        Box::pin(self.images_impl(filter))
    }

    fn push_image<'a>(&'a self, reference: &'a str, remote: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(self.push_impl(reference, remote))
    }

    fn pull_image<'a>(&'a self, remote: &'a str, reference: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(self.pull_impl(remote, reference))
    }
}

#[cfg(test)]
mod tests;
