use std::collections::BTreeMap;

use proptest::prelude::*;
use rand::Rng;

use super::draws::Draws;
use super::*;
use crate::params::Thresholds;

fn run(seed: u32, success: bool, steps: u32, end: RunEnd) -> SeedRun {
    SeedRun { seed, success, steps, end }
}

/// A task of `successes` successful runs (30 steps, submitted) and the given failures, seeds in order.
fn task(name: &str, successes: u32, failures: &[(u32, RunEnd)]) -> TaskRuns {
    let mut runs: Vec<SeedRun> = (0..successes).map(|i| run(i, true, 30, RunEnd::Submit)).collect();
    runs.extend(failures.iter().enumerate().map(|(i, &(steps, end))| run(successes + i as u32, false, steps, end)));
    TaskRuns { task: name.to_string(), runs }
}

fn failures(lengths: &[u32]) -> Vec<(u32, RunEnd)> {
    lengths.iter().map(|&t| (t, if t >= 100 { RunEnd::Cap } else { RunEnd::Submit })).collect()
}

fn sel(tasks: &[TaskRuns], seed: u64, target: Option<u32>) -> Selection {
    select(tasks, &Thresholds::default(), seed, target).unwrap()
}

fn st(s: &str) -> Stratum {
    s.parse().unwrap()
}

fn verdict_of(s: &Selection, task: &str) -> Verdict {
    s.tasks.iter().find(|t| t.task == task).unwrap().verdict
}

#[test]
fn selection_band_edges_of_eight() {
    let tasks: Vec<TaskRuns> =
        (0..=8).map(|k| task(&format!("k{k}"), k, &failures(&vec![50; (8 - k) as usize]))).collect();
    let s = sel(&tasks, 1, None);
    let expected = [
        Verdict::Doomed,
        Verdict::Doomed,
        Verdict::Band,
        Verdict::Band,
        Verdict::Band,
        Verdict::Band,
        Verdict::Band,
        Verdict::Saturated,
        Verdict::Saturated,
    ];
    for (k, v) in expected.iter().enumerate() {
        assert_eq!(verdict_of(&s, &format!("k{k}")), *v, "{k} of 8");
    }
    let one = s.tasks.iter().find(|t| t.task == "k1").unwrap();
    assert_eq!(
        one.reason,
        "1 of 8 base runs succeeded (pass rate 0.125): at or below the doomed threshold 0.125: nothing to localize"
    );
    assert!(s.tasks.iter().find(|t| t.task == "k7").unwrap().reason.contains("above the band (2–6 of 8)"));
    assert!(s.tasks.iter().find(|t| t.task == "k2").unwrap().reason.ends_with("in the band (2–6 of 8)"));
    // Only band tasks give candidates and decoys.
    let band = ["k2", "k3", "k4", "k5", "k6"];
    assert!(s.candidates.iter().all(|c| band.contains(&c.id.task.as_str())));
    assert_eq!(s.candidates.len(), 6 + 5 + 4 + 3 + 2);
    assert_eq!(s.decoy_pool, 2 + 3 + 4 + 5 + 6);
}

#[test]
fn selection_below_band_saturated_and_no_runs() {
    let t = Thresholds { band_min: 3, band_max: 5, ..Thresholds::default() };
    let tasks = vec![
        task("two", 2, &failures(&[50; 6])),
        task("six", 6, &failures(&[50; 2])),
        task("four", 4, &failures(&[50; 4])),
        TaskRuns { task: "none".into(), runs: vec![] },
    ];
    let s = select(&tasks, &t, 1, None).unwrap();
    assert_eq!(verdict_of(&s, "two"), Verdict::BelowBand);
    assert_eq!(verdict_of(&s, "six"), Verdict::Saturated);
    assert_eq!(verdict_of(&s, "four"), Verdict::Band);
    assert_eq!(verdict_of(&s, "none"), Verdict::NoBaseRuns);
    assert_eq!(s.tasks.iter().find(|t| t.task == "none").unwrap().pass_rate, None);
    // Another number of base runs is judged by its pass rate: 6 of 6 is saturated, 2 of 7 in the band.
    let s = sel(&[task("six-of-six", 6, &[]), task("two-of-seven", 2, &failures(&[50; 5]))], 1, None);
    assert_eq!(verdict_of(&s, "six-of-six"), Verdict::Saturated);
    assert_eq!(verdict_of(&s, "two-of-seven"), Verdict::Band);
}

