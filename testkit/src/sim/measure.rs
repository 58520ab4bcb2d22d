//! What a simulated run measures: continuation durations, the lower bound's chain, the reference
//! without barriers, the utilization; the report and its table.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt::Write as _;

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};
use vcurve_method::schedule::{Key, Variant};
use vcurve_worker::runners::synthetic::unit_hash;

/// The lease timeout of the simulation: a year of virtual time, longer than any continuation.
pub const LEASE_TIMEOUT_MS: i64 = 365 * 24 * 3_600_000;

/// `z` of the 99th percentile of the standard normal distribution.
const Z_99: f64 = 2.326_347_874_040_841;

/// Buckets of the utilization over time: each a twentieth (5%) of the makespan.
pub const BUCKETS: usize = 20;

/// Which duration model a simulation draws from (`vcurve bench cluster --durations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DurationModel {
    /// What a real study has (the module docs): a speed per task, steps up to the budget left,
    /// failures more often to the cap, lognormal noise.
    Realistic,
    /// Lognormal with `--median-min` and `--p99-min`, independent of everything a coordinator sees.
    Blind,
}

impl DurationModel {
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        match name {
            "realistic" => Ok(DurationModel::Realistic),
            "blind" => Ok(DurationModel::Blind),
            other => anyhow::bail!("--durations {other:?}: expected realistic or blind"),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DurationModel::Realistic => "realistic",
            DurationModel::Blind => "blind",
        }
    }
}

/// The realistic model's median seconds per agent step, across tasks.
pub const STEP_MEDIAN_S: f64 = 5.0;
/// The realistic model's `σ` of a task's log seconds per step (a task's steps cost what its
/// tests cost: 0.5 puts the 10% and 90% tasks 2.6× apart).
pub const TASK_SIGMA: f64 = 0.5;
/// The realistic model's `σ` of one continuation's lognormal noise around steps × speed.
pub const NOISE_SIGMA: f64 = 0.25;
/// The realistic model's share of failed continuations that run to the step cap.
pub const FAILURE_TO_CAP: f64 = 0.6;
/// The realistic model's latest step of a success, as a share of the budget left.
pub const SUCCESS_SPAN: f64 = 0.7;

/// Continuation durations, a function of the key (and, in the realistic model, of the key's
/// budget and outcome, themselves functions of the key).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Durations {
    model: DurationModel,
    median_s: f64,
    sigma: f64,
    seed: u64,
}

impl Durations {
    /// Blind lognormal durations with median `median_s` and 99th percentile `p99_s` seconds.
    pub fn new(median_s: f64, p99_s: f64, seed: u64) -> anyhow::Result<Self> {
        Self::with_model(DurationModel::Blind, median_s, p99_s, seed)
    }

    /// Durations of `model`; `median_s` and `p99_s` shape the blind model only.
    pub fn with_model(model: DurationModel, median_s: f64, p99_s: f64, seed: u64) -> anyhow::Result<Self> {
        if !(median_s.is_finite() && median_s > 0.0) {
            anyhow::bail!("--median-min must be a positive number of minutes (got {})", median_s / 60.0);
        }
        if !(p99_s.is_finite() && p99_s >= median_s) {
            anyhow::bail!(
                "--p99-min ({}) must be a number of minutes at least --median-min ({})",
                p99_s / 60.0,
                median_s / 60.0
            );
        }
        Ok(Durations { model, median_s, sigma: (p99_s / median_s).ln() / Z_99, seed })
    }

    pub fn model(&self) -> DurationModel {
        self.model
    }

    /// The blind model's `q`-quantile in seconds (`0 < q < 1`).
    pub fn quantile_s(&self, q: f64) -> f64 {
        let z = Normal::standard().inverse_cdf(q);
        self.median_s * (self.sigma * z).exp()
    }

    fn unit(&self, what: &str, trajectory: &str, key: Key) -> f64 {
        let u = unit_hash(&format!("{}/{what}/{trajectory}/{}/{}/{}", self.seed, key.series.as_str(), key.t, key.seed));
        // u is in [0, 1); keep it off 0, where the normal quantile is -inf.
        u.max(f64::EPSILON)
    }

