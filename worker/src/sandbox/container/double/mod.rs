//! **Test double**: [`FakeRuntime`], an in-memory [`ContainerRuntime`] for unit and integration
//! tests of replay, snapshots and agent runs. Nothing here touches Docker or the host.
//!
//! - Images are file maps (path → content) with labels and a size. Tests register task images
//!   with [`FakeRuntime::add_image`]; [`ContainerRuntime::commit`] makes a new image from a
//!   container's files, sized by [`FakeRuntime::set_commit_size`] or by the bytes of the layer's
//!   changed files.
//! - A container is a copy of its image's files ([`FakeFs`]) that commands read and write.
//!   [`ContainerRuntime::diff`] compares it with the image it was created from, listing each
//!   changed file and, like Docker, every directory above it.
//! - What a command does is a closure `Fn(&mut FakeFs, &ExecRequest) -> ExecOutput`
//!   ([`FakeRuntime::with_handler`]); the default, [`fake_shell`], is a tiny explicit interpreter
//!   (`echo`, `cat`, `printf`, redirections, `sleep` against the timeout, `git diff`/`git status`,
//!   and a few commands that print on purpose what differs from run to run).
//! - With [`FakeRuntime::set_stamps`], [`ContainerRuntime::diff_stamped`] stamps the writable
//!   layer as the Docker runtime does where it reads it: a hash of the container's files (equal
//!   content, equal stamp — stricter than a real layer, whose stamp moves on every write).
//! - A registry ([`FakeRegistry`]) holds pushed images by remote reference; runtimes that share
//!   one ([`FakeRuntime::use_registry`]) are hosts of one deployment. Tests can corrupt an image
//!   in it, remove one, or take the registry down.
//! - Every call is logged ([`FakeRuntime::calls`], [`FakeRuntime::count`],
//!   [`FakeRuntime::commands`]) so tests can assert what happened, and any operation can be made
//!   to fail once ([`FakeRuntime::fail_next`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use super::{
    Change, ChangeKind, ContainerNetwork, ContainerRuntime, ContainerSpec, ExecOutput, ExecRequest, ImageInfo,
    LayerStamp, RuntimeError, StampedDiff,
};

mod fs;

pub use fs::{ExecHandler, FakeFs, Files};

/// The runtime's operations, for [`FakeRuntime::count`] and [`FakeRuntime::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Exec,
    PutFile,
    Diff,
    Commit,
    Tag,
    Remove,
    ImageExists,
    RemoveImage,
    Containers,
    Images,
    Push,
    Pull,
}

/// One call to the runtime, as logged.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Create { container: String, image: String, labels: BTreeMap<String, String>, network: ContainerNetwork },
    Exec { container: String, argv: Vec<String>, workdir: String, timeout: Duration },
    PutFile { container: String, path: String },
    Diff { container: String },
    Commit { container: String, reference: String },
    Tag { source: String, reference: String },
    Remove { container: String },
    ImageExists { reference: String },
    RemoveImage { reference: String },
    Containers,
    Images,
    Push { reference: String, remote: String },
    Pull { remote: String, reference: String },
}

impl Call {
    pub fn op(&self) -> Op {
        match self {
            Call::Create { .. } => Op::Create,
            Call::Exec { .. } => Op::Exec,
            Call::PutFile { .. } => Op::PutFile,
            Call::Diff { .. } => Op::Diff,
            Call::Commit { .. } => Op::Commit,
            Call::Tag { .. } => Op::Tag,
            Call::Remove { .. } => Op::Remove,
            Call::ImageExists { .. } => Op::ImageExists,
            Call::RemoveImage { .. } => Op::RemoveImage,
            Call::Containers => Op::Containers,
            Call::Images => Op::Images,
            Call::Push { .. } => Op::Push,
            Call::Pull { .. } => Op::Pull,
        }
    }
}

/// An image of a [`FakeRuntime`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeImage {
    pub id: String,
    pub files: Files,
    pub labels: BTreeMap<String, String>,
    pub size_bytes: u64,
    /// The image a committed image was made over (`None` for a registered task image).
    pub parent: Option<String>,
}

/// A container of a [`FakeRuntime`].
#[derive(Debug, Clone, PartialEq)]
pub struct FakeContainer {
    pub spec: ContainerSpec,
    pub fs: FakeFs,
}

