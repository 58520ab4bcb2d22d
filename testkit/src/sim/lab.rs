//! A dispatch lab: the cluster bench's study, chains and durations list-scheduled in pure code,
//! without the store, to compare admission rules and claim orders in seconds before one is built
//! into the store (docs/decisions.md, "Duration-aware dispatch"). Its first row, demand admission
//! and the store's claim order, reproduces `vcurve bench cluster`'s makespan to 0.1%.
//!
//! ```text
//! cargo test --release -p vcurve-testkit --features sim --lib lab -- --ignored --nocapture
//! LAB_SLOTS=50 LAB_BLIND=1 LAB_N=500 LAB_SEED=1 …   (defaults: 1,000 slots, realistic, 500, 1)
//! LAB_SET=fifo|demand|head|first|study|eb|affine|blind|ties|rounds … (other rows than the default's)
//! LAB_SET=eta …  (the store's rule alone, and `vcurve status`'s estimated end against the time
//!                 left, every 1/40 of the lower bound; what it expects of a waiting trajectory
//!                 against the mean work of those that ran)
//! ```

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use vcurve_method::schedule::variants::variant_by_name;
use vcurve_method::schedule::{Controls, Key, Outcome, Stage, TrajectoryPlan, TrajectorySchedule};

use vcurve_coordinator::durations::{self, Timed};

use super::measure::{DurationModel, Durations, critical_path};
use super::run::{Trajectory, chain_of, key_budget, study_for, synthetic_outcome};

/// When a trajectory is admitted.
#[derive(Clone, Copy, Debug)]
enum Admit {
    /// The store's rule: while the free slots exceed the runnable continuations.
    Demand,
    /// While the runnable continuations are fewer than the free slots plus this many per slot.
    Ahead(f64),
    /// The store's rule until the first curve is finished, then [`Admit::Ahead`].
    AheadAfterFirst(f64),
    /// Every trajectory at the start.
    All,
}

/// Which trajectory a free slot serves.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// The store's: later stage first, then the longest current barrier, then admission order.
    Today,
    /// The head ([`Head`]) first, then the rest by their expected remaining chain ([`Rank`]),
    /// longest first.
    Cp { head: Head, rank: Rank },
}

/// Which trajectories go before the rest, and in what order among themselves.
#[derive(Clone, Copy, Debug)]
enum Head {
    /// The first `f` admitted, by the store's order.
    Today(usize),
    /// The first `f` admitted, shortest expected remaining chain first.
    Short(usize),
    /// The first `f` admitted, in admission order.
    Fifo(usize),
    /// Those admitted while demand admission would have admitted them (free slots beyond the
    /// runnable continuations), by the store's order: the trajectories today's rule starts first.
    Demand,
}

/// A trajectory's expected remaining chain as the order behind the head ranks it.
#[derive(Clone, Copy, Debug)]
enum Rank {
    /// rate × `B` × its stage's factor ([`stage_factors`]), computed at each dispatch: the store's
    /// rank (the study's rate for every trajectory where its trajectories do not differ).
    Factors,
    /// The same, as the store would keep it: computed at its admission and at its own reports
    /// with the rates of that moment.
    Stale,
    /// rate × current barrier × stages left.
    Stages,
    /// The study's rate × `B` × its stage's factor: the stage alone.
    Study,
    /// [`Rank::Factors`] with the rate's prior weight, in continuations, measured on the study's
    /// finished trajectories by empirical Bayes (log durations).
    Eb,
    /// A continuation's expected time affine in its budget, `α + β · b`, fitted on the study's
    /// timed continuations; a trajectory's own scale against the fit, shrunk toward 1 like the
    /// rate; its remaining chain the scale × (`α` × the links its stage has left + `β` × `B` ×
    /// its stage's factor).
    Affine,
    /// [`Rank::Factors`] without pooling: every trajectory at its own rate shrunk toward its
    /// study's even where its study's trajectories do not differ ([`durations::Spread`]).
    Unpooled,
    /// The stage (earliest first, as the pooled rank), then the tie broken otherwise than by
    /// admission order.
    Stage(Tie),
    /// The earliest stage first while trajectories wait for admission, the latest first once
    /// every one is admitted.
    LaterOnceAdmitted,
    /// The rounds (continuations one after another) left on a trajectory's chain, most first:
    /// what the stage stands for.
    Rounds(Rounds),
}

/// How [`Rank::Stage`] breaks a tie within a stage.
#[derive(Clone, Copy, Debug)]
enum Tie {
    /// The trajectory that entered its stage first.
    Entered,
    /// The fewest continuations not started.
    Narrowest,
    /// The most continuations started and not finished: the closest to its barrier.
    ClosestToBarrier,
    /// The most rounds left, known from its future outcomes (an oracle).
    Oracle,
}

