use std::collections::BTreeMap;

use proptest::prelude::*;

use vcurve_method::schedule::variants::variant_names;
use vcurve_method::{BaseRun, BaseRuns, Thresholds};

use vcurve_record::runner::SyntheticOptions;

use super::*;
use crate::trajectory::parse_curve;

/// A curve file for `length` steps with `v = f(t)`.
fn curve_csv(length: u32, f: impl Fn(u32) -> f64) -> String {
    let mut text = String::from("t,v\n");
    for t in 0..length {
        text.push_str(&format!("{t},{}\n", f(t)));
    }
    text
}

/// A valid spec: two trajectories, every optional field of the first given.
const VALID: &str = r#"
name: demo
seed: 7
runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}
trajectories:
  - id: alpha
    task: django__django-11555
    length: 10
    curve: curves/alpha.csv
    labels: {gpt-5.5: 6, o3: 4, sol: none}
    base_runs: [{success: true, steps: 40}, {success: false, steps: 100}]
  - id: beta
    length: 5
    curve: curves/beta.csv
"#;

fn valid_files() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("curves/alpha.csv".to_string(), curve_csv(10, |t| if t < 5 { 0.75 } else { 0.1 })),
        ("curves/beta.csv".to_string(), curve_csv(5, |t| 0.5 - 0.1 * f64::from(t))),
    ])
}

fn parse_with(yaml: &str, files: &BTreeMap<String, String>) -> Result<StudySpec, SpecError> {
    super::parse(yaml, &|path| files.get(path).cloned())
}

/// `VALID` with `from` replaced by `to` (which must occur exactly once).
fn edit(from: &str, to: &str) -> String {
    assert_eq!(VALID.matches(from).count(), 1, "{from:?} must occur once in VALID");
    VALID.replace(from, to)
}

/// The message of the error `yaml` is rejected with, given the valid curve files.
fn rejected(yaml: &str) -> String {
    rejected_with(yaml, &valid_files())
}

