//! Appendix L's tables from hand-made records: a selection with a dropped back-fill, an exhausted
//! stratum and a pending replay; a study that lists its trajectories; one replay does not apply
//! to; and the command classifier.

use serde_json::{Value, json};
use vcurve_method::schedule::{Stage, TrajectoryPlan};
use vcurve_method::selection::{
    BackFill, BackFillEvent, Candidate, Decoy, Initial, Pick, RunEnd, RunId, Selection, SelectionParams, StratumOrder,
    TaskVerdict, Verdict,
};
use vcurve_method::{BaseRuns, Thresholds};
use vcurve_record::jobs::{CompareLevel, MismatchKind, NonReplayable, Replayed};
use vcurve_record::runner::AGENT;
use vcurve_record::{EvaluationStats, StudyRecord, StudyState, TrajectoryRecord, TrajectorySpec, TrajectoryState};

use super::*;
use crate::export::{files, results};

pub(crate) fn st(s: &str) -> Stratum {
    s.parse().unwrap()
}

pub(crate) fn replayed(levels: &[(CompareLevel, usize)], anchors: &[u32]) -> Replayed {
    Replayed {
        anchors: anchors.to_vec(),
        levels: levels.iter().flat_map(|&(l, n)| std::iter::repeat_n(l, n)).collect(),
        fingerprints: None,
        ..Default::default()
    }
}

pub(crate) fn dropped(step: u32, mismatch: Option<MismatchKind>, command: Option<&str>) -> NonReplayable {
    NonReplayable {
        step,
        level: CompareLevel::CharMultiset,
        reason: "differs".into(),
        recorded_excerpt: "a".into(),
        replayed_excerpt: "b".into(),
        mismatch,
        command: command.map(str::to_owned),
    }
}

/// A trajectory of 20 steps in `state`, with a recorded run when `recorded`; no continuation.
pub(crate) fn trajectory(
    id: &str,
    task: &str,
    state: TrajectoryState,
    recorded: bool,
    replay: Option<Replayed>,
    non_replayable: Option<NonReplayable>,
) -> (TrajectorySpec, TrajectoryRecord) {
    let spec = TrajectorySpec {
        id: id.into(),
        task: task.into(),
        length: 20,
        curve: None,
        labels: Vec::new(),
        base_runs: BaseRuns::default(),
        recorded: recorded.then(|| format!("sha256-{id}")),
    };
    let record = TrajectoryRecord {
        id: id.into(),
        state,
        stage: Stage::Screen,
        plan: TrajectoryPlan { length: 20, labels: Vec::new(), controls: Default::default() },
        outcomes: Vec::new(),
        cap_hits: 0,
        non_replayable,
        replay,
    };
    (spec, record)
}

/// The export tests' agent study with these trajectories, base runs and selection.
pub(crate) fn study(
    trajectories: Vec<(TrajectorySpec, TrajectoryRecord)>,
    base_runs: Vec<vcurve_record::BaseRunRecord>,
    selection: Option<Selection>,
) -> StudyRecord {
    StudyRecord {
        base_runs,
        selection,
        state: StudyState::Running,
        ..crate::export::tests::study(AGENT, trajectories, EvaluationStats::default())
    }
}

pub(crate) fn pick(task: &str, seed: u32, stratum: &str, position: u32, round: u32, dropped: bool) -> Pick {
    Pick {
        id: RunId::new(task, seed),
        stratum: st(stratum),
        position,
        round,
        replaces: (round > 0).then(|| RunId::new("b", 2)),
        non_replayable: dropped,
        reason: format!("pick {position}"),
    }
}