#[test]
fn selection_terciles_hand_computed() {
    // n = 10: h = 3 and 6 exactly, the cuts are x_3 = 40 and x_6 = 70; ties go up.
    let t = Terciles::of(&[100, 90, 80, 70, 60, 50, 40, 30, 20, 10]).unwrap();
    assert_eq!((t.failed_runs, t.lower, t.upper), (10, 40.0, 70.0));
    assert_eq!([39, 40, 69, 70].map(|s| t.tercile(s)), [Tercile::L0, Tercile::L1, Tercile::L1, Tercile::L2]);
    // n = 5: h = 4/3 → 20 + (30 − 20)/3; h = 8/3 → 30 + 2(40 − 30)/3.
    let t = Terciles::of(&[10, 20, 30, 40, 100]).unwrap();
    assert!((t.lower - 70.0 / 3.0).abs() < 1e-12 && (t.upper - 110.0 / 3.0).abs() < 1e-12, "{t:?}");
    assert_eq!(
        [20, 23, 24, 36, 37].map(|s| t.tercile(s)),
        [Tercile::L0, Tercile::L0, Tercile::L1, Tercile::L1, Tercile::L2]
    );
    // Mostly capped (the paper's second policy): both cuts at 100, no L1, 100 steps is L2.
    let t = Terciles::of(&[50, 60, 100, 100, 100, 100, 100, 100, 100]).unwrap();
    assert_eq!((t.lower, t.upper), (100.0, 100.0));
    assert_eq!([60, 99, 100].map(|s| t.tercile(s)), [Tercile::L0, Tercile::L0, Tercile::L2]);
    // One length: both cuts on it, so it is L2; none: no terciles.
    let t = Terciles::of(&[7]).unwrap();
    assert_eq!((t.lower, t.upper, t.tercile(7)), (7.0, 7.0, Tercile::L2));
    assert_eq!(Terciles::of(&[]), None);
    // The cuts of a selection are over the failed runs of all band tasks pooled.
    let s = sel(
        &[task("a", 2, &failures(&[10, 20, 30, 40, 50, 60])), task("b", 4, &failures(&[70, 80, 90, 100]))],
        1,
        None,
    );
    assert_eq!(s.terciles, Some(Terciles { failed_runs: 10, lower: 40.0, upper: 70.0 }));
}