fn rejected_with(yaml: &str, files: &BTreeMap<String, String>) -> String {
    match parse_with(yaml, files) {
        Ok(spec) => panic!("accepted an invalid spec: {spec:?}\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// The message when trajectory alpha's curve file reads `csv`.
fn rejected_curve(csv: &str) -> String {
    let mut files = valid_files();
    files.insert("curves/alpha.csv".into(), csv.into());
    rejected_with(VALID, &files)
}

#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} does not mention {part:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Valid specs

#[test]
fn a_valid_spec_parses_with_defaults() {
    let spec = parse_with(VALID, &valid_files()).unwrap();
    assert_eq!((spec.name.as_str(), spec.seed, spec.budget), ("demo", 7, 100));
    assert_eq!(spec.schedule, "paper");
    assert_eq!(spec.runner.kind(), "synthetic");
    assert_eq!(spec.runner, RunnerSpec::Synthetic(SyntheticOptions { duration_ms: 50, no_outcome_rate: 0.02 }));
    assert_eq!(spec.runner.options_json(), serde_json::json!({"duration_ms": 50, "no_outcome_rate": 0.02}));
    assert_eq!(spec.controls, ControlCounts::default());
    assert_eq!(spec.admission, Admission::Demand);
    let expected = Thresholds {
        sanity_trajectories: 0,
        retest_trajectories: 0,
        budget_control_trajectories: 0,
        ..Thresholds::default()
    };
    assert_eq!(spec.thresholds, expected);

    let [alpha, beta] = &spec.trajectories[..] else { panic!("two trajectories") };
    assert_eq!((alpha.id.as_str(), alpha.task.as_str(), alpha.length), ("alpha", "django__django-11555", 10));
    assert_eq!(alpha.curve.as_deref(), Some(&[0.75, 0.75, 0.75, 0.75, 0.75, 0.1, 0.1, 0.1, 0.1, 0.1][..]));
    let labels: Vec<(&str, Option<u32>)> = alpha.labels.iter().map(|l| (l.source.as_str(), l.step)).collect();
    assert_eq!(labels, [("gpt-5.5", Some(6)), ("o3", Some(4)), ("sol", None)], "labels keep the file's order");
    assert_eq!(alpha.labeled_steps(), [6, 4]);
    assert_eq!(
        alpha.base_runs,
        BaseRuns(vec![BaseRun { success: true, steps: 40 }, BaseRun { success: false, steps: 100 }])
    );

    assert_eq!(
        (beta.task.as_str(), beta.labels.len(), beta.base_runs.0.len()),
        ("beta", 0, 0),
        "task defaults to the id"
    );
}

#[test]
fn a_full_spec_round_trips_through_json() {
    let yaml = edit(
        "runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}\n",
        "budget: 120\n\
         schedule: screen-k4\n\
         runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}\n\
         thresholds: {k_screen: 6, epsilon: 0.2, alpha: 0.01}\n\
         controls: {sanity: 2, retest: 1, budget_control: 1}\n\
         admission: {mode: batch, batch_size: 4, pipeline_threshold: 2}\n",
    );
    let mut files = valid_files();
    // Values that need all 17 digits to round-trip.
    let awkward = [
        0.1 + 0.2,
        1.0 / 3.0,
        0.7071067811865475,
        2.0 / 3.0,
        5e-324,
        0.9999999999999999,
        0.0,
        1.0,
        0.123456789012345,
        0.6,
    ];
    files.insert("curves/alpha.csv".into(), curve_csv(10, |t| awkward[t as usize]));
    let spec = parse_with(&yaml, &files).unwrap();
    assert_eq!(spec.budget, 120);
    assert_eq!(spec.thresholds.budget, 120);
    assert_eq!((spec.thresholds.k_screen, spec.thresholds.epsilon, spec.thresholds.alpha), (6, 0.2, 0.01));
    assert_eq!(spec.controls, ControlCounts { sanity: 2, retest: 1, budget_control: 1 });
    assert_eq!(
        (
            spec.thresholds.sanity_trajectories,
            spec.thresholds.retest_trajectories,
            spec.thresholds.budget_control_trajectories
        ),
        (2, 1, 1)
    );
    assert_eq!(spec.admission, Admission::Batch { batch_size: 4, pipeline_threshold: 2 });
    assert_eq!((spec.thresholds.batch_size, spec.thresholds.pipeline_threshold), (4, 2));
    assert_eq!(spec.trajectories[0].curve.as_deref(), Some(&awkward[..]));

    let json = serde_json::to_string(&spec).unwrap();
    let back: StudySpec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, spec);
    let admission = serde_json::to_value(spec.admission).unwrap();
    assert_eq!(admission, serde_json::json!({"mode": "batch", "batch_size": 4, "pipeline_threshold": 2}));
}

#[test]
fn parameters_may_come_from_thresholds_and_agree_with_their_twins() {
    let yaml = edit(
        "seed: 7\n",
        "seed: 7\nbudget: 80\nthresholds: {budget: 80, sanity_trajectories: 1, batch_size: 5}\nadmission: {mode: batch}\n",
    );
    let spec = parse_with(&yaml, &valid_files()).unwrap();
    assert_eq!((spec.budget, spec.controls.sanity), (80, 1));
    assert_eq!(spec.admission, Admission::Batch { batch_size: 5, pipeline_threshold: 3 });
}

#[test]
fn other_runners_need_no_curve_and_keep_their_options() {
    let yaml = edit(
        "runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}",
        "runner: {kind: my-agent, model: {name: gpt-5.5, temperature: 0.7}, retries: [1, 2]}",
    )
    .replace("    curve: curves/beta.csv\n", "");
    let spec = parse_with(&yaml, &valid_files()).unwrap();
    assert_eq!(spec.runner.kind(), "my-agent");
    assert_eq!(
        spec.runner.options_json(),
        serde_json::json!({"model": {"name": "gpt-5.5", "temperature": 0.7}, "retries": [1, 2]})
    );
    assert_eq!(spec.trajectories[1].curve, None);
    assert!(spec.trajectories[0].curve.is_some(), "a curve given is still read");
}

/// The hostile probe of issue 24: a study that puts a host command line on the workers is refused
/// naming `runner.command` and saying what to name instead, whatever its runner kind.
#[test]
fn a_runner_command_is_refused_for_every_kind_naming_the_field() {
    let hostile = r#"command: [sh, -c, "id; curl --unix-socket /var/run/docker.sock http://localhost/version"]"#;
    for runner in [
        format!("runner: {{kind: agent, agent: scripted, {hostile}}}"),
        format!("runner: {{kind: agent, {hostile}}}"),
        format!("runner: {{kind: my-agent, {hostile}}}"),
        format!("runner: {{kind: mini-swe-agent, model: {{model_name: m}}, {hostile}}}"),
    ] {
        let yaml = edit("runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}", &runner)
            .replace("    curve: curves/beta.csv\n", "");
        let err = parse_with(&yaml, &valid_files()).unwrap_err().to_string();
        assert!(err.contains("runner.command") && err.contains("agent: scripted"), "{runner}: {err}");
    }
}

#[test]
fn the_mini_swe_agent_runner_names_its_model_and_no_command() {
    let runner = |r: &str| {
        edit("runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}", r)
            .replace("    curve: curves/beta.csv\n", "")
    };
    let ok = runner(
        "runner: {kind: mini-swe-agent, model: {model_name: openai/Qwen/Qwen3-32B, base_url: 'http://gpu-1:8000/v1', \
         temperature: 0.7, top_p: 0.8}, memory_mb: 4096}",
    );
    let spec = parse_with(&ok, &valid_files()).unwrap();
    assert_eq!(spec.runner.kind(), "mini-swe-agent");
    let RunnerSpec::MiniSweAgent(options) = &spec.runner else { panic!("{:?}", spec.runner) };
    assert_eq!(options.model["model_name"], "openai/Qwen/Qwen3-32B");
    assert_eq!(options.memory_mb, 4096);
    assert_eq!(options.agent, vcurve_record::runner::MINI_SWE_AGENT);
    for (r, field) in [
        ("runner: {kind: mini-swe-agent}", "model_name"),
        ("runner: {kind: mini-swe-agent, model: {model_name: m, top_p: 2}}", "top_p"),
        ("runner: {kind: mini-swe-agent, model: {model_name: m}, command: [python3]}", "command"),
        ("runner: {kind: mini-swe-agent, model: {model_name: m}, retries: 2}", "retries"),
    ] {
        let err = parse_with(&runner(r), &valid_files()).unwrap_err().to_string();
        assert!(err.contains(field) && err.contains("mini-swe-agent"), "{r}: {err}");
    }
}

#[test]
fn a_trajectory_may_be_longer_than_the_budget() {
    let yaml = edit("seed: 7\n", "seed: 7\nbudget: 4\n");
    let spec = parse_with(&yaml, &valid_files()).unwrap();
    assert_eq!((spec.budget, spec.trajectories[0].length), (4, 10));
}

#[test]
fn yaml_merge_keys_share_fields_between_trajectories() {
    let yaml = r#"
name: merged
seed: 1
runner: {kind: synthetic}
trajectories:
  - &common {id: alpha, length: 10, curve: curves/alpha.csv, task: shared-task}
  - {<<: *common, id: again}
"#;
    let spec = parse_with(yaml, &valid_files()).unwrap();
    assert_eq!(spec.trajectories[1].id, "again");
    assert_eq!(spec.trajectories[1].task, "shared-task");
}

#[test]
fn load_resolves_curve_paths_against_the_spec_directory() {
    let dir = tempfile::tempdir().unwrap();
    let study = dir.path().join("study");
    std::fs::create_dir_all(study.join("curves")).unwrap();
    for (path, text) in valid_files() {
        std::fs::write(study.join(path), text).unwrap();
    }
    let spec_path = study.join("spec.yaml");
    std::fs::write(&spec_path, VALID).unwrap();

    // The process's working directory is not the spec's: only the spec's directory can resolve.
    assert!(!Path::new("curves/alpha.csv").exists());
    let (yaml, files) = super::read_with_files(&spec_path).unwrap();
    assert_eq!(yaml, VALID);
    assert_eq!(files, valid_files(), "keys are the paths as written in the spec");
    let spec = super::load(&spec_path).unwrap();
    assert_eq!(spec, parse_with(VALID, &valid_files()).unwrap());

    std::fs::remove_file(study.join("curves/beta.csv")).unwrap();
    let err = super::load(&spec_path).unwrap_err().to_string();
    assert_mentions(&err, &["trajectory \"beta\"", "curve curves/beta.csv", "cannot read", "study/curves/beta.csv"]);

    let err = super::load(&study.join("nope.yaml")).unwrap_err().to_string();
    assert_mentions(&err, &["cannot read the study spec", "nope.yaml"]);
}

#[test]
fn the_shipped_example_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/study.yaml");
    let spec = super::load(&path).unwrap();
    assert_eq!(spec.trajectories.len(), 3);
    assert_eq!(spec.runner, RunnerSpec::Synthetic(SyntheticOptions { duration_ms: 20, no_outcome_rate: 0.01 }));
    let shapes: Vec<vcurve_method::Shape> = spec
        .trajectories
        .iter()
        .map(|tr| {
            // The true curve sampled densely: the estimator should see the shape it was drawn as.
            let points: Vec<vcurve_method::Point> = tr
                .curve
                .as_ref()
                .unwrap()
                .iter()
                .zip(0..)
                .map(|(v, t)| vcurve_method::Point { t, n: 10_000, successes: (v * 10_000.0).round() as u32 })
                .collect();
            vcurve_method::analyze(tr.length, &points, Some(&tr.base_runs), spec.budget, &spec.thresholds)
                .unwrap()
                .shape
        })
        .collect();
    use vcurve_method::Shape::{Cliff, Erosion};
    assert_eq!(shapes, [Cliff, Erosion, Cliff]);
    for tr in &spec.trajectories {
        assert!((40..=100).contains(&tr.length), "{}", tr.id);
        assert!(tr.labels.len() >= 2, "{}", tr.id);
    }
}

// ---------------------------------------------------------------------------------------------
// The document and study-level fields

#[test]
fn not_yaml_is_rejected_with_the_position() {
    let err = rejected("name: demo\ntrajectories: [\n");
    assert_mentions(&err, &["not valid YAML", "line"]);
}

#[test]
fn a_field_given_twice_is_rejected() {
    let err = rejected(&edit("labels: {gpt-5.5: 6, o3: 4, sol: none}", "labels: {o3: 6, o3: 4}"));
    assert_mentions(&err, &["not valid YAML", "duplicate", "o3", "line 10"]);
}

#[test]
fn an_empty_or_non_mapping_document_is_rejected() {
    assert_mentions(&rejected(""), &["study spec", "empty"]);
    assert_mentions(&rejected("- a\n- b\n"), &["study spec", "must be a mapping", "found a list"]);
}

#[test]
fn missing_study_fields_are_named() {
    assert_mentions(&rejected(&edit("name: demo\n", "")), &["name is missing"]);
    assert_mentions(&rejected(&edit("seed: 7\n", "")), &["seed is missing"]);
    assert_mentions(
        &rejected(&edit("runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}\n", "")),
        &["runner is missing"],
    );
    assert_mentions(&rejected(&edit("kind: synthetic, ", "")), &["runner.kind is missing"]);
    assert_mentions(&rejected("name: demo\nseed: 7\nrunner: {kind: synthetic}\n"), &["trajectories is missing"]);
    assert_mentions(&rejected(&edit("name: demo\n", "name:\n")), &["name is missing"]);
}

#[test]
fn an_unknown_study_field_is_rejected_with_the_valid_ones() {
    let err = rejected(&edit("seed: 7\n", "seed: 7\nshedule: paper\n"));
    assert_mentions(&err, &["shedule", "is not a field of a study spec", "schedule", "trajectories"]);
}

#[test]
fn study_fields_of_the_wrong_type_are_rejected() {
    assert_mentions(&rejected(&edit("seed: 7\n", "seed: -7\n")), &["seed = -7 is negative"]);
    assert_mentions(&rejected(&edit("seed: 7\n", "seed: seven\n")), &["seed must be a whole number", "\"seven\""]);
    assert_mentions(&rejected(&edit("seed: 7\n", "seed: 7.5\n")), &["seed = 7.5 is not a whole number"]);
    assert_mentions(&rejected(&edit("name: demo\n", "name: \"\"\n")), &["name is empty"]);
    assert_mentions(&rejected(&edit("name: demo\n", "name: [a]\n")), &["name must be text"]);
}

#[test]
fn an_empty_trajectory_list_is_rejected() {
    let yaml = "name: demo\nseed: 7\nrunner: {kind: synthetic}\ntrajectories: []\n";
    assert_mentions(&rejected(yaml), &["trajectories is empty"]);
    let yaml = "name: demo\nseed: 7\nrunner: {kind: synthetic}\ntrajectories: {id: a}\n";
    assert_mentions(&rejected(yaml), &["trajectories must be a list", "found a mapping"]);
}

#[test]
fn an_unknown_schedule_is_rejected_with_the_valid_names() {
    let err = rejected(&edit("seed: 7\n", "seed: 7\nschedule: papr\n"));
    assert_mentions(&err, &["schedule = \"papr\" is not a schedule"]);
    for name in variant_names() {
        assert_mentions(&err, &[name]);
    }
}

#[test]
fn the_budget_is_range_checked_and_has_one_value() {
    assert_mentions(&rejected(&edit("seed: 7\n", "seed: 7\nbudget: 0\n")), &["budget = 0 is outside 1..=100000"]);
    assert_mentions(&rejected(&edit("seed: 7\n", "seed: 7\nbudget: -5\n")), &["budget = -5 is negative"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nbudget: 80\nthresholds: {budget: 100}\n"));
    assert_mentions(&err, &["budget = 80 conflicts with thresholds.budget = 100"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {budget: 0}\n"));
    assert_mentions(&err, &["thresholds.budget = 0 is outside"]);
}

#[test]
fn thresholds_out_of_range_name_the_field() {
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {epsilon: 1.5}\n"));
    assert_mentions(&err, &["thresholds.epsilon = 1.5 is out of range", "(0, 1]"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {k_confirm: 4}\n"));
    assert_mentions(&err, &["thresholds.k_confirm = 4", "from 8"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {k_screen: -1}\n"));
    assert_mentions(&err, &["thresholds.k_screen = -1 is negative"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {alpha: .nan}\n"));
    assert_mentions(&err, &["thresholds.alpha", "not a finite number"]);
}

#[test]
fn unknown_or_mistyped_thresholds_are_rejected() {
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {epsilonn: 0.1}\n"));
    assert_mentions(&err, &["thresholds.epsilonn is not a threshold", "epsilon", "k_screen"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {k_screen: many}\n"));
    assert_mentions(&err, &["thresholds.k_screen must be a whole number", "\"many\""]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: {k_screen: 8.5}\n"));
    assert_mentions(&err, &["thresholds.k_screen = 8.5 is not a whole number"]);
    let err = rejected(&edit("seed: 7\n", "seed: 7\nthresholds: [k_screen]\n"));
    assert_mentions(&err, &["thresholds must be a mapping"]);
}

#[test]
fn a_runner_that_is_not_a_mapping_is_rejected() {
    let err = rejected(&edit("runner: {kind: synthetic, duration_ms: 50, no_outcome_rate: 0.02}", "runner: synthetic"));
    assert_mentions(&err, &["runner must be a mapping with `kind`", "\"synthetic\""]);
    let err = rejected(&edit("kind: synthetic", "kind: 5"));
    assert_mentions(&err, &["runner.kind must be text"]);
}

#[test]
fn synthetic_runner_options_are_range_checked() {
    let err = rejected(&edit("no_outcome_rate: 0.02", "no_outcome_rate: 1.5"));
    assert_mentions(&err, &["runner.no_outcome_rate = 1.5 is outside [0, 1]"]);
    let err = rejected(&edit("no_outcome_rate: 0.02", "no_outcome_rate: -0.1"));
    assert_mentions(&err, &["runner.no_outcome_rate = -0.1 is outside [0, 1]"]);
    let err = rejected(&edit("no_outcome_rate: 0.02", "no_outcome_rate: .nan"));
    assert_mentions(&err, &["runner.no_outcome_rate = NaN"]);
    let err = rejected(&edit("duration_ms: 50", "duration_ms: -5"));
    assert_mentions(&err, &["runner.duration_ms = -5 is negative"]);
    let err = rejected(&edit("duration_ms: 50", "duration_ms: fast"));
    assert_mentions(&err, &["runner.duration_ms must be a whole number"]);
    let err = rejected(&edit("duration_ms: 50", "duration: 50"));
    assert_mentions(
        &err,
        &["runner.duration is not an option of the synthetic runner", "duration_ms, no_outcome_rate"],
    );
}

#[test]
fn control_counts_are_checked() {
    let with = |controls: &str| rejected(&edit("seed: 7\n", &format!("seed: 7\n{controls}\n")));
    assert_mentions(&with("controls: {sanity: -1}"), &["controls.sanity = -1 is negative"]);
    assert_mentions(&with("controls: {retest: 3}"), &["controls.retest = 3 is more than the study's 2 trajectories"]);
    assert_mentions(&with("controls: {budget: 1}"), &["controls.budget is not a field of controls", "budget_control"]);
    assert_mentions(&with("controls: {sanity: two}"), &["controls.sanity must be a whole number"]);
    assert_mentions(&with("controls: 5"), &["controls must be a mapping"]);
    assert_mentions(
        &with("controls: {sanity: 1}\nthresholds: {sanity_trajectories: 2}"),
        &["controls.sanity = 1 conflicts with thresholds.sanity_trajectories = 2"],
    );
    assert_mentions(
        &with("thresholds: {retest_trajectories: 10}"),
        &["thresholds.retest_trajectories = 10 is more than the study's 2 trajectories"],
    );
}

#[test]
fn admission_is_checked() {
    let with = |admission: &str| rejected(&edit("seed: 7\n", &format!("seed: 7\n{admission}\n")));
    assert_mentions(
        &with("admission: {mode: eager}"),
        &["admission.mode = \"eager\" is not an admission mode", "demand, batch"],
    );
    assert_mentions(&with("admission: {batch_size: 10}"), &["admission.mode is missing"]);
    assert_mentions(
        &with("admission: {mode: demand, batch_size: 10}"),
        &["admission.batch_size applies only to `mode: batch`"],
    );
    assert_mentions(&with("admission: {mode: batch, size: 10}"), &["admission.size is not a field of admission"]);
    assert_mentions(&with("admission: {mode: batch, batch_size: 0}"), &["admission.batch_size = 0 is outside"]);
    assert_mentions(
        &with("admission: {mode: batch, pipeline_threshold: 0}"),
        &["admission.pipeline_threshold = 0 is outside 1..=10"],
    );
    assert_mentions(
        &with("admission: {mode: batch, batch_size: 4, pipeline_threshold: 5}"),
        &["admission.pipeline_threshold = 5 is outside 1..=4"],
    );
    assert_mentions(
        &with("admission: {mode: batch, batch_size: 4}\nthresholds: {batch_size: 8}"),
        &["admission.batch_size = 4 conflicts with thresholds.batch_size = 8"],
    );
    assert_mentions(&with("admission: batch"), &["admission must be a mapping"]);
}

// ---------------------------------------------------------------------------------------------
// Trajectory fields

#[test]
fn a_trajectory_without_a_usable_id_is_named_by_position() {
    let err = rejected(&edit("  - id: beta\n    length: 5\n", "  - length: 5\n"));
    assert_eq!(err, "trajectories[1]: id is missing");
    let err = rejected(&edit("  - id: beta\n", "  - id: \"\"\n"));
    assert_eq!(err, "trajectories[1]: id is empty");
    let err = rejected(&edit("  - id: beta\n", "  - id: \" beta\"\n"));
    assert_mentions(&err, &["trajectories[1]: id = \" beta\" has surrounding blanks"]);
    let err = rejected(&edit("  - id: beta\n", "  - id: 12\n"));
    assert_mentions(&err, &["trajectories[1]: id must be text, found 12 (quote it)"]);
    let err = rejected("name: d\nseed: 1\nrunner: {kind: synthetic}\ntrajectories: [alpha]\n");
    assert_mentions(&err, &["trajectories[0]: entry must be a mapping"]);
}

#[test]
fn duplicate_ids_are_rejected() {
    let err = rejected(&edit("  - id: beta\n", "  - id: alpha\n"));
    assert_eq!(err, "trajectory \"alpha\": id appears twice (trajectories[0] and trajectories[1]); ids must be unique");
}

#[test]
fn an_unknown_trajectory_field_is_rejected() {
    let err = rejected(&edit("    curve: curves/beta.csv\n", "    curve: curves/beta.csv\n    lables: {o3: 2}\n"));
    assert_mentions(&err, &["trajectory \"beta\"", "lables is not a field of a trajectory", "labels"]);
}

#[test]
fn length_is_required_and_range_checked() {
    let err = rejected(&edit("    length: 5\n", ""));
    assert_eq!(err, "trajectory \"beta\": length is missing");
    assert_mentions(
        &rejected(&edit("    length: 5\n", "    length: 0\n")),
        &["trajectory \"beta\": length = 0 is outside 1..=100000"],
    );
    let err = rejected(&edit("    length: 5\n", "    length: 100001\n"));
    assert_mentions(&err, &["trajectory \"beta\": length = 100001 is outside 1..=100000"]);
    assert_mentions(
        &rejected(&edit("    length: 5\n", "    length: five\n")),
        &["trajectory \"beta\": length must be a whole number"],
    );
    assert_mentions(
        &rejected(&edit("    length: 5\n", "    length: -5\n")),
        &["trajectory \"beta\": length = -5 is negative"],
    );
}

#[test]
fn an_empty_task_is_rejected() {
    assert_mentions(
        &rejected(&edit("    task: django__django-11555\n", "    task: \"\"\n")),
        &["trajectory \"alpha\": task is empty"],
    );
}

#[test]
fn the_synthetic_runner_needs_a_curve() {
    let err = rejected(&edit("    curve: curves/beta.csv\n", ""));
    assert_mentions(&err, &["trajectory \"beta\": curve is missing", "synthetic runner"]);
    let err = rejected(&edit("    curve: curves/beta.csv\n", "    curve: [0.5, 0.4]\n"));
    assert_mentions(&err, &["trajectory \"beta\": curve must be text"]);
}

#[test]
fn a_missing_curve_file_is_named() {
    let err = rejected(&edit("curves/beta.csv", "curves/gamma.csv"));
    assert_mentions(&err, &["trajectory \"beta\": curve curves/gamma.csv: was not found", "relative to the spec"]);
}

#[test]
fn a_curve_value_outside_the_unit_interval_names_file_and_line() {
    let err = rejected_curve("t,v\n0,0.8\n1,0.8\n2,0.8\n3,1.3\n4,0.1\n5,0.1\n6,0.1\n7,0.1\n8,0.1\n9,0.1\n");
    assert_eq!(err, "trajectory \"alpha\": curve curves/alpha.csv line 5: v = 1.3 is outside [0, 1]");
    let err = rejected_curve(&curve_csv(10, |t| if t == 7 { -0.2 } else { 0.5 }));
    assert_eq!(err, "trajectory \"alpha\": curve curves/alpha.csv line 9: v = -0.2 is outside [0, 1]");
}

#[test]
fn a_curve_value_that_is_not_a_number_is_rejected() {
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("3,0.5", "3,high"));
    assert_eq!(err, "trajectory \"alpha\": curve curves/alpha.csv line 5: v = \"high\" is not a number");
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("3,0.5", "3,NaN"));
    assert_eq!(err, "trajectory \"alpha\": curve curves/alpha.csv line 5: v = NaN is not a number");
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("3,0.5", "3,"));
    assert_mentions(&err, &["curve curves/alpha.csv line 5: v = \"\" is not a number"]);
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("3,0.5", "3.0,0.5"));
    assert_mentions(&err, &["curve curves/alpha.csv line 5: t = \"3.0\" is not a step"]);
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("3,0.5", "3,0.5,extra"));
    assert_mentions(
        &err,
        &["trajectory \"alpha\": curve curves/alpha.csv line 5: has 3 fields where the header has 2"],
    );
}

#[test]
fn a_curve_with_a_bad_header_is_rejected() {
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replacen("t,v", "t,value", 1));
    assert_mentions(
        &err,
        &["trajectory \"alpha\": curve curves/alpha.csv line 1: the header has no column `v`", "t,value"],
    );
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replacen("t,v", "0,0.5", 1));
    assert_mentions(&err, &["curve curves/alpha.csv line 1: the header has no column `t`"]);
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replacen("t,v", "t,v,v", 1).replace(",0.5", ",0.5,0.5"));
    assert_mentions(&err, &["curve curves/alpha.csv line 1: the header has the column `v` twice"]);
    let err = rejected_curve("");
    assert_mentions(&err, &["trajectory \"alpha\": curve curves/alpha.csv: is empty", "t = 0..=9"]);
    // A byte-order mark, CRLF line ends, extra columns and surrounding blanks are fine.
    let mut files = valid_files();
    files.insert("curves/alpha.csv".into(), format!("\u{feff}{}", curve_csv(10, |_| 0.5).replace('\n', "\r\n")));
    assert_eq!(parse_with(VALID, &files).unwrap().trajectories[0].curve, Some(vec![0.5; 10]));
    let mut files = valid_files();
    files.insert(
        "curves/alpha.csv".into(),
        curve_csv(10, |_| 0.5).replace(",0.5", " , 0.5,x").replacen("t,v", "t , v , note", 1),
    );
    assert_eq!(parse_with(VALID, &files).unwrap().trajectories[0].curve, Some(vec![0.5; 10]));
}

#[test]
fn curve_rows_must_match_the_length() {
    // A missing t.
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("4,0.5\n", ""));
    assert_eq!(
        err,
        "trajectory \"alpha\": curve curves/alpha.csv: has no row for t = 4; expected one row for each t = 0..=9 (the trajectory's length is 10)"
    );
    // Rows for a shorter trajectory.
    let err = rejected_curve(&curve_csv(3, |_| 0.5));
    assert_mentions(&err, &["has no row for t = 3, 4, 5, 6, 7 and 2 more"]);
    // An extra t, at or beyond the length.
    let err = rejected_curve(&curve_csv(11, |_| 0.5));
    assert_mentions(&err, &["trajectory \"alpha\": curve curves/alpha.csv line 12: t = 10 is outside 0..=9"]);
    // A duplicate t.
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("6,0.5\n", "6,0.5\n2,0.4\n"));
    assert_eq!(err, "trajectory \"alpha\": curve curves/alpha.csv line 9: t = 2 appears twice (first on line 4)");
    // A negative t.
    let err = rejected_curve(&curve_csv(10, |_| 0.5).replace("0,0.5", "-1,0.5"));
    assert_mentions(&err, &["line 2: t = \"-1\" is not a step"]);
    // A header and nothing else.
    let err = rejected_curve("t,v\n");
    assert_mentions(&err, &["trajectory \"alpha\": curve curves/alpha.csv: has no rows"]);
    // Rows in any order are fine.
    let mut files = valid_files();
    let shuffled: String = std::iter::once("t,v\n".to_string())
        .chain((0..10).rev().map(|t| format!("{t},{}\n", f64::from(t) / 10.0)))
        .collect();
    files.insert("curves/alpha.csv".into(), shuffled);
    let curve = parse_with(VALID, &files).unwrap().trajectories[0].curve.clone().unwrap();
    assert_eq!(curve, (0..10).map(|t| f64::from(t) / 10.0).collect::<Vec<_>>());
}

#[test]
fn labels_must_be_steps_of_the_trajectory_or_none() {
    let label = |value: &str| rejected(&edit("o3: 4", &format!("o3: {value}")));
    assert_eq!(
        label("11"),
        "trajectory \"alpha\": labels.o3 = 11 is outside 1..=10; expected a step from 1 to 10 (the trajectory's length), or `none` for no mistake"
    );
    assert_mentions(&label("0"), &["trajectory \"alpha\": labels.o3 = 0 is outside 1..=10"]);
    assert_mentions(&label("-3"), &["trajectory \"alpha\": labels.o3 = -3 is not a whole step"]);
    assert_mentions(&label("4.5"), &["trajectory \"alpha\": labels.o3 = 4.5 is not a whole step"]);
    assert_mentions(&label("nothing"), &["trajectory \"alpha\": labels.o3 = \"nothing\"", "`none`"]);
    assert_mentions(&label("null"), &["trajectory \"alpha\": labels.o3 = nothing", "`none`"]);
    assert_mentions(&label("[4]"), &["trajectory \"alpha\": labels.o3 = a list"]);
    let err = rejected(&edit("labels: {gpt-5.5: 6, o3: 4, sol: none}", "labels: [6, 4]"));
    assert_mentions(&err, &["trajectory \"alpha\": labels must be a mapping from source to step"]);
    let err = rejected(&edit("labels: {gpt-5.5: 6, o3: 4, sol: none}", "labels: {3: 6}"));
    assert_mentions(&err, &["trajectory \"alpha\": labels has a source that is not a name: 3"]);
    // The last step is a legal label.
    assert!(parse_with(&edit("o3: 4", "o3: 10"), &valid_files()).is_ok());
}

#[test]
fn base_runs_are_checked() {
    let runs = |value: &str| rejected(&edit("[{success: true, steps: 40}, {success: false, steps: 100}]", value));
    assert_mentions(
        &runs("[{success: true, steps: 40}, {success: false, steps: -1}]"),
        &["trajectory \"alpha\": base_runs[1].steps = -1 is negative"],
    );
    assert_mentions(
        &runs("[{success: 1, steps: 40}]"),
        &["trajectory \"alpha\": base_runs[0].success must be true or false, found 1"],
    );
    assert_mentions(&runs("[{success: true}]"), &["trajectory \"alpha\": base_runs[0].steps is missing"]);
    assert_mentions(&runs("[{steps: 4}]"), &["trajectory \"alpha\": base_runs[0].success is missing"]);
    assert_mentions(
        &runs("[{success: true, steps: 4, seed: 1}]"),
        &["trajectory \"alpha\": base_runs[0].seed is not a field of a base run"],
    );
    assert_mentions(&runs("[true]"), &["trajectory \"alpha\": base_runs[0] must be a mapping"]);
    assert_mentions(&runs("{success: true}"), &["trajectory \"alpha\": base_runs must be a list"]);
}

#[test]
fn decoys_are_parsed_and_checked() {
    let with = |decoys: &str| format!("{VALID}decoys:\n{decoys}\n");
    let spec = parse_with(
        &with("  - {id: ok-1, task: django__django-11555, length: 30, labels: {gpt-5.5: 12, o3: none}}\n  - {id: ok-2, task: beta, length: 8}"),
        &valid_files(),
    )
    .unwrap();
    assert_eq!(spec.decoys.len(), 2);
    assert_eq!(
        spec.decoys[0].labels,
        vec![Label { source: "gpt-5.5".into(), step: Some(12) }, Label { source: "o3".into(), step: None }]
    );
    assert!(spec.decoys[1].labels.is_empty());
    // Without decoys the list is empty, and a stored spec without the field still reads.
    assert!(parse_with(VALID, &valid_files()).unwrap().decoys.is_empty());
    let mut json = serde_json::to_value(&spec).unwrap();
    json.as_object_mut().unwrap().remove("decoys");
    assert!(serde_json::from_value::<StudySpec>(json).unwrap().decoys.is_empty());

    let bad = |decoys: &str| rejected_with(&with(decoys), &valid_files());
    assert_mentions(
        &bad("  - {id: x, task: nowhere, length: 5}"),
        &["decoys[0].task", "\"nowhere\"", "not the task of any trajectory"],
    );
    assert_mentions(
        &bad("  - {id: x, task: beta, length: 5}\n  - {id: x, task: beta, length: 6}"),
        &["decoys[1].id", "appears twice"],
    );
    assert_mentions(
        &bad("  - {id: x, task: beta, length: 5, labels: {o3: 6}}"),
        &["decoys[0].labels.o3", "outside 1..=5"],
    );
    assert_mentions(&bad("  - {id: x, task: beta}"), &["decoys[0].length is missing"]);
    assert_mentions(&bad("  - {id: x, task: beta, length: 5, steps: 3}"), &["decoys[0].steps"]);
    assert_mentions(&rejected(&format!("{VALID}decoys: 3\n")), &["decoys must be a list"]);
}

fn recorded_files(steps: u32) -> BTreeMap<String, String> {
    BTreeMap::from([("runs/r.json".to_string(), recorded_trajectory("task-r", steps))])
}

const RECORDED: &str =
    "name: rec\nseed: 1\nrunner: {kind: docker}\ntrajectories:\n  - id: r\n    recorded: runs/r.json\n";

#[test]
fn a_recorded_run_gives_the_trajectory_its_length_task_and_digest() {
    let files = recorded_files(12);
    let launch = super::parse_launch(RECORDED, &|p| files.get(p).cloned()).unwrap();
    let t = &launch.spec.trajectories[0];
    assert_eq!((t.length, t.task.as_str()), (12, "task-r"));
    let digest = t.recorded.clone().expect("a digest");
    assert_eq!(launch.recorded[&digest].length(), 12);
    let payload = &launch.payloads()[0];
    assert_eq!(payload.recorded.as_ref().map(|r| r.digest()), Some(digest));
    // A length that disagrees with the recorded run is an error; an equal one is fine.
    let yaml = format!("{RECORDED}    length: 11\n");
    let err = parse_with(&yaml, &files).unwrap_err().to_string();
    assert!(err.contains("trajectory \"r\": length = 11 but the recorded run has 12 steps"), "{err}");
    assert!(parse_with(&format!("{RECORDED}    length: 12\n"), &files).is_ok());
}

#[test]
fn bad_recorded_runs_are_refused_naming_the_trajectory_and_field() {
    let files = BTreeMap::from([("runs/r.json".to_string(), r#"{"format": "mini-swe-agent-1.1"}"#.to_string())]);
    let err = parse_with(RECORDED, &files).unwrap_err().to_string();
    assert!(err.contains("trajectory \"r\": recorded runs/r.json: format is \"mini-swe-agent-1.1\""), "{err}");
    let err = parse_with(RECORDED, &BTreeMap::new()).unwrap_err().to_string();
    assert!(err.contains("recorded runs/r.json: was not found"), "{err}");
    let synthetic = RECORDED.replace("kind: docker", "kind: synthetic");
    let err = parse_with(&synthetic, &recorded_files(3)).unwrap_err().to_string();
    assert!(err.contains("the synthetic runner cannot replay recorded runs"), "{err}");
}

#[test]
fn a_referenced_file_over_the_limit_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    let huge = std::fs::File::create(dir.path().join("runs/r.json")).unwrap();
    huge.set_len(super::MAX_FILE_BYTES + 1).unwrap(); // sparse: nothing is written
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, RECORDED).unwrap();
    let err = super::read_with_files(&spec).unwrap_err().to_string();
    assert_mentions(&err, &["runs/r.json", "67108865 bytes", "over the limit of 67108864 bytes (64 MiB)"]);
    std::fs::remove_file(dir.path().join("runs/r.json")).unwrap();
    std::fs::create_dir(dir.path().join("runs/r.json")).unwrap();
    let err = super::read_with_files(&spec).unwrap_err().to_string();
    assert_mentions(&err, &["runs/r.json", "it is a directory, not a regular file"]);
}

#[test]
fn a_decoys_recorded_run_is_read_from_the_spec_folder_and_a_missing_one_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    std::fs::write(dir.path().join("runs/r.json"), recorded_trajectory("task-r", 12)).unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, format!("{RECORDED}decoys:\n  - {{id: d, task: task-r, recorded: runs/d.json}}\n")).unwrap();
    let err = super::read_with_files(&spec).unwrap_err().to_string();
    assert_mentions(&err, &["decoys[0].recorded", "runs/d.json"]);
    std::fs::write(dir.path().join("runs/d.json"), recorded_trajectory("task-r", 6)).unwrap();
    let (yaml, files) = super::read_with_files(&spec).unwrap();
    assert!(files.contains_key("runs/d.json"));
    assert_eq!(parse_with(&yaml, &files).unwrap().decoys[0].length, 6);
    assert!(super::problem_statement_files(&yaml).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Bounded inputs: only regular files, each under a size limit; YAML under a depth limit, checked
// before it is parsed.

/// A FIFO at `path` (nothing ever writes to it: opening it for reading would block forever).
fn fifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn a_spec_that_is_not_a_regular_file_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("spec.fifo");
    fifo(&pipe);
    let cases =
        [(Path::new("/dev/zero"), "a character device"), (dir.path(), "a directory"), (pipe.as_path(), "a FIFO")];
    for (path, found) in cases {
        let err = super::read_with_files(path).unwrap_err().to_string();
        assert_mentions(&err, &["the study spec", &path.display().to_string(), found, "not a regular file"]);
    }
}

#[test]
fn a_spec_over_the_size_limit_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.yaml");
    let huge = std::fs::File::create(&path).unwrap();
    huge.set_len(super::MAX_SPEC_BYTES + 1).unwrap(); // sparse: nothing is written
    let err = super::read_with_files(&path).unwrap_err().to_string();
    assert_mentions(&err, &["the study spec", "huge.yaml", "16777217 bytes", "over the limit", "16 MiB"]);
}

#[test]
fn a_curve_that_is_not_a_regular_file_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    fifo(&dir.path().join("alpha.fifo"));
    for (curve, found) in [("/dev/zero", "a character device"), ("alpha.fifo", "a FIFO")] {
        let spec = dir.path().join("spec.yaml");
        std::fs::write(&spec, edit("curve: curves/alpha.csv", &format!("curve: {curve}"))).unwrap();
        let err = super::read_with_files(&spec).unwrap_err().to_string();
        assert_mentions(&err, &["trajectory \"alpha\"", curve, found, "not a regular file"]);
    }
}

/// Deeply nested YAML of each kind: flow sequences, flow mappings, block sequences, and block
/// mappings `depth` levels deep (these need `depth²/2` bytes of indentation, so at most 700).
fn deep_yaml(depth: usize) -> Vec<(&'static str, String)> {
    vec![
        ("flow sequences", "[".repeat(depth)),
        ("flow sequences with blanks", "[ ".repeat(depth)),
        ("flow mappings", "{a: ".repeat(depth)),
        ("block sequences", format!("{}x\n", "- ".repeat(depth))),
        ("block mappings", (0..depth.min(700)).map(|i| format!("{}a:\n", " ".repeat(i))).collect()),
    ]
}

#[test]
fn a_deeply_nested_spec_is_refused_before_it_is_parsed() {
    for (kind, yaml) in deep_yaml(100_000) {
        let err = rejected(&yaml);
        assert_mentions(&err, &["levels deep", "over the limit of 64 levels"]);
        let found = if kind == "block mappings" { "700 levels" } else { "100000 levels" };
        assert!(err.contains(found), "{kind}: {err}");
    }
    // Through the file, the message names it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.yaml");
    std::fs::write(&path, "[".repeat(100_000)).unwrap();
    let err = super::read_with_files(&path).unwrap_err().to_string();
    assert_mentions(&err, &["the study spec", "deep.yaml", "100000 levels deep", "over the limit of 64 levels"]);
}

#[test]
fn nesting_up_to_the_limit_is_parsed() {
    // Not a study spec, but YAML: the error is about the document, not its depth.
    for (kind, yaml) in deep_yaml(64) {
        let err = rejected(&yaml);
        assert!(!err.contains("levels deep"), "{kind}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// Properties: whatever the text, `parse` and the curve reader return (no panic, no hang), and what
// they accept is valid.

/// Pieces of YAML and of spec values, to write into specs.
const PIECES: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ",",
    ": ",
    "- ",
    "? ",
    "'",
    "\"",
    "#",
    "|",
    ">",
    "&a ",
    "*a",
    "<<: *a",
    "!t ",
    " ",
    "  ",
    "\t",
    "\n",
    "\n  ",
    "\n    ",
    "---\n",
    "~",
    "null",
    "0",
    "1",
    "-1",
    "7",
    "100001",
    "4294967296",
    "1e3",
    "0.5",
    ".nan",
    "true",
    "none",
    "id: ",
    "length: ",
    "curve: ",
    "labels: ",
    "base_runs: ",
    "task: ",
    "recorded: ",
    "runner: ",
    "kind: ",
    "synthetic",
    "docker",
    "thresholds: ",
    "controls: ",
    "admission: ",
    "decoys: ",
    "curves/alpha.csv",
    "curves/beta.csv",
    "alpha",
    "beta",
    "é",
    "\u{0}",
];

/// An edit of a text: at a position, remove some characters and put a piece in.
fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, usize, &'static str)>> {
    prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, prop::sample::select(PIECES)), 1..6)
}

fn apply(text: &str, edits: &[(prop::sample::Index, usize, &str)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, remove, piece) in edits {
        let at = at.index(chars.len() + 1);
        let end = (at + remove).min(chars.len());
        chars.splice(at..end, piece.chars());
    }
    chars.into_iter().collect()
}

/// What an accepted spec promises.
fn check_accepted(spec: &StudySpec) -> Result<(), TestCaseError> {
    prop_assert!(!spec.trajectories.is_empty());
    for t in &spec.trajectories {
        prop_assert!((1..=MAX_LENGTH).contains(&t.length));
        if let Some(curve) = &t.curve {
            prop_assert_eq!(curve.len(), t.length as usize);
            prop_assert!(curve.iter().all(|v| (0.0..=1.0).contains(v)));
        }
        for label in &t.labels {
            prop_assert!(label.step.is_none_or(|m| (1..=t.length).contains(&m)));
        }
    }
    Ok(())
}

/// A curve file's text: a header and rows of fields drawn from numbers and not-numbers.
fn curve_text() -> impl Strategy<Value = String> {
    let field = prop::sample::select(
        &[
            "0",
            "1",
            "2",
            "3",
            "9",
            "10",
            "-1",
            "0.5",
            "1.0",
            "1.5",
            "1e0",
            "NaN",
            "inf",
            "",
            "\"3\"",
            "a",
            " 4 ",
            "0x1",
            "18446744073709551616",
            "\u{feff}0",
            "é",
        ][..],
    );
    let header = prop::sample::select(&["t,v", "v,t", "t,v,x", "", "t", "t,t,v", "\u{feff}t,v", "T,V"][..]);
    let row = prop::collection::vec(field, 0..4).prop_map(|fields| fields.join(","));
    let newline = prop::sample::select(&["\n", "\r\n", "\r"][..]);
    (header, prop::collection::vec(row, 0..14), newline).prop_map(|(header, rows, newline)| {
        std::iter::once(header.to_string()).chain(rows).collect::<Vec<_>>().join(newline)
    })
}

/// Pieces of CSV, to write into curve files.
const CSV_PIECES: &[&str] =
    &[",", "\n", "\r\n", "\"", "0", "1", "9", "0.5", "-", "e", "NaN", " ", "t", "v", "\u{feff}", "é", ",,"];

/// A trajectory's length and a curve file for it: made of pieces, valid, or valid then edited.
fn curve_case() -> impl Strategy<Value = (u32, String)> {
    (6u32..14).prop_flat_map(|length| {
        let valid = prop::collection::vec(0.0f64..=1.0, length as usize)
            .prop_map(move |values| curve_csv(length, |t| values[t as usize]));
        let edits =
            prop::collection::vec((any::<prop::sample::Index>(), 0usize..3, prop::sample::select(CSV_PIECES)), 1..4);
        let edited = (valid.clone(), edits).prop_map(|(text, edits)| apply(&text, &edits));
        (Just(length), prop_oneof![curve_text(), valid, edited])
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn any_edit_of_a_valid_spec_is_parsed_or_refused(edits in edits()) {
        let yaml = apply(VALID, &edits);
        match parse_with(&yaml, &valid_files()) {
            Ok(spec) => check_accepted(&spec)?,
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn any_spec_of_syntax_pieces_is_parsed_or_refused(pieces in prop::collection::vec(prop::sample::select(PIECES), 0..64)) {
        let yaml = format!("name: x\nseed: 1\n{}", pieces.concat());
        match parse_with(&yaml, &valid_files()) {
            Ok(spec) => check_accepted(&spec)?,
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn any_curve_file_is_read_or_refused_with_its_line((length, text) in curve_case()) {
        match parse_curve(&text, length) {
            Ok(values) => {
                prop_assert_eq!(values.len(), length as usize);
                prop_assert!(values.iter().all(|v| (0.0..=1.0).contains(v)), "{:?}", values);
            }
            Err((line, message)) => {
                prop_assert!(line.is_none_or(|l| l >= 1), "line {:?}", line);
                prop_assert!(!message.is_empty());
            }
        }
        // The same text as alpha's curve file, through the whole spec.
        let mut files = valid_files();
        files.insert("curves/alpha.csv".into(), text);
        match parse_with(&edit("length: 10", &format!("length: {length}")), &files) {
            Ok(spec) => check_accepted(&spec)?,
            Err(e) => prop_assert!(e.to_string().contains("alpha"), "{}", e),
        }
    }
}

const TASKS: &str = r#"
name: base
seed: 7
runner: {kind: agent, agent: scripted, model: {q: 0.7}}
controls: {sanity: 2}
tasks:
  - task: tasks/calc.json
    base_runs: 8
"#;

fn task_files(task: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("tasks/calc.json".to_string(), task.to_string())])
}

const CALC: &str = r#"{"id": "calc-1", "image": "vcurve-task-calc:abc", "workdir": "/testbed",
  "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}}"#;

#[test]
fn a_study_of_tasks_needs_no_trajectories_and_counts_its_base_runs_for_controls() {
    let spec = parse_with(TASKS, &task_files(CALC)).unwrap();
    assert!(spec.trajectories.is_empty());
    assert_eq!(spec.tasks.len(), 1);
    assert_eq!((spec.tasks[0].task.id.as_str(), spec.tasks[0].base_runs), ("calc-1", 8));
    assert_eq!(spec.controls.sanity, 2, "up to 8 base runs may fail and be trajectories");
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<StudySpec>(&json).unwrap(), spec);
}

#[test]
fn bad_tasks_are_refused_naming_the_entry() {
    let files = task_files(CALC);
    for (yaml, parts) in [
        (TASKS.replace("base_runs: 8", "base_runs: 0"), &["tasks[0].base_runs"][..]),
        (TASKS.replace("tasks/calc.json", "tasks/none.json"), &["tasks[0].task", "tasks/none.json", "not found"][..]),
        (
            TASKS.replace("kind: agent, agent: scripted, model: {q: 0.7}", "kind: synthetic"),
            &["tasks", "synthetic"][..],
        ),
        (TASKS.replace("sanity: 2", "sanity: 9"), &["controls.sanity", "8"][..]),
        (format!("{TASKS}  - task: tasks/calc.json\n    base_runs: 2\n"), &["tasks[1].task", "twice"][..]),
    ] {
        assert_mentions(&rejected_with(&yaml, &files), parts);
    }
    for (task, parts) in [
        (CALC.replace("/testbed", "testbed"), &["tasks[0].task", "workdir"][..]),
        (CALC.replace("\"timeout_s\": 60", "\"timeout_s\": 0"), &["timeout_s"][..]),
        (
            CALC.replace("\"timeout_s\": 60", "\"timeout_s\": 99999999"),
            &["tasks[0].task", "evaluator.timeout_s = 99999999 is outside [1, 86400]"][..],
        ),
        (CALC.replace("\"image\"", "\"imag\""), &["tasks[0].task", "imag"][..]),
        ("{".to_string(), &["tasks[0].task", "not a task"][..]),
    ] {
        assert_mentions(&rejected_with(TASKS, &task_files(&task)), parts);
    }
    assert_mentions(&rejected_with(&TASKS.replace("agent: scripted, ", ""), &files), &["runner", "agent"]);
}

#[test]
fn a_study_of_tasks_selects_with_the_paper_parameters_by_default() {
    let spec = parse_with(&TASKS.replace("    base_runs: 8\n", ""), &task_files(CALC)).unwrap();
    assert_eq!(spec.tasks[0].base_runs, 8, "base_runs defaults to thresholds.base_runs_per_task");
    assert_eq!(spec.selection, Some(vcurve_record::SelectionSpec { seed: 7, target: None }));
    let t = &spec.thresholds;
    assert_eq!((t.band_min, t.band_max, t.trajectories_per_task, t.decoys), (2, 6, 3, 10));
    // A study of listed trajectories has no selection.
    assert_eq!(parse_with(VALID, &valid_files()).unwrap().selection, None);
}

#[test]
fn the_selection_block_and_base_runs_set_the_selection_parameters() {
    let yaml = format!(
        "{}base_runs: 4\nselection: {{band: [1, 3], per_task: 2, decoys: 5, target: 9, seed: 99}}\n",
        TASKS.replace("    base_runs: 8\n", "")
    );
    let spec = parse_with(&yaml, &task_files(CALC)).unwrap();
    assert_eq!(spec.tasks[0].base_runs, 4);
    assert_eq!(spec.selection, Some(vcurve_record::SelectionSpec { seed: 99, target: Some(9) }));
    let t = &spec.thresholds;
    assert_eq!((t.base_runs_per_task, t.band_min, t.band_max, t.trajectories_per_task, t.decoys), (4, 1, 3, 2, 5));
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<StudySpec>(&json).unwrap(), spec);
    // The same values in `thresholds` agree; different ones conflict, naming both.
    let same = format!("{yaml}thresholds: {{band_min: 1, trajectories_per_task: 2, base_runs_per_task: 4}}\n");
    assert_eq!(parse_with(&same, &task_files(CALC)).unwrap(), spec);
    let files = task_files(CALC);
    for (extra, parts) in [
        ("thresholds: {band_max: 5}\n", &["selection.band[1]", "thresholds.band_max"][..]),
        ("thresholds: {decoys: 1}\n", &["selection.decoys", "thresholds.decoys"][..]),
        ("thresholds: {base_runs_per_task: 8}\n", &["base_runs", "thresholds.base_runs_per_task"][..]),
    ] {
        assert_mentions(&rejected_with(&format!("{yaml}{extra}"), &files), parts);
    }
}

#[test]
fn bad_selection_blocks_are_refused_naming_the_field() {
    let files = task_files(CALC);
    let with = |block: &str| format!("{TASKS}selection: {block}\n");
    for (yaml, parts) in [
        (with("{band: [5, 2]}"), &["selection.band", "lowest"][..]),
        (with("{band: [2, 9]}"), &["selection.band", "8 base runs"][..]),
        (with("{band: 3}"), &["selection.band", "[2, 6]"][..]),
        (with("{per_task: 0}"), &["selection.per_task", "at least 1"][..]),
        (with("{target: 0}"), &["selection.target"][..]),
        (with("{seed: -1}"), &["selection.seed"][..]),
        (with("{bands: [2, 6]}"), &["selection.bands"][..]),
        (with("3"), &["selection", "mapping"][..]),
        (format!("{TASKS}base_runs: 0\n"), &["base_runs", "1..="][..]),
        (format!("{VALID}selection: {{seed: 1}}\n"), &["selection", "no tasks"][..]),
    ] {
        let files = if yaml.contains("tasks:") { files.clone() } else { valid_files() };
        assert_mentions(&rejected_with(&yaml, &files), parts);
    }
}

const INLINE: &str = r#"
name: inline
seed: 3
runner: {kind: agent, agent: scripted}
tasks:
  - id: calc-2
    image: vcurve-task-calc:abc
    workdir: /testbed
    evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}
    problem_statement_file: tasks/calc-2.md
    base_runs: 3
  - task: tasks/calc.json
"#;

#[test]
fn a_task_may_be_written_inline_with_its_problem_statement_in_a_file() {
    let mut files = task_files(CALC);
    files.insert("tasks/calc-2.md".into(), "Fix add().\n".into());
    let spec = parse_with(INLINE, &files).unwrap();
    let t = &spec.tasks[0];
    assert_eq!((t.task.id.as_str(), t.task.workdir.as_str(), t.base_runs), ("calc-2", "/testbed", 3));
    assert_eq!(t.task.problem_statement.as_deref(), Some("Fix add().\n"));
    assert_eq!(
        t.task.evaluator,
        vcurve_record::Evaluator::Command { command: "python3 -m unittest".into(), timeout_s: 60 }
    );
    assert_eq!(spec.tasks[1].base_runs, 8);
    for (yaml, parts) in [
        (INLINE.replace("tasks/calc-2.md", "tasks/none.md"), &["tasks[0].problem_statement_file", "not found"][..]),
        (INLINE.replace("workdir: /testbed", "workdir: testbed"), &["tasks[0].workdir", "absolute"][..]),
        (INLINE.replace("    image: vcurve-task-calc:abc\n", ""), &["tasks[0].image", "missing"][..]),
        (INLINE.replace("kind: command,", "kind: harness,"), &["tasks[0].evaluator.kind", "harness"][..]),
        (INLINE.replace("timeout_s: 60}", "timeout_s: 0}"), &["tasks[0].evaluator.timeout_s"][..]),
        (
            INLINE.replace("timeout_s: 60}", "timeout_s: 99999999}"),
            &["tasks[0].evaluator.timeout_s", "= 99999999 is outside [1, 86400]"][..],
        ),
        (INLINE.replace("    base_runs: 3\n", "    base_runs: 3\n    imagee: x\n"), &["tasks[0].imagee"][..]),
        (
            INLINE.replace(
                "problem_statement_file: tasks/calc-2.md",
                "problem_statement_file: tasks/calc-2.md\n    problem_statement: x",
            ),
            &["tasks[0].problem_statement_file", "both"][..],
        ),
        (INLINE.replace("id: calc-2", "id: calc-1"), &["tasks[1].task", "twice"][..]),
    ] {
        assert_mentions(&rejected_with(&yaml, &files), parts);
    }
}

#[test]
fn the_paths_named_only_as_problem_statements_are_known_without_reading_them() {
    let names = |yaml: &str| super::problem_statement_files(yaml).into_iter().collect::<Vec<_>>();
    assert_eq!(names(INLINE), ["tasks/calc-2.md"]);
    // A path also named as something else is read as that too.
    assert!(names(&INLINE.replace("tasks/calc-2.md", "tasks/calc.json")).is_empty());
    assert!(names(&format!("{INLINE}trajectories:\n  - {{id: a, curve: tasks/calc-2.md}}\n")).is_empty());
    assert!(names(TASKS).is_empty());
    assert!(names("[").is_empty(), "a spec too malformed to walk names none");
}

#[test]
fn reading_a_spec_reads_its_task_files_and_problem_statements() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tasks")).unwrap();
    std::fs::write(dir.path().join("tasks/calc.json"), CALC).unwrap();
    std::fs::write(dir.path().join("tasks/calc-2.md"), "Fix add().").unwrap();
    std::fs::write(dir.path().join("study.yaml"), INLINE).unwrap();
    let spec = load(&dir.path().join("study.yaml")).unwrap();
    assert_eq!(spec.tasks[0].task.problem_statement.as_deref(), Some("Fix add()."));
    std::fs::remove_file(dir.path().join("tasks/calc-2.md")).unwrap();
    let e = load(&dir.path().join("study.yaml")).unwrap_err().to_string();
    assert_mentions(&e, &["tasks[0].problem_statement_file", "tasks/calc-2.md"]);
}

#[test]
fn a_restart_check_spec_names_the_checked_study_and_nothing_else() {
    let none: BTreeMap<String, String> = BTreeMap::new();
    let request = |yaml: &str| parse_request(yaml, &|p| none.get(p).cloned());
    let Ok(Request::RestartCheck(check)) = request("restart_check: {of: s-1}\n") else { panic!() };
    assert_eq!(check, restart_check::RestartCheckRequest { name: None, seed: None, of: "s-1".into(), runs: 8 });
    let Ok(Request::RestartCheck(check)) = request("name: rc\nseed: 3\nrestart_check: {of: s-1, runs: 2}\n") else {
        panic!()
    };
    assert_eq!((check.name.as_deref(), check.seed, check.runs), (Some("rc"), Some(3), 2));
    for (yaml, parts) in [
        ("restart_check: {of: s-1, runs: 0}\n", &["restart_check.runs"][..]),
        ("restart_check: {runs: 2}\n", &["restart_check.of", "missing"][..]),
        ("restart_check: {of: s-1, run: 2}\n", &["restart_check.run"][..]),
        ("restart_check: {of: s-1}\nrunner: {kind: agent}\n", &["runner", "checked study"][..]),
        ("restart_check: s-1\n", &["restart_check", "mapping"][..]),
    ] {
        match request(yaml) {
            Err(e) => assert_mentions(&e.to_string(), parts),
            Ok(r) => panic!("{yaml} was accepted: {r:?}"),
        }
    }
    // `parse` makes studies only: a restart check is completed from the stored study.
    assert_mentions(&rejected("restart_check: {of: s-1}\n"), &["restart_check", "coordinator"]);
}

/// A recorded trajectory of `steps` steps (one `echo` each) on task `task`, as a trajectory file
/// (the same as `vcurve_coordinator::testing::recorded_trajectory`, which this crate cannot use).
fn recorded_trajectory(task: &str, steps: u32) -> String {
    use vcurve_record::trajectory::{Action, EndType, Evaluator, FORMAT, Interpreter, Step, Task, Trajectory};
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "agent"}),
        serde_json::json!({"role": "user", "content": task}),
    ];
    let mut out = Vec::new();
    for i in 1..=steps {
        messages.push(serde_json::json!({"role": "assistant", "content": format!("echo {i}")}));
        messages.push(serde_json::json!({"role": "user", "content": format!("{i}\n")}));
        out.push(Step {
            actions: vec![Action {
                command: format!("echo {i}"),
                timeout_s: 60.0,
                output: format!("{i}\n"),
                returncode: Some(0),
                timed_out: false,
                exception: None,
                omitted: None,
            }],
            messages_end: messages.len(),
            fingerprint: None,
        });
    }
    let t = Trajectory {
        format: FORMAT.into(),
        task: Task {
            id: task.into(),
            image: "vcurve/test-task:latest".into(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
            problem_statement: None,
        },
        interpreter: Interpreter::default(),
        messages,
        initial_messages: 2,
        steps: out,
        end_type: EndType::Submitted,
        submission: Some(String::new()),
        policy: None,
    };
    serde_json::to_string(&t).expect("serializes")
}

