//! Replay (docs/method.md §5): re-execute a trajectory's recorded actions in a container and check, step
//! by step, that the state reached is the recorded one.
//!
//! Every recorded action runs through [`exec::run_command`] — the one exec path — with its
//! recorded timeout, in the task's working directory. Its output is compared with the recorded one
//! after normalization at the two levels (`exact`, `sorted_lines`: whole lines in another order; a
//! step's level is the loosest its actions needed), its return code and its `timed_out` flag exactly
//! ([`Normalizer::compare_action`]). Where the trajectory carries a recorded [`Fingerprint`] the
//! state after the step is measured and compared too ([`Normalizer::check_fingerprint`]). The
//! first mismatch makes the trajectory [`NonReplayable`] and stops the replay: nothing after it
//! runs.
//!
//! ## Fingerprints and the cumulative change set
//!
//! A fingerprint's changed paths are relative to the **task image**, but a container's diff is
//! against the image it was created from, which may be a snapshot `h_s`. So a replay carries a
//! [`ChangeSet`]: the snapshot's own changes against the task image (stored on the snapshot image
//! as the label [`CHANGES_LABEL`] when it was committed), composed with the container's diff
//! ([`ChangeSet::then`]) whenever the state is measured. A file the snapshot added and the replay
//! deleted is then no change at all, as a diff of one container from the task image would say.
//!
//! Measuring costs a container diff, so it happens only at steps whose fingerprint is compared,
//! at every step when the caller asks for fingerprints to be recorded
//! ([`FingerprintMode::RecordMissing`]), and when an anchor is committed. The Docker runtime reads
//! the diff from the container's writable layer on this host (milliseconds; the engine's own diff,
//! seconds, where it cannot: [`crate::sandbox::container::docker::layer`]) and stamps it; `git diff`
//! and `git status` run in one exec through the exec path, with git's optional locks off so that
//! measuring writes nothing, and they are not steps. They run again only when the layer's stamp
//! moved since they last ran: an unchanged layer is an unchanged working tree.
//!
//! Errors of the container runtime are [`ReplayError`]s: infrastructure, the job has no outcome
//! and is run again. A mismatch is an outcome: [`Verdict::NonReplayable`].

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use vcurve_record::import::failure_signal;
use vcurve_record::jobs::{CompareLevel, NonReplayable};
use vcurve_record::replay::{GIT_DIFF_COMMAND, GIT_STATUS_COMMAND, fingerprint_paths, is_excluded_path};
use vcurve_record::{Fingerprint, Trajectory};

pub use vcurve_record::replay::Normalizer;

use crate::sandbox::container::{
    Change, ChangeKind, Container, ContainerNetwork, ContainerSpec, LayerStamp, RuntimeError,
};
use crate::sandbox::exec;

/// The label of a snapshot image that holds its changes against the task image
/// ([`ChangeSet::to_label`]).
pub const CHANGES_LABEL: &str = "vcurve.snapshot.changes";

/// The label of a snapshot image that says whether git's stat check of sizes and whole-second
/// times was exact where it was taken ([`state_exact`]): `1`, or `0` (as is a snapshot without
/// it).
pub const STAT_EXACT_LABEL: &str = "vcurve.snapshot.stat-exact";

/// Whether git may compare only sizes and whole-second times ([`git_state`]'s `stat_only`) in a
/// container whose writable layer's diff is `diff` with `stamp`, over an image that was exact
/// itself (`base_exact`: the task image, or a snapshot labelled [`STAT_EXACT_LABEL`]): the layer
/// holds no file of the image below rewritten keeping its size and second
/// ([`LayerStamp::stat_exact`]; unknown where the engine's diff is used) and no git index
/// written in the container (which would hold the container's stats, which such a rewrite
/// matches).
pub fn state_exact(diff: &[Change], stamp: Option<&LayerStamp>, base_exact: bool) -> bool {
    base_exact && stamp.is_some_and(|s| s.stat_exact) && !diff.iter().any(|c| c.path.ends_with("/.git/index"))
}

/// The timeout of the `git diff` and `git status` a fingerprint is measured with.
pub const GIT_TIMEOUT_S: f64 = 120.0;

/// The line a fingerprint's one exec prints between `git diff`'s output and `git status`'s
/// ([`git_state`]), followed by a nonce so that no file's content or name can forge it.
pub const GIT_STATE_SEPARATOR: &str = "--vcurve-git-status-follows";