#[test]
fn selection_strata_of_each_kind() {
    let tasks = vec![
        task("a", 2, &failures(&[10, 20, 30, 40, 50, 60])),
        task(
            "b",
            2,
            &[
                (70, RunEnd::Submit),
                (100, RunEnd::Cap),
                (100, RunEnd::Submit),
                (15, RunEnd::Cap),
                (45, RunEnd::Other),
                (80, RunEnd::Other),
            ],
        ),
    ];
    let s = sel(&tasks, 1, None);
    // Lengths 10..60, 70, 100, 100, 15, 45, 80: sorted 10 15 20 30 40 45 50 60 70 80 100 100,
    // h = 11/3 → 30 + 2(40 − 30)/3 = 36.67; h = 22/3 → 60 + (70 − 60)/3 = 63.33.
    let t = s.terciles.unwrap();
    assert!((t.lower - 110.0 / 3.0).abs() < 1e-12 && (t.upper - 190.0 / 3.0).abs() < 1e-12, "{t:?}");
    let of = |task: &str, seed: u32| {
        s.candidates.iter().find(|c| c.id == RunId::new(task, seed)).map(|c| c.stratum.to_string()).unwrap()
    };
    assert_eq!([2, 3, 4].map(|i| of("a", i)), ["L0-submit"; 3]);
    assert_eq!([5, 6, 7].map(|i| of("a", i)), ["L1-submit"; 3]);
    assert_eq!(of("b", 2), "L2-submit"); // 70 steps, submitted, in the top tercile
    assert_eq!(of("b", 3), "L2-cap");
    assert_eq!(of("b", 4), "L2-submit"); // submitted at the last step
    assert_eq!(of("b", 5), "L0-cap"); // capped early (a smaller budget): by its length
    assert_eq!(of("b", 6), "L1-other");
    assert_eq!(of("b", 7), "L2-other");
    let c = s.candidates.iter().find(|c| c.id == RunId::new("b", 3)).unwrap();
    assert_eq!(c.reason, "failed run of a band task, T = 100 ≥ 63.33 (upper cut), hit the step cap: L2-cap");
    let names: Vec<String> = s.strata.iter().map(|o| o.stratum.to_string()).collect();
    assert_eq!(names, ["L0-submit", "L0-cap", "L1-submit", "L1-other", "L2-submit", "L2-cap", "L2-other"]);
    // Streams 1 + 3·tercile + end.
    assert_eq!([st("L0-submit"), st("L1-submit"), st("L2-cap"), st("L2-other")].map(Stratum::stream), [1, 4, 8, 9]);
    assert!("L3-cap".parse::<Stratum>().is_err() && "L1".parse::<Stratum>().is_err());
}

#[test]
fn selection_paper_strata_when_caps_are_longest() {
    // Capped runs are the longest: the strata come out as the paper's L0-submit, L1-submit, L2-cap.
    let tasks = vec![
        task("a", 2, &failures(&[40, 50, 60, 70, 100, 100])),
        task("b", 3, &failures(&[45, 55, 65, 100, 100])),
        task("c", 5, &failures(&[52, 75, 100])),
    ];
    let s = sel(&tasks, 20260928, None);
    let names: Vec<String> = s.strata.iter().map(|o| o.stratum.to_string()).collect();
    assert_eq!(names, ["L0-submit", "L1-submit", "L2-cap"]);
}

#[test]
fn selection_per_task_cap() {
    let s = sel(&[task("a", 2, &failures(&[10, 20, 30, 40, 50, 60]))], 3, None);
    assert_eq!(s.picks.len(), 3);
    assert!(s.picks.iter().all(|p| p.id.task == "a"));
    let queued: Vec<Initial> =
        s.candidates.iter().map(|c| c.initial).filter(|i| !matches!(i, Initial::Selected { .. })).collect();
    assert_eq!(queued, [Initial::TaskAtCap; 3]);
    // A cap of one per task, from three tasks.
    let t = Thresholds { trajectories_per_task: 1, ..Thresholds::default() };
    let tasks =
        [task("a", 2, &failures(&[10; 6])), task("b", 3, &failures(&[20; 5])), task("c", 6, &failures(&[30; 2]))];
    let s = select(&tasks, &t, 3, None).unwrap();
    let mut picked: Vec<&str> = s.picks.iter().map(|p| p.id.task.as_str()).collect();
    picked.sort_unstable();
    assert_eq!(picked, ["a", "b", "c"]);
}

