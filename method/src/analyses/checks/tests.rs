use super::super::testing::*;
use super::*;
use crate::BaseRun;

fn ratio(hits: u32, total: u32) -> Ratio {
    Ratio { hits, total }
}

#[test]
fn sanity_uses_the_two_sided_fisher_test() {
    let runs = BaseRuns(
        (0..8).map(|i| BaseRun { success: i < 2, steps: 30 }).collect(), // 2 of 8
    );
    let inputs = vec![
        SanityInput::new("same", Point { t: 0, n: 8, successes: 2 }, &runs),
        SanityInput { trajectory: "far".into(), at_h0: ratio(8, 8), base: ratio(0, 8) },
        SanityInput { trajectory: "tea".into(), at_h0: ratio(3, 4), base: ratio(1, 4) },
    ];
    let report = sanity_control(&inputs, &Thresholds::default());
    assert!(close(report.rows[0].p_value, 1.0) && report.rows[0].passes);
    assert_eq!(report.rows[0].pass_rate, Some(0.25));
    // 8/8 vs 0/8: two tables as extreme, 2 / C(16, 8).
    assert!(close(report.rows[1].p_value, 2.0 / 12_870.0) && !report.rows[1].passes);
    assert!(close(report.rows[2].p_value, 34.0 / 70.0) && report.rows[2].passes);
    assert_eq!(report.passed, ratio(2, 3));
}

#[test]
fn retest_median_and_counts() {
    let row = |t, a, b| RetestInput { trajectory: "r".into(), t, first: ratio(a, 8), second: ratio(b, 8) };
    let report = retest_control(&[row(0, 4, 4), row(5, 2, 4), row(10, 0, 3), row(15, 1, 1)], &Thresholds::default());
    assert_eq!(report.anchors, 4);
    // Gaps 0, 0.25, 0.375, 0 → sorted 0, 0, 0.25, 0.375 → median 0.125.
    assert!(close(report.median_gap.unwrap(), 0.125));
    assert!(close(report.max_gap.unwrap(), 0.375));
    assert_eq!((report.identical, report.beyond_delta), (2, 1), "a gap of exactly 0.25 is not beyond δ");
    let empty = retest_control(
        &[RetestInput { trajectory: "r".into(), t: 0, first: ratio(0, 0), second: ratio(1, 8) }],
        &Thresholds::default(),
    );
    assert_eq!((empty.anchors, empty.median_gap), (0, None));
}

#[test]
fn budget_control_directions() {
    let s = |t_star, shape| Screening { t_star, shape };
    let input = |id: &str, length, r, f| BudgetControlInput {
        trajectory: id.into(),
        length,
        remaining: r,
        full: f,
        final_t_star: None,
    };
    let report = budget_control(&[
        input("same", 60, s(Some(6), Shape::Cliff), s(Some(6), Shape::Cliff)),
        input("near", 60, s(Some(6), Shape::Cliff), s(Some(9), Shape::Erosion)),
        input("later", 100, s(Some(46), Shape::Erosion), s(Some(100), Shape::Cliff)),
        input("earlier", 60, s(Some(20), Shape::Cliff), s(Some(10), Shape::Cliff)),
        input("flat", 60, s(None, Shape::Flat), s(None, Shape::Flat)),
    ]);
    assert_eq!(report.within_three, ratio(3, 5));
    assert_eq!(report.shape_agrees, ratio(3, 5));
    assert_eq!((report.later, report.earlier, report.to_last_step), (2, 1, 1));
    assert_eq!(report.rows[2].shift, Some(54));
    assert!(report.rows[2].full_at_last_step);
}

fn passing_inputs() -> CheckInputs {
    let params = Thresholds::default();
    CheckInputs {
        replay: Some(ratio(47, 64)),
        flake: Some(ratio(0, 46)),
        sanity: sanity_control(
            &[SanityInput { trajectory: "a".into(), at_h0: ratio(4, 8), base: ratio(4, 8) }],
            &params,
        ),
        retest: retest_control(
            &[RetestInput { trajectory: "a".into(), t: 0, first: ratio(4, 8), second: ratio(4, 8) }],
            &params,
        ),
        cap_hits: Some(ratio(4_828, 15_576)),
        resolved: ratio(47, 47),
        cache: Some(CacheUse { evaluations: 1_200, through_cache: 1_200, unique_patches: 805 }),
    }
}

