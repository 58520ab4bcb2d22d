//! This worker process on its host: a random instance id, the lock that says it is alive, and
//! reaping what dead predecessors left (docs/decisions.md, "What a worker leaves behind").
//!
//! # Liveness: a lock in the state directory
//!
//! A worker's state directory ([`default_state_dir`]: `$VCURVE_STATE_DIR`, else
//! `$XDG_STATE_HOME/vcurve/worker`, else `~/.local/state/vcurve/worker`) holds one file per worker
//! instance, `instances/<id>.lock`, on which the instance holds an exclusive `flock` for as long as
//! it lives. The kernel drops the lock when the process dies, however it dies (SIGKILL, OOM): a
//! lock file whose lock can be taken belongs to a dead instance. No clock, heartbeat or
//! coordinator is involved. The file is created and locked under a temporary name and then
//! renamed, so another worker never sees it unlocked.
//!
//! Workers that share one Docker Engine share its state directory (the default is per user; a
//! worker in a container mounts a host directory there): a worker only knows the instances whose
//! lock files it sees.
//!
//! # What is reaped
//!
//! When an instance opens ([`Instance::open`]) it takes the locks of the dead instances it finds
//! and, for each ([`Instance::reap_predecessors`]), removes the containers labelled with that
//! instance ([`labels::INSTANCE`](crate::sandbox::container::labels::INSTANCE)), whatever the
//! worker's name, and kills the agent processes it started ([`kill_marked`]), then deletes its
//! lock file. Containers and processes of live instances — another worker of the same name among
//! them — are never touched.
//!
//! # Agent processes: an environment mark
//!
//! Every agent process is started with [`AGENT_MARK_VAR`]` = <instance id>.<run>` in its
//! environment ([`Instance::agent_mark`]). Its children inherit it, also those that leave its
//! process group or session (`setsid`), and `/proc/<pid>/environ` shows it for as long as they
//! live, whoever their parent is by then. Killing "every process whose environment carries the
//! mark" kills a run's whole tree without cgroups, at the end of the run and, with the instance's
//! prefix, after the worker died. A process that replaces its environment wholesale (`exec env -i`)
//! drops the mark and is out of reach, as a fully detached daemon is for any process-group kill.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sandbox::container::{ContainerRuntime, RuntimeError, labels};

/// The environment variable marking an agent process and its descendants: `<instance id>.<run>`.
pub const AGENT_MARK_VAR: &str = "VCURVE_AGENT_RUN";
/// The variable naming the state directory.
pub const STATE_DIR_VAR: &str = "VCURVE_STATE_DIR";
/// Where the lineage of a state directory is kept (see [`Instance::lineage`]).
const LINEAGE_FILE: &str = "lineage";
const INSTANCES_DIR: &str = "instances";
const LOCK_SUFFIX: &str = ".lock";
const TMP_PREFIX: &str = ".new-";
/// How many times [`kill_marked`] scans `/proc` before giving up on processes that keep forking.
const KILL_ROUNDS: usize = 50;

/// Why an instance could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("worker state directory {path}: {error}")]
pub struct InstanceError {
    pub path: PathBuf,
    #[source]
    pub error: std::io::Error,
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> InstanceError + '_ {
    move |error| InstanceError { path: path.to_owned(), error }
}

/// The state directory a worker uses unless told otherwise: `$VCURVE_STATE_DIR`, else
/// `$XDG_STATE_HOME/vcurve/worker`, else `$HOME/.local/state/vcurve/worker`, else
/// `<temp>/vcurve-worker-state`.
pub fn default_state_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var(STATE_DIR_VAR) {
        return dir;
    }
    if let Some(state) = var("XDG_STATE_HOME") {
        return state.join("vcurve").join("worker");
    }
    if let Some(home) = var("HOME") {
        return home.join(".local").join("state").join("vcurve").join("worker");
    }
    std::env::temp_dir().join("vcurve-worker-state")
}