/// An in-memory image registry, shared by the [`FakeRuntime`]s that use it. Cheap to clone:
/// clones are the same registry.
#[derive(Clone, Default)]
pub struct FakeRegistry {
    inner: Arc<Mutex<RegistryState>>,
}

#[derive(Default)]
struct RegistryState {
    images: BTreeMap<String, FakeImage>,
    down: bool,
}

impl FakeRegistry {
    fn state(&self) -> MutexGuard<'_, RegistryState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The remote references it holds, sorted.
    pub fn references(&self) -> Vec<String> {
        self.state().images.keys().cloned().collect()
    }

    pub fn image(&self, remote: &str) -> Option<FakeImage> {
        self.state().images.get(remote).cloned()
    }

    /// Replace what `remote` holds by other content (another file, so another id), as a registry
    /// whose storage went bad or a tag pushed over by someone else would; whether it held it.
    pub fn corrupt(&self, remote: &str) -> bool {
        let mut st = self.state();
        let Some(image) = st.images.get_mut(remote) else { return false };
        image.files.insert("/corrupted".to_owned(), b"garbage".to_vec());
        image.id = format!("{}-corrupted", image.id);
        true
    }

    /// Forget `remote` (a registry garbage-collected or wiped); whether it held it.
    pub fn remove(&self, remote: &str) -> bool {
        self.state().images.remove(remote).is_some()
    }

    /// While down, every push and pull fails as an unreachable registry does.
    pub fn set_down(&self, down: bool) {
        self.state().down = down;
    }

    fn unreachable(&self, remote: &str) -> Option<RuntimeError> {
        let host = remote.split('/').next().unwrap_or(remote);
        self.state().down.then(|| RuntimeError::Engine(format!("Get \"http://{host}/v2/\": connection refused")))
    }
}

#[derive(Default)]
struct State {
    images: BTreeMap<String, FakeImage>,
    containers: BTreeMap<String, FakeContainer>,
    calls: Vec<Call>,
    next_id: u64,
    commit_size: Option<u64>,
    stamps: bool,
    failures: VecDeque<(Op, RuntimeError)>,
    registry: FakeRegistry,
}

/// The in-memory runtime. See the module docs.
pub struct FakeRuntime {
    state: Mutex<State>,
    handler: ExecHandler,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        FakeRuntime::new()
    }
}

impl FakeRuntime {
    /// A runtime whose commands run through [`fake_shell`].
    pub fn new() -> FakeRuntime {
        FakeRuntime { state: Mutex::new(State::default()), handler: fake_shell() }
    }

    /// A runtime whose commands do what `handler` says.
    pub fn with_handler(
        handler: impl Fn(&mut FakeFs, &ExecRequest) -> ExecOutput + Send + Sync + 'static,
    ) -> FakeRuntime {
        FakeRuntime { state: Mutex::new(State::default()), handler: Arc::new(handler) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already; keep serving the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a task image holding `files` (no labels, size 0).
    pub fn add_image<P: Into<String>, C: Into<Vec<u8>>>(
        &self,
        reference: &str,
        files: impl IntoIterator<Item = (P, C)>,
    ) {
        self.add_image_with(reference, files, BTreeMap::new(), 0);
    }

    /// Register an image with labels and a size (e.g. a snapshot left by an earlier worker).
    pub fn add_image_with<P: Into<String>, C: Into<Vec<u8>>>(
        &self,
        reference: &str,
        files: impl IntoIterator<Item = (P, C)>,
        labels: BTreeMap<String, String>,
        size_bytes: u64,
    ) {
        let files = files.into_iter().map(|(p, c)| (p.into(), c.into())).collect();
        let mut st = self.state();
        st.next_id += 1;
        let id = format!("sha256:fake-image-{}", st.next_id);
        st.images.insert(reference.to_owned(), FakeImage { id, files, labels, size_bytes, parent: None });
    }

    /// The size of every image committed from now on; `None`: the bytes of the layer's added and
    /// modified files.
    /// Whether [`ContainerRuntime::diff_stamped`] stamps the writable layer (off: `None`, as the
    /// Docker runtime where it asks the engine for the diff).
    pub fn set_stamps(&self, on: bool) {
        self.state().stamps = on;
    }

    pub fn set_commit_size(&self, size_bytes: Option<u64>) {
        self.state().commit_size = size_bytes;
    }

    /// The registry this runtime pushes to and pulls from (its own unless
    /// [`FakeRuntime::use_registry`] gave it another).
    pub fn registry(&self) -> FakeRegistry {
        self.state().registry.clone()
    }

    /// Push to and pull from `registry` (share one between runtimes to play several hosts).
    pub fn use_registry(&self, registry: FakeRegistry) {
        self.state().registry = registry;
    }

    /// Make the next call of `op` fail with `error` (once; several queue up).
    pub fn fail_next(&self, op: Op, error: RuntimeError) {
        self.state().failures.push_back((op, error));
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// How many calls of `op` were made.
    pub fn count(&self, op: Op) -> usize {
        self.state().calls.iter().filter(|c| c.op() == op).count()
    }

    /// The command of every exec so far (the last element of its argument vector), in order.
    pub fn commands(&self) -> Vec<String> {
        self.state()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Exec { argv, .. } => argv.last().cloned(),
                _ => None,
            })
            .collect()
    }

    /// Forget the calls logged so far.
    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }

