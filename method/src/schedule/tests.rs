//! Stage-by-stage tests of the schedule on hand-made outcomes.

use std::collections::{BTreeSet, HashSet};

use super::*;

fn plan(length: u32, labels: &[u32]) -> TrajectoryPlan {
    TrajectoryPlan { length, labels: labels.to_vec(), controls: Controls::default() }
}

fn paper(length: u32, labels: &[u32]) -> TrajectorySchedule {
    TrajectorySchedule::new(plan(length, labels), &Thresholds::default(), variant_by_name("paper").unwrap())
}

/// The distinct `t`s of the pending keys of one series.
fn pending_ts(s: &TrajectorySchedule, series: Series) -> Vec<u32> {
    let ts: BTreeSet<u32> = s.pending().iter().filter(|k| k.series == series).map(|k| k.t).collect();
    ts.into_iter().collect()
}

/// Answer every pending key with `success(key)`, once.
fn answer_pending(s: &mut TrajectorySchedule, success: &impl Fn(Key) -> bool) {
    for key in s.pending() {
        let outcome = if success(key) { Outcome::Success } else { Outcome::Failure };
        s.record(key, outcome).unwrap();
    }
}

/// Answer pending keys round by round until the schedule is done.
fn run_to_end(s: &mut TrajectorySchedule, success: &impl Fn(Key) -> bool) {
    for _ in 0..10_000 {
        if s.is_done() {
            return;
        }
        answer_pending(s, success);
    }
    panic!("schedule did not finish");
}

/// Success iff `seed < round(8 · v(t))`: exact raw estimates `v(t)` at K = 8 (and at any K that
/// is a multiple of 8, since seeds beyond 7 repeat the pattern).
fn exact(v: impl Fn(u32) -> f64) -> impl Fn(Key) -> bool {
    move |k: Key| f64::from(k.seed % 8) < (8.0 * v(k.t)).round()
}

fn step_at(cliff: u32) -> impl Fn(Key) -> bool {
    exact(move |t| if t < cliff { 1.0 } else { 0.0 })
}

#[test]
fn screening_requests_k8_at_every_anchor() {
    for (length, anchors) in [
        (40, vec![0, 5, 10, 15, 20, 25, 30, 35, 39]),
        (57, vec![0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 56]),
        (100, vec![0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 60, 70, 80, 90, 99]),
    ] {
        let s = paper(length, &[]);
        assert_eq!(s.stage(), Stage::Screen);
        assert_eq!(pending_ts(&s, Series::Main), anchors);
        assert_eq!(s.pending().len(), anchors.len() * 8);
        assert!(s.pending().iter().all(|k| k.seed < 8 && k.series == Series::Main));
        assert_eq!(s.cost_by_stage()[&Stage::Screen], anchors.len() as u32 * 8);
    }
}

#[test]
fn bisection_recurses_into_the_larger_half_until_adjacent() {
    let mut s = paper(40, &[]);
    let world = step_at(23);
    answer_pending(&mut s, &world);
    assert_eq!(s.stage(), Stage::Bisect);
    // (20, 25) is the only screened drop: midpoint 22 (V̂ = 1, so the drop is in (22, 25]).
    assert_eq!(pending_ts(&s, Series::Main), vec![22]);
    answer_pending(&mut s, &world);
    // Midpoint of (22, 25) is 23 (V̂ = 0): the drop is in (22, 23], adjacent.
    assert_eq!(pending_ts(&s, Series::Main), vec![23]);
    answer_pending(&mut s, &world);
    assert_eq!(s.memory().bracketed, vec![(22, 23)]);
    assert_eq!(s.stage(), Stage::Confirm);
    assert_eq!(s.cost_by_stage()[&Stage::Bisect], 16);
}

/// V̂ = 1, 0.625, 0.375, 0 with drops 0.375 at 7, 0.25 at 23, 0.375 at 33 (T = 40).
fn three_drops(t: u32) -> f64 {
    match t {
        0..7 => 1.0,
        7..23 => 0.625,
        23..33 => 0.375,
        _ => 0.0,
    }
}

