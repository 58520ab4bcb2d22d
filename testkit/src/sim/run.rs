//! One simulated run: the study stored, every trajectory's chain, the discrete-event loop.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use vcurve_coordinator::model::{ContinuationKey, HeldJob, JobKey, JobReport, LeasedJob, Locality, StudyState};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_method::Thresholds;
use vcurve_method::schedule::{Controls, Key, Outcome, Series, TrajectoryPlan, TrajectorySchedule, Variant};
use vcurve_method::synthetic::{Family, SyntheticCurve};
use vcurve_record::TrajectoryPayload;
use vcurve_worker::runners::seam::JobSpec;
use vcurve_worker::runners::synthetic::synthetic_result;

use super::measure::{
    ClusterReport, ClusterSettings, Durations, LEASE_TIMEOUT_MS, OBLIVIOUS_SHUFFLES, critical_path, oblivious_makespan,
    utilization,
};

/// One trajectory of the simulated study.
pub(super) struct Trajectory {
    pub(super) id: String,
    pub(super) payload: Arc<TrajectoryPayload>,
    /// Its makespan with unlimited workers (see the module docs), ms.
    pub(super) chain_ms: i64,
    /// The continuations it runs, with their durations.
    pub(super) keys: BTreeMap<Key, i64>,
}

/// The outcome the synthetic runner gives a key of `trajectory` (its first attempt).
pub(super) fn synthetic_outcome(study_seed: u64, trajectory: &Trajectory, key: Key) -> anyhow::Result<Outcome> {
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
        runner: vcurve_record::RunnerSpec::Synthetic(Default::default()),
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

/// The step budget of a continuation at `key`: `B − t` floored at 0, `B` on `full_budget`
/// (docs/method.md §1).
pub(super) fn key_budget(study_budget: u32, key: Key) -> u32 {
    match key.series {
        Series::FullBudget => study_budget,
        Series::Main | Series::Retest => study_budget.saturating_sub(key.t),
    }
}

/// Run a trajectory's schedule alone with unlimited workers: its chain and its keys.
pub(super) fn chain_of(
    trajectory: &mut Trajectory,
    plan: TrajectoryPlan,
    params: &Thresholds,
    variant: &'static dyn Variant,
    study_seed: u64,
    study_budget: u32,
    durations: &Durations,
) -> anyhow::Result<()> {
    let mut schedule = TrajectorySchedule::new(plan, params, variant);
    let initial = schedule.pending();
    let mut failed = None;
    let (chain, keys) = {
        let t: &Trajectory = trajectory;
        critical_path(
            initial,
            |key| {
                // An outcome the runner cannot give fails the run in `record`, for the same key.
                let success = matches!(synthetic_outcome(study_seed, t, key), Ok(Outcome::Success));
                durations.of(&t.id, key, key_budget(study_budget, key), success)
            },
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

/// The study: its spec and curve files, and its trajectories' curves.
pub(super) fn study_for(trajectories: u32, seed: u64, schedule: &str) -> (String, BTreeMap<String, String>) {
    let mut yaml = format!("name: cluster-bench\nseed: {seed}\nbudget: 100\nschedule: {schedule}\n");
    yaml.push_str("runner: {kind: synthetic}\ntrajectories:\n");
    let mut files = BTreeMap::new();
    for i in 0..trajectories {
        let family = Family::PAPER[i as usize % Family::PAPER.len()];
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

/// Simulate one cluster on `store` (a store without running studies; the caller opened it).
pub async fn run(store: &SqlStore, settings: &ClusterSettings) -> anyhow::Result<ClusterReport> {
    let started = Instant::now();
    let policy = LeasePolicy { timeout_ms: LEASE_TIMEOUT_MS };
    let start = start_time(store).await?;

    // The study, parsed and stored as `vcurve launch` would.
    let (yaml, files) = study_for(settings.trajectories, settings.seed, settings.schedule.name());
    let launch = vcurve_coordinator::spec::parse_launch(&yaml, &|p| files.get(p).cloned())
        .map_err(|e| anyhow::anyhow!("the simulated study's spec: {e}"))?;
    let payloads = launch.payloads();
    let spec = &launch.spec;
    let study_id = store.create_study(spec, &payloads, &Default::default(), start).await?;

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
        chain_of(
            &mut trajectory,
            plan,
            &spec.thresholds,
            settings.schedule,
            spec.seed,
            spec.budget,
            &settings.durations,
        )?;
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

    // `vcurve status`'s estimated end, sampled every 1/40 of the lower bound of virtual time.
    let sample_every = {
        let slots = u64::from(settings.workers) * u64::from(settings.slots);
        let work: i64 = trajectories.iter().flat_map(|t| t.keys.values()).sum();
        let chain = trajectories.iter().map(|t| t.chain_ms).max().unwrap_or(0);
        ((work as f64 / slots as f64).max(chain as f64) / 40.0).max(1.0) as i64
    };
    let mut etas: Vec<(i64, Option<f64>)> = Vec::new();

    sweep!(start);
    let mut now = start;
    while let Some(Reverse((at, id))) = events.pop() {
        while (now - start) / sample_every < (at - start) / sample_every {
            // The estimate as it reads just before the events at `at`.
            let sample = start + ((now - start) / sample_every + 1) * sample_every;
            etas.push((sample - start, store.progress(&study_id, sample, policy).await?.eta_seconds));
            now = sample;
        }
        now = at;
        let done = running.remove(&id).expect("every event is a running job");
        let spec = JobSpec {
            key: done.job.key.clone(),
            attempt: done.job.attempt,
            budget: done.job.budget,
            runner: done.job.runner.clone(),
            study_seed: done.job.study_seed,
            trajectory_digest: done.job.trajectory_digest.as_ref().map(ToString::to_string),
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
    let half = etas.iter().filter(|(_, eta)| eta.is_some()).min_by_key(|(at, _)| (2 * at - makespan).abs());
    let (eta_at_half_s, left_at_half_s) = match half {
        Some(&(at, eta)) => (eta, Some((makespan - at) as f64 / 1000.0)),
        None => (None, None),
    };
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
        durations: settings.durations.model().as_str().to_string(),
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
        eta_at_half_s,
        left_at_half_s,
        eta_error_at_half: match (eta_at_half_s, left_at_half_s) {
            (Some(eta), Some(left)) if left > 0.0 => Some(eta / left - 1.0),
            _ => None,
        },
        leases,
        reports,
        lease_timeout_s: LEASE_TIMEOUT_MS as f64 / 1000.0,
        wall_s: started.elapsed().as_secs_f64(),
    })
}