// ---------------------------------------------------------------------------------------------
// Files stay in the spec's folder: every path a spec names resolves, after symbolic links, under
// the spec's folder or a folder the user allowed; otherwise reading the spec is refused naming
// the field, the trajectory or task, and the path as written.

/// `study/` holding a spec and its files, beside `secret` (a file the spec must not reach) and
/// `shared/` (a folder a user may allow).
struct Layout {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    study: std::path::PathBuf,
}

impl Layout {
    fn new() -> Layout {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let study = root.join("study");
        for sub in ["study/curves", "study/runs", "study/tasks", "study/data", "shared"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join("secret"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
        Layout { _dir: dir, root, study }
    }

    fn spec(&self, yaml: &str) -> std::path::PathBuf {
        let path = self.study.join("study.yaml");
        std::fs::write(&path, yaml).unwrap();
        path
    }
}

#[cfg(unix)]
#[test]
fn a_file_a_spec_names_outside_its_folder_is_refused_naming_the_path() {
    let l = Layout::new();
    let up = "../".repeat(l.study.components().count() + 2);
    let secret = l.root.join("secret");
    std::fs::write(l.study.join("tasks/calc.json"), CALC).unwrap();
    // A curve that is a symbolic link to a file outside the folder.
    std::os::unix::fs::symlink(&secret, l.study.join("curves/alpha.csv")).unwrap();
    std::fs::write(l.study.join("curves/beta.csv"), &valid_files()["curves/beta.csv"]).unwrap();
    std::fs::write(l.root.join("shared/r.json"), recorded_trajectory("task-r", 3)).unwrap();
    let statement = format!("{up}etc/passwd");
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            INLINE.replace("tasks/calc-2.md", &statement),
            vec!["tasks[0].problem_statement_file".into(), statement.clone(), "resolves to /etc/passwd".into()],
        ),
        (
            INLINE.replace("tasks/calc-2.md", "../secret"),
            vec!["tasks[0].problem_statement_file ../secret".into(), secret.display().to_string()],
        ),
        (
            INLINE.replace("tasks/calc-2.md", &secret.display().to_string()),
            vec![format!("tasks[0].problem_statement_file {}", secret.display())],
        ),
        (
            RECORDED.replace("runs/r.json", "../shared/r.json"),
            vec!["trajectory \"r\": recorded ../shared/r.json".into()],
        ),
        (VALID.to_string(), vec!["trajectory \"alpha\": curve curves/alpha.csv".into(), secret.display().to_string()]),
        (
            format!("{SWEBENCH_SPEC}swebench:\n  dataset: ../secret\n  instances: all\n"),
            vec!["swebench.dataset ../secret".into()],
        ),
        (TASKS.replace("tasks/calc.json", "../secret"), vec!["tasks[0].task ../secret".into()]),
    ];
    for (yaml, parts) in &cases {
        let spec = l.spec(yaml);
        let err = super::read_with_files(&spec).unwrap_err().to_string();
        let folder = l.study.display().to_string();
        let mut named: Vec<&str> = parts.iter().map(String::as_str).collect();
        named.extend(["lies outside the spec's folder", &folder, "--allow-path"]);
        assert_mentions(&err, &named);
        // So does loading it in one process.
        assert_mentions(&super::load_launch(&spec).unwrap_err().to_string(), &named);
    }

