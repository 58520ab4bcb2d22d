//! The verdict of every task and the initial selection: candidates, strata and their processing
//! orders, the round-robin and the decoys (rules 1–7 of [`selection`](crate::selection)).

use std::collections::BTreeMap;

use super::choices::{
    Candidate, Decoy, Initial, Pick, Selection, SelectionError, SelectionParams, StratumOrder, TaskVerdict, Verdict,
    count,
};
use super::draws::{DECOY_STREAM, Draws};
use super::strata::{RunEnd, RunId, SeedRun, Stratum, TaskRuns, Tercile};
use super::terciles::Terciles;
use crate::params::Thresholds;
use crate::{meets_at_least, meets_at_most};

fn verdict(task: &str, runs: &[&SeedRun], p: &SelectionParams) -> TaskVerdict {
    let n = count(runs.len());
    let k = count(runs.iter().filter(|r| r.success).count());
    let per = p.base_runs_per_task.max(1);
    let band = format!("the band ({}–{} of {per})", p.band_min, p.band_max);
    let (verdict, pass_rate, reason) = if n == 0 {
        (Verdict::NoBaseRuns, None, "no base run with an outcome".to_string())
    } else {
        let rate = f64::from(k) / f64::from(n);
        let head = format!("{k} of {n} base runs succeeded (pass rate {rate:.3})");
        let (lo, hi) = (f64::from(p.band_min) / f64::from(per), f64::from(p.band_max) / f64::from(per));
        let (verdict, why) = if meets_at_most(rate, p.doomed_threshold) {
            (
                Verdict::Doomed,
                format!("at or below the doomed threshold {:.3}: nothing to localize", p.doomed_threshold),
            )
        } else if !meets_at_most(rate, hi) {
            (Verdict::Saturated, format!("above {band}"))
        } else if !meets_at_least(rate, lo) {
            (Verdict::BelowBand, format!("below {band}, above the doomed threshold {:.3}", p.doomed_threshold))
        } else {
            (Verdict::Band, format!("in {band}"))
        };
        (verdict, Some(rate), format!("{head}: {why}"))
    };
    TaskVerdict { task: task.to_string(), runs: n, successes: k, pass_rate, verdict, reason }
}

