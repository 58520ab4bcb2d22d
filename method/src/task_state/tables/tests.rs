use super::*;
use crate::task_state::records::{Category, CheckpointRecord, Credit, EligibilityFlags, ProbeRecord};
use crate::task_state::settings::WeightScheme;

/// `ctxgap-1` with fewer draws: these tests check identities, not the study's interval widths
/// (the paper-sized study below runs the full 10,000).
fn fast() -> EstimatorSettings {
    EstimatorSettings { bootstrap_draws: 1_000, decomposition_draws: 200, ..EstimatorSettings::ctxgap_1() }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// How deep a view reads (the credits of the synthetic study grow with it).
fn level(view: View) -> u32 {
    match view {
        View::TaskOnly => 0,
        View::LatestReport => 1,
        View::Reports | View::ReportsNarration => 2,
        View::ReportsHeaders | View::ReportsLast3 | View::ReportsLast10 => 3,
        View::Scrollback => 4,
        View::FullMinusReasoning => 5,
        View::Full | View::Actor => 6,
    }
}

/// `tasks` four-turn sessions, 4 eligible probes per checkpoint (3 of 6 fact atoms, 1 of 3
/// failure atoms), and two ineligible probes per task.
fn study(tasks: u32) -> StudyInput {
    let mut input = StudyInput::default();
    for t in 0..tasks {
        let task = format!("issue-{t:02}");
        for k in 1..=4u32 {
            input.checkpoints.push(CheckpointRecord {
                task: task.clone(),
                checkpoint: k,
                fixed: Some(k == 4 && t % 5 != 0),
                view_chars: View::ALL.iter().map(|&v| (v, 1000 * u64::from(level(v)) + u64::from(t))).collect(),
                atoms: BTreeMap::from([(Category::Facts, 6), (Category::Failures, 3)]),
            });
            for i in 0..4u32 {
                let h = (t * 31 + k * 7 + i * 3) % 7;
                let credits = View::ALL
                    .iter()
                    .map(|&v| {
                        let samples = (0..3)
                            .map(|s| {
                                let x = (h + s) % 7;
                                if x < level(v) {
                                    Credit::Full
                                } else if x == level(v) {
                                    Credit::Partial
                                } else {
                                    Credit::None
                                }
                            })
                            .collect();
                        (v, samples)
                    })
                    .collect();
                input.probes.push(ProbeRecord {
                    probe: format!("{task}-k{k}-{i}"),
                    task: task.clone(),
                    checkpoint: k,
                    category: if i < 3 { Category::Facts } else { Category::Failures },
                    importance: 2 + i % 2,
                    origin_turn: 1 + i % k,
                    flags: EligibilityFlags { well_formed: true, excluded: None },
                    credits,
                });
            }
        }
        let mut low = input.probes.last().unwrap().clone();
        low.probe = format!("{task}-low");
        low.importance = 1;
        let mut malformed = low.clone();
        malformed.probe = format!("{task}-malformed");
        malformed.flags.well_formed = false;
        input.probes.extend([low, malformed]);
    }
    input
}

fn value(e: &Estimate) -> f64 {
    e.value.unwrap()
}

fn row(report: &TaskStateReport, view: View) -> &ViewRow {
    report.views.iter().find(|r| r.view == view).unwrap()
}

#[test]
fn table_13_telescopes_exactly_from_the_printed_steps() {
    // .5205 + .215436 + .154222 + .036924 = .927082; each step over .406582 gives the shares
    // 53.0%, 37.9% and 9.1%; the displayed accuracies are .7359, .8902, .9271.
    let u = 0.5205;
    let v = u + 0.215436;
    let tmr = v + 0.154222;
    let t = tmr + 0.036924;
    assert!(close(t, 0.927082, 1e-12));
    let d = Decomposition::from_accuracies(&[
        (View::Reports, u),
        (View::Scrollback, v),
        (View::FullMinusReasoning, tmr),
        (View::Full, t),
    ])
    .unwrap();
    assert!(close(d.gap, 0.406582, 1e-12));
    assert_eq!(format!("{:.4}", d.gap), "0.4066");
    let steps: Vec<f64> = d.rows.iter().filter_map(|r| r.step).collect();
    for (s, printed) in steps.iter().zip([0.215436, 0.154222, 0.036924]) {
        assert!(close(*s, printed, 1e-12), "{s}");
    }
    let shares: Vec<String> = d.rows.iter().filter_map(|r| r.share).map(|s| format!("{:.1}", 100.0 * s)).collect();
    assert_eq!(shares, ["53.0", "37.9", "9.1"]);
    let accuracies: Vec<String> = d.rows.iter().map(|r| format!("{:.4}", r.accuracy)).collect();
    assert_eq!(accuracies, ["0.5205", "0.7359", "0.8902", "0.9271"]);
    assert!(close(d.rows.iter().filter_map(|r| r.share).sum::<f64>(), 1.0, 1e-12));
    assert_eq!((d.rows[0].step, d.rows[0].share), (None, None));
    // No gap: no shares.
    let flat = Decomposition::from_accuracies(&[(View::Reports, 0.5), (View::Full, 0.5)]).unwrap();
    assert_eq!(flat.rows[1].share, None);
    // Nor when two equal accuracies (134/270, from two views' sums) come out a rounding error
    // apart: a gap of -1.7e-16 gave shares of ±10^14 (found by `identities_hold_on_any_study`).
    let chain = [
        (View::Reports, 0.4962962962962964),
        (View::Scrollback, 0.5425925925925925),
        (View::FullMinusReasoning, 0.41851851851851846),
        (View::Full, 0.49629629629629624),
    ];
    let rounded = Decomposition::from_accuracies(&chain).unwrap();
    assert_eq!(rounded.gap, 0.0);
    assert!(rounded.rows.iter().all(|r| r.share.is_none()), "{:?}", rounded.rows);
    assert!(close(rounded.rows.iter().filter_map(|r| r.step).sum::<f64>(), 0.0, 1e-12));
}

#[test]
fn table_13_the_decomposition_of_a_study_telescopes_to_its_gap() {
    let s = EstimatorSettings::ctxgap_1();
    let report = analyze(&study(12), &s).unwrap();
    let d = report.decomposition.as_ref().unwrap();
    assert_eq!((d.probes, d.tasks), (192, 12));
    let steps: f64 = d.rows.iter().filter_map(|r| r.step).sum();
    assert!(close(steps, d.gap, 1e-12));
    assert!(close(d.rows.iter().filter_map(|r| r.share).sum::<f64>(), 1.0, 1e-12));
    // Complete data: the decomposed gap is the headline Gap_view(U), and each row's accuracy
    // is its view's.
    assert!(close(d.gap, value(&row(&report, View::Reports).gap_view), 1e-12));
    for r in &d.rows {
        assert!(close(r.accuracy, value(&row(&report, r.view).accuracy), 1e-12));
        if let (Some(share), Some(ci)) = (r.share, r.share_ci) {
            assert!(ci.lo <= share + 1e-12 && share <= ci.hi + 1e-12, "{r:?}");
        }
    }
    assert!(d.rows[1..].iter().all(|r| r.share_ci.is_some()));
}

#[test]
fn tables_1_5_14_gaps_are_differences_of_accuracies() {
    // Table 1: .927 − .520 = .407, .927 − .736 = .191, .919 − .571 = .348.
    // Table 5: A − U = .936 − .520 = .416 (Gap_actor), T − U = .407 (Gap_view).
    // Table 14: Gap_actor = .936 − accuracy, to the printed rounding.
    for (a, b, gap) in [(0.927, 0.520, 0.407), (0.927, 0.736, 0.191), (0.919, 0.571, 0.348), (0.936, 0.520, 0.416)] {
        assert!(close(a - b, gap, 1e-9 + 1e-3 / 2.0), "{a} − {b} ≠ {gap}");
    }
    for (acc, gap_actor) in
        [(0.239, 0.697), (0.520, 0.416), (0.545, 0.391), (0.639, 0.297), (0.657, 0.279), (0.690, 0.247)]
    {
        assert!(close(0.936 - acc, gap_actor, 1e-3 + 1e-9), "{acc} {gap_actor}");
    }
    // Table 9: .9271 − .5205 = .4066, .9372 − .4748 = .4624, .9328 − .4950 = .4378; 4,799 + 5,387 = 10,186.
    for (t, u, gap) in [(0.9271, 0.5205, 0.4066), (0.9372, 0.4748, 0.4624), (0.9328, 0.4950, 0.4378)] {
        assert!(close(t - u, gap, 1e-9));
    }
    assert_eq!(4_799 + 5_387, 10_186);
    // Table 35 (Gap_actor, original and re-scored): .935 − .514 = .421, .972 − .540 = .432, change .011.
    assert!(close(0.935 - 0.514, 0.421, 1e-9) && close(0.972 - 0.540, 0.432, 1e-9));
    assert!(close(0.432 - 0.421, 0.011, 1e-9));
    // Table 45: Gap_view = Acc(T) − Acc(U) per generator/observer pair; Table 46's contrasts are
    // differences of those gaps.
    let g = [0.8995 - 0.5206, 0.8462 - 0.5012, 0.8874 - 0.4879, 0.8547 - 0.4564];
    for (x, printed) in g.iter().zip([0.3789, 0.3450, 0.3995, 0.3983]) {
        assert!(close(*x, printed, 1e-9));
    }
    for (x, printed) in [(g[2] - g[0], 0.0206), (g[3] - g[1], 0.0533), (g[1] - g[0], -0.0339), (g[3] - g[2], -0.0012)] {
        assert!(close(x, printed, 1e-9), "{x} {printed}");
    }
    // Tables 52 and 54: Gap_view = Acc(T) − Acc(U) per harness and executor; Table 49's pooled
    // DS − HY4 contrast (Table 51): .3985 − .4066 = −.0081.
    for (t, u, gap) in [
        (0.932, 0.525, 0.407),
        (0.940, 0.550, 0.390),
        (0.919, 0.429, 0.490),
        (0.9487, 0.4264, 0.5223),
        (0.9482, 0.4212, 0.5270),
    ] {
        assert!(close(t - u, gap, 1e-9));
    }
    assert!(close(0.5270 - 0.5223, 0.0047, 1e-9) && close(0.3985 - 0.4066, -0.0081, 1e-9));

    // On a study's records, exactly.
    let report = analyze(&study(12), &fast()).unwrap();
    let (t, a) = (value(&row(&report, View::Full).accuracy), value(&row(&report, View::Actor).accuracy));
    for r in &report.views {
        assert!(close(value(&r.gap_view), t - value(&r.accuracy), 1e-12), "{r:?}");
        assert!(close(value(&r.gap_actor), a - value(&r.accuracy), 1e-12), "{r:?}");
        assert_eq!(r.accuracy.probes, 192);
        let ci = r.accuracy.ci.unwrap();
        assert!(ci.lo <= value(&r.accuracy) && value(&r.accuracy) <= ci.hi);
    }
    assert_eq!(report.views.len(), 11);
    assert_eq!(report.accuracy().len(), 11);
    assert_eq!(report.accuracy()["reports"], value(&row(&report, View::Reports).accuracy));
}

#[test]
fn table_14_mean_characters_are_means_over_checkpoints() {
    let report = analyze(&study(3), &fast()).unwrap();
    // chars = 1000·level + task index: mean over 12 checkpoints of tasks 0, 1, 2 adds 1.
    assert_eq!(row(&report, View::Reports).mean_chars, Some(2001.0));
    assert_eq!(row(&report, View::Full).mean_chars, Some(6001.0));
    assert_eq!(row(&report, View::Reports).symbol, "U");
    let mut input = study(1);
    input.checkpoints.iter_mut().for_each(|c| c.view_chars.clear());
    assert_eq!(row(&analyze(&input, &fast()).unwrap(), View::Full).mean_chars, None);
}

#[test]
fn tables_15_and_50_by_checkpoint() {
    // Table 50: the per-k valid probes add up to the sample (HY4: 789 + 1,223 + 1,337 + 1,450),
    // and each k's gap is Acc(T) − Acc(U) (to the printed rounding).
    assert_eq!(789 + 1_223 + 1_337 + 1_450, 4_799);
    for (u, t, gap) in [(0.496, 0.917, 0.421), (0.468, 0.922, 0.453), (0.501, 0.940, 0.439), (0.579, 0.924, 0.345)] {
        assert!(close(t - u, gap, 1e-3 + 1e-9));
    }
    // Table 15: unaligned = fresh + earlier (to the printed rounding).
    for (fresh, earlier, unaligned) in
        [(9.423, 0.014, 9.436), (11.546, 7.480, 19.027), (3.057, 17.984, 21.041), (3.411, 18.869, 22.280)]
    {
        assert!(close(fresh + earlier, unaligned, 1e-3 + 1e-9));
    }

    let input = study(12);
    let report = analyze(&input, &fast()).unwrap();
    let ks: Vec<u32> = report.checkpoints.iter().map(|r| r.checkpoint).collect();
    assert_eq!(ks, [1, 2, 3, 4]);
    assert_eq!(report.checkpoints.iter().map(|r| r.probes).sum::<u64>(), report.inventory.probes_eligible);
    for r in &report.checkpoints {
        assert_eq!(r.sessions, 12);
        assert!(close(r.fresh + r.earlier, r.unaligned, 1e-12));
        assert!(close(value(&r.gap_view), r.accuracy_full.unwrap() - r.accuracy_reports.unwrap(), 1e-12));
        assert!(close(value(&r.gap_actor), r.accuracy_actor.unwrap() - r.accuracy_reports.unwrap(), 1e-12));
    }
    // At k = 1 every atom arose in turn 1: nothing is earlier.
    assert_eq!(report.checkpoints[0].earlier, 0.0);
    // By hand at k = 2: unaligned probes (T above U) weigh 2 (facts) or 3 (failures) atoms.
    let s = EstimatorSettings::ctxgap_1();
    let (mut fresh, mut earlier) = (0.0, 0.0);
    for p in input.probes.iter().filter(|p| p.checkpoint == 2 && eligibility(p, &s).is_ok()) {
        let score = |v| crate::task_state::view_score(p, v, &s).unwrap();
        if score(View::Full) > score(View::Reports) {
            let w = if p.category == Category::Facts { 2.0 } else { 3.0 };
            if p.origin_turn == 2 { fresh += w } else { earlier += w }
        }
    }
    assert!(close(report.checkpoints[1].fresh, fresh / 12.0, 1e-12));
    assert!(close(report.checkpoints[1].earlier, earlier / 12.0, 1e-12));
}

#[test]
fn tables_1_and_10_outcome_subsets() {
    // Table 10: fixed at k = 4: .5705 + .3479 = .9184 ≈ Acc(T) .9185. Its 1,172 probes are among
    // the 1,450 at k = 4 (Table 50's k = 4 row), as the fixed-at-final row is a subset of the
    // all-at-final row here.
    assert!(close(0.5705 + 0.3479, 0.9185, 1e-4 + 1e-9));

    let input = study(10);
    let report = analyze(&input, &fast()).unwrap();
    let [fixed_final, fixed_all, all_final] = [0, 1, 2].map(|i| &report.outcomes[i]);
    assert_eq!(fixed_final.subset, Subset::FixedAtFinal);
    // Tasks 0 and 5 are not fixed: 8 fixed tasks × 4 probes at k = 4, × 16 over all k; 10 × 4 at k = 4.
    assert_eq!((fixed_final.gap_view.probes, fixed_final.gap_view.tasks), (32, 8));
    assert_eq!((fixed_all.gap_view.probes, fixed_all.gap_view.tasks), (128, 8));
    assert_eq!((all_final.gap_view.probes, all_final.gap_view.tasks), (40, 10));
    assert!(fixed_final.gap_view.probes <= all_final.gap_view.probes);
    assert!(fixed_all.gap_view.probes <= report.inventory.probes_eligible);
    for r in &report.outcomes {
        assert!(close(value(&r.gap_view), r.accuracy_full.unwrap() - r.accuracy_reports.unwrap(), 1e-12));
    }
    // The k = 4 row of the checkpoint table is the all-at-final row.
    assert_eq!(report.checkpoints[3].gap_view, all_final.gap_view);
    // Unjudged checkpoints are in no fixed row.
    let mut unjudged = input;
    unjudged.checkpoints.iter_mut().for_each(|c| c.fixed = None);
    let report = analyze(&unjudged, &fast()).unwrap();
    assert_eq!((report.outcomes[0].gap_view.probes, report.outcomes[0].gap_view.value), (0, None));
    assert_eq!(report.outcomes[2].gap_view.probes, 40);
}

#[test]
fn table_4_inventory_and_table_2_eligibility() {
    // Table 4: 37 × 4 = 148 checkpoints, 46 × 4 = 184, 30 × 4 = 120, 12 × 3 = 36 trajectories;
    // Table 2: 4,799 of 4,855 retained.
    assert_eq!((37 * 4, 46 * 4, 30 * 4, 12 * 3), (148, 184, 120, 36));
    assert_eq!(4_855 - 4_799, 56);

    let report = analyze(&study(12), &fast()).unwrap();
    let inv = &report.inventory;
    assert_eq!((inv.tasks, inv.checkpoints, inv.probes_generated, inv.probes_eligible), (12, 48, 216, 192));
    assert_eq!(inv.exclusions, BTreeMap::from([(Exclusion::NotWellFormed, 12), (Exclusion::BelowMinImportance, 12)]));
    assert_eq!(inv.probes_generated, inv.probes_eligible + inv.exclusions.values().sum::<u64>());
    assert_eq!(inv.scored_samples[&View::Reports], 216 * 3);
}

#[test]
fn table_2_the_eligibility_filters_effect_on_the_gap() {
    // Two probes of one stratum (4 atoms): the eligible one (U 0, T 1) and a low-importance one
    // (U 1, T 1). Eligible: gap 1. All scored (weights 2 each): gap 0.5. Effect: +0.5.
    let s = EstimatorSettings::ctxgap_1();
    let mut input = study(1);
    input.probes.clear();
    input.checkpoints.truncate(1);
    input.checkpoints[0].atoms = BTreeMap::from([(Category::Facts, 4)]);
    let mk = |id: &str, importance, u: Credit| ProbeRecord {
        probe: id.into(),
        task: "issue-00".into(),
        checkpoint: 1,
        category: Category::Facts,
        importance,
        origin_turn: 1,
        flags: EligibilityFlags { well_formed: true, excluded: None },
        credits: BTreeMap::from([(View::Reports, vec![u; 3]), (View::Full, vec![Credit::Full; 3])]),
    };
    input.probes = vec![mk("kept", 3, Credit::None), mk("dropped", 1, Credit::Full)];
    let report = analyze(&input, &s).unwrap();
    assert_eq!(report.inventory.eligibility_effect, Some(0.5));
    assert_eq!(value(&row(&report, View::Reports).accuracy), 0.0);
    // One task: the task-equal mean has no interval.
    assert_eq!(report.task_equal[0].accuracy.unwrap().ci, None);
}

#[test]
fn a_known_study_by_hand_and_its_json() {
    // Uniform weights, two tasks: U scores 1, 0 | 0.5; T scores 1, 1 | 1.
    let s = EstimatorSettings { weights: WeightScheme::Uniform, ..EstimatorSettings::ctxgap_1() };
    let mut input = study(2);
    input.checkpoints.retain(|c| c.checkpoint == 1);
    input.probes.clear();
    let mk = |task: &str, id: &str, u: [f64; 3]| ProbeRecord {
        probe: id.into(),
        task: task.into(),
        checkpoint: 1,
        category: Category::Risks,
        importance: 2,
        origin_turn: 1,
        flags: EligibilityFlags { well_formed: true, excluded: None },
        credits: BTreeMap::from([
            (View::Reports, u.iter().map(|&c| Credit::try_from(c).unwrap()).collect()),
            (View::Full, vec![Credit::Full; 3]),
        ]),
    };
    input.probes = vec![
        mk("issue-00", "a", [1.0, 1.0, 1.0]),
        mk("issue-00", "b", [0.0, 0.0, 0.0]),
        mk("issue-01", "c", [1.0, 0.5, 0.0]),
    ];
    let report = analyze(&input, &s).unwrap();
    assert_eq!(value(&row(&report, View::Reports).accuracy), 0.5);
    assert_eq!(value(&row(&report, View::Full).accuracy), 1.0);
    assert_eq!(value(&row(&report, View::Reports).gap_view), 0.5);
    assert_eq!(row(&report, View::Reports).gap_actor.value, None);
    assert_eq!(report.views.len(), 2);
    let te = report.task_equal.iter().find(|r| r.view == View::Reports).unwrap().accuracy.unwrap();
    assert_eq!((te.tasks, te.mean, te.df), (2, 0.5, 1));
    let json = serde_json::to_string(&report).unwrap();
    assert_eq!(serde_json::from_str::<TaskStateReport>(&json).unwrap(), report);
}

#[test]
fn analyze_refuses_bad_settings_and_inputs() {
    let mut s = EstimatorSettings::ctxgap_1();
    s.bootstrap_draws = 100;
    let mut input = study(1);
    input.probes[0].origin_turn = 9;
    let err = analyze(&input, &s).unwrap_err().to_string();
    assert!(
        err.starts_with("task-state input: probe issue-00-k1-0 (task issue-00, checkpoint 1): origin turn 9"),
        "{err}"
    );
    s.confidence = 0.0;
    assert!(analyze(&study(1), &s).unwrap_err().to_string().starts_with("task-state settings ctxgap-1: confidence"));
}

/// A study the size of the study's main sample: 37 tasks, 148 checkpoints, 32 or 33 probes per
/// checkpoint over the eight categories (4,799 in all, as Table 4).
fn paper_sized() -> StudyInput {
    let mut input = StudyInput::default();
    let mut n = 0u32;
    for t in 0..37u32 {
        let task = format!("issue-{t:02}");
        for k in 1..=4u32 {
            let probes = if n < 4_799 - 32 * (148 - (t * 4 + k - 1)) { 33 } else { 32 };
            let mut atoms: BTreeMap<Category, u32> = BTreeMap::new();
            for i in 0..probes {
                let category = Category::ALL[(i % 8) as usize];
                *atoms.entry(category).or_default() += 2;
                let h = (t * 131 + k * 17 + i * 7) % 11;
                let credits = [
                    (View::Reports, 3),
                    (View::Scrollback, 6),
                    (View::FullMinusReasoning, 9),
                    (View::Full, 10),
                    (View::Actor, 10),
                ]
                .into_iter()
                .map(|(v, level)| {
                    (v, (0..3).map(|s| if (h + s) % 11 < level { Credit::Full } else { Credit::None }).collect())
                })
                .collect();
                input.probes.push(ProbeRecord {
                    probe: format!("{task}-k{k}-{i}"),
                    task: task.clone(),
                    checkpoint: k,
                    category,
                    importance: 2,
                    origin_turn: 1 + i % k,
                    flags: EligibilityFlags { well_formed: true, excluded: None },
                    credits,
                });
                n += 1;
            }
            input.checkpoints.push(CheckpointRecord {
                task: task.clone(),
                checkpoint: k,
                fixed: Some(k == 4 && t >= 7),
                view_chars: BTreeMap::new(),
                atoms,
            });
        }
    }
    input
}

#[test]
fn a_study_the_size_of_table_4_with_the_fixed_parameters() {
    let input = paper_sized();
    let report = analyze(&input, &EstimatorSettings::ctxgap_1()).unwrap();
    let inv = &report.inventory;
    assert_eq!((inv.tasks, inv.checkpoints, inv.probes_eligible), (37, 148, 4_799));
    // Table 1's fixed row: the final checkpoints of 30 fixed tasks.
    assert_eq!(report.outcomes[0].gap_view.tasks, 30);
    assert_eq!(report.checkpoints.iter().map(|r| r.probes).sum::<u64>(), 4_799);
    let u = row(&report, View::Reports);
    assert_eq!((u.accuracy.probes, u.accuracy.tasks), (4_799, 37));
    let d = report.decomposition.as_ref().unwrap();
    assert!(close(d.rows.iter().filter_map(|r| r.step).sum::<f64>(), d.gap, 1e-12));
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Probes over 1–6 tasks, each scored in every chain view and the actor, with random credits.
    fn records() -> impl Strategy<Value = StudyInput> {
        prop::collection::vec((0u32..6, 1u32..4, prop::collection::vec(0u8..3, 15)), 1..40).prop_map(|probes| {
            let mut input = StudyInput::default();
            let mut seen = BTreeSet::new();
            for (i, (t, k, credits)) in probes.into_iter().enumerate() {
                let task = format!("t{t}");
                if seen.insert((t, k)) {
                    input.checkpoints.push(CheckpointRecord {
                        task: task.clone(),
                        checkpoint: k,
                        fixed: Some(t % 2 == 0),
                        view_chars: BTreeMap::new(),
                        atoms: BTreeMap::from([(Category::Facts, 100)]),
                    });
                }
                let views = [View::Reports, View::Scrollback, View::FullMinusReasoning, View::Full, View::Actor];
                let credits = views
                    .iter()
                    .zip(credits.chunks(3))
                    .map(|(&v, c)| (v, c.iter().map(|&x| Credit::try_from(f64::from(x) / 2.0).unwrap()).collect()))
                    .collect();
                input.probes.push(ProbeRecord {
                    probe: format!("p{i}"),
                    task,
                    checkpoint: k,
                    category: Category::Facts,
                    importance: 2,
                    origin_turn: k - 1,
                    flags: EligibilityFlags { well_formed: true, excluded: None },
                    credits,
                });
            }
            input
        })
    }

    fn quick() -> EstimatorSettings {
        EstimatorSettings { bootstrap_draws: 50, decomposition_draws: 20, ..EstimatorSettings::ctxgap_1() }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Tables 1, 5, 13, 14, 15 and 50's identities hold on any complete study.
        #[test]
        fn identities_hold_on_any_study(input in records()) {
            let report = analyze(&input, &quick()).unwrap();
            let acc = |v: View| value(&row(&report, v).accuracy);
            for r in &report.views {
                prop_assert!(close(value(&r.gap_view), acc(View::Full) - value(&r.accuracy), 1e-12));
                prop_assert!(close(value(&r.gap_actor), acc(View::Actor) - value(&r.accuracy), 1e-12));
                let a = value(&r.accuracy);
                prop_assert!((0.0..=1.0).contains(&a));
                let ci = r.accuracy.ci.unwrap();
                prop_assert!(ci.lo <= ci.hi);
            }
            let d = report.decomposition.as_ref().unwrap();
            prop_assert!(close(d.rows.iter().filter_map(|r| r.step).sum::<f64>(), d.gap, 1e-12));
            prop_assert!(close(d.gap, acc(View::Full) - acc(View::Reports), 1e-12));
            if d.gap != 0.0 {
                prop_assert!(close(d.rows.iter().filter_map(|r| r.share).sum::<f64>(), 1.0, 1e-9));
            }
            prop_assert_eq!(report.checkpoints.iter().map(|r| r.probes).sum::<u64>(), input.probes.len() as u64);
            for r in &report.checkpoints {
                prop_assert!(close(r.fresh + r.earlier, r.unaligned, 1e-12));
                // Every atom here arose in the turn before its checkpoint: none is fresh.
                prop_assert_eq!(r.fresh, 0.0);
            }
            // Same input, same settings: the same report, intervals included.
            prop_assert_eq!(analyze(&input, &quick()).unwrap(), report);
        }
    }
}