/// One worker process's identity (cheap to clone; the lock is released when the last clone goes,
/// and its file removed).
#[derive(Clone)]
pub struct Instance {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    worker_name: String,
    lineage: String,
    state_dir: PathBuf,
    lock_path: PathBuf,
    /// Held for the instance's life: the lock is the liveness.
    _lock: File,
    runs: AtomicU64,
    /// Dead predecessors whose locks this instance took, not yet reaped.
    dead: std::sync::Mutex<Vec<Dead>>,
}

struct Dead {
    id: String,
    path: PathBuf,
    /// Held while reaping, so no other worker reaps the same instance at once.
    _lock: File,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("id", &self.inner.id)
            .field("worker_name", &self.inner.worker_name)
            .field("lineage", &self.inner.lineage)
            .field("state_dir", &self.inner.state_dir)
            .finish()
    }
}

/// What [`Instance::reap_predecessors`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaped {
    /// The dead instances reaped.
    pub instances: Vec<String>,
    pub containers: usize,
    pub processes: usize,
}

impl Instance {
    /// A new instance of the worker `worker_name` in `state_dir` (created if missing): a fresh
    /// random id, its lock taken, and the locks of the dead instances found there taken too, for
    /// [`Instance::reap_predecessors`].
    pub fn open(state_dir: &Path, worker_name: &str) -> Result<Instance, InstanceError> {
        let instances = state_dir.join(INSTANCES_DIR);
        std::fs::create_dir_all(&instances).map_err(at(&instances))?;
        let lineage = lineage(state_dir)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let tmp = instances.join(format!("{TMP_PREFIX}{id}"));
        let mut lock = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(at(&tmp))?;
        lock.try_lock().map_err(|e| at(&tmp)(std::io::Error::other(e.to_string())))?;
        let _ = writeln!(lock, "worker {worker_name}\npid {}", std::process::id());
        let lock_path = instances.join(format!("{id}{LOCK_SUFFIX}"));
        std::fs::rename(&tmp, &lock_path).map_err(at(&lock_path))?;
        let dead = dead_instances(&instances, &id)?;
        Ok(Instance {
            inner: Arc::new(Inner {
                id,
                worker_name: worker_name.to_owned(),
                lineage,
                state_dir: state_dir.to_owned(),
                lock_path,
                _lock: lock,
                runs: AtomicU64::new(0),
                dead: std::sync::Mutex::new(dead),
            }),
        })
    }

    /// [`Instance::open`] in [`default_state_dir`].
    pub fn open_default(worker_name: &str) -> Result<Instance, InstanceError> {
        Instance::open(&default_state_dir(), worker_name)
    }

    /// The instance's random id (32 hex digits).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    pub fn worker_name(&self) -> &str {
        &self.inner.worker_name
    }

    /// The lineage of the state directory: a random id made once per state directory and kept in
    /// it, shared by every worker instance that uses the directory, one after another or side by
    /// side. Snapshot images carry it: a worker adopts and evicts only its lineage's.
    pub fn lineage(&self) -> &str {
        &self.inner.lineage
    }

    pub fn state_dir(&self) -> &Path {
        &self.inner.state_dir
    }

    /// The labels every container of this instance carries: managed, the worker's name, the
    /// instance.
    pub fn container_labels(&self) -> std::collections::BTreeMap<String, String> {
        std::collections::BTreeMap::from([
            (labels::MANAGED.to_owned(), "1".to_owned()),
            (labels::WORKER.to_owned(), self.inner.worker_name.clone()),
            (labels::INSTANCE.to_owned(), self.inner.id.clone()),
        ])
    }

    /// A fresh mark for one agent process and its descendants ([`AGENT_MARK_VAR`]).
    pub fn agent_mark(&self) -> AgentMark {
        let run = self.inner.runs.fetch_add(1, Ordering::Relaxed);
        AgentMark(format!("{}.{run}", self.inner.id))
    }

    /// The ids of the dead instances this one found and has not reaped yet.
    pub fn dead_predecessors(&self) -> Vec<String> {
        self.inner.dead.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|d| d.id.clone()).collect()
    }

    /// Remove what the dead instances found at [`Instance::open`] left: their containers on
    /// `runtime` (by their instance label, whatever their worker's name) and their agent
    /// processes on this host (by mark); then forget them. An instance whose containers cannot
    /// all be removed stays, for the next try.
    pub async fn reap_predecessors(&self, runtime: &dyn ContainerRuntime) -> Result<Reaped, RuntimeError> {
        let dead = std::mem::take(&mut *self.inner.dead.lock().unwrap_or_else(|e| e.into_inner()));
        let mut reaped = Reaped::default();
        let mut failed = None;
        let mut kept = Vec::new();
        for instance in dead {
            reaped.processes += kill_marked(&format!("{}.", instance.id), true);
            let filter = std::collections::BTreeMap::from([
                (labels::MANAGED.to_owned(), "1".to_owned()),
                (labels::INSTANCE.to_owned(), instance.id.clone()),
            ]);
            let removed = async {
                let ids = runtime.containers(&filter).await?;
                for id in &ids {
                    runtime.remove(id).await?;
                }
                Ok::<_, RuntimeError>(ids.len())
            }
            .await;
            match removed {
                Ok(n) => {
                    reaped.containers += n;
                    let _ = std::fs::remove_file(&instance.path);
                    reaped.instances.push(instance.id);
                }
                Err(e) => {
                    failed = Some(e);
                    kept.push(instance);
                }
            }
        }
        self.inner.dead.lock().unwrap_or_else(|e| e.into_inner()).extend(kept);
        match failed {
            Some(e) => Err(e),
            None => Ok(reaped),
        }
    }
}