    /// The ids of the containers that exist (created and not removed).
    pub fn running(&self) -> Vec<String> {
        self.state().containers.keys().cloned().collect()
    }

    pub fn container(&self, id: &str) -> Option<FakeContainer> {
        self.state().containers.get(id).cloned()
    }

    pub fn image(&self, reference: &str) -> Option<FakeImage> {
        self.state().images.get(reference).cloned()
    }

    /// The references of every image, sorted.
    pub fn image_references(&self) -> Vec<String> {
        self.state().images.keys().cloned().collect()
    }

    /// Log `call` and take the failure queued for its operation, if any.
    fn enter(&self, st: &mut State, call: Call) -> Result<(), RuntimeError> {
        let op = call.op();
        st.calls.push(call);
        match st.failures.iter().position(|(o, _)| *o == op) {
            Some(i) => Err(st.failures.remove(i).map_or_else(|| RuntimeError::Engine("injected".into()), |(_, e)| e)),
            None => Ok(()),
        }
    }

    fn do_create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let mut st = self.state();
        st.next_id += 1;
        let id = format!("fake-{}", st.next_id);
        self.enter(
            &mut st,
            Call::Create {
                container: id.clone(),
                image: spec.image.clone(),
                labels: spec.labels.clone(),
                network: spec.network.clone(),
            },
        )?;
        let image = st.images.get(&spec.image).ok_or_else(|| RuntimeError::NoImage(spec.image.clone()))?;
        // The origin is the root of the image chain.
        let mut root = image;
        while let Some(parent) = root.parent.as_ref().and_then(|p| st.images.get(p)) {
            root = parent;
        }
        let fs = FakeFs::with_origin(image.files.clone(), root.files.clone());
        st.containers.insert(id.clone(), FakeContainer { spec: spec.clone(), fs });
        Ok(id)
    }

    fn do_exec(&self, container: &str, request: &ExecRequest) -> Result<ExecOutput, RuntimeError> {
        // vcurve's own script ends with the kill of what it left (`exec::REAP_TAIL`): this runtime
        // starts no processes, so it runs the script alone, whose status the tail keeps.
        let stripped;
        let request = match request.argv.last().and_then(|s| s.strip_suffix(crate::sandbox::exec::REAP_TAIL)) {
            Some(script) if request.reaps_itself => {
                let mut argv = request.argv.clone();
                *argv.last_mut().expect("argv has a last element") =
                    script.strip_suffix('\n').unwrap_or(script).to_owned();
                stripped = ExecRequest { argv, ..request.clone() };
                &stripped
            }
            _ => request,
        };
        let mut st = self.state();
        self.enter(
            &mut st,
            Call::Exec {
                container: container.to_owned(),
                argv: request.argv.clone(),
                workdir: request.workdir.clone(),
                timeout: request.timeout,
            },
        )?;
        let c = st.containers.get_mut(container).ok_or_else(|| RuntimeError::Gone(container.to_owned()))?;
        Ok((self.handler)(&mut c.fs, request))
    }

    fn do_put_file(&self, container: &str, path: &str, content: &[u8]) -> Result<(), RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::PutFile { container: container.to_owned(), path: path.to_owned() })?;
        let c = st.containers.get_mut(container).ok_or_else(|| RuntimeError::Gone(container.to_owned()))?;
        c.fs.write(path, content.to_vec());
        Ok(())
    }

    fn do_diff(&self, container: &str) -> Result<Vec<Change>, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Diff { container: container.to_owned() })?;
        let c = st.containers.get(container).ok_or_else(|| RuntimeError::Gone(container.to_owned()))?;
        let image = st.images.get(&c.spec.image).ok_or_else(|| RuntimeError::NoImage(c.spec.image.clone()))?;
        Ok(diff_files(&image.files, c.fs.files()))
    }

    fn do_diff_stamped(&self, container: &str) -> Result<StampedDiff, RuntimeError> {
        let diff = self.do_diff(container)?;
        let st = self.state();
        if !st.stamps {
            return Ok((diff, None));
        }
        let c = st.containers.get(container).ok_or_else(|| RuntimeError::Gone(container.to_owned()))?;
        let mut hash = Sha256::new();
        for (path, content) in c.fs.files() {
            hash.update((path.len() as u64).to_le_bytes());
            hash.update(path.as_bytes());
            hash.update((content.len() as u64).to_le_bytes());
            hash.update(content);
        }
        let hash = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok((diff, Some(LayerStamp { hash, stat_exact: true })))
    }

    fn do_commit(
        &self,
        container: &str,
        reference: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Commit { container: container.to_owned(), reference: reference.to_owned() })?;
        let c = st.containers.get(container).ok_or_else(|| RuntimeError::Gone(container.to_owned()))?;
        let parent = st.images.get(&c.spec.image).ok_or_else(|| RuntimeError::NoImage(c.spec.image.clone()))?;
        let derived: u64 =
            c.fs.files()
                .iter()
                .filter(|(p, content)| parent.files.get(*p) != Some(*content))
                .map(|(_, content)| content.len() as u64)
                .sum();
        let size_bytes = st.commit_size.unwrap_or(derived);
        let files = c.fs.files().clone();
        let parent = c.spec.image.clone();
        st.next_id += 1;
        let id = format!("sha256:fake-image-{}", st.next_id);
        st.images.insert(
            reference.to_owned(),
            FakeImage { id: id.clone(), files, labels: labels.clone(), size_bytes, parent: Some(parent) },
        );
        Ok(id)
    }

    fn do_remove(&self, container: &str) -> Result<(), RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Remove { container: container.to_owned() })?;
        st.containers.remove(container);
        Ok(())
    }

    fn do_image_exists(&self, reference: &str) -> Result<bool, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::ImageExists { reference: reference.to_owned() })?;
        Ok(st.images.contains_key(reference))
    }

    fn do_tag(&self, source: &str, reference: &str) -> Result<(), RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Tag { source: source.to_owned(), reference: reference.to_owned() })?;
        let image = st.images.get(source).ok_or_else(|| RuntimeError::NoImage(source.to_owned()))?.clone();
        st.images.insert(reference.to_owned(), image);
        Ok(())
    }

    fn do_remove_image(&self, reference: &str) -> Result<(), RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::RemoveImage { reference: reference.to_owned() })?;
        // Like Docker without `force`: an image a container runs from stays.
        if let Some(c) = st.containers.iter().find(|(_, c)| c.spec.image == reference) {
            return Err(RuntimeError::Engine(format!(
                "conflict: unable to remove repository reference {reference:?} (must force) - container {} is using it",
                c.0
            )));
        }
        st.images.remove(reference);
        Ok(())
    }

    fn do_push(&self, reference: &str, remote: &str) -> Result<String, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Push { reference: reference.to_owned(), remote: remote.to_owned() })?;
        if let Some(e) = st.registry.unreachable(remote) {
            return Err(e);
        }
        let mut image = st.images.get(reference).ok_or_else(|| RuntimeError::NoImage(reference.to_owned()))?.clone();
        // The registry keeps the content; the chain is kept as its root (a task image every host
        // holds), so a host that pulls it sees the same origin.
        let mut root = image.parent.clone();
        while let Some(parent) = root.as_ref().and_then(|p| st.images.get(p)).and_then(|i| i.parent.clone()) {
            root = Some(parent);
        }
        image.parent = root;
        let id = image.id.clone();
        st.registry.state().images.insert(remote.to_owned(), image);
        Ok(id)
    }

    fn do_pull(&self, remote: &str, reference: &str) -> Result<String, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Pull { remote: remote.to_owned(), reference: reference.to_owned() })?;
        if let Some(e) = st.registry.unreachable(remote) {
            return Err(e);
        }
        let image = st.registry.image(remote).ok_or_else(|| RuntimeError::NoImage(remote.to_owned()))?;
        let id = image.id.clone();
        st.images.insert(reference.to_owned(), image);
        Ok(id)
    }

    fn do_containers(&self, filter: &BTreeMap<String, String>) -> Result<Vec<String>, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Containers)?;
        Ok(st.containers.iter().filter(|(_, c)| has_labels(&c.spec.labels, filter)).map(|(id, _)| id.clone()).collect())
    }

    fn do_images(&self, filter: &BTreeMap<String, String>) -> Result<Vec<ImageInfo>, RuntimeError> {
        let mut st = self.state();
        self.enter(&mut st, Call::Images)?;
        Ok(st
            .images
            .iter()
            .filter(|(_, i)| has_labels(&i.labels, filter))
            .map(|(r, i)| ImageInfo {
                reference: r.clone(),
                id: i.id.clone(),
                size_bytes: i.size_bytes,
                labels: i.labels.clone(),
            })
            .collect())
    }
}