/// The one command [`git_state`] runs: [`GIT_DIFF_COMMAND`], the separator line with `nonce`, and
/// [`GIT_STATUS_COMMAND`], one statement a line (a failing `git diff` does not stop the status).
pub fn git_state_command(nonce: &str) -> String {
    format!("{GIT_DIFF_COMMAND}\necho {GIT_STATE_SEPARATOR}-{nonce}\n{GIT_STATUS_COMMAND}")
}

/// What git is told, through its environment (git 2.31 and later; an older one ignores it), when
/// a stat check of sizes and whole-second times is exact ([`git_state`]'s `stat_only`).
pub const GIT_STAT_ONLY_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_COUNT", "2"),
    ("GIT_CONFIG_KEY_0", "core.checkStat"),
    ("GIT_CONFIG_VALUE_0", "minimal"),
    ("GIT_CONFIG_KEY_1", "core.trustCtime"),
    ("GIT_CONFIG_VALUE_1", "false"),
];

/// `git diff` and `git status` of the task's working directory, from one exec instead of two
/// (each exec costs a round trip to the engine): the output of [`git_state_command`] split at its
/// separator line. The outputs are what the two commands print when run one by one.
///
/// `stat_only`: the caller knows that no tracked file differs from the index while keeping its
/// size and whole-second modification time ([`Fingerprinter::fingerprint`]), so git is told to
/// compare only those ([`GIT_STAT_ONLY_ENV`]), not inode numbers and change times: a container
/// gets new ones for every file of the image, and with them git would read the whole repository
/// once per container to find it unchanged. The outputs are the same.
pub async fn git_state(
    container: &Container,
    task: &vcurve_record::Task,
    interpreter: &vcurve_record::Interpreter,
    stat_only: bool,
) -> Result<(String, String), RuntimeError> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let nonce = format!("{nanos:x}{:x}", CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let command = git_state_command(&nonce);
    // Where the recorded environment configures git through its environment, it is left alone.
    let stat_only = stat_only && !interpreter.env.keys().any(|k| k.starts_with("GIT_CONFIG"));
    let observed = if stat_only {
        let mut interpreter = interpreter.clone();
        interpreter.env.extend(GIT_STAT_ONLY_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        exec::run_own_command(container, task, &interpreter, &command, GIT_TIMEOUT_S).await?
    } else {
        exec::run_own_command(container, task, interpreter, &command, GIT_TIMEOUT_S).await?
    };
    let line = format!("{GIT_STATE_SEPARATOR}-{nonce}\n");
    let Some(at) = observed.output.find(&line) else {
        return Err(RuntimeError::Engine(format!(
            "measuring git diff and git status in container {}: the separator line {line:?} is missing from the \
             output (the command timed out or the interpreter did not run it as a shell script): {:?}",
            container.id(),
            observed.output.chars().take(400).collect::<String>()
        )));
    };
    Ok((observed.output[..at].to_owned(), observed.output[at + line.len()..].to_owned()))
}

/// Where the state is measured during a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FingerprintMode {
    /// Only at steps with a recorded fingerprint, to compare it.
    CompareOnly,
    /// At every step: compare the recorded ones, and record one where the trajectory has none.
    RecordMissing,
}

/// A replay's result when no runtime error stopped it.
#[derive(Debug)]
pub enum Verdict<T> {
    /// Every step replayed reproduced the record.
    Reproduced(T),
    /// The first step that did not, and why.
    NonReplayable(NonReplayable),
}

impl<T> Verdict<T> {
    /// The reproduced value, if any.
    pub fn reproduced(self) -> Option<T> {
        match self {
            Verdict::Reproduced(t) => Some(t),
            Verdict::NonReplayable(_) => None,
        }
    }
}

/// Why a replay could not be carried out. Every variant is an infrastructure failure or a bad
/// request, never a statement about the trajectory: the job has no outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The container runtime failed (retryable: run the job again).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The steps asked for do not exist in the trajectory (a caller's bug).
    #[error("cannot replay steps {from}+1..={to} of a trajectory of {length} steps")]
    Range { from: u32, to: u32, length: u32 },
    /// A snapshot's name or labels are unusable (the message says which).
    #[error("snapshot: {0}")]
    Snapshot(String),
}

/// A container's changes against the task image, path by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    changes: BTreeMap<String, ChangeKind>,
}

impl ChangeSet {
    /// No change: the task image itself.
    pub fn new() -> ChangeSet {
        ChangeSet::default()
    }

    /// The changes of a container created from the task image.
    pub fn from_changes(changes: &[Change]) -> ChangeSet {
        ChangeSet::new().then(changes)
    }

