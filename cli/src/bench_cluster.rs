//! `vcurve bench cluster`: a cluster of workers simulated in virtual time over the real
//! coordinator logic — the store, its admission, its claim order and the schedule — to see how
//! close the coordinator comes to the best any scheduler could do.
//!
//! # What runs
//!
//! A synthetic study (`--trajectories` curves drawn from the synthetic families of
//! `vcurve_method::synthetic`, cycling through them, seeded by `--seed`) is stored in a real
//! [`SqlStore`] (a fresh in-memory SQLite by default) and `--workers` workers of `--slots` slots
//! are registered. A discrete-event simulation then plays the workers: a worker with free slots
//! calls [`Store::lease`] for all of them in one call at the virtual time `now`; a leased
//! continuation finishes after its duration, and the worker calls [`Store::report`] with the
//! outcome the synthetic runner gives it ([`vcurve_worker::runners::synthetic::synthetic_result`], the
//! worker's own code) and leases again. When a report creates work (`Reported::wakes`, what wakes
//! long-polling workers in the real coordinator), the idle workers lease again at once, in turn,
//! until one gets less than it asked for. No gRPC: this is about scheduling, not wire speed.
//!
//! The store is given virtual time in milliseconds. Heartbeats are not simulated: the lease
//! timeout is [`LEASE_TIMEOUT_MS`] (a year of virtual time), longer than any continuation, so no
//! lease expires and every worker stays live; a continuation drawn longer than that is refused.
//!
//! # Durations
//!
//! A continuation's duration is lognormal with median `m = --median-min` and 99th percentile
//! `p = --p99-min`: `σ = ln(p/m) / z₀.₉₉` (`z₀.₉₉ = 2.3263`) and `d = m · exp(σ · Φ⁻¹(u))`, where
//! `u` is the synthetic runner's hash of `"{seed}/duration/{trajectory}/{series}/{t}/{key seed}"`.
//! A duration is a function of the key alone, so every run — any number of workers, any order —
//! gives each continuation the same duration (rounded to the millisecond, at least 1 ms).
//!
//! # The lower bound
//!
//! `lower_bound = max(total work / slots, the longest chain)`, where
//!
//! - `total work` is the sum of the durations of every continuation the study ran, and `slots` is
//!   `workers × slots per worker`: no schedule finishes that work sooner;
//! - a trajectory's chain is its makespan with unlimited workers: its schedule
//!   (`TrajectorySchedule`, the same the store rebuilds) is started alone, every requested
//!   continuation starts the moment it is requested and finishes after its duration, and its
//!   outcome is given to the schedule then. A stage's keys are requested only once the previous
//!   stage's barrier is met (and within a stage, a lane's next keys once its last ones have
//!   outcomes), so this is the longest chain of barriers of the trajectory, each as long as its
//!   slowest continuation. The schedule requests only more keys as it learns more outcomes, so
//!   with fewer workers no key can be requested — or finish — sooner: no schedule finishes the
//!   trajectory sooner. The longest chain is the maximum over trajectories.
//!
//! The simulation checks that every trajectory ran exactly the continuations its chain did.
//!
//! # The reference without barriers
//!
//! The bound ignores that no scheduler knows a continuation's duration before it ends. With
//! heavy-tailed durations that alone costs a lot: of the continuations started last some are among
//! the longest, and the other slots idle while they run. [`oblivious_makespan`] measures it on the
//! study's own durations: every continuation with no barriers at all, in a random order, each on
//! the first slot to come free, averaged over [`OBLIVIOUS_SHUFFLES`] orders. A scheduler that
//! never leaves a slot idle while work waits, and that cannot see durations, can expect this
//! makespan when there are no barriers (a reference, not a bound: a lucky order beats it);
//! `ratio_to_oblivious` is, roughly, what the barriers and the claim order cost beyond it. (At 1,000 workers, median 3 and p99 30 minutes, it is about
//! 1.14 × `total work / slots`.)
//!
//! # What is reported
//!
//! Makespan (virtual time from the start to the study's end), the bound and its two parts, their
//! ratio, the reference without barriers and the makespan's ratio to it, the virtual time the first
//! trajectory was done, the mean utilization (busy slot-seconds
//! over `slots × makespan`) and the utilization in each twentieth of the makespan, the number of
//! continuations, and the wall-clock time of the simulation.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};
use vcurve_coordinator::model::{ContinuationKey, HeldJob, JobKey, JobReport, LeasedJob, Locality, StudyState};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_method::Thresholds;
use vcurve_method::schedule::{Controls, Key, Outcome, TrajectoryPlan, TrajectorySchedule, Variant};
use vcurve_method::synthetic::{Family, SyntheticCurve};
use vcurve_record::TrajectoryPayload;
use vcurve_worker::runners::seam::JobSpec;
use vcurve_worker::runners::synthetic::{synthetic_result, unit_hash};