#[test]
fn selection_round_robin_and_target() {
    // Three strata of 8 (lengths 10, 50 and 90 in each task), a cap that never binds, target 5.
    let t = Thresholds { trajectories_per_task: 10, ..Thresholds::default() };
    let tasks: Vec<TaskRuns> =
        ["a", "b", "c", "d"].iter().map(|n| task(n, 2, &failures(&[10, 10, 50, 50, 90, 90]))).collect();
    let s = select(&tasks, &t, 9, Some(5)).unwrap();
    let strata: Vec<String> = s.picks.iter().map(|p| p.stratum.to_string()).collect();
    assert_eq!(strata, ["L0-submit", "L1-submit", "L2-submit", "L0-submit", "L1-submit"]);
    for p in &s.picks {
        let order = &s.strata.iter().find(|o| o.stratum == p.stratum).unwrap().order;
        let nth = s.picks.iter().filter(|q| q.stratum == p.stratum && q.position < p.position).count();
        assert_eq!(p.id, order[nth], "each stratum takes its own order from the front");
    }
    assert_eq!(s.picks.iter().map(|p| p.position).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    assert!(
        s.picks[3].reason.starts_with("turn 2 of the round-robin: 2 of L0-submit's processing order"),
        "{}",
        s.picks[3].reason
    );
    assert_eq!(s.candidates.iter().filter(|c| c.initial == Initial::TargetReached).count(), 24 - 5);
    let queue: usize = s.strata.iter().map(|o| o.queue.len()).sum();
    assert_eq!(queue, 19);
    assert_eq!(s.shortfall(), 0);
    // Fewer candidates than the target: all that the cap allows, and the shortfall said.
    let s = sel(&[task("a", 5, &failures(&[10, 50, 90]))], 9, Some(60));
    assert_eq!((s.picks.len(), s.initial(), s.shortfall()), (3, 3, 57));
    // Target 0 selects nothing.
    let s = sel(&tasks, 9, Some(0));
    assert!(s.picks.is_empty() && s.candidates.iter().all(|c| c.initial == Initial::TargetReached));
}

#[test]
fn selection_decoys() {
    let tasks = vec![
        task("a", 2, &failures(&[50; 6])),
        task("b", 3, &failures(&[50; 5])),
        task("c", 4, &failures(&[50; 4])),
        task("sat", 8, &[]),
        task("doom", 1, &failures(&[50; 7])),
    ];
    let s = sel(&tasks, 5, None);
    assert_eq!((s.decoy_pool, s.decoys.len()), (9, 9));
    let t = Thresholds { decoys: 4, ..Thresholds::default() };
    let s = select(&tasks, &t, 5, None).unwrap();
    assert_eq!((s.decoy_pool, s.decoys.len()), (9, 4));
    let mut ids: Vec<&RunId> = s.decoys.iter().map(|d| &d.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    for d in &s.decoys {
        assert!(["a", "b", "c"].contains(&d.id.task.as_str()), "{d:?}");
        assert!(tasks.iter().find(|t| t.task == d.id.task).unwrap().runs[d.id.seed as usize].success);
    }
    assert!(s.decoys[0].reason.ends_with("1 of the decoy order of 9 drawn from the seed"), "{}", s.decoys[0].reason);
    // The decoys are the front of one seeded order: 4 of them are the first 4 of all 9.
    let all = sel(&tasks, 5, None);
    assert_eq!(s.decoys[..], all.decoys[..4]);
    let t = Thresholds { decoys: 0, ..Thresholds::default() };
    assert!(select(&tasks, &t, 5, None).unwrap().decoys.is_empty());
    // A decoy is never back-filled.
    let mut s = s;
    let decoy = s.decoys[0].id.clone();
    assert_eq!(s.back_fill(&decoy), BackFill::NotSelected);
    assert!(s.back_fills.is_empty());
}

#[test]
fn selection_fixed_order_from_the_seed() {
    let tasks: Vec<TaskRuns> =
        ["a", "b", "c", "d"].iter().map(|n| task(n, 2, &failures(&[10, 20, 30, 40, 50, 60]))).collect();
    let one = sel(&tasks, 1, Some(6));
    assert_eq!(one, sel(&tasks, 1, Some(6)));
    let two = sel(&tasks, 2, Some(6));
    assert_ne!(one.strata[0].order, two.strata[0].order);
    assert_ne!(one.picks, two.picks);
    // Each stratum is a permutation of its members in canonical order.
    for o in &one.strata {
        let mut sorted = o.order.clone();
        sorted.sort();
        let members: Vec<RunId> =
            one.candidates.iter().filter(|c| c.stratum == o.stratum).map(|c| c.id.clone()).collect();
        assert_eq!(sorted, members);
    }
    // The order of the input does not matter.
    let mut reversed: Vec<TaskRuns> = tasks.iter().rev().cloned().collect();
    for t in &mut reversed {
        t.runs.reverse();
    }
    assert_eq!(one, sel(&reversed, 1, Some(6)));
}

#[test]
fn selection_draws_are_chacha20_as_documented() {
    // ChaCha20, zero key, zero nonce: keystream 76 b8 e0 ad a0 f1 3d 90 …, read as little-endian
    // words, low word first.
    assert_eq!(Draws::from_key([0; 32], 0).0.next_u64(), 0x903d_f1a0_ade0_b876);
    // Pinned: a change of generator, key, stream or shuffle changes every selection.
    let mut items: Vec<u32> = (0..10).collect();
    Draws::new(0, 1).shuffle(&mut items);
    assert_eq!(items, PINNED_SHUFFLE);
    let mut d = Draws::new(0, 1);
    assert!((0..1000).all(|_| d.below(7) < 7));
    assert_eq!(d.below(1), 0);
    assert_eq!(d.below(0), 0);
}

/// Computed by an independent ChaCha20 (Python, from the recipe in the module documentation).
const PINNED_SHUFFLE: [u32; 10] = [6, 8, 3, 7, 4, 5, 2, 1, 0, 9];

#[test]
fn selection_known_answer_from_an_independent_implementation() {
    // Seed 4. One stratum, L2-submit (stream 7): a's failures s2–s7 and b's s4–s7, all 50 steps.
    // Its order, from the independent implementation: b7 b4 b5 b6 a5 a4 a6 a2 a3 a7.
    let mut s = sel(&[task("a", 2, &failures(&[50; 6])), task("b", 4, &failures(&[50; 4]))], 4, None);
    let ids = |v: &[(&str, u32)]| v.iter().map(|&(t, i)| RunId::new(t, i)).collect::<Vec<_>>();
    let order =
        ids(&[("b", 7), ("b", 4), ("b", 5), ("b", 6), ("a", 5), ("a", 4), ("a", 6), ("a", 2), ("a", 3), ("a", 7)]);
    assert_eq!(s.strata[0].order, order);
    // Cap 3: b6 is passed over (b full) and stays first in the queue.
    let picks: Vec<RunId> = s.picks.iter().map(|p| p.id.clone()).collect();
    assert_eq!(picks, ids(&[("b", 7), ("b", 4), ("b", 5), ("a", 5), ("a", 4), ("a", 6)]));
    assert_eq!(s.strata[0].queue, ids(&[("b", 6), ("a", 2), ("a", 3), ("a", 7)]));
    let b6 = s.candidates.iter().find(|c| c.id == RunId::new("b", 6)).unwrap();
    assert_eq!((b6.order, b6.initial), (3, Initial::TaskAtCap));
    // Dropping a trajectory of a takes a2, passing over b6 (b still full).
    assert_eq!(
        s.back_fill(&RunId::new("a", 4)),
        BackFill::Replaced { replacement: RunId::new("a", 2), stratum: st("L2-submit"), round: 1 }
    );
    // Decoys (stream 10) over a s0 a s1 b s0 … b s3: a1 b2 b1 a0 b3 b0.
    let decoys: Vec<RunId> = s.decoys.iter().map(|d| d.id.clone()).collect();
    assert_eq!(decoys, ids(&[("a", 1), ("b", 2), ("b", 1), ("a", 0), ("b", 3), ("b", 0)]));
}

#[test]
fn selection_back_fill_from_the_stratum_with_rounds_and_exhaustion() {
    // One stratum (equal lengths), one task of six failures: three selected, three queued.
    let mut s = sel(&[task("a", 2, &failures(&[50; 6]))], 4, None);
    assert_eq!(s.strata.len(), 1);
    let queue = s.strata[0].queue.clone();
    assert_eq!((s.picks.len(), queue.len()), (3, 3));
    let first = s.picks[0].id.clone();
    assert_eq!(
        s.back_fill(&first),
        BackFill::Replaced { replacement: queue[0].clone(), stratum: st("L2-submit"), round: 1 }
    );
    assert_eq!(s.back_fill(&first), BackFill::AlreadyNonReplayable);
    // The back-fill of a back-fill is of round 2, and so on.
    assert_eq!(
        s.back_fill(&queue[0]),
        BackFill::Replaced { replacement: queue[1].clone(), stratum: st("L2-submit"), round: 2 }
    );
    assert_eq!(
        s.back_fill(&queue[1]),
        BackFill::Replaced { replacement: queue[2].clone(), stratum: st("L2-submit"), round: 3 }
    );
    assert_eq!(s.back_fill(&queue[2]), BackFill::StratumExhausted { stratum: st("L2-submit"), round: 4 });
    let second = s.picks[1].id.clone();
    assert_eq!(s.back_fill(&second), BackFill::StratumExhausted { stratum: st("L2-submit"), round: 1 });
    assert_eq!((s.back_fill_count(), s.exhausted_count(), s.rounds()), (3, 2, 3));
    assert_eq!(s.active().count(), 1);
    let last = s.picks.last().unwrap();
    assert_eq!((last.position, last.round, last.replaces.as_ref()), (5, 3, Some(&queue[1])));
    assert!(
        last.reason.starts_with(&format!("back-fill of round 3 for {} (non-replayable): 6 of L2-submit's", queue[1])),
        "{}",
        last.reason
    );
    assert_eq!(s.back_fill(&RunId::new("a", 99)), BackFill::NotSelected);
    assert_eq!(s.back_fills.len(), 5);
}

#[test]
fn selection_back_fill_respects_the_cap_and_stays_in_its_stratum() {
    // One stratum: a has six failures, b four; cap 3: three of each selected, queue a a a b.
    let mut s = sel(&[task("a", 2, &failures(&[50; 6])), task("b", 4, &failures(&[50; 4]))], 8, None);
    assert_eq!(s.picks.len(), 6);
    let b: Vec<RunId> = s.picks.iter().filter(|p| p.id.task == "b").map(|p| p.id.clone()).collect();
    let spare_b = s.strata[0].queue.iter().find(|id| id.task == "b").cloned().unwrap();
    // Dropping a b takes the queued b, whatever a's place in the queue: a is at its cap.
    assert_eq!(s.back_fill(&b[0]), BackFill::Replaced { replacement: spare_b, stratum: st("L2-submit"), round: 1 });
    assert_eq!(s.back_fill(&b[1]), BackFill::StratumExhausted { stratum: st("L2-submit"), round: 1 });
    assert_eq!(s.strata[0].queue.iter().filter(|id| id.task == "a").count(), 3);
    // Dropping an a takes the first queued a.
    let a0 = s.picks.iter().find(|p| p.id.task == "a").unwrap().id.clone();
    let next_a = s.strata[0].queue[0].clone();
    assert_eq!(s.back_fill(&a0), BackFill::Replaced { replacement: next_a, stratum: st("L2-submit"), round: 1 });

    // Two strata: the one exhausted does not borrow from the other.
    let mut s = sel(&[task("a", 2, &failures(&[10, 10, 10, 90, 90, 90]))], 8, None);
    // n = 6: both 10s and the lower cut (x_1 + 2(x_2 − x_1)/3 = 10) coincide, so the 10s are L1
    // (ties go up) and the 90s L2; the round-robin took L1, L2, L1.
    let l1 = s.picks.iter().filter(|p| p.stratum == st("L1-submit")).count();
    assert_eq!((l1, s.picks.len()), (2, 3));
    let l2 = s.picks.iter().find(|p| p.stratum == st("L2-submit")).unwrap().id.clone();
    let result = s.back_fill(&l2);
    assert_eq!(
        result,
        BackFill::Replaced { replacement: s.strata[1].order[1].clone(), stratum: st("L2-submit"), round: 1 }
    );
    assert_eq!(s.strata[0].queue.len(), 1, "L0's queue untouched");
}

#[test]
fn selection_edge_inputs_do_not_panic() {
    let s = sel(&[], 0, Some(60));
    assert!(s.tasks.is_empty() && s.picks.is_empty() && s.terciles.is_none() && s.strata.is_empty());
    assert_eq!(s.shortfall(), 60);
    let doomed = [task("x", 0, &failures(&[100; 8])), task("y", 1, &failures(&[40; 7]))];
    let s = sel(&doomed, 0, None);
    assert!(s.candidates.is_empty() && s.decoys.is_empty() && s.terciles.is_none());
    let t = Thresholds {
        trajectories_per_task: 0,
        base_runs_per_task: 0,
        band_min: 5,
        band_max: 1,
        ..Thresholds::default()
    };
    let s = select(&[task("a", 2, &failures(&[10; 6]))], &t, 0, None).unwrap();
    assert!(s.picks.is_empty());
    assert_eq!(
        select(&[task("a", 2, &[]), task("a", 3, &[])], &Thresholds::default(), 0, None),
        Err(SelectionError::DuplicateTask("a".into()))
    );
    let dup = TaskRuns { task: "a".into(), runs: vec![run(1, true, 3, RunEnd::Submit), run(1, false, 4, RunEnd::Cap)] };
    assert_eq!(
        select(&[dup], &Thresholds::default(), 0, None),
        Err(SelectionError::DuplicateSeed { task: "a".into(), seed: 1 })
    );
    let extremes = [task("e", 2, &[(0, RunEnd::Submit), (u32::MAX, RunEnd::Cap), (u32::MAX, RunEnd::Other)])];
    let s = select(&extremes, &Thresholds { base_runs_per_task: 5, ..Thresholds::default() }, u64::MAX, None).unwrap();
    assert_eq!(s.picks.len(), 3);
}

#[test]
fn selection_serializes_for_the_export() {
    let mut s = sel(
        &[task("a", 2, &failures(&[10, 20, 30, 40, 50, 100])), task("b", 3, &failures(&[60, 70, 100, 100, 100]))],
        11,
        Some(4),
    );
    let first = s.picks[0].id.clone();
    s.back_fill(&first);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["picks"][0]["stratum"], serde_json::json!(s.picks[0].stratum.to_string()));
    assert_eq!(json["candidates"][0]["end"], "submit");
    assert!(json["back_fills"][0]["result"]["result"].is_string());
    let back: Selection = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
}

fn arb_tasks() -> impl Strategy<Value = Vec<TaskRuns>> {
    let end = prop_oneof![Just(RunEnd::Submit), Just(RunEnd::Cap), Just(RunEnd::Other)];
    let run = (any::<bool>(), 0u32..=120, end);
    prop::collection::vec(prop::collection::vec(run, 0..10), 0..8).prop_map(|tasks| {
        tasks
            .into_iter()
            .enumerate()
            .map(|(i, runs)| TaskRuns {
                task: format!("t{i}"),
                runs: runs
                    .into_iter()
                    .enumerate()
                    .map(|(seed, (success, steps, end))| SeedRun { seed: seed as u32, success, steps, end })
                    .collect(),
            })
            .collect()
    })
}

fn arb_thresholds() -> impl Strategy<Value = Thresholds> {
    (0u32..5, 0u32..5, 0u32..9, prop_oneof![Just(0.0), Just(0.125), Just(0.3)], 0u32..12).prop_map(
        |(cap, band_min, width, doomed, decoys)| Thresholds {
            trajectories_per_task: cap,
            band_min,
            band_max: band_min + width,
            doomed_threshold: doomed,
            decoys,
            ..Thresholds::default()
        },
    )
}

fn check_invariants(s: &Selection, tasks: &[TaskRuns]) -> Result<(), TestCaseError> {
    let band: Vec<&str> = s.tasks.iter().filter(|t| t.verdict == Verdict::Band).map(|t| t.task.as_str()).collect();
    let run_of =
        |id: &RunId| tasks.iter().find(|t| t.task == id.task).and_then(|t| t.runs.iter().find(|r| r.seed == id.seed));
    let mut active: BTreeMap<&str, u32> = BTreeMap::new();
    for p in s.active() {
        *active.entry(p.id.task.as_str()).or_default() += 1;
    }
    prop_assert!(active.values().all(|&n| n <= s.params.trajectories_per_task), "cap exceeded: {active:?}");
    for p in &s.picks {
        prop_assert!(band.contains(&p.id.task.as_str()), "{p:?} is not of a band task");
        prop_assert!(!run_of(&p.id).unwrap().success, "{p:?} succeeded");
        prop_assert_eq!(s.candidates.iter().find(|c| c.id == p.id).map(|c| c.stratum), Some(p.stratum));
    }
    for d in &s.decoys {
        prop_assert!(band.contains(&d.id.task.as_str()) && run_of(&d.id).unwrap().success);
    }
    prop_assert_eq!(s.decoys.len(), (s.params.decoys as usize).min(s.decoy_pool as usize));
    if let Some(t) = s.target {
        prop_assert!(s.initial() <= t);
    }
    // Every candidate is either picked or queued in its stratum, exactly once.
    for o in &s.strata {
        let mut seen: Vec<&RunId> =
            o.queue.iter().chain(s.picks.iter().filter(|p| p.stratum == o.stratum).map(|p| &p.id)).collect();
        seen.sort();
        let mut order: Vec<&RunId> = o.order.iter().collect();
        order.sort();
        prop_assert_eq!(seen, order);
    }
    for p in s.picks.iter().filter(|p| p.replaces.is_some()) {
        let dropped = s.picks.iter().find(|q| Some(&q.id) == p.replaces.as_ref()).unwrap();
        prop_assert!(dropped.non_replayable && dropped.stratum == p.stratum && p.round == dropped.round + 1);
    }
    Ok(())
}

proptest! {
    #[test]
    fn selection_invariants_hold_through_back_fills(
        tasks in arb_tasks(),
        thresholds in arb_thresholds(),
        seed in any::<u64>(),
        target in prop::option::of(0u32..20),
        drops in prop::collection::vec(0usize..64, 0..12),
    ) {
        let mut s = select(&tasks, &thresholds, seed, target).unwrap();
        check_invariants(&s, &tasks)?;
        for d in drops {
            let active: Vec<RunId> = s.active().map(|p| p.id.clone()).collect();
            if active.is_empty() {
                break;
            }
            let id = active[d % active.len()].clone();
            let before = s.active().count();
            match s.back_fill(&id) {
                BackFill::Replaced { .. } => prop_assert_eq!(s.active().count(), before),
                BackFill::StratumExhausted { .. } => prop_assert_eq!(s.active().count(), before - 1),
                other => prop_assert!(false, "an active trajectory gave {other:?}"),
            }
            check_invariants(&s, &tasks)?;
        }
        prop_assert_eq!(s.rounds(), s.picks.iter().map(|p| p.round).max().unwrap_or(0));
    }

    #[test]
    fn selection_is_a_pure_function_of_its_input(
        tasks in arb_tasks(),
        thresholds in arb_thresholds(),
        seed in any::<u64>(),
        target in prop::option::of(0u32..20),
    ) {
        let s = select(&tasks, &thresholds, seed, target).unwrap();
        prop_assert_eq!(&s, &select(&tasks, &thresholds, seed, target).unwrap());
        let mut shuffled: Vec<TaskRuns> = tasks.iter().rev().cloned().collect();
        for t in &mut shuffled {
            t.runs.reverse();
        }
        prop_assert_eq!(&s, &select(&shuffled, &thresholds, seed, target).unwrap());
    }
}