    // Allowed, the same files are read (`/etc/passwd` stays refused: only its folder was not).
    let allowed = [l.root.clone()];
    for (yaml, _) in &cases[1..5] {
        let (_, files) = super::read_with_files_allowing(&l.spec(yaml), &allowed).unwrap();
        assert!(!files.is_empty(), "{yaml}");
    }
    let err = super::read_with_files_allowing(&l.spec(&cases[0].0), &allowed).unwrap_err().to_string();
    assert_mentions(&err, &["resolves to /etc/passwd", "and the allowed", &l.root.display().to_string()]);
    let (_, files) = super::read_with_files_allowing(&l.spec(&cases[0].0), &[PathBuf::from("/etc")]).unwrap();
    assert!(files[&statement].contains("root:"), "the user allowed /etc");
    // An allowed folder that does not exist is named.
    let err = super::read_with_files_allowing(&l.spec(VALID), &[l.root.join("nowhere")]).unwrap_err().to_string();
    assert_mentions(&err, &["--allow-path", "nowhere", "cannot be resolved"]);
}

#[cfg(unix)]
#[test]
fn links_and_dotted_paths_that_stay_in_the_folder_are_read() {
    let l = Layout::new();
    std::fs::write(l.study.join("curves/a.csv"), &valid_files()["curves/alpha.csv"]).unwrap();
    std::os::unix::fs::symlink("a.csv", l.study.join("curves/alpha.csv")).unwrap();
    std::fs::write(l.study.join("curves/beta.csv"), &valid_files()["curves/beta.csv"]).unwrap();
    let yaml = edit("curve: curves/beta.csv", "curve: runs/../curves/beta.csv");
    let (_, files) = super::read_with_files(&l.spec(&yaml)).unwrap();
    assert_eq!(files["curves/alpha.csv"], valid_files()["curves/alpha.csv"]);
    // An absolute path into the folder is inside it.
    let absolute = l.study.join("curves/beta.csv").display().to_string();
    let yaml = edit("curve: curves/beta.csv", &format!("curve: {absolute}"));
    let spec = super::load(&l.spec(&yaml)).unwrap();
    assert_eq!(spec.trajectories.len(), 2);
}