/// How [`Rank::Rounds`] knows the rounds left.
#[derive(Clone, Copy, Debug)]
enum Rounds {
    /// From the trajectory's future outcomes: an oracle no coordinator has.
    Oracle,
    /// The oracle's remaining chain in milliseconds, from its future durations too.
    OracleMs,
    /// Expected over futures whose outcomes are drawn from the trajectory's curve as sampled so
    /// far ([`imputed_rounds`]): what a coordinator could compute.
    Imputed,
}

struct Lt {
    sched: TrajectorySchedule,
    unstarted: BTreeSet<Key>,
    started: BTreeSet<Key>,
    rank: Option<usize>,
    timed: Timed,
    done: bool,
    admitted_at: i64,
    /// The expected remaining chain as last stored ([`Rank::Stale`]).
    stored: f64,
    /// Admitted while demand admission would have admitted it ([`Head::Demand`]).
    demand: bool,
    /// When it entered its current stage (or was admitted).
    entered: i64,
    /// Its outcomes so far, in the order they came (kept where the order reads [`Lt::future`]).
    recorded: Vec<(Key, Outcome)>,
    /// Its remaining chain as [`Rank::Rounds`] and [`Tie::Oracle`] read it: rounds, and ms.
    future: (f64, f64),
}

impl Order {
    /// Whether the order reads [`Lt::future`], and how.
    fn future(self) -> Option<Rounds> {
        match self {
            Order::Cp { rank: Rank::Rounds(r), .. } => Some(r),
            Order::Cp { rank: Rank::Stage(Tie::Oracle), .. } => Some(Rounds::Oracle),
            _ => None,
        }
    }
}

/// Trajectory `i`'s remaining chain after the outcomes `recorded`, as [`Lt::future`]: its
/// pending continuations start now, each one the schedule asks for starts when the outcome it
/// waits for is in (unlimited workers). `Oracle`, `OracleMs`: its own future outcomes and
/// durations; `Imputed`: [`imputed_rounds`], no milliseconds.
fn future_of(s: &Setup, i: usize, recorded: &[(Key, Outcome)], how: Rounds) -> (f64, f64) {
    if let Rounds::Imputed = how {
        return (imputed_rounds(s, i, recorded, 12), 0.0);
    }
    let tr = &s.trajectories[i];
    let variant = variant_by_name("paper").unwrap();
    let mut sched = TrajectorySchedule::rebuild(&s.plans[i], &s.thresholds, variant, recorded.iter().copied());
    let pending = sched.pending();
    // Each key's round: the pending ones the first, a key the schedule asks for once an outcome is
    // in one after that outcome's.
    let mut rounds: BTreeMap<Key, i64> = pending.iter().map(|k| (*k, 1)).collect();
    let (end, _) = critical_path(
        pending,
        |k| tr.keys[&k],
        |k| {
            sched.record(k, synthetic_outcome(s.seed, tr, k).unwrap()).unwrap();
            let next = rounds[&k] + 1;
            let asked = sched.pending();
            for n in &asked {
                rounds.entry(*n).or_insert(next);
            }
            asked
        },
    );
    (rounds.values().max().copied().unwrap_or(0) as f64, end as f64)
}

/// The rounds left on trajectory `i`'s chain after the outcomes `recorded`, the mean over
/// `draws` futures: each continuation succeeds with the trajectory's `V̂` at its step as sampled
/// so far (linear between its sampled points of the main series, the nearest beyond them, 0.5
/// before any), by a hash of the draw and the key.
fn imputed_rounds(s: &Setup, i: usize, recorded: &[(Key, Outcome)], draws: u64) -> f64 {
    use std::hash::{Hash, Hasher};
    let variant = variant_by_name("paper").unwrap();
    let rebuild = || TrajectorySchedule::rebuild(&s.plans[i], &s.thresholds, variant, recorded.iter().copied());
    let points: Vec<(f64, f64)> = rebuild()
        .points()
        .sampled(vcurve_method::schedule::Series::Main)
        .iter()
        .map(|p| (f64::from(p.t), f64::from(p.successes) / f64::from(p.n)))
        .collect();
    let v_at = |t: f64| -> f64 {
        let j = points.partition_point(|p| p.0 < t);
        match (j.checked_sub(1).map(|j| points[j]), points.get(j)) {
            (None, None) => 0.5,
            (Some(a), None) => a.1,
            (None, Some(b)) => b.1,
            (Some(a), Some(b)) => a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0).max(1e-9),
        }
    };
    let mut total = 0.0;
    for draw in 0..draws {
        let mut sched = rebuild();
        let mut seen: BTreeSet<Key> = recorded.iter().map(|x| x.0).collect();
        let mut round: Vec<Key> = sched.pending();
        seen.extend(round.iter().copied());
        while !round.is_empty() {
            total += 1.0;
            for k in std::mem::take(&mut round) {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (i, k, draw).hash(&mut h);
                let u = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
                let o = if u < v_at(f64::from(k.t)) { Outcome::Success } else { Outcome::Failure };
                sched.record(k, o).unwrap();
            }
            round.extend(sched.pending().into_iter().filter(|k| seen.insert(*k)));
        }
    }
    total / draws as f64
}