/// A selection of five picks from the band tasks `a` and `b`:
///
/// - 0: `a s1` (L0-submit), replayed: 3 exact and 1 sorted_lines step, one anchor;
/// - 1: `b s2` (L2-cap), dropped at step 7 (observation, `python repro.py`), back-filled by 3;
/// - 2: `a s3` (L0-submit), its replay pending;
/// - 3: `b s4` (L2-cap, round 1), the back-fill, dropped at step 12 (git diff, `git stash pop`):
///   its own back-fill found L2-cap exhausted;
/// - 4: `a s5` (L1-submit), replayed: 2 exact and 1 char_multiset step, two anchors.
///
/// `a` has 3 successes of 8 (seeds 0, 2, 4), `b` 6 (all but 2 and 4), both in the band; `c` is
/// doomed (its failed run a doomed trajectory, not a pick), `d` saturated. The candidates `a s6`
/// and `a s7` stay queued (their task at its cap); the decoys are `a s0` and `b s6` of 9.
pub(crate) fn selection() -> Selection {
    let verdict = |task: &str, runs: u32, successes: u32, verdict: Verdict| TaskVerdict {
        task: task.into(),
        runs,
        successes,
        pass_rate: Some(f64::from(successes) / f64::from(runs)),
        verdict,
        reason: format!("{task}: {verdict:?}"),
    };
    let order = |stratum: &str, ids: &[(&str, u32)], queue: &[(&str, u32)]| StratumOrder {
        stratum: st(stratum),
        order: ids.iter().map(|&(t, s)| RunId::new(t, s)).collect(),
        queue: queue.iter().map(|&(t, s)| RunId::new(t, s)).collect(),
    };
    Selection {
        seed: 11,
        target: Some(4),
        params: SelectionParams::from(&Thresholds::default()),
        tasks: vec![
            verdict("a", 8, 3, Verdict::Band),
            verdict("b", 8, 6, Verdict::Band),
            verdict("c", 8, 0, Verdict::Doomed),
            verdict("d", 8, 8, Verdict::Saturated),
        ],
        terciles: Some(vcurve_method::selection::Terciles { failed_runs: 9, lower: 30.0, upper: 60.0 }),
        candidates: vec![
            candidate("a", 1, 20, "L0-submit", 1, Initial::Selected { position: 0 }),
            candidate("a", 3, 25, "L0-submit", 0, Initial::Selected { position: 2 }),
            candidate("a", 5, 40, "L1-submit", 0, Initial::Selected { position: 3 }),
            candidate("a", 6, 28, "L0-submit", 2, Initial::TaskAtCap),
            candidate("a", 7, 50, "L1-submit", 1, Initial::TaskAtCap),
            candidate("b", 2, 100, "L2-cap", 0, Initial::Selected { position: 1 }),
            candidate("b", 4, 100, "L2-cap", 1, Initial::TargetReached),
        ],
        strata: vec![
            order("L0-submit", &[("a", 3), ("a", 1), ("a", 6)], &[("a", 6)]),
            order("L1-submit", &[("a", 5), ("a", 7)], &[("a", 7)]),
            order("L2-cap", &[("b", 2), ("b", 4)], &[]),
        ],
        picks: vec![
            pick("a", 1, "L0-submit", 0, 0, false),
            pick("b", 2, "L2-cap", 1, 0, true),
            pick("a", 3, "L0-submit", 2, 0, false),
            pick("b", 4, "L2-cap", 4, 1, true),
            pick("a", 5, "L1-submit", 3, 0, false),
        ],
        decoys: vec![
            Decoy { id: RunId::new("a", 0), steps: 30, end: RunEnd::Submit, reason: "decoy 1".into() },
            Decoy { id: RunId::new("b", 6), steps: 30, end: RunEnd::Submit, reason: "decoy 2".into() },
        ],
        decoy_pool: 9,
        back_fills: vec![
            BackFillEvent {
                non_replayable: RunId::new("b", 2),
                result: BackFill::Replaced { replacement: RunId::new("b", 4), stratum: st("L2-cap"), round: 1 },
            },
            BackFillEvent {
                non_replayable: RunId::new("b", 4),
                result: BackFill::StratumExhausted { stratum: st("L2-cap"), round: 2 },
            },
        ],
    }
}

fn candidate(task: &str, seed: u32, steps: u32, stratum: &str, order: u32, initial: Initial) -> Candidate {
    let stratum = st(stratum);
    Candidate {
        id: RunId::new(task, seed),
        steps,
        end: stratum.end,
        stratum,
        order,
        initial,
        reason: format!("failed run of a band task: {stratum}"),
    }
}

/// The base runs [`selection`] was drawn from: 32, 8 of each task.
pub(crate) fn base_runs() -> Vec<vcurve_record::BaseRunRecord> {
    let run = |task: &str, seed: u32, success: bool, steps: u32, end_type: vcurve_record::EndType| {
        vcurve_record::BaseRunRecord { subject: task.into(), seed, success, steps, end_type }
    };
    let (submitted, cap) = (vcurve_record::EndType::Submitted, vcurve_record::EndType::StepCap);
    let mut runs = Vec::new();
    let failed_a = [(1, 20), (3, 25), (5, 40), (6, 28), (7, 50)];
    for seed in 0..8 {
        runs.push(match failed_a.iter().find(|(s, _)| *s == seed) {
            Some(&(_, steps)) => run("a", seed, false, steps, submitted),
            None => run("a", seed, true, 30, submitted),
        });
        runs.push(match seed {
            2 | 4 => run("b", seed, false, 100, cap),
            _ => run("b", seed, true, 30, submitted),
        });
        runs.push(run("c", seed, false, if seed < 4 { 100 } else { 60 }, if seed < 4 { cap } else { submitted }));
        runs.push(run("d", seed, true, 30, submitted));
    }
    // The store's order is not the export's.
    runs.reverse();
    runs
}