use crate::output;

/// The lease timeout of the simulation: a year of virtual time, longer than any continuation.
pub const LEASE_TIMEOUT_MS: i64 = 365 * 24 * 3_600_000;

/// `z` of the 99th percentile of the standard normal distribution.
const Z_99: f64 = 2.326_347_874_040_841;

/// Buckets of the utilization over time: each a twentieth (5%) of the makespan.
pub const BUCKETS: usize = 20;

/// Lognormal continuation durations, a function of the key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Durations {
    median_s: f64,
    sigma: f64,
    seed: u64,
}

impl Durations {
    /// Durations with median `median_s` and 99th percentile `p99_s` seconds.
    pub fn new(median_s: f64, p99_s: f64, seed: u64) -> anyhow::Result<Self> {
        if !(median_s.is_finite() && median_s > 0.0) {
            bail!("--median-min must be a positive number of minutes (got {})", median_s / 60.0);
        }
        if !(p99_s.is_finite() && p99_s >= median_s) {
            bail!(
                "--p99-min ({}) must be a number of minutes at least --median-min ({})",
                p99_s / 60.0,
                median_s / 60.0
            );
        }
        Ok(Durations { median_s, sigma: (p99_s / median_s).ln() / Z_99, seed })
    }

    /// The `q`-quantile in seconds (`0 < q < 1`).
    pub fn quantile_s(&self, q: f64) -> f64 {
        let z = Normal::standard().inverse_cdf(q);
        self.median_s * (self.sigma * z).exp()
    }

    /// The duration of a continuation of `trajectory`, in milliseconds.
    pub fn of(&self, trajectory: &str, key: Key) -> i64 {
        let u =
            unit_hash(&format!("{}/duration/{trajectory}/{}/{}/{}", self.seed, key.series.as_str(), key.t, key.seed));
        // u is in [0, 1); keep it off 0, where the quantile is 0.
        let u = u.max(f64::EPSILON);
        ((self.quantile_s(u) * 1000.0).round() as i64).max(1)
    }
}

/// The makespan of a schedule with unlimited workers: `initial` keys start at 0, each finishes
/// after `duration(key)`, and `record(key)` — called in order of finish time — gives the keys the
/// schedule requests anew once it knows that key's outcome; they start at once. Returns the
/// makespan and every key run with its duration.
pub fn critical_path(
    initial: Vec<Key>,
    duration: impl Fn(Key) -> i64,
    mut record: impl FnMut(Key) -> Vec<Key>,
) -> (i64, Vec<(Key, i64)>) {
    let mut running = BinaryHeap::new();
    let mut ran = Vec::new();
    let mut seen = BTreeSet::new();
    let mut start = |at: i64, keys: Vec<Key>, running: &mut BinaryHeap<Reverse<(i64, Key)>>| {
        for key in keys {
            if seen.insert(key) {
                let d = duration(key);
                ran.push((key, d));
                running.push(Reverse((at + d, key)));
            }
        }
    };
    start(0, initial, &mut running);
    let mut end = 0;
    while let Some(Reverse((at, key))) = running.pop() {
        end = at;
        let new = record(key);
        start(at, new, &mut running);
    }
    (end, ran)
}

/// Shuffles of [`oblivious_makespan`].
pub const OBLIVIOUS_SHUFFLES: u64 = 8;

/// The makespan a scheduler that does not know durations can expect for `durations` on `slots`
/// slots with **no barriers at all**: the continuations in a random order, each started on the
/// first slot to come free (list scheduling), averaged over `shuffles` orders drawn from `seed`.
/// Durations are independent of everything a scheduler sees before a continuation ends, so every
/// order that never leaves a slot idle while work waits has this expected makespan; barriers only
/// add waits. With heavy-tailed durations it lies well above `work / slots`: the continuations
/// started last include some of the longest, and the other slots go idle while they run.
pub fn oblivious_makespan(durations: &[i64], slots: u64, shuffles: u64, seed: u64) -> f64 {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    if durations.is_empty() || slots == 0 || shuffles == 0 {
        return 0.0;
    }
    let mut order = durations.to_vec();
    let mut total = 0.0;
    for shuffle in 0..shuffles {
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ shuffle.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        let mut free: BinaryHeap<Reverse<i64>> = (0..slots.min(order.len() as u64)).map(|_| Reverse(0)).collect();
        let mut end = 0;
        for &d in &order {
            let Reverse(at) = free.pop().expect("at least one slot");
            end = end.max(at + d);
            free.push(Reverse(at + d));
        }
        total += end as f64;
    }
    total / shuffles as f64
}