fn stage_rank(s: Stage) -> usize {
    Stage::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

struct Setup {
    trajectories: Vec<Trajectory>,
    plans: Vec<TrajectoryPlan>,
    seed: u64,
    budget: u32,
    thresholds: vcurve_method::Thresholds,
    work: i64,
    chain: i64,
    /// Mean remaining chain at entry into each stage, in units of (rate × budget B).
    factors: [f64; 7],
    /// Mean continuations one after another left on the chain at entry into each stage.
    links: [f64; 7],
}

fn setup(n: u32, seed: u64, model: DurationModel) -> Setup {
    let (yaml, files) = study_for(n, seed, "paper");
    let launch = vcurve_coordinator::spec::parse_launch(&yaml, &|p| files.get(p).cloned()).unwrap();
    let payloads = launch.payloads();
    let spec = &launch.spec;
    let durations = Durations::with_model(model, 180.0, 1800.0, seed).unwrap();
    let variant = variant_by_name("paper").unwrap();
    let mut trajectories = Vec::new();
    let mut plans = Vec::new();
    for (t, payload) in spec.trajectories.iter().zip(payloads) {
        let mut tr = Trajectory { id: t.id.clone(), payload: Arc::new(payload), chain_ms: 0, keys: Default::default() };
        let plan = TrajectoryPlan { length: t.length, labels: vec![], controls: Controls::default() };
        chain_of(&mut tr, plan.clone(), &spec.thresholds, variant, spec.seed, spec.budget, &durations).unwrap();
        trajectories.push(tr);
        plans.push(plan);
    }
    let work = trajectories.iter().flat_map(|t| t.keys.values()).sum();
    let chain = trajectories.iter().map(|t| t.chain_ms).max().unwrap();
    let mut s = Setup {
        trajectories,
        plans,
        seed: spec.seed,
        budget: spec.budget,
        thresholds: spec.thresholds.clone(),
        work,
        chain,
        factors: [0.0; 7],
        links: [0.0; 7],
    };
    (s.factors, s.links) = stage_factors(&s);
    s
}

/// Remaining chain on entering each stage, over rate × B, averaged (unlimited workers); and the
/// continuations one after another left on it.
fn stage_factors(s: &Setup) -> ([f64; 7], [f64; 7]) {
    let mut sum = [0.0; 7];
    let mut lsum = [0.0; 7];
    let mut n = [0.0; 7];
    let variant = variant_by_name("paper").unwrap();
    for (tr, plan) in s.trajectories.iter().zip(&s.plans) {
        let mut sched = TrajectorySchedule::new(plan.clone(), &s.thresholds, variant);
        let mut heap: BinaryHeap<Reverse<(i64, Key)>> = BinaryHeap::new();
        let mut seen = BTreeSet::new();
        let mut depth = BTreeMap::new();
        for k in sched.pending() {
            seen.insert(k);
            depth.insert(k, 1i64);
            heap.push(Reverse((tr.keys[&k], k)));
        }
        let mut entered = vec![(stage_rank(sched.stage()), 0i64, 0i64)];
        let (mut ms, mut budget) = (0i64, 0i64);
        let mut end = 0;
        let mut end_depth = 0;
        while let Some(Reverse((at, k))) = heap.pop() {
            end = at;
            let d = depth[&k];
            end_depth = d;
            ms += tr.keys[&k];
            budget += i64::from(key_budget(s.budget, k));
            let o = synthetic_outcome(s.seed, tr, k).unwrap();
            let before = sched.stage();
            sched.record(k, o).unwrap();
            if sched.stage() != before {
                entered.push((stage_rank(sched.stage()), at, d));
            }
            for k in sched.pending() {
                if seen.insert(k) {
                    depth.insert(k, d + 1);
                    heap.push(Reverse((at + tr.keys[&k], k)));
                }
            }
        }
        let rate = ms as f64 / budget as f64;
        for (st, at, d) in entered {
            sum[st] += (end - at) as f64 / (rate * f64::from(s.budget));
            lsum[st] += (end_depth - d) as f64;
            n[st] += 1.0;
        }
    }
    let mut f = [0.0; 7];
    let mut l = [0.0; 7];
    for i in 0..7 {
        f[i] = if n[i] > 0.0 { sum[i] / n[i] } else { 0.0 };
        l[i] = if n[i] > 0.0 { lsum[i] / n[i] } else { 0.0 };
    }
    (f, l)
}

/// The study's fit of a continuation's time on its budget, `ms ≈ α + β · b`, by least squares
/// over its timed continuations (`study`, and Σ ms · b, Σ b² in `x`), neither below 0: a negative
/// slope is no slope (the mean), a negative intercept none (the rate per step).
fn affine(study: Timed, x: (f64, f64)) -> Option<(f64, f64)> {
    let (n, sb, sm) = (study.n as f64, study.budget as f64, study.ms as f64);
    if study.n == 0 || study.budget == 0 {
        return None;
    }
    let den = n * x.1 - sb * sb;
    if study.n < 2 || den <= 0.0 {
        return Some((0.0, sm / sb));
    }
    let beta = (n * x.0 - sb * sm) / den;
    let alpha = (sm - beta * sb) / n;
    Some(if beta < 0.0 {
        (sm / n, 0.0)
    } else if alpha < 0.0 {
        (0.0, sm / sb)
    } else {
        (alpha, beta)
    })
}

/// A trajectory's scale against its study's fit: its timed milliseconds over what the fit
/// expects of its continuations, weighed `n` to [`durations::PRIOR_CONTINUATIONS`] against 1.
fn scale(t: &Lt, fit: (f64, f64), prior: f64) -> f64 {
    let expected = fit.0 * t.timed.n as f64 + fit.1 * t.timed.budget as f64;
    if t.timed.n == 0 || expected <= 0.0 {
        return 1.0;
    }
    let n = t.timed.n as f64;
    (n * t.timed.ms as f64 / expected + prior) / (n + prior)
}

/// A trajectory's expected remaining chain, ms: rate × `B` × its stage's factor.
fn remaining(s: &Setup, t: &Lt, study: Timed, pooled: bool) -> f64 {
    durations::rate(t.timed, study, pooled) * s.factors[stage_rank(t.sched.stage())] * f64::from(s.budget)
}

struct Run {
    makespan: i64,
    first: i64,
    /// The trajectory that finished first and when it was admitted.
    first_of: (usize, i64),
    /// Moments of the run, every `sample_every` ms.
    etas: Vec<Sample>,
}

/// A moment of a run as the estimated end sees it.
struct Sample {
    at: i64,
    /// The work not yet finished over the slots, ms (an oracle: running continuations count whole).
    work: f64,
    /// The store's estimated end then, ms from then.
    eta: Option<f64>,
    /// [`waiting_bias`] then.
    waiting: Option<(f64, f64)>,
}

/// What the estimated end expects of a waiting trajectory ([`durations::WorkLeft::waiting_ms`]),
/// and the study's rate times the expected total in steps of budget (the estimate it replaced),
/// each over the truth it estimates: the mean work of the trajectories that ran (an oracle:
/// their futures' durations).
fn waiting_bias(s: &Setup, ts: &[Lt], left: &[durations::TrajectoryLeft], done: &[Timed]) -> Option<(f64, f64)> {
    let work = durations::WorkLeft::of(left, done)?;
    let ran: Vec<usize> = (0..ts.len()).filter(|i| ts[*i].done || ts[*i].timed.n > 0).collect();
    let truth =
        ran.iter().map(|i| s.trajectories[*i].keys.values().sum::<i64>() as f64).sum::<f64>() / ran.len() as f64;
    let by_rate = work.study_rate() * work.totals().mean_beyond(0.0)?;
    Some((work.waiting_ms(left, done) / truth, by_rate / truth))
}

/// The store's estimated end at a moment of a run, ms from then, from what the store sees: the
/// trajectories left and the finished ones' sums (`done`).
fn estimate(s: &Setup, ts: &[Lt], done: &[Timed], study: Timed, slots: usize) -> (Option<f64>, Option<(f64, f64)>) {
    let pooled = durations::Spread::of(done.iter().copied()).pooled();
    let left: Vec<durations::TrajectoryLeft> = ts
        .iter()
        .filter(|t| !t.done)
        .map(|t| {
            let waiting = t.rank.is_none();
            let open: Vec<u32> =
                if waiting { vec![] } else { t.sched.pending().iter().map(|k| key_budget(s.budget, *k)).collect() };
            let r = durations::rate(t.timed, study, pooled);
            durations::TrajectoryLeft {
                waiting,
                timed: t.timed,
                open_budget: open.iter().map(|b| i64::from(*b)).sum(),
                chain_ms: durations::chain_ms(r, open.iter().copied()),
                remaining_steps: (s.factors[if waiting { 0 } else { stage_rank(t.sched.stage()) }]
                    * f64::from(s.budget))
                .round() as i64,
            }
        })
        .collect();
    (durations::eta_ms(&left, done, slots as u64, s.budget), waiting_bias(s, ts, &left, done))
}

/// The prior weight of a study's rate in a trajectory's, in continuations, by empirical Bayes on
/// the finished trajectories' log durations (a one-way random-effects model's moments): the
/// within-trajectory variance over the between-trajectory one; [`durations::PRIOR_CONTINUATIONS`]
/// before ten trajectories finished. Only finished ones: a running one's timed continuations are
/// its quick ones.
fn eb_prior(ts: &[Lt]) -> f64 {
    let xs: Vec<(f64, f64, f64)> = ts
        .iter()
        .filter(|t| t.done && t.timed.n > 1)
        .map(|t| (t.timed.n as f64, t.timed.log_ms, t.timed.log_ms_sq))
        .collect();
    let m = xs.len() as f64;
    if m < 10.0 {
        return durations::PRIOR_CONTINUATIONS;
    }
    let dfw: f64 = xs.iter().map(|x| x.0 - 1.0).sum();
    let s2 = xs.iter().map(|x| x.2 - x.1 * x.1 / x.0).sum::<f64>() / dfw;
    let (sn, sl, sn2) = xs.iter().fold((0.0, 0.0, 0.0), |a, x| (a.0 + x.0, a.1 + x.1, a.2 + x.0 * x.0));
    let between = xs.iter().map(|x| x.1 * x.1 / x.0).sum::<f64>() - sl * sl / sn;
    let tau2 = (between - (m - 1.0) * s2) / (sn - sn2 / sn);
    if tau2 <= 0.0 { 1e9 } else { (s2 / tau2).min(1e9) }
}

fn simulate(s: &Setup, slots: usize, admit: Admit, order: Order, sample_every: i64) -> Run {
    let variant = variant_by_name("paper").unwrap();
    let mut ts: Vec<Lt> = s
        .plans
        .iter()
        .map(|p| Lt {
            sched: TrajectorySchedule::new(p.clone(), &s.thresholds, variant),
            unstarted: BTreeSet::new(),
            started: BTreeSet::new(),
            rank: None,
            timed: Timed::default(),
            done: false,
            admitted_at: 0,
            stored: 0.0,
            demand: false,
            entered: 0,
            recorded: Vec::new(),
            future: (0.0, 0.0),
        })
        .collect();
    let mut study = Timed::default();
    let mut pooled = false;
    let mut study_x = (0.0f64, 0.0f64);
    let mut next_admit = 0usize;
    let mut runnable = 0usize;
    let mut free = slots;
    let mut heap: BinaryHeap<Reverse<(i64, usize, Key)>> = BinaryHeap::new();
    let mut now = 0i64;
    let mut first = None;
    let mut first_of = (0, 0);
    let mut finished = 0;
    let mut done_trs: Vec<Timed> = Vec::new();
    let mut etas = Vec::new();
    let mut work_left: i64 = s.work;
    let mut next_sample = sample_every;
    loop {
        // Admission.
        loop {
            if next_admit >= ts.len() {
                break;
            }
            let demand = free > runnable;
            let go = match admit {
                Admit::Demand => demand,
                Admit::Ahead(k) => demand || (runnable as f64) < free as f64 + k * slots as f64,
                Admit::AheadAfterFirst(k) => {
                    demand || (first.is_some() && (runnable as f64) < free as f64 + k * slots as f64)
                }
                Admit::All => true,
            };
            if !go {
                break;
            }
            let t = &mut ts[next_admit];
            t.demand = demand;
            t.rank = Some(next_admit);
            t.admitted_at = now;
            t.entered = now;
            t.stored = remaining(s, t, study, pooled);
            if let Some(how) = order.future() {
                t.future = future_of(s, next_admit, &[], how);
            }
            for k in t.sched.pending() {
                t.unstarted.insert(k);
                runnable += 1;
            }
            next_admit += 1;
        }
        // Dispatch.
        let prior = match order {
            Order::Cp { rank: Rank::Eb, .. } if free > 0 && runnable > 0 => eb_prior(&ts),
            _ => durations::PRIOR_CONTINUATIONS,
        };
        let fit = affine(study, study_x).unwrap_or((0.0, durations::DEFAULT_RATE));
        while free > 0 && runnable > 0 {
            let mut best: Option<(usize, (i64, f64, f64))> = None;
            for (i, t) in ts.iter().enumerate() {
                if t.unstarted.is_empty() {
                    continue;
                }
                let rate = durations::rate(t.timed, study, pooled);
                let open = t.sched.pending().iter().map(|k| key_budget(s.budget, *k)).max().unwrap_or(0);
                let rank = t.rank.unwrap();
                let p = match order {
                    Order::Today => (stage_rank(t.sched.stage()) as i64, rate * f64::from(open), -(rank as f64)),
                    Order::Cp { head, rank: by } => {
                        let st = stage_rank(t.sched.stage());
                        let rem = match by {
                            Rank::Stale => t.stored,
                            Rank::Factors => remaining(s, t, study, pooled),
                            Rank::Unpooled => remaining(s, t, study, false),
                            Rank::Stages => rate * f64::from(open) * (7 - st) as f64,
                            Rank::Stage(tie) => {
                                -(st as f64) * 1e6
                                    + match tie {
                                        Tie::Entered => -(t.entered as f64) / 1e6,
                                        Tie::Narrowest => -(t.unstarted.len() as f64),
                                        Tie::ClosestToBarrier => t.started.len() as f64,
                                        Tie::Oracle => t.future.0,
                                    }
                            }
                            Rank::LaterOnceAdmitted if next_admit >= ts.len() => st as f64,
                            Rank::LaterOnceAdmitted => -(st as f64),
                            Rank::Rounds(Rounds::OracleMs) => t.future.1,
                            Rank::Rounds(_) => t.future.0,
                            Rank::Study => study.rate().unwrap_or(1.0) * s.factors[st] * f64::from(s.budget),
                            Rank::Eb => {
                                durations::rate_weighed(t.timed, study, prior) * s.factors[st] * f64::from(s.budget)
                            }
                            Rank::Affine => {
                                scale(t, fit, durations::PRIOR_CONTINUATIONS)
                                    * (fit.0 * s.links[st] + fit.1 * s.factors[st] * f64::from(s.budget))
                            }
                        };
                        let today = (1 + st as i64, rate * f64::from(open), -(rank as f64));
                        match head {
                            Head::Short(f) if rank < f => (1, -rem, -(rank as f64)),
                            Head::Fifo(f) if rank < f => (1, -(rank as f64), 0.0),
                            Head::Today(f) if rank < f => today,
                            Head::Demand if t.demand => today,
                            _ => (0, rem, -(rank as f64)),
                        }
                    }
                };
                if best.as_ref().is_none_or(|(_, b)| p.partial_cmp(b) == Some(std::cmp::Ordering::Greater)) {
                    best = Some((i, p));
                }
            }
            let (i, _) = best.unwrap();
            let t = &mut ts[i];
            let k = *t.unstarted.iter().next().unwrap();
            t.unstarted.remove(&k);
            t.started.insert(k);
            runnable -= 1;
            free -= 1;
            heap.push(Reverse((now + s.trajectories[i].keys[&k], i, k)));
        }
        let Some(Reverse((at, i, k))) = heap.pop() else { break };
        while sample_every > 0 && next_sample < at {
            // Oracle: the work not yet finished (running keys count whole).
            let (eta, waiting) = estimate(s, &ts, &done_trs, study, slots);
            etas.push(Sample { at: next_sample, work: work_left as f64 / slots as f64, eta, waiting });
            next_sample += sample_every;
        }
        now = at;
        free += 1;
        let tr = &s.trajectories[i];
        let d = tr.keys[&k];
        work_left -= d;
        let b = i64::from(key_budget(s.budget, k).max(1));
        let t = &mut ts[i];
        t.timed = t.timed.plus(d, b);
        let (df, bf) = (d as f64, b as f64);
        study_x = (study_x.0 + df * bf, study_x.1 + bf * bf);
        study = study.plus(d, b);
        let o: Outcome = synthetic_outcome(s.seed, tr, k).unwrap();
        let stage = t.sched.stage();
        // Only an order that reads the future keeps the outcomes and counts the open keys.
        let future = order.future().map(|how| (how, t.sched.pending().len()));
        t.sched.record(k, o).unwrap();
        if t.sched.stage() != stage {
            t.entered = now;
        }
        if let Some((how, open)) = future {
            t.recorded.push((k, o));
            // A new round (or stage): what is left of the chain changed.
            if t.sched.stage() != stage || t.sched.pending().len() >= open {
                t.future = future_of(s, i, &t.recorded, how);
            }
        }
        pooled = durations::Spread::of(done_trs.iter().copied()).pooled();
        t.stored = remaining(s, t, study, pooled);
        for k in t.sched.pending() {
            if !t.started.contains(&k) && t.unstarted.insert(k) {
                runnable += 1;
            }
        }
        if t.sched.is_done() && !t.done {
            t.done = true;
            finished += 1;
            done_trs.push(t.timed);
            if first.is_none() {
                first = Some(now);
                first_of = (i, t.admitted_at);
            }
        }
    }
    assert_eq!(finished, ts.len());
    if matches!(order, Order::Cp { rank: Rank::Affine, .. }) {
        eprintln!("  the study's fit at its end (α ms, β ms a step): {:?}", affine(study, study_x));
    }
    Run { makespan: now, first: first.unwrap(), first_of, etas }
}

#[test]
#[ignore = "a lab, minutes in a release build: run it by name"]
fn lab() {
    let n: u32 = std::env::var("LAB_N").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let slots: usize = std::env::var("LAB_SLOTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let seed: u64 = std::env::var("LAB_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let model = if std::env::var("LAB_BLIND").is_ok() { DurationModel::Blind } else { DurationModel::Realistic };
    let s = setup(n, seed, model);
    let bound = (s.work as f64 / slots as f64).max(s.chain as f64);
    eprintln!(
        "work/slots {:.0} s, chain {:.0} s, factors {:?}, links {:?}",
        s.work as f64 / slots as f64 / 1000.0,
        s.chain as f64 / 1000.0,
        s.factors,
        s.links
    );
    let cp = |head| Order::Cp { head, rank: Rank::Factors };
    if std::env::var("LAB_SET").as_deref() == Ok("eta") {
        // The store's rule, and its estimated end against the time left.
        let r = simulate(&s, slots, Admit::AheadAfterFirst(16.0), cp(Head::Demand), (bound / 40.0) as i64);
        eprintln!(
            "makespan {:.0} s ratio {:.3} first {:.0} s",
            r.makespan as f64 / 1000.0,
            r.makespan as f64 / bound,
            r.first as f64 / 1000.0
        );
        let mut middle = Vec::new();
        for Sample { at, work, eta, waiting } in &r.etas {
            let left = (r.makespan - at) as f64;
            let eta = eta.map_or("-".into(), |e| format!("{:.0} ({:+.1}%)", e / 1000.0, (e / left - 1.0) * 100.0));
            let against =
                waiting.map_or("-".into(), |(w, by_rate)| format!("{w:.3} (by the study's rate {by_rate:.3})"));
            let share = *at as f64 / r.makespan as f64;
            eprintln!(
                "{:>6.0} s ({share:.2}) left {:>6.0} s, work/slots {:>6.0} s: store {eta}; a waiting one's work {against}",
                *at as f64 / 1000.0,
                left / 1000.0,
                work / 1000.0
            );
            if (0.2..=0.8).contains(&share) {
                middle.extend(*waiting);
            }
        }
        let n = middle.len() as f64;
        eprintln!(
            "a waiting trajectory's work over the mean of those that ran, 0.2 to 0.8 of the run: {:.4} (by the study's rate {:.4})",
            middle.iter().map(|m| m.0).sum::<f64>() / n,
            middle.iter().map(|m| m.1).sum::<f64>() / n
        );
        return;
    }
    let mut runs: Vec<(Admit, Order)> = vec![(Admit::Demand, Order::Today)];
    match std::env::var("LAB_SET").as_deref() {
        Ok("fifo") => {
            for f in [1, 3, 5, 10, 20] {
                runs.push((Admit::Ahead(16.0), cp(Head::Fifo(f))));
            }
        }
        Ok("demand") => {
            for k in [4.0, 8.0, 16.0, 32.0] {
                runs.push((Admit::Ahead(k), cp(Head::Demand)));
            }
            runs.push((Admit::Ahead(16.0), Order::Cp { head: Head::Demand, rank: Rank::Stages }));
        }
        Ok("eb") => {
            runs.push((Admit::AheadAfterFirst(16.0), cp(Head::Demand)));
            runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank: Rank::Eb }));
            runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank: Rank::Study }));
        }
        Ok("blind") => {
            for admit in [Admit::AheadAfterFirst(16.0), Admit::AheadAfterFirst(64.0), Admit::All] {
                runs.push((admit, Order::Cp { head: Head::Demand, rank: Rank::Study }));
                runs.push((admit, Order::Cp { head: Head::Fifo(100_000), rank: Rank::Study }));
                runs.push((admit, Order::Cp { head: Head::Fifo(10), rank: Rank::Study }));
                runs.push((admit, Order::Today));
            }
        }
        Ok("ties") => {
            for rank in [Rank::Stage(Tie::Entered), Rank::Stage(Tie::Narrowest), Rank::Stage(Tie::ClosestToBarrier)] {
                runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank }));
                runs.push((Admit::All, Order::Cp { head: Head::Fifo(10), rank }));
            }
            runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank: Rank::LaterOnceAdmitted }));
        }
        Ok("rounds") => {
            // Minutes: the oracles replay a trajectory's future at each of its rounds.
            for rank in [
                Rank::Rounds(Rounds::Oracle),
                Rank::Rounds(Rounds::OracleMs),
                Rank::Rounds(Rounds::Imputed),
                Rank::Stage(Tie::Oracle),
            ] {
                runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank }));
            }
        }
        Ok("affine") => {
            runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank: Rank::Unpooled }));
            runs.push((Admit::AheadAfterFirst(16.0), cp(Head::Demand)));
            runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank: Rank::Study }));
            runs.push((Admit::AheadAfterFirst(16.0), Order::Cp { head: Head::Demand, rank: Rank::Affine }));
        }
        Ok("study") => {
            for k in [16.0, 64.0] {
                runs.push((Admit::AheadAfterFirst(k), cp(Head::Demand)));
                runs.push((Admit::AheadAfterFirst(k), Order::Cp { head: Head::Demand, rank: Rank::Study }));
            }
            runs.push((Admit::All, Order::Cp { head: Head::Fifo(10), rank: Rank::Study }));
        }
        Ok("first") => {
            for k in [8.0, 16.0, 32.0] {
                runs.push((Admit::AheadAfterFirst(k), cp(Head::Demand)));
            }
            runs.push((Admit::All, cp(Head::Demand)));
            runs.push((Admit::All, cp(Head::Fifo(10))));
        }
        Ok("head") => {
            runs.push((Admit::Ahead(16.0), cp(Head::Demand)));
            for f in [14, 20, 32, 48] {
                runs.push((Admit::Ahead(16.0), cp(Head::Today(f))));
            }
        }
        _ => {
            for admit in [Admit::Ahead(10.0), Admit::Ahead(16.0), Admit::All] {
                runs.push((admit, Order::Today));
                for f in [0, 10, 20, 32] {
                    runs.push((admit, cp(Head::Today(f))));
                }
                runs.push((admit, Order::Cp { head: Head::Today(20), rank: Rank::Stale }));
                runs.push((admit, Order::Cp { head: Head::Today(10), rank: Rank::Stages }));
                runs.push((admit, cp(Head::Short(10))));
            }
        }
    }
    for (admit, order) in runs {
        let r = simulate(&s, slots, admit, order, 0);
        eprintln!(
            "{admit:?} {order:?}: makespan {:.0} s ratio {:.3} first {:.0} s (trajectory {} admitted at {:.0} s)",
            r.makespan as f64 / 1000.0,
            r.makespan as f64 / bound,
            r.first as f64 / 1000.0,
            r.first_of.0,
            r.first_of.1 as f64 / 1000.0
        );
    }
}