pub(crate) fn selected_trajectories() -> Vec<(TrajectorySpec, TrajectoryRecord)> {
    use TrajectoryState::*;
    let exact = CompareLevel::Exact;
    vec![
        trajectory(
            "a-base1",
            "a",
            Running,
            true,
            Some(replayed(&[(exact, 3), (CompareLevel::SortedLines, 1)], &[5])),
            None,
        ),
        trajectory(
            "b-base2",
            "b",
            NonReplayable,
            true,
            None,
            Some(dropped(7, Some(MismatchKind::Observation), Some("python repro.py"))),
        ),
        trajectory("a-base3", "a", Replaying, true, None, None),
        trajectory(
            "b-base4",
            "b",
            NonReplayable,
            true,
            None,
            Some(dropped(12, Some(MismatchKind::GitDiff), Some("git stash pop"))),
        ),
        trajectory(
            "a-base5",
            "a",
            Done,
            true,
            Some(replayed(&[(exact, 2), (CompareLevel::CharMultiset, 1)], &[5, 10])),
            None,
        ),
        trajectory("c-base0", "c", Doomed, true, None, None),
    ]
}

fn row(kind: GroupKind, group: &str, counts: [u32; 4], rate: Option<f64>) -> GroupRow {
    let [n, replayed, non_replayable, not_measured] = counts;
    GroupRow { kind, group: group.into(), n, replayed, non_replayable, not_measured, rate }
}

fn count(name: &str, n: u32) -> Count {
    Count { name: name.into(), n }
}

#[test]
fn a_selection_replays_by_role_and_stratum_with_its_back_fills() {
    let study = study(selected_trajectories(), Vec::new(), Some(selection()));
    let table = ReplayTable::of(&results(&study).unwrap()).unwrap();
    use GroupKind::*;
    assert_eq!(
        table.groups,
        [
            row(Role, "selected", [4, 2, 1, 1], Some(2.0 / 3.0)),
            row(Role, "back-fill", [1, 0, 1, 0], Some(0.0)),
            row(Stratum, "L0-submit", [2, 1, 0, 1], Some(1.0)),
            row(Stratum, "L1-submit", [1, 1, 0, 0], Some(1.0)),
            row(Stratum, "L2-cap", [2, 0, 2, 0], Some(0.0)),
            row(All, "all", [5, 2, 2, 1], Some(0.5)),
        ]
    );
    // Ties in the canonical order.
    assert_eq!(table.mismatches, [count("observation", 1), count("git_diff", 1)]);
    assert_eq!(table.commands, [count("git stash", 1), count("python script", 1)]);
    assert_eq!(table.levels, [count("exact", 5), count("sorted_lines", 1), count("char_multiset", 1)]);
    assert_eq!(table.anchors, 3);
    assert_eq!(table.first_mismatch, Some(StepSummary { n: 2, median: 9.5, q1: 8.25, q3: 10.75, max: 12 }));
    assert_eq!(
        table.back_fills,
        Some(BackFills {
            picks: 5,
            initial: 4,
            back_fills: 1,
            rounds: 1,
            exhausted: 1,
            exhausted_strata: vec![st("L2-cap")],
            dropped: 2,
            active: 3,
        })
    );

    assert_eq!(
        replay_csv(&table),
        "kind,group,n,replayed,non_replayable,not_measured,rate\n\
         role,selected,4,2,1,1,0.6666666666666666\n\
         role,back-fill,1,0,1,0,0\n\
         stratum,L0-submit,2,1,0,1,1\n\
         stratum,L1-submit,1,1,0,0,1\n\
         stratum,L2-cap,2,0,2,0,0\n\
         all,all,5,2,2,1,0.5\n"
    );

    let tables = tables(&results(&study).unwrap());
    let names: Vec<&str> = tables.iter().map(|t| t.name).collect();
    assert_eq!(names, ["replay_roles", "replay_mismatches", "replay_levels", "replay_summary"]);
    assert_eq!(tables[0].title, "Replay (Appendix L)");
    assert_eq!(tables[0].rows[0], ["selected", "4", "2", "1", "1", "67%"]);
    assert_eq!(tables[0].rows[5], ["all", "5", "2", "2", "1", "50%"]);
    assert_eq!(
        tables[1].rows,
        [
            ["mismatch", "observation", "1"],
            ["mismatch", "git_diff", "1"],
            ["command", "git stash", "1"],
            ["command", "python script", "1"]
        ]
    );
    assert_eq!(tables[2].rows[0], ["exact", "5", "71%"]);
    let summary: Vec<(&str, &str)> = tables[3].rows.iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
    assert_eq!(
        summary,
        [
            ("first mismatch step", "median 9.5 (quartiles 8.25, 10.75; maximum 12; n = 2)"),
            ("anchors committed", "3"),
            ("picks (initial + back-fills)", "5 (4 + 1)"),
            ("back-fills, rounds", "1 in 1 round(s)"),
            ("strata exhausted", "1 (L2-cap)"),
            ("dropped, active", "2 dropped, 3 of 5 active"),
        ]
    );
}