/// One trajectory of the simulated study.
struct Trajectory {
    id: String,
    payload: Arc<TrajectoryPayload>,
    /// Its makespan with unlimited workers (see the module docs), ms.
    chain_ms: i64,
    /// The continuations it runs, with their durations.
    keys: BTreeMap<Key, i64>,
}

/// The outcome the synthetic runner gives a key of `trajectory` (its first attempt).
fn synthetic_outcome(study_seed: u64, trajectory: &Trajectory, key: Key) -> anyhow::Result<Outcome> {
    let job = JobSpec {
        key: JobKey::Continuation(ContinuationKey {
            study: String::new(),
            trajectory: trajectory.id.clone(),
            series: key.series,
            t: key.t,
            seed: key.seed,
        }),
        attempt: 1,
        budget: 1,
        runner_kind: "synthetic".into(),
        options: serde_json::json!({}),
        study_seed,
        trajectory_digest: None,
        trajectory: Some(trajectory.payload.clone()),
        anchors: Vec::new(),
        registry_snapshot: None,
    };
    match synthetic_result(&job) {
        JobReport::Outcome(o) => Ok(if o.success { Outcome::Success } else { Outcome::Failure }),
        other => bail!("the synthetic runner gave {other:?} for {} {key:?}", trajectory.id),
    }
}

/// Run a trajectory's schedule alone with unlimited workers: its chain and its keys.
fn chain_of(
    trajectory: &mut Trajectory,
    plan: TrajectoryPlan,
    params: &Thresholds,
    variant: &'static dyn Variant,
    study_seed: u64,
    durations: &Durations,
) -> anyhow::Result<()> {
    let mut schedule = TrajectorySchedule::new(plan, params, variant);
    let initial = schedule.pending();
    let mut failed = None;
    let (chain, keys) = {
        let t: &Trajectory = trajectory;
        critical_path(
            initial,
            |key| durations.of(&t.id, key),
            |key| match synthetic_outcome(study_seed, t, key) {
                Ok(outcome) => {
                    if let Err(e) = schedule.record(key, outcome) {
                        failed.get_or_insert(anyhow::anyhow!("{}: {e}", t.id));
                    }
                    schedule.pending()
                }
                Err(e) => {
                    failed.get_or_insert(e);
                    Vec::new()
                }
            },
        )
    };
    if let Some(e) = failed {
        return Err(e);
    }
    if !schedule.is_done() {
        bail!("the schedule of {} stopped before its end with unlimited workers", trajectory.id);
    }
    trajectory.chain_ms = chain;
    trajectory.keys = keys.into_iter().collect();
    Ok(())
}

/// What one simulated run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub store: String,
    pub schedule: String,
    pub workers: u32,
    pub slots_per_worker: u32,
    pub trajectories: u32,
    pub continuations: u64,
    pub median_min: f64,
    pub p99_min: f64,
    pub seed: u64,
    /// Virtual seconds from the start to the study's end.
    pub makespan_s: f64,
    /// `max(work_bound_s, chain_bound_s)`.
    pub lower_bound_s: f64,
    /// Total work over the slots.
    pub work_bound_s: f64,
    /// The longest trajectory's makespan with unlimited workers.
    pub chain_bound_s: f64,
    /// `makespan_s / lower_bound_s`.
    pub ratio: f64,
    /// The same continuations without barriers, as any scheduler not knowing durations can
    /// expect to run them ([`oblivious_makespan`]): a reference, not a bound.
    pub oblivious_s: f64,
    /// `makespan_s / oblivious_s`: what the barriers and the claim order cost beyond that.
    pub ratio_to_oblivious: f64,
    /// Virtual seconds until the first trajectory was done.
    pub first_curve_s: f64,
    /// Busy slot-seconds over `slots × makespan`.
    pub mean_utilization: f64,
    /// The utilization in each twentieth of the makespan, in order.
    pub utilization: Vec<f64>,
    /// Store calls made: leases and reports.
    pub leases: u64,
    pub reports: u64,
    /// Lease timeout of the simulation (virtual), longer than any continuation.
    pub lease_timeout_s: f64,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