const SWEBENCH_SPEC: &str = "name: swe\nseed: 7\nrunner: {kind: agent, agent: agent}\n";

/// A recorded run with the policy `policy` (`format`, `model_kwargs`, …) as the import keeps it.
fn recorded_with_policy(policy: serde_json::Value) -> BTreeMap<String, String> {
    let mut t: serde_json::Value = serde_json::from_str(&recorded_trajectory("task-r", 3)).unwrap();
    t["policy"] = policy;
    BTreeMap::from([("runs/r.json".to_string(), t.to_string())])
}

const MSA_RECORDED: &str = "name: rec\nseed: 1\nrunner: {kind: mini-swe-agent, model: {model_name: openai/m, \
    temperature: 0.7}}\ntrajectories:\n  - id: r\n    recorded: runs/r.json\n";

#[test]
fn launch_notes_where_the_resumed_policy_differs_from_the_recorded_one() {
    let files = recorded_with_policy(serde_json::json!({"agent": "mini-swe-agent", "format": "mini-swe-agent-1.1",
        "version": "2.4.6", "model_name": "hosted_vllm/m", "model_kwargs": {"temperature": 0, "api_base": "http://x"},
        "environment": "minisweagent.environments.singularity.SingularityEnvironment"}));
    let launch = super::parse_launch(MSA_RECORDED, &|p| files.get(p).cloned()).unwrap();
    let notes = launch.policy_notes();
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(notes.iter().all(|n| n.starts_with("r: the resumed policy differs from the recorded one: ")), "{notes:?}");
    assert!(notes.iter().any(|n| n.ends_with("temperature: the spec's 0.7, recorded 0")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("model_name: the spec's \"openai/m\", recorded \"hosted_vllm/m\"")));
    assert!(notes.iter().any(|n| n.contains("SingularityEnvironment, replayed and resumed in Docker")));
    // Without the spec's temperature the recorded 0 is resumed: a deterministic policy, said so.
    let yaml = MSA_RECORDED.replace(", \\\n    temperature: 0.7", "").replace(", temperature: 0.7", "");
    let launch = super::parse_launch(&yaml, &|p| files.get(p).cloned()).unwrap();
    let notes = launch.policy_notes();
    assert!(notes.last().unwrap().starts_with("r: the policy samples at temperature 0"), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("temperature: the spec's")), "{notes:?}");
    // Another runner's model object is its own agent's: nothing to compare.
    let files = recorded_files(3);
    assert!(super::parse_launch(RECORDED, &|p| files.get(p).cloned()).unwrap().policy_notes().is_empty());
}