#[test]
fn checks_pass_fail_and_not_measured() {
    let params = Thresholds::default();
    let criteria = CheckCriteria::default();
    let report = checks(&passing_inputs(), &criteria, &params);
    assert_eq!(report.verdict, Verdict::Pass, "{report:#?}");
    assert_eq!(report.checks.len(), 7);
    assert_eq!(report.checks[0].value, "47/64 (73%)");

    // Replay exactly at 70% passes; below fails.
    let mut inputs = passing_inputs();
    inputs.replay = Some(ratio(7, 10));
    assert_eq!(checks(&inputs, &criteria, &params).checks[0].status, Status::Pass);
    inputs.replay = Some(ratio(69, 100));
    assert_eq!(checks(&inputs, &criteria, &params).verdict, Verdict::Fail);

    // Flake: 3% passes, above fails.
    let mut inputs = passing_inputs();
    inputs.flake = Some(ratio(3, 100));
    assert_eq!(checks(&inputs, &criteria, &params).checks[1].status, Status::Pass);
    inputs.flake = Some(ratio(4, 100));
    assert_eq!(checks(&inputs, &criteria, &params).checks[1].status, Status::Fail);

    // Cap hits: below 35%, with the tolerance in favour of meeting it (as `p < α`): exactly
    // 35% meets, 36% does not.
    let mut inputs = passing_inputs();
    inputs.cap_hits = Some(ratio(35, 100));
    assert_eq!(checks(&inputs, &criteria, &params).checks[4].status, Status::Pass);
    inputs.cap_hits = Some(ratio(36, 100));
    assert_eq!(checks(&inputs, &criteria, &params).checks[4].status, Status::Fail);
    inputs.cap_hits = Some(ratio(58, 100));
    assert_eq!(checks(&inputs, &criteria, &params).verdict, Verdict::Fail);

    // Resolved: 60% passes.
    let mut inputs = passing_inputs();
    inputs.resolved = ratio(3, 5);
    assert_eq!(checks(&inputs, &criteria, &params).checks[5].status, Status::Pass);
    inputs.resolved = ratio(2, 5);
    assert_eq!(checks(&inputs, &criteria, &params).checks[5].status, Status::Fail);

    // A sanity trajectory rejected, a retest gap too large, an evaluation around the cache.
    let mut inputs = passing_inputs();
    inputs.sanity =
        sanity_control(&[SanityInput { trajectory: "a".into(), at_h0: ratio(8, 8), base: ratio(0, 8) }], &params);
    inputs.retest = retest_control(
        &[RetestInput { trajectory: "a".into(), t: 0, first: ratio(8, 8), second: ratio(2, 8) }],
        &params,
    );
    inputs.cache = Some(CacheUse { evaluations: 10, through_cache: 9, unique_patches: 9 });
    let report = checks(&inputs, &criteria, &params);
    let failed: Vec<&str> = report.checks.iter().filter(|c| c.status == Status::Fail).map(|c| c.id.as_str()).collect();
    assert_eq!(failed, ["t0_sanity", "test_retest", "cache"]);

    // A synthetic study: replay not measured, nothing else wrong → incomplete.
    let mut inputs = passing_inputs();
    inputs.replay = None;
    let report = checks(&inputs, &criteria, &params);
    assert_eq!(report.checks[0].status, Status::NotMeasured);
    assert_eq!(report.checks[0].value, "not measured");
    assert_eq!(report.verdict, Verdict::Incomplete);
}

#[test]
fn a_check_not_measured_exports_null_with_its_reason() {
    let params = Thresholds::default();
    let mut inputs = passing_inputs();
    inputs.replay = None;
    inputs.flake = None;
    inputs.cache = None;
    inputs.cap_hits = Some(ratio(0, 0));
    inputs.sanity = sanity_control(&[], &params);
    inputs.retest = retest_control(&[], &params);
    let report = checks(&inputs, &CheckCriteria::default(), &params);
    let json = serde_json::to_value(&report).unwrap();
    let by_id = |id: &str| json["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap().clone();
    for id in ["replay", "flake", "t0_sanity", "test_retest", "cap_hits", "cache"] {
        let c = by_id(id);
        assert_eq!(c["value"], serde_json::Value::Null, "{id}: {c}");
        assert_eq!(c["status"], "not_measured", "{id}");
    }
    // Measured checks keep their value; a measured 0 is 0.
    inputs.flake = Some(ratio(0, 46));
    let report = checks(&inputs, &CheckCriteria::default(), &params);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["checks"][1]["value"], "0/46 (0%)");
    assert_eq!(json["checks"][5]["value"], "47/47 (100%)");
    assert_eq!(json["verdict"], "incomplete");
    // Read back, a check not measured prints as such.
    let back: ChecksReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
    assert_eq!(back.checks[0].value, NOT_MEASURED);
}