/// What a run simulates.
#[derive(Clone)]
pub struct ClusterSettings {
    pub store_url: String,
    pub schedule: &'static dyn Variant,
    pub workers: u32,
    pub slots: u32,
    pub trajectories: u32,
    pub durations: Durations,
    pub median_min: f64,
    pub p99_min: f64,
    pub seed: u64,
    /// Print progress on stderr.
    pub progress: bool,
}

/// The study: its spec and curve files, and its trajectories' curves.
fn study_for(trajectories: u32, seed: u64, schedule: &str) -> (String, BTreeMap<String, String>) {
    let mut yaml = format!("name: cluster-bench\nseed: {seed}\nbudget: 100\nschedule: {schedule}\n");
    yaml.push_str("runner: {kind: synthetic}\ntrajectories:\n");
    let mut files = BTreeMap::new();
    for i in 0..trajectories {
        let family = Family::ALL[i as usize % Family::ALL.len()];
        let curve = SyntheticCurve::draw(family, seed, u64::from(i));
        let id = format!("{}-{i:05}", family.as_str().replace('_', "-"));
        let path = format!("curves/{id}.csv");
        let mut csv = String::from("t,v\n");
        for (t, v) in curve.values[..curve.length() as usize].iter().enumerate() {
            let _ = writeln!(csv, "{t},{v}");
        }
        files.insert(path.clone(), csv);
        let _ = writeln!(yaml, "  - {{id: {id}, length: {}, curve: {path}}}", curve.length());
    }
    (yaml, files)
}

/// A continuation a slot is running.
struct Running {
    worker: usize,
    job: LeasedJob,
    trajectory: usize,
    started_ms: i64,
}

/// The busy share of `slots` slots in each of [`BUCKETS`] equal parts of `[0, makespan)`, from
/// busy intervals `(start, end)` relative to the start.
pub fn utilization(intervals: &[(i64, i64)], slots: u64, makespan: i64) -> Vec<f64> {
    if makespan <= 0 || slots == 0 {
        return Vec::new();
    }
    let width = makespan as f64 / BUCKETS as f64;
    let mut busy = vec![0.0; BUCKETS];
    for &(start, end) in intervals {
        let (s, e) = (start as f64, end as f64);
        let first = ((s / width) as usize).min(BUCKETS - 1);
        let last = ((e / width) as usize).min(BUCKETS - 1);
        for (b, cell) in busy.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
            *cell += (e.min(hi) - s.max(lo)).max(0.0);
        }
    }
    busy.into_iter().map(|b| b / (width * slots as f64)).collect()
}

/// The virtual time a run starts at: one at which no worker of an earlier run on the same store
/// is still live (their leases and demand would count), and refuse a store with a running study.
async fn start_time(store: &SqlStore) -> anyhow::Result<i64> {
    if let Some((id, name, _)) = store.list_studies().await?.into_iter().find(|(_, _, s)| *s == StudyState::Running) {
        bail!(
            "the store holds a running study {name:?} ({id}); the simulation needs a store without running \
             studies (leave out --store for a fresh in-memory one)"
        );
    }
    let policy = LeasePolicy { timeout_ms: LEASE_TIMEOUT_MS };
    let mut start = 0;
    for _ in 0..1000 {
        if store.live_workers(start, policy).await?.is_empty() {
            return Ok(start);
        }
        start += LEASE_TIMEOUT_MS + 1;
    }
    bail!("the store's workers stay live however late the simulation starts")
}