#[test]
fn a_text_format_run_is_refused_by_the_tool_call_runner() {
    let files = recorded_with_policy(serde_json::json!({"agent": "mini-swe-agent", "format": "mini-swe-agent-1",
        "version": "1.15.0", "model_kwargs": {}}));
    let err = parse_with(MSA_RECORDED, &files).unwrap_err().to_string();
    assert!(
        err.contains(
            "trajectory \"r\": recorded was recorded by mini-swe-agent 1.15.0's text scaffold (mini-swe-agent-1"
        ),
        "{err}"
    );
    assert!(err.contains("tool-call scaffold of mini-swe-agent 2.4.6 only"), "{err}");
    // The agent runner takes it: its adapter is the study's own.
    assert!(parse_with(RECORDED, &files).is_ok());
}

const JUDGED: &str = "name: rec\nseed: 1\nrunner: {kind: docker}\n\
     judges:\n  o3: {base_url: \"http://127.0.0.1:9/v1\", model: o3, api_key_env: OPENAI_KEY}\n  \
     qwen.v2: {base_url: \"http://127.0.0.1:10/v1\", model: qwen, temperature: 0.3}\n\
     trajectories:\n  - id: r\n    recorded: runs/r.json\n    labels: {sol: 4}\n";

#[test]
fn judges_are_label_sources_with_a_model_each_at_temperature_0() {
    let files = recorded_files(12);
    let spec = parse_with(JUDGED, &files).unwrap();
    assert_eq!(spec.judges.keys().collect::<Vec<_>>(), ["o3", "qwen.v2"]);
    let o3 = &spec.judges["o3"];
    assert_eq!((o3.endpoint.model.as_str(), o3.endpoint.api_key_env.as_deref()), ("o3", Some("OPENAI_KEY")));
    assert_eq!(o3.sampling.temperature, Some(0.0));
    assert_eq!(spec.judges["qwen.v2"].sampling.temperature, Some(0.3));
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<StudySpec>(&json).unwrap(), spec);
    // A spec without judges stores none (and its JSON has no `judges`).
    let plain = parse_with(RECORDED, &files).unwrap();
    assert!(plain.judges.is_empty() && !serde_json::to_string(&plain).unwrap().contains("judges"));
}