#[test]
fn three_pairs_are_bisected_concurrently() {
    let mut s = paper(40, &[]);
    let world = exact(three_drops);
    answer_pending(&mut s, &world);
    // All three pairs start at once: midpoints of (5,10), (20,25), (30,35).
    assert_eq!(pending_ts(&s, Series::Main), vec![7, 22, 32]);
    // Only pair (5, 10) hears back: it moves on (7 has V̂ 0.625: the drop is in (5, 7]) while the
    // others still wait.
    for key in s.pending().into_iter().filter(|k| k.t == 7) {
        s.record(key, if world(key) { Outcome::Success } else { Outcome::Failure }).unwrap();
    }
    assert_eq!(pending_ts(&s, Series::Main), vec![6, 22, 32]);
    run_to_end(&mut s, &world);
    let mut bracketed = s.memory().bracketed.clone();
    bracketed.sort();
    assert_eq!(bracketed, vec![(6, 7), (22, 23), (32, 33)]);
}

#[test]
fn at_most_three_pairs_largest_first_ties_earliest() {
    // Four equal drops of 0.25 at 3, 13, 23, 33: the earliest three pairs are bisected.
    let mut s = paper(40, &[]);
    let world = exact(|t| match t {
        0..3 => 1.0,
        3..13 => 0.75,
        13..23 => 0.5,
        23..33 => 0.25,
        _ => 0.0,
    });
    answer_pending(&mut s, &world);
    assert_eq!(pending_ts(&s, Series::Main), vec![2, 12, 22]);
}

#[test]
fn confirmation_raises_the_largest_and_a_large_second_drop() {
    let mut s = paper(40, &[]);
    let world = exact(three_drops);
    while s.stage() < Stage::Confirm {
        answer_pending(&mut s, &world);
    }
    // Ranked: (6,7) 0.375 and (32,33) 0.375 tie → the earlier first; then (32,33) is still ≥ 0.25.
    assert_eq!(pending_ts(&s, Series::Main), vec![6, 7]);
    assert!(s.pending().iter().all(|k| (8..32).contains(&k.seed)));
    answer_pending(&mut s, &world);
    assert_eq!(pending_ts(&s, Series::Main), vec![32, 33]);
    answer_pending(&mut s, &world);
    assert_eq!(s.memory().confirmed, vec![(6, 7), (32, 33)]);
    assert_eq!(s.points().requested(Series::Main, 22), 8, "the third pair is not confirmed");
    assert_eq!(s.cost_by_stage()[&Stage::Confirm], 4 * 24);
}

#[test]
fn a_small_second_drop_is_not_confirmed() {
    // (20, 25) erodes by 0.125 a step and bisects to (20, 21), a drop of 0.125; (30, 35) has a
    // sharp drop of 0.5 at 33.
    let mut s = paper(40, &[]);
    let world = exact(|t| match t {
        0..=20 => 1.0,
        21 => 0.875,
        22 => 0.75,
        23 => 0.625,
        24..33 => 0.5,
        _ => 0.0,
    });
    while s.stage() < Stage::Confirm {
        answer_pending(&mut s, &world);
    }
    let mut bracketed = s.memory().bracketed.clone();
    bracketed.sort();
    assert_eq!(bracketed, vec![(20, 21), (32, 33)]);
    answer_pending(&mut s, &world);
    assert_eq!(s.memory().confirmed, vec![(32, 33)]);
    assert_eq!(s.stage(), Stage::Pnr);
}

#[test]
fn a_terminal_pair_is_confirmed_without_sampling_the_terminal_point() {
    // Full value to the last step: the only drop is (39, 40).
    let mut s = paper(40, &[]);
    run_to_end(&mut s, &exact(|_| 1.0));
    assert_eq!(s.memory().bracketed, vec![(39, 40)]);
    assert_eq!(s.memory().confirmed, vec![(39, 40)]);
    assert_eq!(s.points().requested(Series::Main, 39), 32);
    assert_eq!(s.points().requested(Series::Main, 40), 0);
}

#[test]
fn pnr_certifies_at_the_first_zero_anchor() {
    let mut s = paper(40, &[]);
    let world = step_at(23);
    while s.stage() < Stage::Pnr {
        answer_pending(&mut s, &world);
    }
    // 25 is the first anchor with no success: raised to 24, certified; backward bisection from
    // 22 (the latest point with a success) reaches 23, already at 32 from confirmation.
    assert_eq!(pending_ts(&s, Series::Main), vec![25]);
    answer_pending(&mut s, &world);
    assert_eq!(s.memory().certified_anchor, Some(25));
    assert_eq!(s.stage(), Stage::Done);
    assert_eq!(s.cost_by_stage()[&Stage::Pnr], 16);
}