#[test]
fn a_back_fill_not_yet_in_the_study_is_not_measured_and_a_dropped_one_without_a_record_counts_as_dropped() {
    // The back-fill's trajectory is not in the study yet; the dropped pick's record is gone.
    let mut trajectories = selected_trajectories();
    trajectories.retain(|(s, _)| s.id != "b-base4" && s.id != "b-base2");
    let mut sel = selection();
    sel.picks[3].non_replayable = false;
    let table = ReplayTable::of(&results(&study(trajectories, Vec::new(), Some(sel))).unwrap()).unwrap();
    assert_eq!(table.groups[1], row(GroupKind::Role, "back-fill", [1, 0, 0, 1], None));
    assert_eq!(table.groups[0], row(GroupKind::Role, "selected", [4, 2, 1, 1], Some(2.0 / 3.0)));
    // Its mismatch is unknown: not recorded, no command, no step.
    assert_eq!(table.mismatches, [count(NOT_RECORDED, 1)]);
    assert_eq!(table.commands, [count(NO_COMMAND, 1)]);
    assert_eq!(table.first_mismatch, None);
    let t = tables(&results(&study(Vec::new(), Vec::new(), Some(selection()))).unwrap());
    // No trajectory in the study at all: every pick not measured (the dropped ones dropped).
    assert_eq!(t[0].rows.last().unwrap(), &["all", "5", "0", "2", "3", "0%"]);
    assert_eq!(t[3].rows[0], ["first mismatch step", NOT_MEASURED]);
}

#[test]
fn a_listed_study_replays_its_recorded_trajectories() {
    use TrajectoryState::*;
    let trajectories = vec![
        trajectory("r", "t1", Done, true, Some(replayed(&[(CompareLevel::Exact, 20)], &[5, 10, 15])), None),
        // Stored before the mismatch kind and the command were recorded.
        trajectory("d", "t2", NonReplayable, true, None, Some(dropped(3, None, None))),
        trajectory("w", "t3", Waiting, true, None, None),
        // A replay that could not be carried out: no step.
        trajectory(
            "n",
            "t4",
            NonReplayable,
            true,
            None,
            Some(vcurve_record::jobs::NonReplayable::no_outcome("3 attempts")),
        ),
        // Left out: no recorded run; doomed.
        trajectory("s", "t5", Done, false, None, None),
        trajectory("x", "t6", Doomed, true, None, None),
    ];
    let table = ReplayTable::of(&results(&study(trajectories, Vec::new(), None)).unwrap()).unwrap();
    assert_eq!(
        table.groups,
        [
            row(GroupKind::Role, "listed", [4, 1, 2, 1], Some(1.0 / 3.0)),
            row(GroupKind::All, "all", [4, 1, 2, 1], Some(1.0 / 3.0))
        ]
    );
    assert_eq!(table.mismatches, [count("no_outcome", 1), count(NOT_RECORDED, 1)]);
    assert_eq!(table.commands, [count(NO_COMMAND, 2)]);
    assert_eq!(table.levels, [count("exact", 20)]);
    assert_eq!(table.first_mismatch, Some(StepSummary { n: 1, median: 3.0, q1: 3.0, q3: 3.0, max: 3 }));
    assert_eq!(table.back_fills, None);
    let t = tables(
        &results(&study(
            vec![trajectory("r", "t1", Done, true, Some(replayed(&[(CompareLevel::Exact, 20)], &[5])), None)],
            Vec::new(),
            None,
        ))
        .unwrap(),
    );
    // Without a selection the summary has no back-fill rows.
    assert_eq!(t[3].rows.len(), 2);
}