fn has_labels(labels: &BTreeMap<String, String>, filter: &BTreeMap<String, String>) -> bool {
    filter.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A container diff as Docker reports it: each added, modified or deleted file, and every
/// directory above a change (modified when the image had it, added otherwise), sorted by path.
pub fn diff_files(image: &Files, container: &Files) -> Vec<Change> {
    let mut changes: BTreeMap<String, ChangeKind> = BTreeMap::new();
    let image_fs = FakeFs::new(image.clone());
    let note = |path: &str, kind: ChangeKind, changes: &mut BTreeMap<String, ChangeKind>| {
        changes.insert(path.to_owned(), kind);
        let mut dir = path;
        while let Some(i) = dir.rfind('/') {
            dir = &dir[..i];
            if dir.is_empty() {
                break;
            }
            let kind = if image_fs.is_dir(dir) { ChangeKind::Modified } else { ChangeKind::Added };
            changes.entry(dir.to_owned()).or_insert(kind);
        }
    };
    for (path, content) in container {
        match image.get(path) {
            None => note(path, ChangeKind::Added, &mut changes),
            Some(old) if old != content => note(path, ChangeKind::Modified, &mut changes),
            Some(_) => {}
        }
    }
    for path in image.keys() {
        if !container.contains_key(path) {
            note(path, ChangeKind::Deleted, &mut changes);
        }
    }
    changes.into_iter().map(|(path, kind)| Change { path, kind }).collect()
}

impl ContainerRuntime for FakeRuntime {
    fn create<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(async move { self.do_create(spec) })
    }

    fn exec<'a>(
        &'a self,
        container: &'a str,
        request: &'a ExecRequest,
    ) -> BoxFuture<'a, Result<ExecOutput, RuntimeError>> {
        Box::pin(async move {
            // Let concurrent tasks interleave at every command, as they would with a real engine.
            tokio::task::yield_now().await;
            self.do_exec(container, request)
        })
    }

    fn put_file<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
        content: &'a [u8],
        _mode: u32,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.do_put_file(container, path, content) })
    }

    fn diff<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<Vec<Change>, RuntimeError>> {
        Box::pin(async move { self.do_diff(container) })
    }

    fn diff_stamped<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<StampedDiff, RuntimeError>> {
        Box::pin(async move { self.do_diff_stamped(container) })
    }

    fn commit<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.do_commit(container, reference, labels)
        })
    }

    fn tag<'a>(&'a self, source: &'a str, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.do_tag(source, reference) })
    }

    fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.do_remove(container) })
    }

    fn image_exists<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<bool, RuntimeError>> {
        Box::pin(async move { self.do_image_exists(reference) })
    }

    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.do_remove_image(reference) })
    }

    fn containers<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<String>, RuntimeError>> {
        Box::pin(async move { self.do_containers(filter) })
    }

    fn images<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<ImageInfo>, RuntimeError>> {
        Box::pin(async move { self.do_images(filter) })
    }

    fn push_image<'a>(&'a self, reference: &'a str, remote: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(async move { self.do_push(reference, remote) })
    }

    fn pull_image<'a>(&'a self, remote: &'a str, reference: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(async move { self.do_pull(remote, reference) })
    }
}

mod shell;

pub use shell::fake_shell;

#[cfg(test)]
mod tests;