#[test]
fn pnr_falls_back_to_the_next_zero_anchor() {
    // Anchor 25 has no success among seeds 0..8 but one at seed 10 once raised to 24.
    let mut s = paper(40, &[]);
    let base = step_at(23);
    let world = move |k: Key| base(k) || (k.t == 25 && k.seed == 10);
    while s.stage() < Stage::Pnr {
        answer_pending(&mut s, &world);
    }
    assert_eq!(pending_ts(&s, Series::Main), vec![25]);
    answer_pending(&mut s, &world);
    assert_eq!(pending_ts(&s, Series::Main), vec![30]);
    answer_pending(&mut s, &world);
    assert_eq!(s.memory().certified_anchor, Some(30));
    // Backward from 25 (a success at seed 10) to 30: midpoint 27 at 8, then 24; then 26.
    assert_eq!(pending_ts(&s, Series::Main), vec![27]);
    answer_pending(&mut s, &world);
    assert_eq!(pending_ts(&s, Series::Main), vec![27]);
    assert!(s.pending().iter().all(|k| (8..24).contains(&k.seed)));
    answer_pending(&mut s, &world);
    assert_eq!(pending_ts(&s, Series::Main), vec![26]);
    run_to_end(&mut s, &world);
}

#[test]
fn pnr_bisects_backward_from_the_latest_success() {
    // V̂ = 1/8 before 13, 0 after: no screened drop reaches 0.25, so nothing is bisected.
    let mut s = paper(40, &[]);
    let world = exact(|t| if t < 13 { 0.125 } else { 0.0 });
    answer_pending(&mut s, &world);
    assert!(s.memory().bracketed.is_empty());
    assert_eq!(s.stage(), Stage::Pnr);
    let mut rounds = Vec::new();
    while !s.is_done() {
        let keys = s.pending();
        let ts: BTreeSet<u32> = keys.iter().map(|k| k.t).collect();
        let seeds: BTreeSet<u32> = keys.iter().map(|k| k.seed).collect();
        rounds.push((ts.into_iter().collect::<Vec<_>>(), *seeds.first().unwrap(), *seeds.last().unwrap()));
        answer_pending(&mut s, &world);
    }
    assert_eq!(
        rounds,
        vec![
            (vec![15], 8, 23), // first zero anchor to 24: certified
            (vec![12], 0, 7),  // backward from 10: midpoint 12 has a success → lower end
            (vec![13], 0, 7),  // midpoint 13: no success at 8 …
            (vec![13], 8, 23), // … raised to 24: certified → upper end; (12, 13) adjacent
        ]
    );
}

#[test]
fn pnr_with_no_earlier_success_ends_at_the_anchor() {
    let mut s = paper(40, &[]);
    run_to_end(&mut s, &exact(|_| 0.0));
    assert_eq!(s.memory().certified_anchor, Some(0));
    assert_eq!(s.points().requested(Series::Main, 0), 24);
    assert_eq!(s.requested_total(), 9 * 8 + 16);
}

#[test]
fn label_probes_are_raised_to_16_then_32_where_the_drop_is_large() {
    let mut s = paper(40, &[23, 10, 23]);
    let world = step_at(23);
    while s.stage() < Stage::Labels {
        answer_pending(&mut s, &world);
    }
    // 22 and 23 are already at 32 from confirmation; 9 and 10 go to 16.
    assert_eq!(pending_ts(&s, Series::Main), vec![9, 10]);
    answer_pending(&mut s, &world);
    // The drop at 23 is 1 ≥ 0.20: raise to 32 (already there); at 10 it is 0: not raised.
    assert!(s.is_done());
    assert_eq!(s.points().requested(Series::Main, 9), 16);
    assert_eq!(s.points().requested(Series::Main, 23), 32);

    // A label where the drop is found only by the probe: raised to 32.
    let mut s = paper(40, &[12]);
    let world = step_at(12);
    run_to_end(&mut s, &world);
    assert_eq!(s.points().requested(Series::Main, 11), 32);
    assert_eq!(s.points().requested(Series::Main, 12), 32);
}