/// How well [`imputed_rounds`] foresees the rounds a trajectory has left: at each of its rounds,
/// with unlimited workers, the imputation against the oracle's count, by stage (blind durations,
/// 200 trajectories). `cargo test --release -p vcurve-testkit --features sim --lib
/// lab_rounds -- --ignored --nocapture`
#[test]
#[ignore = "a lab: run it by name"]
fn lab_rounds() {
    let s = setup(200, 1, DurationModel::Blind);
    let variant = variant_by_name("paper").unwrap();
    // Per stage: n, Σ oracle, Σ imputed, Σ oracle², Σ imputed², Σ oracle × imputed.
    let mut sums = [[0.0f64; 6]; 7];
    for (i, plan) in s.plans.iter().enumerate() {
        let mut sched = TrajectorySchedule::new(plan.clone(), &s.thresholds, variant);
        let mut recorded = Vec::new();
        let mut round = sched.pending();
        let mut seen: BTreeSet<Key> = round.iter().copied().collect();
        while !round.is_empty() {
            let (o, m) = (future_of(&s, i, &recorded, Rounds::Oracle).0, imputed_rounds(&s, i, &recorded, 12));
            let a = &mut sums[stage_rank(sched.stage())];
            for (x, v) in a.iter_mut().zip([1.0, o, m, o * o, m * m, o * m]) {
                *x += v;
            }
            for k in std::mem::take(&mut round) {
                let outcome = synthetic_outcome(s.seed, &s.trajectories[i], k).unwrap();
                sched.record(k, outcome).unwrap();
                recorded.push((k, outcome));
            }
            round.extend(sched.pending().into_iter().filter(|k| seen.insert(*k)));
        }
    }
    for (stage, a) in sums.iter().enumerate().filter(|(_, a)| a[0] > 0.0) {
        let n = a[0];
        let (mo, mi) = (a[1] / n, a[2] / n);
        let (vo, vi, c) = (a[3] / n - mo * mo, a[4] / n - mi * mi, a[5] / n - mo * mi);
        eprintln!(
            "{:?}: {n} rounds, oracle {mo:.2} ± {:.2}, imputed {mi:.2} ± {:.2}, correlation {:.2}",
            Stage::ALL[stage],
            vo.sqrt(),
            vi.sqrt(),
            c / (vo * vi).sqrt()
        );
    }
}