/// The mark of one agent process and its descendants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMark(String);

impl AgentMark {
    /// The value of [`AGENT_MARK_VAR`].
    pub fn value(&self) -> &str {
        &self.0
    }

    /// Set the mark in `command`'s environment.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command.env(AGENT_MARK_VAR, &self.0);
    }

    /// SIGKILL every process carrying this mark, until none is left; how many were killed.
    pub fn kill(&self) -> usize {
        kill_marked(&self.0, false)
    }
}

/// The state directory's lineage, made on first use.
fn lineage(state_dir: &Path) -> Result<String, InstanceError> {
    let path = state_dir.join(LINEAGE_FILE);
    let read = |path: &Path| -> Result<Option<String>, InstanceError> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let text = text.trim().to_owned();
                if text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(Some(text))
                } else {
                    Err(at(path)(std::io::Error::other(format!(
                        "the lineage file holds {text:?}, not 32 hex digits; remove it to start a new lineage"
                    ))))
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(at(path)(e)),
        }
    };
    if let Some(lineage) = read(&path)? {
        return Ok(lineage);
    }
    // Made under a temporary name and linked into place: two workers starting at once agree.
    let made = uuid::Uuid::new_v4().simple().to_string();
    let tmp = state_dir.join(format!("{TMP_PREFIX}lineage-{made}"));
    std::fs::write(&tmp, format!("{made}\n")).map_err(at(&tmp))?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(made),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read(&path)?.ok_or_else(|| at(&path)(std::io::Error::other("the lineage file vanished")))
        }
        Err(e) => Err(at(&path)(e)),
    }
}

/// The instances in `dir` other than `own` whose lock can be taken (their process is dead), with
/// their locks held. Leftover temporary files of dead instances are removed.
fn dead_instances(dir: &Path, own: &str) -> Result<Vec<Dead>, InstanceError> {
    let mut dead = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(at(dir))? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let (id, tmp) = match (name.strip_suffix(LOCK_SUFFIX), name.strip_prefix(TMP_PREFIX)) {
            (Some(id), _) => (id.to_owned(), false),
            (None, Some(id)) => (id.to_owned(), true),
            _ => continue,
        };
        if id == own || id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(file) = OpenOptions::new().write(true).open(&path) else { continue };
        if file.try_lock().is_err() {
            continue; // alive (or being reaped by another worker)
        }
        if tmp {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        dead.push(Dead { id, path, _lock: file });
    }
    dead.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(dead)
}