#[test]
fn at_most_four_labels_are_probed_and_the_terminal_point_never_is() {
    let mut s = paper(40, &[3, 8, 13, 18, 28, 40]);
    run_to_end(&mut s, &exact(|_| 0.5));
    assert!(s.requested_keys().iter().all(|k| k.t < 40));
    // The four earliest distinct labels: 3, 8, 13, 18; 28 is not probed.
    for t in [2, 3, 7, 8, 12, 13, 17, 18] {
        assert!(s.points().requested(Series::Main, t) >= 16, "t = {t}");
    }
    assert_eq!(s.points().requested(Series::Main, 27), 0);
}

#[test]
fn a_label_at_the_terminal_step_probes_only_the_step_before() {
    let mut s = paper(20, &[20]);
    run_to_end(&mut s, &exact(|_| 0.5));
    assert!(s.points().requested(Series::Main, 19) >= 16);
    assert!(s.requested_keys().iter().all(|k| k.t < 20));
}

#[test]
fn controls_run_on_their_own_series() {
    let controls = Controls { sanity: true, retest: true, budget_control: true };
    let mut s = TrajectorySchedule::new(
        TrajectoryPlan { length: 100, labels: vec![], controls },
        &Thresholds::default(),
        variant_by_name("paper").unwrap(),
    );
    let world = step_at(47);
    while s.stage() < Stage::Controls {
        answer_pending(&mut s, &world);
    }
    assert_eq!(pending_ts(&s, Series::Retest), vec![0, 40, 99]);
    assert_eq!(pending_ts(&s, Series::FullBudget), Thresholds::default().anchors(100));
    assert_eq!(s.cost_by_stage()[&Stage::Controls], (3 + 16) * 8);
    run_to_end(&mut s, &world);
    assert_eq!(Series::FullBudget.budget(100, 40), 100);
    assert_eq!(Series::Retest.budget(100, 40), 60);
}

#[test]
fn variants_change_what_they_say() {
    let world = step_at(23);
    let run = |name: &str| {
        let mut s = TrajectorySchedule::new(plan(40, &[]), &Thresholds::default(), variant_by_name(name).unwrap());
        let first = s.pending().len();
        run_to_end(&mut s, &world);
        (first, s)
    };
    let (first, s) = run("screen-bisect");
    assert_eq!(first, 9 * 8);
    assert!(!s.cost_by_stage().contains_key(&Stage::Confirm) && !s.cost_by_stage().contains_key(&Stage::Pnr));
    let (first, s) = run("screen-k4");
    assert_eq!(first, 9 * 4);
    assert_eq!(s.params().k_screen, 4);
    assert_eq!(s.points().requested(Series::Main, 22), 32, "bisection at 8, confirmation at 32");
    let (first, _) = run("sparse-anchors");
    assert_eq!(first, 5 * 8); // 0, 10, 20, 30, 39
    assert!(variant_by_name("nope").is_none());
}

/// A reproducible stream of pseudo-random bits for shuffling and noisy outcomes.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn noisy(seed: u64, v: impl Fn(u32) -> f64) -> impl Fn(Key) -> bool {
    move |k: Key| {
        let h = splitmix(seed ^ (u64::from(k.t) << 32) ^ u64::from(k.seed) ^ ((k.series as u64) << 56));
        ((h >> 11) as f64 / (1u64 << 53) as f64) < v(k.t)
    }
}

/// Run answering one random pending key at a time; returns every key in the order issued.
fn run_shuffled(s: &mut TrajectorySchedule, world: &impl Fn(Key) -> bool, shuffle: u64) -> Vec<Key> {
    let mut issued = Vec::new();
    let mut seen = HashSet::new();
    let mut i = 0u64;
    while !s.is_done() {
        let pending = s.pending();
        for k in &pending {
            if seen.insert(*k) {
                issued.push(*k);
            }
        }
        let key = pending[(splitmix(shuffle ^ i) % pending.len() as u64) as usize];
        i += 1;
        s.record(key, if world(key) { Outcome::Success } else { Outcome::Failure }).unwrap();
    }
    issued
}

