use proptest::prelude::*;

use super::*;

fn p(t: u32, successes: u32, n: u32) -> Point {
    Point { t, n, successes }
}

fn run(length: u32, points: &[Point]) -> CurveAnalysis {
    analyze(length, points, None, 100, &Thresholds::default()).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// A cliff bisected down to one step: full value through t = 8, nothing from t = 9.
fn bisected_cliff(n_at_9: u32) -> Vec<Point> {
    vec![p(0, 8, 8), p(5, 8, 8), p(7, 8, 8), p(8, 8, 8), p(9, 0, n_at_9), p(10, 0, 8), p(15, 0, 8), p(19, 0, 8)]
}

#[test]
fn cliff_located_to_one_step() {
    let a = run(20, &bisected_cliff(8));
    assert_eq!(a.decisive_interval, Some(Interval { a: 8, b: 9 }));
    assert_eq!(a.t_star, Some(9));
    assert_eq!(a.concentration, Some(1.0));
    assert_eq!(a.shape, Shape::Cliff);
    // 8/8 against 0/8: p = 1 / C(16, 8).
    assert_eq!(a.onset, Some(9));
    assert_eq!(a.onset_interval, Some(Interval { a: 8, b: 9 }));
    assert!(close(a.onset_p_value.unwrap(), 1.0 / 12_870.0));
    // Zero of 8 gives U = 0.2527 > 0.15: nothing certifies, the terminal point is the PNR.
    assert_eq!((a.pnr, a.pnr_certified), (20, false));
}

#[test]
fn zero_of_24_certifies_the_point_of_no_return() {
    let a = run(20, &bisected_cliff(24));
    assert_eq!((a.pnr, a.pnr_certified), (9, true));
}

#[test]
fn a_later_point_above_epsilon_blocks_certification() {
    // 0/24 at t = 5 would certify, but 2/8 = 0.25 > ε at t = 10 comes after it.
    let pts = [p(0, 8, 8), p(5, 0, 24), p(10, 2, 8), p(15, 0, 24), p(29, 0, 8)];
    let a = run(30, &pts);
    assert_eq!((a.pnr, a.pnr_certified), (15, true));
    // The rise at 10 is pooled with 5: (0 + 2) / 32.
    let fits: Vec<f64> = a.points.iter().map(|f| f.v_fit).collect();
    assert!(close(fits[1], 0.0625) && close(fits[2], 0.0625), "{fits:?}");
}

#[test]
fn equal_drops_go_to_the_earliest_and_make_erosion() {
    let pts = [p(0, 8, 8), p(3, 6, 8), p(6, 4, 8), p(9, 2, 8)];
    let a = run(10, &pts);
    assert_eq!(a.decisive_interval, Some(Interval { a: 0, b: 3 }));
    assert_eq!(a.t_star, Some(1));
    assert!(close(a.concentration.unwrap(), 0.25));
    assert_eq!(a.shape, Shape::Erosion);
    // 8/8 vs 6/8: p = C(14,8)/C(16,8) = 3003/12870 = 0.233 — not significant; 6/8 vs 4/8 neither,
    // 4/8 vs 2/8 neither: no onset.
    assert_eq!(a.onset, None);
}

#[test]
fn unresolved_points_enter_the_fit_but_not_the_interval() {
    // t = 4 has n = 4 < K_screen: it shapes the fit but cannot bound the decisive interval.
    let pts = [p(0, 8, 8), p(4, 0, 4), p(8, 0, 8)];
    let a = run(12, &pts);
    assert_eq!(a.decisive_interval, Some(Interval { a: 0, b: 8 }));
    assert_eq!(a.t_star, Some(1));
    assert_eq!(a.resolved.iter().map(|r| r.t).collect::<Vec<_>>(), vec![0, 8, 12]);
}

#[test]
fn a_rise_just_before_the_terminal_point_is_pooled() {
    let pts = [p(0, 8, 8), p(8, 1, 8), p(9, 3, 8)];
    let a = run(10, &pts);
    let fits: Vec<f64> = a.points.iter().map(|f| f.v_fit).collect();
    assert!(close(fits[1], 0.25) && close(fits[2], 0.25), "{fits:?}");
    assert_eq!(a.decisive_interval, Some(Interval { a: 0, b: 8 }));
    assert!(close(a.concentration.unwrap(), 0.75));
    assert_eq!(a.shape, Shape::Cliff);
}

#[test]
fn all_zero_is_flat() {
    let a = run(10, &[p(0, 0, 8), p(5, 0, 8), p(9, 0, 8)]);
    assert_eq!(a.shape, Shape::Flat);
    assert_eq!((a.t_star, a.decisive_interval, a.concentration), (None, None, None));
    assert_eq!(a.value_captured(Some(3), 0), None);
}

#[test]
fn restart_point_meets_the_margin_within_tolerance() {
    // docs/method.md §3: R̂ = 0.625 and a fitted V = 0.525 meet μ = 0.10, although the floating-point
    // difference is 0.09999999999999998.
    let (restart, fitted) = (std::hint::black_box(0.625_f64), std::hint::black_box(0.525_f64));
    assert!(restart - fitted < 0.1, "the example must exercise the tolerance");
    let runs = BaseRuns(
        [(true, 30), (true, 30), (true, 30), (true, 30), (true, 30), (false, 100), (false, 100), (false, 100)]
            .map(|(success, steps)| BaseRun { success, steps })
            .to_vec(),
    );
    let pts = [p(0, 21, 40), p(5, 0, 8)];
    let a = analyze(50, &pts, Some(&runs), 100, &Thresholds::default()).unwrap();
    assert_eq!(a.restart_point, Some(0));
    // With a tighter budget the successes no longer fit: at t = 0, R̂(x, 25) = 0; at t = 5 the
    // fit is 0 and R̂(x, 20) = 0; at the terminal point R̂(x, −25) = 0.
    let a = analyze(50, &pts, Some(&runs), 25, &Thresholds::default()).unwrap();
    assert_eq!(a.restart_point, None);
}

#[test]
fn restart_value_counts_successes_within_budget() {
    let runs = BaseRuns(vec![
        BaseRun { success: true, steps: 40 },
        BaseRun { success: true, steps: 80 },
        BaseRun { success: false, steps: 100 },
        BaseRun { success: false, steps: 20 },
    ]);
    assert_eq!(runs.pass_rate(), Some(0.5));
    assert_eq!(runs.restart_value(100), Some(0.5));
    assert_eq!(runs.restart_value(79), Some(0.25));
    assert_eq!(runs.restart_value(40), Some(0.25));
    assert_eq!(runs.restart_value(39), Some(0.0));
    assert_eq!(runs.restart_value(-5), Some(0.0));
    assert_eq!(BaseRuns::default().restart_value(10), None);
}

#[test]
fn value_captured_reads_the_fit() {
    let a = run(20, &bisected_cliff(8));
    // V(h_0) − V(h_T) = 1.
    assert_eq!(a.value_captured(Some(9), 0), Some(1.0));
    assert_eq!(a.value_captured(Some(12), 0), Some(0.0));
    // k = 1 around m = 10: V(h_8) − V(h_11) = 1 − (value at 10) = 1.
    assert_eq!(a.value_captured(Some(10), 1), Some(1.0));
    // k = 3 around m = 1: indices clamp to 0 and 4 (value of 0): nothing captured.
    assert_eq!(a.value_captured(Some(1), 3), Some(0.0));
    // Step 6 is not resolved: it takes the value of 5 (1.0); step 12 takes 10's (0).
    assert_eq!(a.value_captured(Some(7), 5), Some(1.0));
    assert_eq!(a.value_captured(None, 3), Some(0.0));
    assert_eq!(a.v0_fit(), Some(1.0));
}

#[test]
fn bad_points_are_rejected() {
    let t = Thresholds::default();
    assert_eq!(analyze(0, &[], None, 100, &t).unwrap_err(), CurveError::EmptyTrajectory);
    assert_eq!(
        analyze(10, &[p(10, 0, 8)], None, 100, &t).unwrap_err(),
        CurveError::BeyondTerminal { t: 10, length: 10 }
    );
    assert_eq!(
        analyze(10, &[p(3, 9, 8)], None, 100, &t).unwrap_err(),
        CurveError::MoreSuccessesThanRuns { t: 3, successes: 9, n: 8 }
    );
    assert_eq!(analyze(10, &[p(3, 0, 0)], None, 100, &t).unwrap_err(), CurveError::NoContinuations { t: 3 });
    assert_eq!(analyze(10, &[p(3, 1, 8), p(3, 2, 8)], None, 100, &t).unwrap_err(), CurveError::DuplicateStep { t: 3 });
}

#[test]
fn no_points_at_all_leaves_only_the_terminal_point() {
    let a = run(5, &[]);
    assert_eq!(a.shape, Shape::Flat);
    assert_eq!((a.pnr, a.pnr_certified), (5, false));
}

fn curves() -> impl Strategy<Value = (u32, Vec<Point>)> {
    (2u32..120).prop_flat_map(|length| {
        let points = prop::collection::btree_map(0..length, (1u32..=32, 0u32..=32), 1..30)
            .prop_map(|m| m.into_iter().map(|(t, (n, s))| Point { t, n, successes: s.min(n) }).collect::<Vec<_>>());
        (Just(length), points)
    })
}

proptest! {
    #[test]
    fn drops_telescope_and_concentration_is_a_share((length, points) in curves()) {
        let a = run(length, &points);
        let drops: Vec<f64> = a.resolved_drops().map(|(_, d)| d).collect();
        // The fit cannot rise, so drops are non-negative and sum to V(first resolved) − V(T).
        prop_assert!(drops.iter().all(|&d| d >= -1e-12));
        let first = a.resolved.first().unwrap().v_fit;
        prop_assert!((drops.iter().sum::<f64>() - first).abs() < 1e-9);
        match a.concentration {
            Some(c) => prop_assert!(c > 0.0 && c <= 1.0 + 1e-12),
            None => prop_assert_eq!(a.shape, Shape::Flat),
        }
        prop_assert!(a.pnr <= length);
        if let Some(Interval { a: lo, b: hi }) = a.decisive_interval {
            prop_assert!(lo < hi && hi <= length);
        }
    }
}