#[test]
fn a_study_without_recorded_runs_or_selection_has_no_replay_table() {
    let s = study(vec![trajectory("s", "t", TrajectoryState::Done, false, None, None)], Vec::new(), None);
    let r = results(&s).unwrap();
    assert_eq!(ReplayTable::of(&r), None);
    let t = tables(&r);
    assert_eq!(t.len(), 1);
    assert!(t[0].not_measured && t[0].rows.is_empty());
    assert!(t[0].html().contains(">not measured</td>"));
    let files = files(&s).unwrap();
    assert!(!files.contains_key("replay.csv") && !files.contains_key("replay.json"));
}

#[test]
fn the_export_writes_the_replay_table_and_it_reads_back() {
    let s = study(selected_trajectories(), Vec::new(), Some(selection()));
    let files = files(&s).unwrap();
    let table = ReplayTable::of(&results(&s).unwrap()).unwrap();
    assert_eq!(files["replay.csv"], replay_csv(&table).into_bytes());
    let json: Value = serde_json::from_slice(&files["replay.json"]).unwrap();
    assert_eq!(json["groups"][0]["group"], "selected");
    assert_eq!(json["back_fills"]["exhausted_strata"], json!(["L2-cap"]));
    assert_eq!(serde_json::from_value::<ReplayTable>(json).unwrap(), table);
    // The report built from the export folder's results.json shows the same table.
    let back: Results = serde_json::from_slice(&files["results.json"]).unwrap();
    assert_eq!(ReplayTable::of(&back), Some(table));
}

#[test]
fn commands_are_classified_by_kind() {
    use CommandKind::*;
    let cases: &[(&str, CommandKind)] = &[
        ("git stash", GitStash),
        ("cd /testbed && git stash pop", GitStash),
        ("git stash list | head", GitStash),
        ("git diff", Git),
        ("git log --oneline -3", Git),
        ("pytest tests/test_x.py -x -q", TestRun),
        ("cd /testbed && python -m pytest -k foo 2>&1 | tail -20", TestRun),
        ("python3 -m unittest discover", TestRun),
        ("python tests/runtests.py admin_views", TestRun),
        ("./tests/runtests.py queries", TestRun),
        ("bin/test sympy/core", TestRun),
        ("python bin/test sympy/core", TestRun),
        ("tox -e py39", TestRun),
        ("python setup.py test", TestRun),
        ("timeout 120 pytest -q", TestRun),
        ("PYTHONPATH=. pytest", TestRun),
        (
            "cat > reproduce.py << 'EOF'\nimport secrets\nprint(secrets.token_hex(8))\nEOF\npython reproduce.py",
            WriteFile,
        ),
        ("cat <<EOF > /testbed/x.py\ngit stash\npytest\nEOF", WriteFile),
        ("echo 'x = 1' > a.py", WriteFile),
        ("printf 'a\\nb' >> notes.txt", WriteFile),
        ("sed -i 's/a/b/' src/x.py", WriteFile),
        ("echo hi | tee out.txt", WriteFile),
        ("python reproduce.py", PythonScript),
        ("python3 -c \"import uuid; print(uuid.uuid4())\"", PythonScript),
        ("python - <<'EOF'\nprint(1)\nEOF", PythonScript),
        ("cd /testbed && python3.9 repro.py 2>&1", PythonScript),
        ("./reproduce.py", PythonScript),
        ("pip install -e .", Install),
        ("python -m pip install numpy==1.24", Install),
        ("cat src/x.py", Read),
        ("cat src/x.py 2>&1 | head -50", Read),
        ("grep -rn 'def foo' src/ 2>/dev/null", Read),
        ("find . -name '*.py' | xargs wc -l", Read),
        ("sed -n '10,20p' src/x.py", Read),
        ("ls -la", Read),
        ("echo done", Other),
        ("cd /testbed", Other),
        ("make", Other),
        ("", Other),
    ];
    for (command, kind) in cases {
        assert_eq!(command_kind(command), *kind, "{command:?}");
    }
    // Every kind has a distinct label; "other" last.
    let labels: std::collections::BTreeSet<&str> = CommandKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(labels.len(), CommandKind::ALL.len());
    assert_eq!(CommandKind::ALL.last(), Some(&Other));
}