#[test]
fn same_outcomes_in_any_order_give_the_same_requests_and_points() {
    let controls = Controls { sanity: false, retest: true, budget_control: true };
    for (case, name) in (0..40u64).map(|c| (c, if c % 2 == 0 { "paper" } else { "adaptive" })) {
        let world = noisy(case, |t| {
            if t < 31 {
                0.7
            } else if t < 55 {
                0.3
            } else {
                0.0
            }
        });
        let make = || {
            TrajectorySchedule::new(
                TrajectoryPlan { length: 80, labels: vec![30, 54, 12], controls },
                &Thresholds::default(),
                variant_by_name(name).unwrap(),
            )
        };
        let mut by_round = make();
        run_to_end(&mut by_round, &world);
        let mut shuffled = make();
        run_shuffled(&mut shuffled, &world, case * 7919);
        assert_eq!(by_round.requested_keys(), shuffled.requested_keys(), "case {case} {name}");
        for series in Series::ALL {
            assert_eq!(by_round.points().sampled(series), shuffled.points().sampled(series));
        }
        assert_eq!(by_round.cost_by_stage(), shuffled.cost_by_stage());

        // A coordinator restarting from its store: every outcome at once.
        let mut replayed = make();
        let all: Vec<(Key, Outcome)> = by_round
            .requested_keys()
            .into_iter()
            .map(|k| (k, if world(k) { Outcome::Success } else { Outcome::Failure }))
            .collect();
        replayed.record_all(all).unwrap();
        assert!(replayed.is_done());
        assert_eq!(replayed.requested_keys(), by_round.requested_keys());
    }
}

#[test]
fn keys_are_never_issued_twice_and_raising_only_adds_seeds() {
    for case in 0..40u64 {
        let world = noisy(case + 100, |t| 0.9 - f64::from(t) / 60.0);
        let name = if case % 2 == 0 { "paper" } else { "adaptive" };
        let mut s = TrajectorySchedule::new(plan(57, &[9, 33]), &Thresholds::default(), variant_by_name(name).unwrap());
        let issued = run_shuffled(&mut s, &world, case);
        let unique: HashSet<Key> = issued.iter().copied().collect();
        assert_eq!(unique.len(), issued.len());
        assert_eq!(issued.len() as u32, s.requested_total());
        // Per point, seeds are exactly 0..K.
        for series in Series::ALL {
            for t in 0..57 {
                let k = s.points().requested(series, t);
                let seeds: BTreeSet<u32> =
                    issued.iter().filter(|x| x.series == series && x.t == t).map(|x| x.seed).collect();
                assert_eq!(seeds, (0..k).collect::<BTreeSet<u32>>());
            }
        }
    }
}

#[test]
fn duplicates_change_nothing_and_retired_keys_complete_barriers() {
    let mut s = paper(10, &[]);
    let key = s.pending()[0];
    assert_eq!(s.record(key, Outcome::Success).unwrap(), Recorded::New);
    assert_eq!(s.record(key, Outcome::Failure).unwrap(), Recorded::Duplicate);
    assert_eq!(s.points().counts(Series::Main, key.t), (1, 1));
    assert!(s.record(Key { series: Series::Main, t: 10, seed: 0 }, Outcome::Success).is_err());
    // Retire every key: the schedule still finishes, with no counts.
    let mut s = paper(10, &[]);
    for _ in 0..100 {
        for key in s.pending() {
            s.record(key, Outcome::Retired).unwrap();
        }
    }
    assert!(s.is_done());
    assert!(s.points().sampled(Series::Main).is_empty());
}

fn adaptive(length: u32, labels: &[u32]) -> TrajectorySchedule {
    TrajectorySchedule::new(plan(length, labels), &Thresholds::default(), variant_by_name("adaptive").unwrap())
}

/// The `K` requested at each `t` of the main series that has pending keys.
fn pending_ks(s: &TrajectorySchedule) -> Vec<(u32, u32)> {
    pending_ts(s, Series::Main).into_iter().map(|t| (t, s.points().requested(Series::Main, t))).collect()
}