/// Select the study set from every task's base runs (the rules and the draws of
/// [`selection`](crate::selection)).
/// A pure function of its input: the order of `tasks` and of each task's runs does not matter.
/// `target` bounds the initial selection (the paper's 60); `None` takes all the cap allows.
pub fn select(
    tasks: &[TaskRuns],
    thresholds: &Thresholds,
    seed: u64,
    target: Option<u32>,
) -> Result<Selection, SelectionError> {
    let params = SelectionParams::from(thresholds);
    let cap = params.trajectories_per_task;

    let mut sorted: Vec<&TaskRuns> = tasks.iter().collect();
    sorted.sort_by(|a, b| a.task.cmp(&b.task));
    if let Some(w) = sorted.windows(2).find(|w| w[0].task == w[1].task) {
        return Err(SelectionError::DuplicateTask(w[0].task.clone()));
    }

    let mut verdicts = Vec::with_capacity(sorted.len());
    // Failed and successful runs of band tasks, in canonical order.
    let mut failed: Vec<(RunId, SeedRun)> = Vec::new();
    let mut succeeded: Vec<(RunId, SeedRun)> = Vec::new();
    for task in sorted {
        let mut runs: Vec<&SeedRun> = task.runs.iter().collect();
        runs.sort_by_key(|r| r.seed);
        if let Some(w) = runs.windows(2).find(|w| w[0].seed == w[1].seed) {
            return Err(SelectionError::DuplicateSeed { task: task.task.clone(), seed: w[0].seed });
        }
        let v = verdict(&task.task, &runs, &params);
        if v.verdict == Verdict::Band {
            for r in runs {
                let entry = (RunId::new(task.task.as_str(), r.seed), *r);
                if r.success { succeeded.push(entry) } else { failed.push(entry) }
            }
        }
        verdicts.push(v);
    }

    let lengths: Vec<u32> = failed.iter().map(|(_, r)| r.steps).collect();
    let terciles = Terciles::of(&lengths);

    // Strata, each in canonical order, then shuffled with its own stream.
    let mut members: BTreeMap<Stratum, Vec<usize>> = BTreeMap::new();
    let mut stratum_of = Vec::with_capacity(failed.len());
    for (i, (_, r)) in failed.iter().enumerate() {
        let tercile = terciles.map_or(Tercile::L0, |t| t.tercile(r.steps));
        let stratum = Stratum { tercile, end: r.end };
        stratum_of.push(stratum);
        members.entry(stratum).or_default().push(i);
    }
    let mut strata: Vec<StratumOrder> = Vec::with_capacity(members.len());
    let mut order_of = vec![0u32; failed.len()];
    for (stratum, mut idx) in members {
        Draws::new(seed, stratum.stream()).shuffle(&mut idx);
        for (k, &i) in idx.iter().enumerate() {
            order_of[i] = count(k);
        }
        let order: Vec<RunId> = idx.iter().map(|&i| failed[i].0.clone()).collect();
        strata.push(StratumOrder { stratum, queue: order.clone(), order });
    }

    // The round-robin.
    let limit = target.map_or(usize::MAX, |t| t as usize);
    let mut selected: BTreeMap<String, u32> = BTreeMap::new();
    let mut picks: Vec<Pick> = Vec::new();
    let mut turn = 0u32;
    'turns: loop {
        turn = turn.saturating_add(1);
        let mut took = false;
        for s in &mut strata {
            if picks.len() >= limit {
                break 'turns;
            }
            let has_room = |id: &RunId| selected.get(&id.task).copied().unwrap_or(0) < cap;
            let Some(k) = s.queue.iter().position(has_room) else {
                continue;
            };
            let id = s.queue.remove(k);
            *selected.entry(id.task.clone()).or_default() += 1;
            let rank = s.order.iter().position(|o| *o == id).unwrap_or(0);
            let reason = format!(
                "turn {turn} of the round-robin: {} of {}'s processing order, the first left whose task had fewer \
                 than {cap} selected",
                rank + 1,
                s.stratum
            );
            picks.push(Pick {
                id,
                stratum: s.stratum,
                position: count(picks.len()),
                round: 0,
                replaces: None,
                non_replayable: false,
                reason,
            });
            took = true;
        }
        if !took {
            break;
        }
    }

    let position: BTreeMap<&RunId, u32> = picks.iter().map(|p| (&p.id, p.position)).collect();
    let candidates: Vec<Candidate> = failed
        .iter()
        .enumerate()
        .map(|(i, (id, r))| {
            let stratum = stratum_of[i];
            let initial = match position.get(id) {
                Some(&position) => Initial::Selected { position },
                None if selected.get(&id.task).copied().unwrap_or(0) >= cap => Initial::TaskAtCap,
                None => Initial::TargetReached,
            };
            let place = terciles.map(|t| t.describe(r.steps)).unwrap_or_default();
            let end = match r.end {
                RunEnd::Submit => "submitted",
                RunEnd::Cap => "hit the step cap",
                RunEnd::Other => "ended otherwise",
            };
            let reason = format!("failed run of a band task, {place}, {end}: {stratum}");
            Candidate { id: id.clone(), steps: r.steps, end: r.end, stratum, order: order_of[i], initial, reason }
        })
        .collect();

    // Decoys.
    let mut pool: Vec<usize> = (0..succeeded.len()).collect();
    Draws::new(seed, DECOY_STREAM).shuffle(&mut pool);
    let decoy_pool = count(succeeded.len());
    let decoys = pool
        .iter()
        .take(params.decoys as usize)
        .enumerate()
        .map(|(k, &i)| {
            let (id, r) = &succeeded[i];
            let reason = format!(
                "successful run of band task {}: {} of the decoy order of {decoy_pool} drawn from the seed",
                id.task,
                k + 1
            );
            Decoy { id: id.clone(), steps: r.steps, end: r.end, reason }
        })
        .collect();

    Ok(Selection {
        seed,
        target,
        params,
        tasks: verdicts,
        terciles,
        candidates,
        strata,
        picks,
        decoys,
        decoy_pool,
        back_fills: Vec::new(),
    })
}