#[test]
fn replay_and_flake_over_nothing_are_not_measured() {
    let params = Thresholds::default();
    let mut inputs = passing_inputs();
    // No trajectory's replay finished, no flake check made: not measured, not 0%.
    inputs.replay = Some(ratio(0, 0));
    inputs.flake = Some(ratio(0, 0));
    let report = checks(&inputs, &CheckCriteria::default(), &params);
    for c in &report.checks[..2] {
        assert_eq!((c.status, c.value.as_str()), (Status::NotMeasured, NOT_MEASURED), "{}", c.id);
    }
    assert_eq!(report.verdict, Verdict::Incomplete);
    // A measured 0 of some is measured: every replay failed.
    inputs.replay = Some(ratio(0, 3));
    let report = checks(&inputs, &CheckCriteria::default(), &params);
    assert_eq!((report.checks[0].status, report.checks[0].value.as_str()), (Status::Fail, "0/3 (0%)"));
}

#[test]
fn the_cache_check_with_its_figures() {
    let params = Thresholds::default();
    let criteria = CheckCriteria::default();
    let figures = CacheFigures { evaluations: 830, saved_share: Some(370.0 / 1_200.0) };
    let cache = |inputs: &CheckInputs, figures: &CacheFigures| {
        checks(inputs, &criteria, &params).with_cache_figures(figures).checks[6].clone()
    };

    // Measured, passing: every run judged through the cache; the figures follow the count.
    let inputs = passing_inputs();
    let c = cache(&inputs, &figures);
    assert_eq!(c.status, Status::Pass);
    assert_eq!(c.value, "1200/1200 (805 unique patches); 830 evaluations, 31% saved by the cache");
    // Without figures the value is the paper's.
    assert_eq!(checks(&inputs, &criteria, &params).checks[6].value, "1200/1200 (805 unique patches)");

    // Measured, failing: a run judged around the cache, or judged runs with no run behind them.
    let mut inputs = passing_inputs();
    inputs.cache = Some(CacheUse { evaluations: 1_200, through_cache: 1_199, unique_patches: 805 });
    let c = cache(&inputs, &figures);
    assert_eq!(c.status, Status::Fail);
    assert!(c.value.starts_with("1199/1200 (805 unique patches); 830 evaluations"), "{}", c.value);
    inputs.cache = Some(CacheUse { evaluations: 0, through_cache: 3, unique_patches: 2 });
    let c = cache(&inputs, &CacheFigures { evaluations: 2, saved_share: None });
    assert_eq!((c.status, c.value.as_str()), (Status::Fail, "3/0 (2 unique patches); 2 evaluations"));

    // Not measured: a study that judges no patch, or an agent study with no run yet; the
    // figures are not added to "not measured".
    for unmeasured in [None, Some(CacheUse { evaluations: 0, through_cache: 0, unique_patches: 0 })] {
        let mut inputs = passing_inputs();
        inputs.cache = unmeasured;
        let report = checks(&inputs, &criteria, &params).with_cache_figures(&figures);
        assert_eq!((report.checks[6].status, report.checks[6].value.as_str()), (Status::NotMeasured, NOT_MEASURED));
        assert_eq!(report.verdict, Verdict::Incomplete);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][6]["value"], serde_json::Value::Null);
    }
}

#[test]
fn runs_capped_by_the_wall_clock_limit_are_shown_beside_the_cap_hits() {
    let params = Thresholds::default();
    let criteria = CheckCriteria::default();
    let report = checks(&passing_inputs(), &criteria, &params);
    let plain = report.checks.iter().find(|c| c.id == "cap_hits").unwrap().clone();
    let with = report.clone().with_capped_runs(3);
    let c = with.checks.iter().find(|c| c.id == "cap_hits").unwrap();
    assert_eq!(c.value, format!("{}; 3 runs capped by the wall-clock limit (no outcome, not in n)", plain.value));
    assert_eq!((c.status, with.verdict), (plain.status, report.verdict), "shown, not judged");
    assert_eq!(report.clone().with_capped_runs(0), report);
    // Not measured (no continuation with an outcome): the count goes into the check's name.
    let mut inputs = passing_inputs();
    inputs.cap_hits = None;
    let with = checks(&inputs, &criteria, &params).with_capped_runs(1);
    let c = with.checks.iter().find(|c| c.id == "cap_hits").unwrap();
    assert_eq!((c.status, c.value.as_str()), (Status::NotMeasured, NOT_MEASURED));
    assert!(c.check.ends_with("(1 run capped by the wall-clock limit (no outcome, not in n))"), "{}", c.check);
}

#[test]
fn resolved_counts_confirmed_or_certified() {
    let certified = record("a", "x", 30, 10, 11, 20);
    let mut confirmed = record("b", "x", 30, 10, 11, 30);
    confirmed.confirmed_drop = true;
    let neither = record("c", "x", 30, 10, 11, 30);
    assert_eq!(resolved(&[certified, confirmed, neither]), ratio(2, 3));
}