#[test]
fn adaptive_screens_in_waves_and_stops_at_the_first_certified_zero_anchor() {
    let mut s = adaptive(40, &[]);
    let world = step_at(23);
    // The first wave: four anchors at K = 4.
    assert_eq!(s.params().k_screen, 4);
    assert_eq!(pending_ks(&s), vec![(0, 4), (5, 4), (10, 4), (15, 4)]);
    answer_pending(&mut s, &world);
    // No anchor without a success yet: the next wave of three.
    assert_eq!(s.stage(), Stage::Pnr);
    assert_eq!(pending_ks(&s), vec![(20, 4), (25, 4), (30, 4)]);
    answer_pending(&mut s, &world);
    // 25 and 30 have no success: a run of two, so 25 is looked at, four continuations at a time,
    // to K_CERTIFY = 26.
    for k in [8, 12, 16, 20, 24, 26] {
        assert_eq!(pending_ks(&s), vec![(25, k)]);
        answer_pending(&mut s, &world);
    }
    assert_eq!(s.memory().certified_anchor, Some(25));
    // The anchors after the certified point are never sampled; refinement brackets the cliff.
    run_to_end(&mut s, &world);
    for t in [35, 39] {
        assert_eq!(s.points().requested(Series::Main, t), 0, "t = {t}");
    }
    assert_eq!(s.points().requested(Series::Main, 30), 4);
    let analysis = crate::analyze(40, &s.points().sampled(Series::Main), None, 100, s.params()).unwrap();
    assert_eq!(
        (analysis.pnr, analysis.t_star, analysis.decisive_interval.map(|i| (i.a, i.b))),
        (25, Some(23), Some((22, 23)))
    );
    assert_eq!(s.memory().confirmed, vec![(22, 23)]);
    assert_eq!((s.points().requested(Series::Main, 22), s.points().requested(Series::Main, 23)), (16, 16));
}

#[test]
fn adaptive_completes_a_run_before_it_looks() {
    // The value is lost at 13: the first wave ends in one anchor without a success (15), so the
    // next wave is the one anchor that completes a run of two.
    let mut s = adaptive(40, &[]);
    let world = step_at(13);
    answer_pending(&mut s, &world);
    assert_eq!(pending_ks(&s), vec![(20, 4)]);
    answer_pending(&mut s, &world);
    assert_eq!(pending_ks(&s), vec![(15, 8)]);
}

#[test]
fn adaptive_looks_at_the_next_candidate_after_a_failed_look() {
    // The value fades to 0.03 before it is lost at 30: the look at anchor 25 finds a success.
    let world = |k: Key| match k.t {
        t if t < 25 => true,
        t if t < 30 => k.seed == 12,
        _ => false,
    };
    let mut s = adaptive(40, &[]);
    run_to_end(&mut s, &world);
    assert_eq!(s.memory().certified_anchor, Some(30));
    assert_eq!(s.points().counts(Series::Main, 30), (26, 0));
    let analysis = crate::analyze(40, &s.points().sampled(Series::Main), None, 100, s.params()).unwrap();
    assert_eq!(analysis.pnr, 30);
}

#[test]
fn adaptive_certification_costs_and_bounds() {
    use crate::schedule::variants::adaptive::{K_CERTIFY, certification_z, certifies_from, look_cost};
    let params = variant_by_name("adaptive").unwrap().params(&Thresholds::default());
    assert_eq!((params.k_pnr, params.k_confirm, params.k_screen), (K_CERTIFY, 16, 4));
    assert_eq!(params.z_one_sided, certification_z(26, 0.15));
    // No success certifies exactly from 26 on, one success from 38 (beyond every K but the cap's).
    assert_eq!(certifies_from(0, params.z_one_sided, 0.15), 26);
    assert_eq!(certifies_from(1, params.z_one_sided, 0.15), 38);
    // Paid looks (when α does not cover the anchors): 0.8^22 at a screened anchor, 0.8^26 at n = 0.
    assert!((look_cost(4, 26) - 0.8f64.powi(22)).abs() < 1e-15);
    assert!((look_cost(0, 26) - 0.8f64.powi(26)).abs() < 1e-15);
    assert!(6.0 * look_cost(4, 26) <= 0.05 && 7.0 * look_cost(4, 26) > 0.05);
    // The 16 anchors of T = 100, the most of any T ≤ B, are covered by α at once; 17 would not be.
    use crate::schedule::variants::adaptive::anchors_covered;
    let most = (1..=100).map(|t| params.anchors(t).len()).max().unwrap();
    assert_eq!(most, 16);
    assert!(anchors_covered(16, 26, 0.05) && !anchors_covered(17, 26, 0.05));
    assert!(!anchors_covered(16, 24, 0.05));
}