    /// These changes followed by `layer`, a diff against an image holding them: what a diff
    /// against the task image would list.
    ///
    /// - deleted: whatever this set had under the path goes; a path this set added is no change,
    ///   any other is deleted;
    /// - added: a path this set deleted was modified, any other added;
    /// - modified: a path this set added stays added, any other is modified.
    pub fn then(&self, layer: &[Change]) -> ChangeSet {
        let mut changes = self.changes.clone();
        for change in layer {
            let path = change.path.as_str();
            let before = changes.get(path).copied();
            match change.kind {
                ChangeKind::Deleted => {
                    let prefix = format!("{}/", path.trim_end_matches('/'));
                    changes.retain(|p, _| !p.starts_with(&prefix));
                    if before == Some(ChangeKind::Added) {
                        changes.remove(path);
                    } else {
                        changes.insert(path.to_owned(), ChangeKind::Deleted);
                    }
                }
                ChangeKind::Added => {
                    let kind =
                        if before == Some(ChangeKind::Deleted) { ChangeKind::Modified } else { ChangeKind::Added };
                    changes.insert(path.to_owned(), kind);
                }
                ChangeKind::Modified => {
                    let kind = if before == Some(ChangeKind::Added) { ChangeKind::Added } else { ChangeKind::Modified };
                    changes.insert(path.to_owned(), kind);
                }
            }
        }
        ChangeSet { changes }.compact()
    }

    /// Drop what lies below an excluded path (a cache, a log, a temporary directory): it never
    /// counts, and the excluded path itself still tells [`fingerprint_paths`] that its parent
    /// directory changed only through it.
    fn compact(mut self) -> ChangeSet {
        let excluded_ancestor = |path: &str| {
            let mut dir = path;
            while let Some(i) = dir.rfind('/') {
                dir = &dir[..i];
                if dir.is_empty() {
                    return false;
                }
                if is_excluded_path(dir) {
                    return true;
                }
            }
            false
        };
        self.changes.retain(|p, _| !excluded_ancestor(p));
        self
    }

    pub fn len(&self) -> usize {
        self.changes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The changed paths and how each changed.
    pub fn iter(&self) -> impl Iterator<Item = (&str, ChangeKind)> {
        self.changes.iter().map(|(p, k)| (p.as_str(), *k))
    }

    /// How `path` changed, if it did.
    pub fn kind(&self, path: &str) -> Option<ChangeKind> {
        self.changes.get(path).copied()
    }

    /// The paths a fingerprint compares ([`fingerprint_paths`]).
    pub fn fingerprint_paths(&self) -> Vec<String> {
        fingerprint_paths(self.changes.keys().map(String::as_str))
    }

    /// The text form stored in [`CHANGES_LABEL`]: one `A`, `C` or `D`, a space and the path a
    /// line, as `docker diff` prints them.
    pub fn to_label(&self) -> String {
        let mut out = String::new();
        for (path, kind) in &self.changes {
            out.push(match kind {
                ChangeKind::Added => 'A',
                ChangeKind::Modified => 'C',
                ChangeKind::Deleted => 'D',
            });
            out.push(' ');
            out.push_str(path);
            out.push('\n');
        }
        out
    }

    /// Parse [`ChangeSet::to_label`]'s form; the error names the line.
    pub fn from_label(label: &str) -> Result<ChangeSet, String> {
        let mut changes = BTreeMap::new();
        for (i, line) in label.lines().enumerate() {
            if line.is_empty() {
                continue;
            }
            let (kind, path) =
                line.split_once(' ').ok_or_else(|| format!("line {}: {line:?} is not `K /path`", i + 1))?;
            let kind = match kind {
                "A" => ChangeKind::Added,
                "C" => ChangeKind::Modified,
                "D" => ChangeKind::Deleted,
                other => return Err(format!("line {}: change kind {other:?} is not A, C or D", i + 1)),
            };
            if !path.starts_with('/') {
                return Err(format!("line {}: path {path:?} is not absolute", i + 1));
            }
            changes.insert(path.to_owned(), kind);
        }
        Ok(ChangeSet { changes })
    }
}

/// How a container is created for a replay or a continuation: everything of its
/// [`ContainerSpec`] but the image.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerLimits {
    pub memory_bytes: u64,
    pub pids_limit: i64,
    /// The labels of the job (managed, worker, job, study).
    pub labels: BTreeMap<String, String>,
    /// The network of the study's agent containers, and what every command there gets with it
    /// ([`ContainerSpec::exec_env`]).
    pub network: ContainerNetwork,
    pub exec_env: BTreeMap<String, String>,
}