/// SIGKILL every process of this host whose environment carries [`AGENT_MARK_VAR`] equal to
/// `mark` (or starting with it, with `prefix`), scanning `/proc` again until none is left (a
/// process may fork while it is scanned); how many were killed. Processes whose environment this
/// worker may not read (another user's, without the rights) are not seen.
pub fn kill_marked(mark: &str, prefix: bool) -> usize {
    let wanted = format!("{AGENT_MARK_VAR}={mark}");
    let own = std::process::id();
    let mut killed = std::collections::HashSet::new();
    for _ in 0..KILL_ROUNDS {
        let Ok(entries) = std::fs::read_dir("/proc") else { return killed.len() };
        let mut found = 0;
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if pid == own {
                continue;
            }
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
            let marked = environ
                .split(|b| *b == 0)
                .any(|var| if prefix { var.starts_with(wanted.as_bytes()) } else { var == wanted.as_bytes() });
            if !marked {
                continue;
            }
            let Some(raw) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { continue };
            if rustix::process::kill_process(raw, rustix::process::Signal::KILL).is_ok() {
                found += 1;
                killed.insert(pid);
            }
        }
        if found == 0 {
            return killed.len();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    tracing::warn!(mark, "processes carrying an agent's mark were still being found after {KILL_ROUNDS} rounds");
    killed.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_instance_is_not_dead_and_a_dropped_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = Instance::open(dir.path(), "w").unwrap();
        let b = Instance::open(dir.path(), "w").unwrap();
        assert_ne!(a.id(), b.id());
        assert!(b.dead_predecessors().is_empty(), "a is alive");
        assert_eq!(a.lineage(), b.lineage(), "one state directory, one lineage");
        assert_eq!(a.container_labels()[labels::INSTANCE], a.id());
        drop(a);
        let names: Vec<_> = std::fs::read_dir(dir.path().join(INSTANCES_DIR)).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "a's file is gone with it");
        let other = tempfile::tempdir().unwrap();
        assert_ne!(Instance::open(other.path(), "w").unwrap().lineage(), b.lineage());
    }

    #[test]
    fn a_lock_file_nobody_holds_is_a_dead_instance() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(INSTANCES_DIR)).unwrap();
        let dead_id = "0123456789abcdef0123456789abcdef";
        std::fs::write(dir.path().join(INSTANCES_DIR).join(format!("{dead_id}.lock")), "worker x\n").unwrap();
        let a = Instance::open(dir.path(), "another-name").unwrap();
        assert_eq!(a.dead_predecessors(), vec![dead_id.to_owned()]);
        // Another worker starting meanwhile does not see it dead: a holds its lock.
        let b = Instance::open(dir.path(), "w").unwrap();
        assert!(b.dead_predecessors().is_empty());
    }

    #[test]
    fn a_bad_lineage_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LINEAGE_FILE), "nope").unwrap();
        let e = Instance::open(dir.path(), "w").unwrap_err().to_string();
        assert!(e.contains("lineage") && e.contains("not 32 hex digits"), "{e}");
    }

    #[tokio::test]
    async fn a_mark_kills_a_process_and_the_children_that_left_its_session() {
        let dir = tempfile::tempdir().unwrap();
        let instance = Instance::open(dir.path(), "w").unwrap();
        let mark = instance.agent_mark();
        let pidfile = dir.path().join("child.pid");
        let mut command = tokio::process::Command::new("sh");
        command.args([
            "-c",
            &format!("setsid sh -c 'echo $$ > {}; exec sleep 1000' & exec sleep 1000", pidfile.display()),
        ]);
        mark.apply(&mut command);
        let mut agent = command.spawn().unwrap();
        let start = std::time::Instant::now();
        while !std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')) {
            assert!(start.elapsed() < std::time::Duration::from_secs(10), "the child never started");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let child: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert_eq!(mark.kill(), 2);
        let _ = agent.wait().await;
        let start = std::time::Instant::now();
        // The setsid child is gone (a zombie at most until init reaps it).
        while std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| !s.contains(") Z ")) {
            assert!(start.elapsed() < std::time::Duration::from_secs(5), "the setsid child survived");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(mark.kill(), 0);
    }
}