/// Simulate one cluster.
pub async fn run(settings: &ClusterSettings) -> anyhow::Result<ClusterReport> {
    let started = Instant::now();
    let store = SqlStore::connect(&settings.store_url)
        .await
        .with_context(|| format!("cannot open the store {}", crate::commands::redact_url(&settings.store_url)))?;
    let policy = LeasePolicy { timeout_ms: LEASE_TIMEOUT_MS };
    let start = start_time(&store).await?;

    // The study, parsed and stored as `vcurve launch` would.
    let (yaml, files) = study_for(settings.trajectories, settings.seed, settings.schedule.name());
    let launch = vcurve_coordinator::spec::parse_launch(&yaml, &|p| files.get(p).cloned())
        .map_err(|e| anyhow::anyhow!("the simulated study's spec: {e}"))?;
    let payloads = launch.payloads();
    let spec = &launch.spec;
    let study_id = store.create_study(spec, &payloads, start).await?;

    // Every trajectory's chain with unlimited workers.
    let mut trajectories = Vec::with_capacity(payloads.len());
    for (t, payload) in spec.trajectories.iter().zip(payloads) {
        let mut trajectory =
            Trajectory { id: t.id.clone(), payload: Arc::new(payload), chain_ms: 0, keys: BTreeMap::new() };
        let plan = TrajectoryPlan {
            length: t.length,
            labels: t.labels.iter().filter_map(|l| l.step).collect(),
            controls: Controls::default(),
        };
        chain_of(&mut trajectory, plan, &spec.thresholds, settings.schedule, spec.seed, &settings.durations)?;
        if let Some((key, d)) = trajectory.keys.iter().find(|(_, d)| **d >= LEASE_TIMEOUT_MS) {
            bail!(
                "{} {key:?} would run {:.0} days, longer than the simulation's lease timeout; lower --p99-min",
                trajectory.id,
                *d as f64 / 86_400_000.0
            );
        }
        trajectories.push(trajectory);
    }
    let index: HashMap<String, usize> = trajectories.iter().enumerate().map(|(i, t)| (t.id.clone(), i)).collect();
    let expected: u64 = trajectories.iter().map(|t| t.keys.len() as u64).sum();

    let capabilities = vec!["synthetic".to_string()];
    let mut worker_ids = Vec::with_capacity(settings.workers as usize);
    for i in 0..settings.workers {
        worker_ids.push(store.register_worker(&format!("sim-{i:05}"), settings.slots, &capabilities, start).await?);
    }
    let mut free = vec![settings.slots; settings.workers as usize];
    let mut idle: BTreeSet<usize> = (0..settings.workers as usize).collect();
    let mut events: BinaryHeap<Reverse<(i64, u64)>> = BinaryHeap::new();
    let mut running: HashMap<u64, Running> = HashMap::new();
    let mut next_id = 0u64;
    let mut reported_per_trajectory = vec![0usize; trajectories.len()];
    let mut intervals: Vec<(i64, i64)> = Vec::with_capacity(expected as usize);
    let (mut leases, mut reports) = (0u64, 0u64);
    let mut first_curve: Option<i64> = None;
    let mut last_progress = Instant::now();

    // Lease for `worker` at `now`; whether it got every slot it asked for.
    macro_rules! lease {
        ($worker:expr, $now:expr) => {{
            let worker: usize = $worker;
            let now: i64 = $now;
            let asked = free[worker];
            let jobs = store.lease(&worker_ids[worker], asked, now, policy, &Locality::default()).await?;
            leases += 1;
            let got = jobs.len() as u32;
            for job in jobs {
                let Some(key) = job.key.continuation() else {
                    bail!("the simulated study handed out a {} job", job.key.kind().as_str());
                };
                let trajectory = *index.get(&key.trajectory).with_context(|| format!("unknown {}", key.trajectory))?;
                let k = Key { series: key.series, t: key.t, seed: key.seed };
                let Some(&d) = trajectories[trajectory].keys.get(&k) else {
                    bail!(
                        "the store asked for {} {k:?}, which the schedule run alone never asks for",
                        trajectories[trajectory].id
                    );
                };
                events.push(Reverse((now + d, next_id)));
                running.insert(next_id, Running { worker, job, trajectory, started_ms: now });
                next_id += 1;
            }
            free[worker] -= got;
            if free[worker] == 0 {
                idle.remove(&worker);
            } else {
                idle.insert(worker);
            }
            got == asked
        }};
    }

    // Every idle worker leases in turn until one gets less than it asked for.
    macro_rules! sweep {
        ($now:expr) => {{
            let now: i64 = $now;
            let candidates: Vec<usize> = idle.iter().copied().collect();
            for w in candidates {
                if !lease!(w, now) {
                    break;
                }
            }
        }};
    }

    sweep!(start);
    let mut now = start;
    while let Some(Reverse((at, id))) = events.pop() {
        now = at;
        let done = running.remove(&id).expect("every event is a running job");
        let spec = JobSpec {
            key: done.job.key.clone(),
            attempt: done.job.attempt,
            budget: done.job.budget,
            runner_kind: done.job.runner_kind.clone(),
            options: serde_json::from_str(&done.job.runner_options).context("the study's runner options")?,
            study_seed: done.job.study_seed,
            trajectory_digest: done.job.trajectory_digest.clone(),
            trajectory: Some(trajectories[done.trajectory].payload.clone()),
            anchors: Vec::new(),
            registry_snapshot: None,
        };
        let report = synthetic_result(&spec);
        let held = HeldJob { key: done.job.key.clone(), attempt: done.job.attempt };
        let reported = store.report(&worker_ids[done.worker], &held, &report, now).await?;
        reports += 1;
        if let vcurve_coordinator::model::ReportVerdict::Ignored(why) = &reported.verdict {
            bail!("the store ignored the report of {}: {why}", done.job.key);
        }
        intervals.push((done.started_ms - start, now - start));
        reported_per_trajectory[done.trajectory] += 1;
        if first_curve.is_none() && reported_per_trajectory[done.trajectory] == trajectories[done.trajectory].keys.len()
        {
            first_curve = Some(now - start);
        }
        free[done.worker] += 1;
        idle.insert(done.worker);
        // The reporting worker asks again at once; the others when there may be more work.
        let filled = lease!(done.worker, now);
        if reported.wakes || filled {
            sweep!(now);
        }
        if settings.progress && last_progress.elapsed().as_secs_f64() >= 5.0 {
            last_progress = Instant::now();
            eprintln!(
                "  {} workers: {:.1} h virtual, {reports}/{expected} continuations, {} running, {:.0} s",
                settings.workers,
                (now - start) as f64 / 3_600_000.0,
                running.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }

    // The study must be over, with every trajectory done on exactly its keys.
    let progress = store.progress(&study_id, now, policy).await?;
    if progress.state != StudyState::Done {
        bail!(
            "the simulation stalled at {:.1} h virtual: no continuation running, the study {} with {} pending, \
             {} of {} trajectories admitted and {} done",
            (now - start) as f64 / 3_600_000.0,
            progress.state.as_str(),
            progress.pending,
            progress.trajectories_admitted,
            progress.trajectories,
            progress.trajectories_done
        );
    }
    for (t, n) in trajectories.iter().zip(&reported_per_trajectory) {
        if *n != t.keys.len() {
            bail!("{} ran {n} continuations in the cluster but {} alone", t.id, t.keys.len());
        }
    }

    let makespan = now - start;
    let slots = u64::from(settings.workers) * u64::from(settings.slots);
    let work: i64 = trajectories.iter().flat_map(|t| t.keys.values()).sum();
    let work_bound = work as f64 / slots as f64;
    let chain_bound = trajectories.iter().map(|t| t.chain_ms).max().unwrap_or(0) as f64;
    let lower_bound = work_bound.max(chain_bound);
    let busy: i64 = intervals.iter().map(|(s, e)| e - s).sum();
    let all: Vec<i64> = trajectories.iter().flat_map(|t| t.keys.values().copied()).collect();
    let oblivious = oblivious_makespan(&all, slots, OBLIVIOUS_SHUFFLES, settings.seed);
    Ok(ClusterReport {
        store: if settings.store_url.starts_with("sqlite") { "sqlite".into() } else { "postgres".into() },
        schedule: settings.schedule.name().to_string(),
        workers: settings.workers,
        slots_per_worker: settings.slots,
        trajectories: settings.trajectories,
        continuations: reports,
        median_min: settings.median_min,
        p99_min: settings.p99_min,
        seed: settings.seed,
        makespan_s: makespan as f64 / 1000.0,
        lower_bound_s: lower_bound / 1000.0,
        work_bound_s: work_bound / 1000.0,
        chain_bound_s: chain_bound / 1000.0,
        ratio: if lower_bound > 0.0 { makespan as f64 / lower_bound } else { 1.0 },
        oblivious_s: oblivious / 1000.0,
        ratio_to_oblivious: if oblivious > 0.0 { makespan as f64 / oblivious } else { 1.0 },
        first_curve_s: first_curve.unwrap_or(makespan) as f64 / 1000.0,
        mean_utilization: if makespan > 0 { busy as f64 / (slots as f64 * makespan as f64) } else { 0.0 },
        utilization: utilization(&intervals, slots, makespan),
        leases,
        reports,
        lease_timeout_s: LEASE_TIMEOUT_MS as f64 / 1000.0,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// The human-readable table of the runs.
pub fn table(reports: &[ClusterReport]) -> String {
    let h = |s: f64| s / 3600.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>7} {:>5} {:>6} {:>7} {:>10} {:>8} {:>8} {:>8} {:>6} {:>7} {:>7} {:>8} {:>5} {:>7}",
        "schedule",
        "workers",
        "slots",
        "trajs",
        "cont",
        "makespan h",
        "bound h",
        "work h",
        "chain h",
        "ratio",
        "obliv h",
        "/obliv",
        "first h",
        "util",
        "wall s"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:<8} {:>7} {:>5} {:>6} {:>7} {:>10.2} {:>8.2} {:>8.2} {:>8.2} {:>6.3} {:>7.2} {:>7.3} {:>8.2} {:>5.3} {:>7.1}",
            r.schedule,
            r.workers,
            r.slots_per_worker,
            r.trajectories,
            r.continuations,
            h(r.makespan_s),
            h(r.lower_bound_s),
            h(r.work_bound_s),
            h(r.chain_bound_s),
            r.ratio,
            h(r.oblivious_s),
            r.ratio_to_oblivious,
            h(r.first_curve_s),
            r.mean_utilization,
            r.wall_s
        );
    }
    out.push_str("\nutilization by twentieth of the makespan (%):\n");
    for r in reports {
        let cells: Vec<String> = r.utilization.iter().map(|u| format!("{:.0}", u * 100.0)).collect();
        let _ = writeln!(out, "{:>7} workers: {}", r.workers, cells.join(" "));
    }
    if let Some(r) = reports.first() {
        let _ = writeln!(
            out,
            "\ncontinuations lognormal, median {} min, p99 {} min, seed {}; virtual time, lease timeout {:.0} days \
             (no lease expires, heartbeats not simulated);\nbound = max(work / slots, longest trajectory with \
             unlimited workers); ratio = makespan / bound; obliv: the same continuations without barriers in a random \
             order (mean of {} orders),\nwhat a scheduler not knowing durations can expect even without barriers; \
             first: first trajectory done.",
            r.median_min,
            r.p99_min,
            r.seed,
            r.lease_timeout_s / 86_400.0,
            OBLIVIOUS_SHUFFLES
        );
    }
    out
}

#[derive(Debug, clap::Args)]
pub struct BenchClusterArgs {
    /// Workers of the simulated cluster (several runs: --workers 1000,50).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1000u32, 50], value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub workers: Vec<u32>,
    /// Slots of each worker.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub slots: u32,
    /// Trajectories of the simulated study (synthetic curves of every family in turn).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub trajectories: u32,
    /// Median continuation duration, minutes.
    #[arg(long, default_value_t = 3.0)]
    pub median_min: f64,
    /// 99th percentile of the continuation duration, minutes.
    #[arg(long, default_value_t = 30.0)]
    pub p99_min: f64,
    /// Seed of the curves, their outcomes and the durations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The schedule variant (as `vcurve bench schedule --schedule`, one name).
    #[arg(long, default_value = "paper", value_name = "NAME")]
    pub schedule: String,
    /// The store: postgres://… (a database the bench may fill, without running studies) or
    /// sqlite://PATH; a fresh in-memory SQLite for each run by default.
    #[arg(long)]
    pub store: Option<String>,
    /// Print JSON instead of a table: one report, or with several worker counts a list of them.
    #[arg(long)]
    pub json: bool,
}

/// `vcurve bench cluster`.
pub async fn run_command(args: &BenchClusterArgs) -> anyhow::Result<()> {
    let schedules = crate::bench_schedule::parse_schedules(&args.schedule)?;
    let [schedule] = schedules[..] else {
        bail!("--schedule {:?}: the cluster simulation runs one schedule at a time", args.schedule);
    };
    let durations = Durations::new(args.median_min * 60.0, args.p99_min * 60.0, args.seed)?;
    let progress =
        std::io::IsTerminal::is_terminal(&std::io::stderr()) || std::env::var_os("VCURVE_PROGRESS").is_some();
    let mut reports = Vec::new();
    for &workers in &args.workers {
        let settings = ClusterSettings {
            store_url: args.store.clone().unwrap_or_else(|| "sqlite::memory:".into()),
            schedule,
            workers,
            slots: args.slots,
            trajectories: args.trajectories,
            durations,
            median_min: args.median_min,
            p99_min: args.p99_min,
            seed: args.seed,
            progress,
        };
        if progress {
            eprintln!("simulating {workers} workers × {} slots, {} trajectories…", args.slots, args.trajectories);
        }
        reports.push(run(&settings).await?);
    }
    if args.json {
        let json = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(&reports)?
        };
        output::println(json)
    } else {
        output::print(table(&reports))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcurve_method::schedule::Series;

    fn key(t: u32, seed: u32) -> Key {
        Key { series: Series::Main, t, seed }
    }

    #[test]
    fn durations_have_the_asked_median_and_p99() {
        let d = Durations::new(180.0, 1800.0, 3).unwrap();
        assert!((d.quantile_s(0.5) - 180.0).abs() < 1e-9);
        assert!((d.quantile_s(0.99) - 1800.0).abs() < 1e-6);
        let mut sample: Vec<i64> = (0..40_000).map(|i| d.of("traj", key(i % 100, i / 100))).collect();
        sample.sort_unstable();
        let q = |p: f64| sample[(p * (sample.len() - 1) as f64).round() as usize] as f64 / 1000.0;
        assert!((q(0.5) / 180.0 - 1.0).abs() < 0.03, "median {}", q(0.5));
        assert!((q(0.99) / 1800.0 - 1.0).abs() < 0.12, "p99 {}", q(0.99));
        // A function of the key.
        assert_eq!(d.of("traj", key(4, 2)), d.of("traj", key(4, 2)));
        assert!(Durations::new(0.0, 10.0, 1).is_err());
        assert!(Durations::new(10.0, 5.0, 1).is_err());
    }

    /// c once a and b are in, d once c is.
    fn barriers() -> impl FnMut(Key) -> Vec<Key> {
        let mut done = BTreeSet::new();
        move |k| {
            done.insert(k);
            let mut next = Vec::new();
            if done.contains(&key(0, 0)) && done.contains(&key(0, 1)) {
                next.push(key(1, 0));
            }
            if done.contains(&key(1, 0)) {
                next.push(key(2, 0));
            }
            next
        }
    }

    #[test]
    fn the_chain_is_the_longest_path_through_the_barriers() {
        // Round 1: a (5) and b (10); once both are in, c (3); c then asks for d (4). Meanwhile
        // e (20) runs from the start and asks for nothing.
        let durations: HashMap<Key, i64> =
            [(key(0, 0), 5), (key(0, 1), 10), (key(1, 0), 3), (key(2, 0), 4), (key(3, 0), 20)].into();
        let (end, ran) = critical_path(vec![key(0, 0), key(0, 1), key(3, 0)], |k| durations[&k], barriers());
        assert_eq!(end, 20); // e alone; the barrier chain is 10 + 3 + 4 = 17
        assert_eq!(ran.len(), 5);
        let mut durations = durations;
        durations.insert(key(3, 0), 1);
        let (end, _) = critical_path(vec![key(0, 0), key(0, 1), key(3, 0)], |k| durations[&k], barriers());
        assert_eq!(end, 17);
    }

    #[test]
    fn the_oblivious_makespan_is_list_scheduling_in_random_orders() {
        // One slot: the sum, whatever the order; equal durations: full waves.
        assert_eq!(oblivious_makespan(&[5, 1, 3], 1, 4, 1), 9.0);
        assert_eq!(oblivious_makespan(&[2; 7], 3, 4, 1), 6.0);
        // More slots than continuations: the longest.
        assert_eq!(oblivious_makespan(&[2, 9, 4], 8, 4, 1), 9.0);
        // One long continuation among many short ones: it ends last unless it starts first.
        let mut ds = vec![1; 99];
        ds.push(50);
        let m = oblivious_makespan(&ds, 10, 64, 3);
        assert!(m > 50.0 && m < 60.0, "{m}");
        assert_eq!(oblivious_makespan(&[], 4, 4, 1), 0.0);
    }

    #[test]
    fn utilization_splits_busy_time_over_the_buckets() {
        // Two slots over 20 ms: one busy all along, one for the first 5 ms.
        let u = utilization(&[(0, 20), (0, 5)], 2, 20);
        assert_eq!(u.len(), BUCKETS);
        assert!(u[..5].iter().all(|&x| (x - 1.0).abs() < 1e-9), "{u:?}");
        assert!(u[5..].iter().all(|&x| (x - 0.5).abs() < 1e-9), "{u:?}");
    }

    #[tokio::test]
    async fn a_small_cluster_finishes_every_trajectory_above_the_bound() {
        let settings = ClusterSettings {
            store_url: "sqlite::memory:".into(),
            schedule: vcurve_method::schedule::variants::variant_by_name("paper").unwrap(),
            workers: 20,
            slots: 1,
            trajectories: 5,
            durations: Durations::new(180.0, 1800.0, 1).unwrap(),
            median_min: 3.0,
            p99_min: 30.0,
            seed: 1,
            progress: false,
        };
        let r = run(&settings).await.unwrap();
        assert!(r.continuations > 5 * 72, "{r:?}");
        assert!(r.makespan_s >= r.lower_bound_s, "{r:?}");
        assert!(r.ratio >= 1.0);
        assert!(r.first_curve_s > 0.0 && r.first_curve_s <= r.makespan_s);
        assert!(r.mean_utilization > 0.0 && r.mean_utilization <= 1.0);
        assert_eq!(r.utilization.len(), BUCKETS);
    }
}
