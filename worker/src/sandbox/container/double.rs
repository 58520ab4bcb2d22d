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
//! - A registry ([`FakeRegistry`]) holds pushed images by remote reference; runtimes that share
//!   one ([`FakeRuntime::use_registry`]) are hosts of one deployment. Tests can corrupt an image
//!   in it, remove one, or take the registry down.
//! - Every call is logged ([`FakeRuntime::calls`], [`FakeRuntime::count`],
//!   [`FakeRuntime::commands`]) so tests can assert what happened, and any operation can be made
//!   to fail once ([`FakeRuntime::fail_next`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use sha2::{Digest as _, Sha256};

use super::{Change, ChangeKind, ContainerRuntime, ContainerSpec, ExecOutput, ExecRequest, ImageInfo, RuntimeError};

/// Files by absolute path. Directories are implied by the files under them.
pub type Files = BTreeMap<String, Vec<u8>>;

/// A container's file system as an exec handler sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeFs {
    files: Files,
    /// The files of the task image at the root of the container's image chain (what `git diff`
    /// and `git status` of [`fake_shell`] compare with).
    origin: Arc<Files>,
}

impl FakeFs {
    /// A file system holding `files`, whose origin is itself.
    pub fn new(files: Files) -> FakeFs {
        FakeFs { origin: Arc::new(files.clone()), files }
    }