#[test]
fn adaptive_certifies_only_through_a_look_and_rarely_on_holding_curves() {
    let mut certified = 0;
    let cases = 400u64;
    for case in 0..cases {
        // Holding curves: V ≥ 0.2 before T, down to exactly 0.2 where it matters most.
        let world = noisy(case + 7_000, |t| if t < 20 { 0.5 } else { 0.2 });
        let mut s = adaptive(70, &[25]);
        run_to_end(&mut s, &world);
        let analysis = crate::analyze(70, &s.points().sampled(Series::Main), None, 100, s.params()).unwrap();
        if analysis.pnr_certified {
            certified += 1;
            assert_eq!(s.memory().certified_anchor, Some(analysis.pnr), "case {case}");
        }
        // Outside a look no point without a success reaches K_CERTIFY.
        for p in s.points().sampled(Series::Main) {
            if p.successes == 0 && p.n >= s.params().k_pnr {
                assert_eq!(s.memory().certified_anchor, Some(p.t), "case {case}: {p:?}");
            }
        }
    }
    assert!(f64::from(certified) / cases as f64 <= 0.05, "{certified} of {cases}");
    // On falling curves the analysis certifies where the schedule did.
    for case in 0..100u64 {
        let world = noisy(case + 9_000, |t| {
            if t < 30 {
                0.6
            } else if t < 40 {
                0.1
            } else {
                0.0
            }
        });
        let mut s = adaptive(64, &[]);
        run_to_end(&mut s, &world);
        let analysis = crate::analyze(64, &s.points().sampled(Series::Main), None, 100, s.params()).unwrap();
        if analysis.pnr_certified {
            assert_eq!(s.memory().certified_anchor, Some(analysis.pnr), "case {case}");
        }
    }
}

/// Success iff `seed % 4 < round(4 · v(t))`: exact raw estimates at every multiple of 4.
fn exact4(v: impl Fn(u32) -> f64) -> impl Fn(Key) -> bool {
    move |k: Key| f64::from(k.seed % 4) < (4.0 * v(k.t)).round()
}

#[test]
fn adaptive_brackets_both_of_two_cliffs_to_one_step() {
    // Two cliffs of 0.5 each, at 22 and at 43: refinement bisects both, not only the largest.
    let world = exact4(|t| match t {
        t if t < 22 => 1.0,
        t if t < 43 => 0.5,
        _ => 0.0,
    });
    let mut s = adaptive(60, &[]);
    run_to_end(&mut s, &world);
    let sampled = |t: u32| s.points().counts(Series::Main, t).0 >= 4;
    assert!(sampled(21) && sampled(22), "the first cliff is one step wide");
    assert!(sampled(42) && sampled(43), "the second cliff is one step wide");
    let analysis = crate::analyze(60, &s.points().sampled(Series::Main), None, 100, s.params()).unwrap();
    assert_eq!(analysis.t_star, Some(22));
    assert_eq!(analysis.onset, Some(22));
}

#[test]
fn adaptive_tests_the_decisive_drop_for_an_onset_up_to_24() {
    for case in 0..200u64 {
        // A modest cliff that 16 continuations a side often leave short of significance.
        let world = noisy(case + 11_000, |t| match t {
            t if t < 30 => 0.55,
            t if t < 50 => 0.2,
            _ => 0.0,
        });
        let mut s = adaptive(70, &[]);
        run_to_end(&mut s, &world);
        let points = s.points();
        let analysis = crate::analyze(70, &points.sampled(Series::Main), None, 100, s.params()).unwrap();
        // Outside the certification look nothing is raised beyond the onset search's 24.
        for p in points.sampled(Series::Main) {
            if s.memory().certified_anchor != Some(p.t) {
                assert!(points.requested(Series::Main, p.t) <= 24, "case {case}: {p:?}");
            }
        }
        // A confirmed decisive drop with no significant pair anywhere: the search ran to 24
        // (unless the fit ended a settled erosion, where it tests the first clear drop instead).
        let Some(interval) = analysis.decisive_interval else { continue };
        let (a, b) = (interval.a, interval.b);
        let confirmed = s.memory().confirmed.contains(&(a, b));
        let settled = analysis.concentration.unwrap_or(1.0) < 0.35 && analysis.decisive_drop.unwrap_or(1.0) < 0.2;
        if analysis.onset.is_none() && confirmed && !settled && b < 70 && points.drop(Series::Main, a, b) >= 0.1 {
            let at_24 =
                points.sampled(Series::Main).iter().filter(|p| points.requested(Series::Main, p.t) == 24).count();
            assert!(at_24 >= 1, "case {case}");
        }
    }
}