impl ContainerLimits {
    pub fn spec(&self, image: &str) -> ContainerSpec {
        ContainerSpec {
            image: image.to_owned(),
            memory_bytes: self.memory_bytes,
            pids_limit: self.pids_limit,
            labels: self.labels.clone(),
            network: self.network.clone(),
            exec_env: self.exec_env.clone(),
        }
    }
}

/// Measures the states of one container step after step: its changes against the task image and
/// its fingerprints. Used by a replay, and by a base run that records its own.
pub struct Fingerprinter<'a> {
    container: &'a Container,
    task: &'a vcurve_record::Task,
    interpreter: &'a vcurve_record::Interpreter,
    /// The changes of the container's image against the task image.
    base: ChangeSet,
    /// The cumulative changes measured at step `.0`, with the stamp of the writable layer they
    /// were read from (where the runtime reads it).
    measured: Option<(u32, ChangeSet, Option<LayerStamp>)>,
    /// `git diff` and `git status` as last measured, with the layer's stamp then: a state whose
    /// stamp is the same has the same working tree, so they are not run again.
    git: Option<(LayerStamp, (String, String))>,
    /// Whether the container's image was itself taken where git's stat check was exact (the task
    /// image; a snapshot labelled [`STAT_EXACT_LABEL`]).
    base_exact: bool,
    /// [`state_exact`] of the last diff measured (the changes leave out what is below `.git`, so
    /// this is read from the diff itself).
    exact: bool,
    /// The git state measured at step `.0`.
    git_at: Option<(u32, (String, String))>,
}

impl<'a> Fingerprinter<'a> {
    /// Measures `container`, whose image's changes against the task image are `base` (empty for
    /// the task image); its commands run as `interpreter` in `task`'s working directory.
    pub fn new(
        container: &'a Container,
        task: &'a vcurve_record::Task,
        interpreter: &'a vcurve_record::Interpreter,
        base: ChangeSet,
    ) -> Fingerprinter<'a> {
        let base_is_task_image = base.is_empty();
        Fingerprinter {
            container,
            task,
            interpreter,
            base,
            measured: None,
            git: None,
            base_exact: base_is_task_image,
            exact: false,
            git_at: None,
        }
    }

    /// The container's image is a snapshot taken where git's stat check was exact (its
    /// [`STAT_EXACT_LABEL`]), so the check stays exact over it where the layer on top is.
    pub fn set_base_exact(&mut self, exact: bool) {
        self.base_exact = exact;
        self.measured = None;
    }

    /// Whether git's stat check is exact at step `t` ([`state_exact`]): what a snapshot taken
    /// now is labelled with.
    pub async fn exact_at(&mut self, t: u32) -> Result<bool, RuntimeError> {
        self.changes_stamped(t).await?;
        Ok(self.exact)
    }

    /// The container's changes against the task image at step `t`, measured once per step (one
    /// container diff), with the stamp of the writable layer where the runtime reads the layer
    /// itself ([`Container::diff_stamped`]): equal stamps, the same state.
    pub async fn changes_stamped(&mut self, t: u32) -> Result<(ChangeSet, Option<LayerStamp>), RuntimeError> {
        if let Some((at, changes, stamp)) = &self.measured
            && *at == t
        {
            return Ok((changes.clone(), stamp.clone()));
        }
        let (diff, stamp) = self.container.diff_stamped().await?;
        self.exact = state_exact(&diff, stamp.as_ref(), self.base_exact);
        let changes = self.base.then(&diff);
        self.measured = Some((t, changes.clone(), stamp.clone()));
        Ok((changes, stamp))
    }

    /// Measure the state at step `t`: the changed paths, `returncode`, `git diff` and `git
    /// status`. The two git commands run (in one exec) only when the writable layer changed since
    /// they last ran, or when its stamp is unknown. They compare sizes and whole-second times only
    /// ([`git_state`]'s `stat_only`) where that is exact ([`state_exact`]): the container's image
    /// is the task image or a snapshot taken where it was exact
    /// ([`Fingerprinter::set_base_exact`]), git's index is the image's (an index git wrote in the
    /// container holds the container's stats, which a rewrite keeping size and second would
    /// match), and the layer holds no file of the image rewritten keeping its size and second
    /// ([`LayerStamp::stat_exact`]).
    pub async fn fingerprint(&mut self, t: u32, returncode: Option<i32>) -> Result<Fingerprint, RuntimeError> {
        let (changes, _) = self.changes_stamped(t).await?;
        let changed_paths = changes.fingerprint_paths();
        let (git_diff, git_status) = self.git_state(t).await?;
        Ok(Fingerprint { changed_paths, returncode, git_diff, git_status })
    }

    /// `git diff` and `git status` at step `t`, as [`Fingerprinter::fingerprint`] measures them:
    /// run once per step, and again only when the layer's stamp moved since they last ran.
    pub async fn git_state(&mut self, t: u32) -> Result<(String, String), RuntimeError> {
        if let Some((at, state)) = &self.git_at
            && *at == t
        {
            return Ok(state.clone());
        }
        let (_, stamp) = self.changes_stamped(t).await?;
        let state = match (&stamp, &self.git) {
            (Some(now), Some((then, state))) if now == then => state.clone(),
            _ => {
                let state = git_state(self.container, self.task, self.interpreter, self.exact).await?;
                if let Some(now) = stamp {
                    self.git = Some((now, state.clone()));
                }
                state
            }
        };
        self.git_at = Some((t, state.clone()));
        Ok(state)
    }
}