    pub fn read(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    /// A file's content as text (invalid UTF-8 replaced).
    pub fn read_string(&self, path: &str) -> Option<String> {
        self.read(path).map(|b| String::from_utf8_lossy(b).into_owned())
    }

    pub fn write(&mut self, path: &str, content: impl Into<Vec<u8>>) {
        self.files.insert(path.to_owned(), content.into());
    }

    pub fn append(&mut self, path: &str, content: &[u8]) {
        self.files.entry(path.to_owned()).or_default().extend_from_slice(content);
    }

    /// Remove a file, or a directory with everything under it; whether anything was removed.
    pub fn remove(&mut self, path: &str) -> bool {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let before = self.files.len();
        self.files.retain(|p, _| p != path && !p.starts_with(&prefix));
        self.files.len() != before
    }

    /// Whether `path` is a file or a directory (has files under it).
    pub fn exists(&self, path: &str) -> bool {
        self.files.contains_key(path) || self.is_dir(path)
    }

    pub fn is_dir(&self, path: &str) -> bool {
        let prefix = if path == "/" { "/".to_owned() } else { format!("{}/", path.trim_end_matches('/')) };
        self.files.range(prefix.clone()..).next().is_some_and(|(p, _)| p.starts_with(&prefix))
    }

    pub fn files(&self) -> &Files {
        &self.files
    }

    /// The files of the task image the container's chain started from.
    pub fn origin(&self) -> &Files {
        &self.origin
    }
}

/// What a command does in a [`FakeRuntime`].
pub type ExecHandler = Arc<dyn Fn(&mut FakeFs, &ExecRequest) -> ExecOutput + Send + Sync>;

/// The runtime's operations, for [`FakeRuntime::count`] and [`FakeRuntime::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Exec,
    PutFile,
    Diff,
    Commit,
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
    Create { container: String, image: String, labels: BTreeMap<String, String> },
    Exec { container: String, argv: Vec<String>, workdir: String, timeout: Duration },
    PutFile { container: String, path: String },
    Diff { container: String },
    Commit { container: String, reference: String },
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
            Call::Create { container: id.clone(), image: spec.image.clone(), labels: spec.labels.clone() },
        )?;
        let image = st.images.get(&spec.image).ok_or_else(|| RuntimeError::NoImage(spec.image.clone()))?;
        // The origin is the root of the image chain.
        let mut root = image;
        while let Some(parent) = root.parent.as_ref().and_then(|p| st.images.get(p)) {
            root = parent;
        }
        let fs = FakeFs { files: image.files.clone(), origin: Arc::new(root.files.clone()) };
        st.containers.insert(id.clone(), FakeContainer { spec: spec.clone(), fs });
        Ok(id)
    }

    fn do_exec(&self, container: &str, request: &ExecRequest) -> Result<ExecOutput, RuntimeError> {
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
        Ok(diff_files(&image.files, &c.fs.files))
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
            c.fs.files
                .iter()
                .filter(|(p, content)| parent.files.get(*p) != Some(*content))
                .map(|(_, content)| content.len() as u64)
                .sum();
        let size_bytes = st.commit_size.unwrap_or(derived);
        let files = c.fs.files.clone();
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
            .map(|(r, i)| ImageInfo { reference: r.clone(), size_bytes: i.size_bytes, labels: i.labels.clone() })
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

/// The default exec handler: a tiny, explicit shell over a [`FakeFs`].
///
/// The command is the request's last argument. It is split into statements at `;` and newlines,
/// each statement into words at whitespace (no quoting, no globbing, no pipes); a statement may
/// end with `> FILE` or `>> FILE`. Relative paths are taken from the request's working directory.
/// The exit code is the last statement's.
///
/// | statement | does |
/// |---|---|
/// | `echo WORDS…` | prints the words and a newline |
/// | `printf WORDS…` | prints the words, with `\n` turned into newlines, and no newline of its own |
/// | `cat FILE…` | prints the files; a missing one: an error and exit 1 |
/// | `ls [DIR]` | the names directly in `DIR` (default: the working directory), one a line |
/// | `rm [-f|-rf] PATH…` | removes files or directories |
/// | `true`, `false`, `exit N` | exit 0, 1, N (`exit` ends the command) |
/// | `sleep SECONDS` | spends simulated time: past the request's timeout the command is killed, keeping what it printed so far |
/// | `git [--flags] diff` | a unified-looking diff of the working directory's files against the task image's |
/// | `git [--flags] status [--porcelain]` | ` M`, ` D` and `??` lines for the same |
/// | `date` | `date`'s default format, the seconds changing on every call (a normalization rule masks it) |
/// | `random` | a random 24-letter token, new on every call (no rule masks it) |
/// | `shuffle WORDS…` | the words one a line, rotated by a call counter (the same lines in another order) |
/// | `scramble WORD` | the word's characters rotated by a call counter (the same characters in another order) |
///
/// Anything else prints `bash: NAME: command not found` and exits 127.
pub fn fake_shell() -> ExecHandler {
    let counter = Arc::new(AtomicU64::new(0));
    Arc::new(move |fs: &mut FakeFs, request: &ExecRequest| {
        let script = request.argv.last().cloned().unwrap_or_default();
        run_script(fs, request, &script, &counter)
    })
}

fn resolve(workdir: &str, path: &str) -> String {
    let joined =
        if path.starts_with('/') { path.to_owned() } else { format!("{}/{path}", workdir.trim_end_matches('/')) };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn run_script(fs: &mut FakeFs, request: &ExecRequest, script: &str, counter: &AtomicU64) -> ExecOutput {
    let mut output = Vec::new();
    let mut code = 0i64;
    let mut elapsed = Duration::ZERO;
    for statement in script.split([';', '\n']) {
        let mut words: Vec<&str> = statement.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let mut redirect: Option<(String, bool)> = None;
        if words.len() >= 2 && matches!(words[words.len() - 2], ">" | ">>") {
            let target = resolve(&request.workdir, words[words.len() - 1]);
            redirect = Some((target, words[words.len() - 2] == ">>"));
            words.truncate(words.len() - 2);
        }
        let mut out = Vec::new();
        let (name, args) = (words.first().copied().unwrap_or(""), words.get(1..).unwrap_or(&[]));
        let mut stop = false;
        code = match name {
            "echo" => {
                out.extend_from_slice(args.join(" ").as_bytes());
                out.push(b'\n');
                0
            }
            "printf" => {
                out.extend_from_slice(args.join(" ").replace("\\n", "\n").as_bytes());
                0
            }
            "cat" => {
                let mut code = 0;
                for arg in args {
                    match fs.read(&resolve(&request.workdir, arg)) {
                        Some(content) => out.extend_from_slice(content),
                        None => {
                            out.extend_from_slice(format!("cat: {arg}: No such file or directory\n").as_bytes());
                            code = 1;
                        }
                    }
                }
                code
            }
            "ls" => {
                let dir = resolve(&request.workdir, args.first().copied().unwrap_or("."));
                let prefix = if dir == "/" { "/".to_owned() } else { format!("{dir}/") };
                let names: BTreeSet<&str> = fs
                    .files()
                    .keys()
                    .filter_map(|p| p.strip_prefix(&prefix))
                    .map(|rest| rest.split('/').next().unwrap_or(rest))
                    .collect();
                for n in names {
                    out.extend_from_slice(n.as_bytes());
                    out.push(b'\n');
                }
                0
            }
            "rm" => {
                for arg in args.iter().filter(|a| !a.starts_with('-')) {
                    fs.remove(&resolve(&request.workdir, arg));
                }
                0
            }
            "true" => 0,
            "false" => 1,
            "exit" => {
                stop = true;
                args.first().and_then(|a| a.parse().ok()).unwrap_or(0)
            }
            "sleep" => {
                let secs: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(0.0);
                elapsed += Duration::from_secs_f64(secs.max(0.0));
                if elapsed > request.timeout {
                    return ExecOutput { output, exit_code: None, timed_out: true };
                }
                0
            }
            "git" => {
                let sub = args.iter().find(|a| !a.starts_with('-')).copied().unwrap_or("");
                let workdir = format!("{}/", request.workdir.trim_end_matches('/'));
                match sub {
                    "diff" => {
                        out.extend_from_slice(git_diff(fs, &workdir).as_bytes());
                        0
                    }
                    "status" => {
                        out.extend_from_slice(git_status(fs, &workdir).as_bytes());
                        0
                    }
                    other => {
                        out.extend_from_slice(format!("git: '{other}' is not a git command\n").as_bytes());
                        1
                    }
                }
            }
            "date" => {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                out.extend_from_slice(format!("Tue Dec  1 11:15:{:02} UTC 2026\n", n % 60).as_bytes());
                0
            }
            "random" => {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let digest = Sha256::digest(format!("fake-random-{n}").as_bytes());
                let token: String = digest.iter().take(24).map(|b| (b'a' + b % 26) as char).collect();
                out.extend_from_slice(token.as_bytes());
                out.push(b'\n');
                0
            }
            "shuffle" => {
                let n = counter.fetch_add(1, Ordering::Relaxed) as usize;
                let mut items: Vec<&str> = args.to_vec();
                if !items.is_empty() {
                    let len = items.len();
                    items.rotate_left(n % len);
                }
                for item in items {
                    out.extend_from_slice(item.as_bytes());
                    out.push(b'\n');
                }
                0
            }
            "scramble" => {
                let n = counter.fetch_add(1, Ordering::Relaxed) as usize;
                let mut chars: Vec<char> = args.join(" ").chars().collect();
                if !chars.is_empty() {
                    let len = chars.len();
                    chars.rotate_left(n % len);
                }
                out.extend_from_slice(chars.into_iter().collect::<String>().as_bytes());
                out.push(b'\n');
                0
            }
            other => {
                out.extend_from_slice(format!("bash: {other}: command not found\n").as_bytes());
                127
            }
        };
        match redirect {
            Some((target, true)) => fs.append(&target, &out),
            Some((target, false)) => fs.write(&target, out),
            None => output.extend_from_slice(&out),
        }
        if stop {
            break;
        }
    }
    ExecOutput { output, exit_code: Some(code), timed_out: false }
}

/// A working-tree file that differs from the origin: its path relative to the working directory,
/// its content in the origin and now (`None`: absent).
type WorktreeChange<'a> = (String, Option<&'a [u8]>, Option<&'a [u8]>);

/// The files under `workdir` (which ends with `/`) that differ from the origin.
fn worktree_changes<'a>(fs: &'a FakeFs, workdir: &str) -> Vec<WorktreeChange<'a>> {
    let paths: BTreeSet<&String> = fs
        .files()
        .keys()
        .chain(fs.origin().keys())
        .filter(|p| p.starts_with(workdir) && !p.contains("/.git/"))
        .collect();
    paths
        .into_iter()
        .filter_map(|p| {
            let old = fs.origin().get(p).map(Vec::as_slice);
            let new = fs.read(p);
            (old != new).then(|| (p[workdir.len()..].to_owned(), old, new))
        })
        .collect()
}

