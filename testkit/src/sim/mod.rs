//! The cluster simulator of `vcurve bench cluster` (feature `sim`): a cluster of workers simulated
//! in virtual time over the real coordinator logic — the store, its admission, its claim order and the schedule — to see how
//! close the coordinator comes to the best any scheduler could do.
//!
//! # What runs
//!
//! A synthetic study (`--trajectories` curves drawn from the synthetic families of
//! `vcurve_method::synthetic`, cycling through them, seeded by `--seed`) is stored in a real
//! [`SqlStore`](vcurve_coordinator::store::SqlStore) (the caller's: `vcurve bench cluster` opens a fresh in-memory SQLite by default) and `--workers` workers of `--slots` slots
//! are registered. A discrete-event simulation then plays the workers: a worker with free slots
//! calls [`Store::lease`](vcurve_coordinator::store::Store::lease) for all of them in one call at the virtual time `now`; a leased
//! continuation finishes after its duration, and the worker calls [`Store::report`](vcurve_coordinator::store::Store::report) with the
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
//! `--durations realistic` (the default) draws what a real study has. Each trajectory is its own
//! task with a speed, seconds per agent step, lognormal across tasks (median [`STEP_MEDIAN_S`],
//! `σ` [`TASK_SIGMA`]). A continuation's steps depend on its budget `b` (`B − t`, or `B` on
//! `full_budget`) and on its outcome, which the synthetic runner draws from the curve's own `V`:
//! a failure runs to the cap `b` with probability [`FAILURE_TO_CAP`] and otherwise stops uniformly
//! in `1..=b`; a success stops uniformly in `1..=⌈SUCCESS_SPAN · b⌉`. The duration is steps
//! (at least 1) × speed × lognormal noise (`σ` [`NOISE_SIGMA`]). Its draws are hashes of
//! `"{seed}/{what}/{trajectory}/{series}/{t}/{key seed}"`, the speed of `"{seed}/speed/{trajectory}"`.
//!
//! `--durations blind` is the earlier model: lognormal with median `m = --median-min` and 99th
//! percentile `p = --p99-min`: `σ = ln(p/m) / z₀.₉₉` (`z₀.₉₉ = 2.3263`) and `d = m · exp(σ ·
//! Φ⁻¹(u))`, where `u` is the synthetic runner's hash of
//! `"{seed}/duration/{trajectory}/{series}/{t}/{key seed}"`, independent of everything a
//! coordinator sees before the continuation ends.
//!
//! Either way a duration is a function of the key alone, so every run — any number of workers,
//! any order — gives each continuation the same duration (rounded to the millisecond, at least 1 ms).
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
//! continuations, `vcurve status`'s estimated end ([`Progress::eta_seconds`](vcurve_coordinator::model::Progress))
//! read every 1/40 of the lower bound and compared, at the sample nearest half the makespan, with
//! the time that was left then, and the wall-clock time of the simulation.

#[cfg(test)]
mod lab;
mod measure;
mod run;
#[cfg(test)]
mod tests;

pub use measure::{
    BUCKETS, ClusterReport, ClusterSettings, DurationModel, Durations, FAILURE_TO_CAP, LEASE_TIMEOUT_MS, NOISE_SIGMA,
    OBLIVIOUS_SHUFFLES, STEP_MEDIAN_S, SUCCESS_SPAN, TASK_SIGMA, critical_path, oblivious_makespan, table, utilization,
};
pub use run::run;