/// A replay in progress over one container: [`Replay::step`] replays the next step. The state
/// stands at `h_t` ([`Replay::t`]) after every step that reproduced the record.
pub struct Replay<'a> {
    container: &'a Container,
    trajectory: &'a Trajectory,
    normalizer: &'a Normalizer,
    mode: FingerprintMode,
    t: u32,
    measure: Fingerprinter<'a>,
    levels: Vec<CompareLevel>,
    fingerprints: BTreeMap<u32, Fingerprint>,
    /// The failure signal of the step just replayed (see [`Replay::failure_signal`]).
    signal: Option<String>,
    failed: bool,
}

/// What a replay of steps `from+1..=to` reproduced.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedSteps {
    pub from: u32,
    pub to: u32,
    /// The level of each step `from+1..=to`, in order.
    pub levels: Vec<CompareLevel>,
    /// The fingerprints measured at steps that had none recorded
    /// ([`FingerprintMode::RecordMissing`]), by step.
    pub fingerprints: BTreeMap<u32, Fingerprint>,
}

impl<'a> Replay<'a> {
    /// A replay of `trajectory` in `container`, whose state is `h_from`; `base` holds the changes
    /// of the container's image against the task image (empty for the task image).
    pub fn new(
        container: &'a Container,
        trajectory: &'a Trajectory,
        normalizer: &'a Normalizer,
        mode: FingerprintMode,
        from: u32,
        base: ChangeSet,
    ) -> Result<Replay<'a>, ReplayError> {
        if from > trajectory.length() {
            return Err(ReplayError::Range { from, to: from, length: trajectory.length() });
        }
        Ok(Replay {
            container,
            trajectory,
            normalizer,
            mode,
            t: from,
            measure: Fingerprinter::new(container, &trajectory.task, &trajectory.interpreter, base),
            levels: Vec::new(),
            fingerprints: BTreeMap::new(),
            signal: None,
            failed: false,
        })
    }

    /// The container's image is a snapshot labelled [`STAT_EXACT_LABEL`]
    /// ([`Fingerprinter::set_base_exact`]).
    pub fn set_base_exact(&mut self, exact: bool) {
        self.measure.set_base_exact(exact);
    }

    /// Whether git's stat check is exact at the current step ([`Fingerprinter::exact_at`]).
    pub async fn state_exact(&mut self) -> Result<bool, RuntimeError> {
        self.measure.exact_at(self.t).await
    }

    /// The step the state stands at.
    pub fn t(&self) -> u32 {
        self.t
    }

    pub fn container(&self) -> &'a Container {
        self.container
    }

    pub fn trajectory(&self) -> &'a Trajectory {
        self.trajectory
    }

    /// The failure signal (docs/method.md §3, [`failure_signal`]) in the replayed observations of
    /// step `t`, the step just replayed: the first of its actions that carries one.
    pub fn failure_signal(&self) -> Option<&str> {
        self.signal.as_deref()
    }

    /// The container's changes against the task image at `h_t`, measured once per step (one
    /// container diff).
    pub async fn changes(&mut self) -> Result<ChangeSet, RuntimeError> {
        Ok(self.changes_stamped().await?.0)
    }

    /// [`Replay::changes`] with the stamp of the writable layer at `h_t`, where the runtime reads
    /// the layer itself ([`Container::diff_stamped`]): equal stamps, the same state.
    pub async fn changes_stamped(&mut self) -> Result<(ChangeSet, Option<LayerStamp>), RuntimeError> {
        self.measure.changes_stamped(self.t).await
    }

    /// `git diff` and `git status` at `h_t`: the ones the step's fingerprint measured where it
    /// measured one and the layer has not moved since ([`Fingerprinter::git_state`]).
    pub async fn git_state(&mut self) -> Result<(String, String), RuntimeError> {
        self.measure.git_state(self.t).await
    }

    /// Replay step `t + 1`: `Ok(None)` when it reproduced the record (the state is now at
    /// `h_{t+1}`), `Ok(Some(_))` at the first mismatch. After a mismatch or an error the replay is
    /// over and every further call is refused.
    pub async fn step(&mut self) -> Result<Option<NonReplayable>, ReplayError> {
        let length = self.trajectory.length();
        if self.failed || self.t >= length {
            return Err(ReplayError::Range { from: self.t, to: self.t + 1, length });
        }
        // Until the step is through, a failure leaves the state somewhere between two steps.
        self.failed = true;
        let n = self.t + 1;
        let step = &self.trajectory.steps[self.t as usize];
        let mut level = CompareLevel::Exact;
        let mut last_code = None;
        let mut signal = None;
        for action in &step.actions {
            let observed = exec::run_command(
                self.container,
                &self.trajectory.task,
                &self.trajectory.interpreter,
                &action.command,
                action.timeout_s,
            )
            .await?;
            match self.normalizer.compare_action(action, &observed.output, observed.returncode, observed.timed_out) {
                Ok(l) => level = level.max(l),
                Err(mismatch) => return Ok(Some(mismatch.at_step(n))),
            }
            last_code = observed.returncode;
            if signal.is_none() {
                signal = failure_signal(&action.command, &observed.output, observed.returncode);
            }
        }
        self.t = n;
        self.signal = signal;
        let measure = step.fingerprint.is_some() || self.mode == FingerprintMode::RecordMissing;
        if measure {
            let measured = self.measure.fingerprint(self.t, last_code).await?;
            match &step.fingerprint {
                Some(recorded) => {
                    if let Err(mismatch) = self.normalizer.check_fingerprint(recorded, &measured) {
                        // The state after the step differs: every command of the step made it.
                        let commands: Vec<&str> = step.actions.iter().map(|a| a.command.as_str()).collect();
                        return Ok(Some(mismatch.with_command(&commands.join("\n")).at_step(n)));
                    }
                }
                None => {
                    self.fingerprints.insert(n, measured);
                }
            }
        }
        self.levels.push(level);
        self.failed = false;
        Ok(None)
    }

    /// What the steps replayed so far reproduced.
    pub fn finish(self, from: u32) -> ReplayedSteps {
        ReplayedSteps { from, to: self.t, levels: self.levels, fingerprints: self.fingerprints }
    }
}