fn git_diff(fs: &FakeFs, workdir: &str) -> String {
    let mut out = String::new();
    for (rel, old, new) in worktree_changes(fs, workdir) {
        let Some(old) = old else { continue }; // untracked files are not in `git diff`
        out.push_str(&format!("diff --git a/{rel} b/{rel}\n--- a/{rel}\n"));
        out.push_str(&match new {
            Some(_) => format!("+++ b/{rel}\n"),
            None => "+++ /dev/null\n".to_owned(),
        });
        for line in String::from_utf8_lossy(old).lines() {
            out.push_str(&format!("-{line}\n"));
        }
        for line in new.map(String::from_utf8_lossy).unwrap_or_default().lines() {
            out.push_str(&format!("+{line}\n"));
        }
    }
    out
}

fn git_status(fs: &FakeFs, workdir: &str) -> String {
    worktree_changes(fs, workdir)
        .into_iter()
        .map(|(rel, old, new)| match (old, new) {
            (None, _) => format!("?? {rel}\n"),
            (Some(_), None) => format!(" D {rel}\n"),
            (Some(_), Some(_)) => format!(" M {rel}\n"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::container::Container;

    fn spec(image: &str) -> ContainerSpec {
        ContainerSpec { image: image.into(), memory_bytes: 1 << 30, pids_limit: 256, labels: BTreeMap::new() }
    }

    fn run(script: &str) -> ExecRequest {
        ExecRequest {
            argv: vec!["bash".into(), "-c".into(), script.into()],
            env: BTreeMap::new(),
            workdir: "/testbed".into(),
            timeout: Duration::from_secs(10),
        }
    }

    fn text(out: &ExecOutput) -> String {
        String::from_utf8_lossy(&out.output).into_owned()
    }

    #[tokio::test]
    async fn the_shell_reads_writes_and_diffs() {
        let rt = Arc::new(FakeRuntime::new());
        rt.add_image("task", [("/testbed/a.py", "a\n"), ("/testbed/b.py", "b\n")]);
        let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
        let out = c.exec(&run("cat a.py; echo new > c.py; echo more >> c.py; cat c.py")).await.unwrap();
        assert_eq!(text(&out), "a\nnew\nmore\n");
        assert_eq!(out.exit_code, Some(0));
        let out = c.exec(&run("printf x\\ny > a.py; rm b.py; ls; cat missing")).await.unwrap();
        assert_eq!(text(&out), "a.py\nc.py\ncat: missing: No such file or directory\n");
        assert_eq!(out.exit_code, Some(1));
        let status = text(&c.exec(&run("git --no-optional-locks status --porcelain")).await.unwrap());
        assert_eq!(status, " M a.py\n D b.py\n?? c.py\n");
        let diff = text(&c.exec(&run("git diff")).await.unwrap());
        assert!(diff.contains("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n-a\n+x\n+y\n"), "{diff}");
        assert!(!diff.contains("c.py"));
        let changes = c.diff().await.unwrap();
        let listed: Vec<(&str, ChangeKind)> = changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        assert_eq!(
            listed,
            vec![
                ("/testbed", ChangeKind::Modified),
                ("/testbed/a.py", ChangeKind::Modified),
                ("/testbed/b.py", ChangeKind::Deleted),
                ("/testbed/c.py", ChangeKind::Added),
            ]
        );
        assert_eq!(text(&c.exec(&run("nope")).await.unwrap()), "bash: nope: command not found\n");
        assert_eq!(
            c.exec(&run("exit 3; echo never")).await.unwrap(),
            ExecOutput { output: vec![], exit_code: Some(3), timed_out: false }
        );
        c.remove().await.unwrap();
        assert!(rt.running().is_empty());
        assert_eq!(rt.count(Op::Exec), 6);
        assert_eq!(rt.commands()[0], "cat a.py; echo new > c.py; echo more >> c.py; cat c.py");
    }

    #[tokio::test]
    async fn timeouts_keep_partial_output() {
        let rt = Arc::new(FakeRuntime::new());
        rt.add_image("task", [("/testbed/a", "")]);
        let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
        let out = c.exec(&run("echo start; sleep 5; sleep 6; echo never")).await.unwrap();
        assert_eq!(out, ExecOutput { output: b"start\n".to_vec(), exit_code: None, timed_out: true });
        let out = c.exec(&run("sleep 9; echo done")).await.unwrap();
        assert_eq!(text(&out), "done\n");
        c.remove().await.unwrap();
    }

    #[tokio::test]
    async fn commits_images_and_lists_them_by_label() {
        let rt = Arc::new(FakeRuntime::new());
        rt.add_image("task", [("/testbed/a", "1234")]);
        let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
        c.exec(&run("echo hello > /testbed/b")).await.unwrap();
        let labels = BTreeMap::from([("vcurve.managed".to_owned(), "1".to_owned())]);
        c.commit("snap:1", &labels).await.unwrap();
        let image = rt.image("snap:1").unwrap();
        assert_eq!(image.size_bytes, 6);
        assert_eq!(image.parent.as_deref(), Some("task"));
        rt.set_commit_size(Some(1000));
        c.commit("snap:2", &labels).await.unwrap();
        let listed = rt.images(&labels).await.unwrap();
        assert_eq!(
            listed.iter().map(|i| (i.reference.as_str(), i.size_bytes)).collect::<Vec<_>>(),
            vec![("snap:1", 6), ("snap:2", 1000)]
        );
        // A container from a snapshot diffs against the snapshot; git compares with the task image.
        let d = Container::start(rt.clone(), &spec("snap:1")).await.unwrap();
        assert!(d.diff().await.unwrap().is_empty());
        assert_eq!(text(&d.exec(&run("git status")).await.unwrap()), "?? b\n");
        // An image a container runs from is not removed.
        assert!(rt.remove_image("snap:1").await.is_err());
        d.remove().await.unwrap();
        rt.remove_image("snap:1").await.unwrap();
        rt.remove_image("snap:1").await.unwrap();
        assert!(!rt.image_exists("snap:1").await.unwrap());
        c.remove().await.unwrap();
        assert!(matches!(rt.create(&spec("nothing")).await, Err(RuntimeError::NoImage(_))));
    }

    #[tokio::test]
    async fn failures_can_be_injected_and_calls_are_logged() {
        let rt = Arc::new(FakeRuntime::with_handler(|fs, req| {
            fs.write("/seen", req.argv.join(" "));
            ExecOutput { output: b"handled".to_vec(), exit_code: Some(0), timed_out: false }
        }));
        rt.add_image("task", Vec::<(String, Vec<u8>)>::new());
        let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
        rt.fail_next(Op::Exec, RuntimeError::Gone(c.id().to_owned()));
        assert!(matches!(c.exec(&run("x")).await, Err(RuntimeError::Gone(_))));
        assert_eq!(c.exec(&run("x")).await.unwrap().output, b"handled");
        assert_eq!(rt.container(c.id()).unwrap().fs.read_string("/seen").unwrap(), "bash -c x");
        let id = c.id().to_owned();
        drop(c); // the guard removes it in the background
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert!(rt.container(&id).is_none());
        assert_eq!(rt.calls().last(), Some(&Call::Remove { container: id }));
    }
}