    /// The realistic model's seconds per step of `trajectory`'s task (each simulated trajectory
    /// is its own task).
    pub fn step_s(&self, trajectory: &str) -> f64 {
        let u = unit_hash(&format!("{}/speed/{trajectory}", self.seed)).max(f64::EPSILON);
        STEP_MEDIAN_S * (TASK_SIGMA * Normal::standard().inverse_cdf(u)).exp()
    }

    /// The realistic model's steps of a continuation with `budget` steps left and outcome
    /// `success`: a failure runs to the cap with probability [`FAILURE_TO_CAP`], else uniformly
    /// in `1..=budget`; a success ends uniformly in `1..=⌈SUCCESS_SPAN · budget⌉`.
    pub fn steps(&self, trajectory: &str, key: Key, budget: u32, success: bool) -> u32 {
        if budget == 0 {
            return 0;
        }
        let u = self.unit("steps", trajectory, key);
        let uniform = |span: u32| 1 + ((u * f64::from(span)) as u32).min(span - 1);
        if success {
            uniform(((SUCCESS_SPAN * f64::from(budget)).ceil() as u32).max(1))
        } else if self.unit("cap", trajectory, key) < FAILURE_TO_CAP {
            budget
        } else {
            uniform(budget)
        }
    }

    /// The duration of a continuation of `trajectory` in milliseconds, given its budget (steps
    /// left) and outcome (both ignored by the blind model). A continuation with no step left
    /// still costs one step's time (its start and evaluation).
    pub fn of(&self, trajectory: &str, key: Key, budget: u32, success: bool) -> i64 {
        let seconds = match self.model {
            DurationModel::Blind => self.quantile_s(self.unit("duration", trajectory, key)),
            DurationModel::Realistic => {
                let steps = self.steps(trajectory, key, budget, success).max(1);
                let noise = (NOISE_SIGMA * Normal::standard().inverse_cdf(self.unit("noise", trajectory, key))).exp();
                f64::from(steps) * self.step_s(trajectory) * noise
            }
        };
        ((seconds * 1000.0).round() as i64).max(1)
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

/// What one simulated run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub store: String,
    pub schedule: String,
    pub workers: u32,
    pub slots_per_worker: u32,
    pub trajectories: u32,
    /// The duration model: `realistic` or `blind`.
    pub durations: String,
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
    /// `vcurve status`'s estimated time to the end (`Progress::eta_seconds`), read at the
    /// sample nearest half the makespan (samples every 1/40 of the lower bound), and the virtual
    /// time left then; `None` when no sample had an estimate.
    pub eta_at_half_s: Option<f64>,
    pub left_at_half_s: Option<f64>,
    /// `eta_at_half_s / left_at_half_s − 1`.
    pub eta_error_at_half: Option<f64>,
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
    /// The store's URL, for the report's `store` (`sqlite` or `postgres`); [`run`] is given the
    /// store itself, open.
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

/// The human-readable table of the runs.
pub fn table(reports: &[ClusterReport]) -> String {
    let h = |s: f64| s / 3600.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>7} {:>5} {:>6} {:>7} {:>10} {:>8} {:>8} {:>8} {:>6} {:>7} {:>7} {:>8} {:>5} {:>8} {:>7}",
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
        "eta err",
        "wall s"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:<8} {:>7} {:>5} {:>6} {:>7} {:>10.2} {:>8.2} {:>8.2} {:>8.2} {:>6.3} {:>7.2} {:>7.3} {:>8.2} {:>5.3} {:>8} {:>7.1}",
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
            r.eta_error_at_half.map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0)),
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
            "\ncontinuations {}, seed {}; virtual time, lease timeout {:.0} days \
             (no lease expires, heartbeats not simulated);\nbound = max(work / slots, longest trajectory with \
             unlimited workers); ratio = makespan / bound; obliv: the same continuations without barriers in a random \
             order (mean of {} orders),\nwhat a scheduler not knowing durations can expect even without barriers; \
             first: first trajectory done.",
            if r.durations == "blind" {
                format!("lognormal (blind), median {} min, p99 {} min", r.median_min, r.p99_min)
            } else {
                "realistic (steps up to the budget left × the task's speed × noise)".to_string()
            },
            r.seed,
            r.lease_timeout_s / 86_400.0,
            OBLIVIOUS_SHUFFLES
        );
    }
    out
}