/// What the caller does each time the replay reaches a step (e.g. commit an anchor).
pub trait OnStep: Send {
    /// Called after step `replay.t()` reproduced the record.
    fn reached<'r>(&'r mut self, replay: &'r mut Replay<'_>) -> BoxFuture<'r, Result<(), ReplayError>>;
}

/// Nothing to do at any step.
impl OnStep for () {
    fn reached<'r>(&'r mut self, _replay: &'r mut Replay<'_>) -> BoxFuture<'r, Result<(), ReplayError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Replay steps `from+1..=to` of `trajectory` in `container`, whose state is `h_from` (`base`: the
/// changes of its image against the task image), calling `on_step` after each step that
/// reproduced the record.
#[allow(clippy::too_many_arguments)]
pub async fn replay_steps(
    container: &Container,
    trajectory: &Trajectory,
    from: u32,
    to: u32,
    normalizer: &Normalizer,
    fingerprints: FingerprintMode,
    base: ChangeSet,
    on_step: &mut dyn OnStep,
) -> Result<Verdict<ReplayedSteps>, ReplayError> {
    if from > to || to > trajectory.length() {
        return Err(ReplayError::Range { from, to, length: trajectory.length() });
    }
    let mut replay = Replay::new(container, trajectory, normalizer, fingerprints, from, base)?;
    while replay.t() < to {
        if let Some(mismatch) = replay.step().await? {
            return Ok(Verdict::NonReplayable(mismatch));
        }
        on_step.reached(&mut replay).await?;
    }
    Ok(Verdict::Reproduced(replay.finish(from)))
}

#[cfg(test)]
pub(crate) mod tests;