#[test]
fn bad_judges_are_refused_naming_the_field_and_trajectory() {
    let files = recorded_files(12);
    let mut both = files.clone();
    both.insert("c.csv".into(), curve_csv(5, |_| 0.5));
    let cases = [
        (
            JUDGED.replace("sol: 4", "o3: 4"),
            "judges.o3 is also a label source given in the spec (trajectory r: labels.o3)",
        ),
        (JUDGED.replace("  o3: {", "  o/3: {"), "judges has a judge name that is not a name: \"o/3\""),
        (JUDGED.replace("model: o3, ", ""), "judges.o3.model is missing"),
        (JUDGED.replace("temperature: 0.3", "temperature: 3"), "judges.qwen.v2.temperature"),
        (JUDGED.replace("api_key_env: OPENAI_KEY", "keys: x"), "judges.o3.keys"),
        (JUDGED.replace("http://127.0.0.1:9/v1", "ftp://x"), "judges.o3.base_url"),
        (
            JUDGED.replace("  - id: r\n", "  - {id: plain, length: 5, curve: c.csv}\n  - id: r\n"),
            "trajectory \"plain\": recorded is missing: the study has judges",
        ),
        (
            RECORDED.replace("trajectories:", "judges: [o3]\ntrajectories:"),
            "judges must be a mapping from a judge's name",
        ),
        (RECORDED.replace("trajectories:", "judges: {}\ntrajectories:"), "judges is empty"),
    ];
    for (yaml, expected) in cases {
        let err = parse_with(&yaml, &both).unwrap_err().to_string();
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    let decoy =
        format!("{JUDGED}decoys:\n  - {{id: d, task: task-r, recorded: runs/r.json, labels: {{qwen.v2: 2}}}}\n");
    let err = parse_with(&decoy, &files).unwrap_err().to_string();
    assert!(err.contains("judges.qwen.v2 is also a label source given in the spec (decoy d: labels.qwen.v2)"), "{err}");
}

#[test]
fn a_decoy_names_a_recorded_run_which_judges_need() {
    let mut files = recorded_files(12);
    files.insert("runs/d.json".into(), recorded_trajectory("task-r", 7));
    // The run gives the decoy its length and digest, and the launch hands it over by decoy id.
    let yaml = format!("{JUDGED}decoys:\n  - {{id: d, task: task-r, recorded: runs/d.json}}\n");
    let launch = super::parse_launch(&yaml, &|p| files.get(p).cloned()).unwrap();
    let d = &launch.spec.decoys[0];
    assert_eq!(d.length, 7);
    assert_eq!(d.recorded, Some(launch.decoy_runs()["d"].digest()));
    let json = serde_json::to_string(&launch.spec).unwrap();
    assert_eq!(serde_json::from_str::<StudySpec>(&json).unwrap(), launch.spec);
    // An equal length is fine; a different one, a missing file, a malformed run are refused.
    let at = |decoy: &str| format!("{JUDGED}decoys:\n  - {decoy}\n");
    assert!(parse_with(&at("{id: d, task: task-r, length: 7, recorded: runs/d.json}"), &files).is_ok());
    let cases = [
        (
            "{id: d, task: task-r, length: 6, recorded: runs/d.json}",
            "decoys[0].length = 6 but the recorded run has 7 steps",
        ),
        ("{id: d, task: task-r, recorded: runs/none.json}", "decoys[0].recorded runs/none.json: was not found"),
        ("{id: d, task: task-r, recorded: runs/bad.json}", "decoys[0].recorded runs/bad.json:"),
        // With judges, a decoy without a recorded run is refused by name.
        ("{id: d, task: task-r, length: 5}", "decoys[0].recorded is missing (decoy \"d\"): the study has judges"),
    ];
    files.insert("runs/bad.json".into(), "{}".into());
    for (decoy, expected) in cases {
        let err = parse_with(&at(decoy), &files).unwrap_err().to_string();
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    // Without judges a decoy needs no run, but still a length.
    let plain = format!("{RECORDED}decoys:\n  - {{id: d, task: task-r, length: 5}}\n");
    assert_eq!(parse_with(&plain, &files).unwrap().decoys[0].recorded, None);
    let err = parse_with(&format!("{RECORDED}decoys:\n  - {{id: d, task: task-r}}\n"), &files).unwrap_err();
    assert!(err.to_string().contains("decoys[0].length is missing"), "{err}");
}
