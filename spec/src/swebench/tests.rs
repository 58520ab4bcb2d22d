use std::collections::BTreeMap;

use serde_json::Value as Json;
use vcurve_record::{Evaluator, StudySpec, Trajectory};

use crate::{Launch, SpecError, load, parse_launch};

/// Three rows shaped like SWE-bench Verified's (short stand-in text).
const DATASET: &str = include_str!("../../../coordinator/tests/fixtures/swebench/verified-3.jsonl");
/// A real mini-swe-agent run of django__django-10999 (format `mini-swe-agent-1`).
const DJANGO_RUN: &[u8] =
    include_bytes!("../../../record/tests/fixtures/mini-swe-agent/django__django-10999.v1.traj.json");

const SPEC: &str = "name: swe\nseed: 7\nrunner: {kind: agent, agent: agent}\n";
const BLOCK: &str = "swebench:\n  dataset: data/verified.jsonl\n";

fn with_block(block: &str) -> String {
    format!("{SPEC}{BLOCK}{block}")
}

fn files(dataset: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("data/verified.jsonl".to_string(), dataset.to_string())])
}

fn launch(yaml: &str, files: &BTreeMap<String, String>) -> Result<Launch, SpecError> {
    parse_launch(yaml, &|p| files.get(p).cloned())
}

fn parsed(yaml: &str) -> StudySpec {
    launch(yaml, &files(DATASET)).unwrap_or_else(|e| panic!("{e}\n{yaml}")).spec
}

fn rejected_with(yaml: &str, files: &BTreeMap<String, String>) -> String {
    match launch(yaml, files) {
        Err(e) => e.to_string(),
        Ok(l) => panic!("accepted:\n{yaml}\n{:?}", l.spec.tasks),
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} does not mention {part:?}");
    }
}

fn row(line: usize) -> Json {
    serde_json::from_str(DATASET.lines().nth(line).unwrap()).unwrap()
}

/// The dataset with one row's field set (`None` removes it).
fn with_field(line: usize, field: &str, value: Option<Json>) -> String {
    with_field_of(DATASET, line, field, value)
}

fn with_field_of(dataset: &str, line: usize, field: &str, value: Option<Json>) -> String {
    dataset
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut r: Json = serde_json::from_str(l).unwrap();
            if i == line {
                let o = r.as_object_mut().unwrap();
                match &value {
                    Some(v) => o.insert(field.to_string(), v.clone()),
                    None => o.remove(field),
                };
            }
            format!("{r}\n")
        })
        .collect()
}

#[test]
fn instances_become_tasks_with_the_harness_images_and_their_rows() {
    let spec = parsed(&with_block("  instances: [django__django-10999, astropy__astropy-14309]\n  base_runs: 4\n"));
    assert!(spec.trajectories.is_empty(), "a study from tasks");
    let ids: Vec<&str> = spec.tasks.iter().map(|t| t.task.id.as_str()).collect();
    assert_eq!(ids, ["django__django-10999", "astropy__astropy-14309"], "in the order of instances");
    let django = &spec.tasks[0];
    assert_eq!(django.base_runs, 4);
    assert_eq!(django.task.image, "swebench/sweb.eval.x86_64.django_1776_django-10999:latest");
    assert_eq!(spec.tasks[1].task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest");
    assert_eq!(django.task.workdir, "/testbed");
    assert_eq!(django.task.problem_statement.as_deref(), Some("Fix parse_duration() for some negative durations\n"));
    assert_eq!(
        django.task.evaluator,
        Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(0)) }
    );
    let Evaluator::Swebench { instance: Some(stored), .. } = &spec.tasks[1].task.evaluator else { panic!() };
    assert_eq!(stored["FAIL_TO_PASS"], row(2)["FAIL_TO_PASS"], "the row as read, lists still JSON-encoded");
    assert_eq!(spec.selection, Some(vcurve_record::SelectionSpec { seed: 7, target: None }));
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<StudySpec>(&json).unwrap(), spec);
}

#[test]
fn all_takes_every_row_in_file_order_and_the_study_parameters_apply() {
    let yaml = format!(
        "{}base_runs: 6\nselection: {{band: [1, 5], per_task: 2}}\ncontrols: {{sanity: 18}}\n",
        with_block("  instances: all\n")
    );
    let spec = parsed(&yaml);
    let ids: Vec<&str> = spec.tasks.iter().map(|t| t.task.id.as_str()).collect();
    assert_eq!(ids, ["django__django-10999", "astropy__astropy-13236", "astropy__astropy-14309"]);
    assert!(spec.tasks.iter().all(|t| t.base_runs == 6), "base_runs: 6 for every instance");
    assert_eq!((spec.thresholds.band_min, spec.thresholds.band_max, spec.thresholds.trajectories_per_task), (1, 5, 2));
    // 3 × 6 base runs may all fail and become trajectories; 19 may not.
    assert_mentions(
        &rejected_with(&yaml.replace("sanity: 18", "sanity: 19"), &files(DATASET)),
        &["controls.sanity", "18"],
    );
}

#[test]
fn the_image_may_be_a_template_or_a_field_of_the_row_and_the_workdir_another_directory() {
    let spec = parsed(&with_block(
        "  instances: [django__django-10999]\n  image: \"mirror:5000/{harness}\"\n  workdir: /work\n",
    ));
    let task = &spec.tasks[0].task;
    assert_eq!(task.image, "mirror:5000/swebench/sweb.eval.x86_64.django_1776_django-10999:latest");
    assert_eq!(task.workdir, "/work");
    let spec = parsed(&with_block("  instances: [django__django-10999]\n  image: \"local/{instance_id}:v1\"\n"));
    assert_eq!(spec.tasks[0].task.image, "local/django__django-10999:v1");
    let dataset = with_field(0, "image_name", Some(Json::from("ghcr.io/x/django-10999:1")));
    let yaml = with_block("  instances: [django__django-10999]\n  image_field: image_name\n");
    let spec = launch(&yaml, &files(&dataset)).unwrap().spec;
    assert_eq!(spec.tasks[0].task.image, "ghcr.io/x/django-10999:1");
}

#[test]
fn a_row_that_names_its_image_must_name_the_one_the_agent_runs_in() {
    // The harness judges in the row's image: the last row's is the harness's name, untagged.
    let spec = parsed(&with_block("  instances: [astropy__astropy-14309]\n"));
    assert_eq!(spec.tasks[0].task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest");
    let spec = parsed(&with_block("  instances: [astropy__astropy-14309]\n  image_field: image\n"));
    assert_eq!(spec.tasks[0].task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309");
    let mirror = with_block("  instances: [astropy__astropy-14309]\n  image: \"mirror:5000/{harness}\"\n");
    assert_mentions(
        &rejected_with(&mirror, &files(DATASET)),
        &[
            "swebench.dataset data/verified.jsonl: line 3 (instance \"astropy__astropy-14309\"): the row's image",
            "is not \"mirror:5000/swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest\"",
            "from swebench.image",
            "image_field: image",
        ],
    );
    // Nor may a task's or a recorded run's differ from its row's.
    let dataset = with_field(0, "image", Some(Json::from("docker.io/other/django:1")));
    let yaml = format!("{}{INLINE}", with_block(""));
    assert_mentions(
        &rejected_with(&yaml, &files(&dataset)),
        &["tasks[1].evaluator of task \"dj\"", "the row's image \"docker.io/other/django:1\" is not \"dj:1\""],
    );
    let dataset = with_field(0, "image", Some(Json::from("dj:1")));
    assert_eq!(launch(&yaml, &files(&dataset)).unwrap().spec.tasks.len(), 2);
}

const INLINE: &str = "tasks:\n  - id: calc-1\n    image: calc:1\n    workdir: /testbed\n    \
                      evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}\n  - id: dj\n    \
                      image: dj:1\n    workdir: /testbed\n    \
                      evaluator: {kind: swebench, instance_id: django__django-10999}\n";

#[test]
fn tasks_and_instances_combine_and_tasks_judged_by_the_harness_get_their_rows() {
    let spec = parsed(&format!("{}{INLINE}", with_block("  instances: [astropy__astropy-13236]\n")));
    let ids: Vec<&str> = spec.tasks.iter().map(|t| t.task.id.as_str()).collect();
    assert_eq!(ids, ["calc-1", "dj", "astropy__astropy-13236"], "the tasks entries, then the instances");
    assert!(matches!(spec.tasks[0].task.evaluator, Evaluator::Command { .. }));
    assert_eq!(
        spec.tasks[1].task.evaluator,
        Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(0)) }
    );
    assert_eq!(spec.tasks[1].task.image, "dj:1", "a task's own image is kept");
    // The dataset alone, for the rows of `tasks:`.
    assert_eq!(parsed(&format!("{}{INLINE}", with_block(""))).tasks.len(), 2);
    // An id in both is given twice; a harness task the dataset lacks could never be judged.
    let both = format!("{}{INLINE}", with_block("  instances: [django__django-10999]\n"));
    let both = both.replace("id: dj\n", "id: django__django-10999\n");
    assert_mentions(
        &rejected_with(&both, &files(DATASET)),
        &["swebench.instances[0]", "django__django-10999", "tasks[1]"],
    );
    assert_mentions(
        &rejected_with(&both.replace("instances: [django__django-10999]", "instances: all"), &files(DATASET)),
        &["swebench.instances (all: line 1 of data/verified.jsonl) = \"django__django-10999\"", "tasks[1]"],
    );
    let absent =
        format!("{}{INLINE}", with_block("")).replace("instance_id: django__django-10999", "instance_id: a__b-1");
    assert_mentions(
        &rejected_with(&absent, &files(DATASET)),
        &["tasks[1].evaluator of task \"dj\": data/verified.jsonl has no row of SWE-bench instance \"a__b-1\""],
    );
}

fn imported_run() -> String {
    let options = vcurve_record::import::ImportOptions::default();
    let imported =
        vcurve_record::import::import_mini_swe_agent("django__django-10999.v1.traj.json", DJANGO_RUN, &options)
            .unwrap();
    serde_json::to_string_pretty(&imported.trajectory).unwrap()
}

#[test]
fn an_imported_run_gets_its_row_and_is_digested_with_it() {
    let run_json = imported_run();
    let unfilled = Trajectory::from_json(run_json.as_bytes()).unwrap();
    assert_eq!(
        unfilled.task.evaluator,
        Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: None }
    );
    let mut files = files(DATASET);
    files.insert("runs/django.json".into(), run_json.clone());
    let yaml = format!("{}trajectories:\n  - id: dj-1\n    recorded: runs/django.json\n", with_block(""));
    let launch = launch(&yaml, &files).unwrap();
    assert!(launch.spec.tasks.is_empty(), "without instances the dataset only gives rows");
    let digest = launch.spec.trajectories[0].recorded.clone().unwrap();
    assert_ne!(digest, unfilled.digest(), "digested with the row filled in");
    assert_eq!(launch.recorded.keys().collect::<Vec<_>>(), [&digest]);
    let run = &launch.recorded[&digest];
    assert_eq!(run.digest(), digest);
    assert_eq!(
        run.task.evaluator,
        Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(0)) }
    );
    let mut expected = unfilled.clone();
    expected.task.evaluator = run.task.evaluator.clone();
    assert_eq!(*run, expected, "nothing else changes: the image, workdir and steps are as recorded");
    let payload = &launch.payloads()[0];
    assert_eq!(payload.task_def(), Some(&run.task), "workers judge the run with its row");
    assert_eq!(launch.spec.trajectories[0].task, "django__django-10999");

    // A run that carries the dataset's row keeps its digest; one that carries another is refused.
    files.insert("runs/django.json".into(), serde_json::to_string(run).unwrap());
    let again = crate::parse_launch(&yaml, &|p| files.get(p).cloned()).unwrap();
    assert_eq!(again.spec.trajectories[0].recorded.as_deref(), Some(digest.as_str()));
    let mut other = run.clone();
    other.task.evaluator = Evaluator::Swebench { instance_id: "django__django-10999".into(), instance: Some(row(1)) };
    files.insert("runs/django.json".into(), serde_json::to_string(&other).unwrap());
    assert_mentions(
        &rejected_with(&yaml, &files),
        &[
            "trajectory \"dj-1\": recorded run: carries a dataset row",
            "differs from the row on line 1 of data/verified.jsonl",
        ],
    );
    // A run whose instance the dataset lacks could never be judged.
    files.insert("runs/django.json".into(), run_json.clone());
    let dataset: String = DATASET.lines().skip(1).map(|l| format!("{l}\n")).collect();
    files.insert("data/verified.jsonl".into(), dataset);
    assert_mentions(
        &rejected_with(&yaml, &files),
        &[
            "trajectory \"dj-1\": recorded run: data/verified.jsonl has no row of SWE-bench instance",
            "\"django__django-10999\"",
        ],
    );
    // Base runs of instances and recorded runs together.
    files.insert("data/verified.jsonl".into(), DATASET.into());
    let both = yaml.replace(BLOCK, &format!("{BLOCK}  instances: [astropy__astropy-14309]\n"));
    let spec = crate::parse_launch(&both, &|p| files.get(p).cloned()).unwrap().spec;
    assert_eq!((spec.tasks.len(), spec.trajectories.len()), (1, 1));
    assert_eq!(spec.trajectories[0].recorded.as_deref(), Some(digest.as_str()));
}

#[test]
fn a_bad_dataset_is_refused_naming_the_line() {
    let yaml = with_block("  instances: [django__django-10999]\n");
    let line = |n: usize, text: &str| -> String {
        let mut lines: Vec<String> = DATASET.lines().map(str::to_string).collect();
        lines.insert(n - 1, text.to_string());
        lines.join("\n")
    };
    let first = DATASET.lines().next().unwrap();
    for (dataset, parts) in [
        (line(3, "{\"instance_id\": "), &["swebench.dataset data/verified.jsonl: line 3: not JSON"][..]),
        (line(2, "[1, 2]"), &["line 2", "is a list, not a row"][..]),
        (line(1, "{\"problem_statement\": \"x\"}"), &["line 1: instance_id is missing"][..]),
        (line(1, "{\"instance_id\": 12}"), &["line 1: instance_id must be text, found a number"][..]),
        (line(4, first), &["line 4: instance_id \"django__django-10999\" appears twice (lines 1 and 4)"][..]),
        (format!("[{first}]"), &["line 1: is a list, not a row", "one JSON array", "JSON Lines"][..]),
        (format!("[\n{first},\n]"), &["line 1: not JSON", "one JSON array", "JSON Lines"][..]),
        ("\n \n".to_string(), &["swebench.dataset data/verified.jsonl: has no rows"][..]),
        (
            with_field(0, "problem_statement", None),
            &["swebench.dataset", "line 1 (instance \"django__django-10999\"): problem_statement is missing"][..],
        ),
        (with_field(0, "problem_statement", Some(Json::from(3))), &["problem_statement must be text"][..]),
        (with_field(0, "FAIL_TO_PASS", Some(Json::from("[\"a\", 1]"))), &["line 1", "FAIL_TO_PASS"][..]),
        (with_field(0, "PASS_TO_PASS", Some(Json::from("not json"))), &["PASS_TO_PASS", "not JSON"][..]),
        (with_field(0, "version", Some(Json::from(3.0))), &["version must be text, found a number"][..]),
        (with_field(0, "eval_type", Some(Json::from("all"))), &["eval_type = \"all\"", "pass_and_fail"][..]),
        (with_field(0, "FAIL_TO_PASS", None), &["line 1", "lacks FAIL_TO_PASS, which the swebench evaluator"][..]),
        (with_field(0, "image", Some(Json::from(2))), &["image must be text"][..]),
        (
            // A SWE-bench 4 row: swebench 5.0.2 could not judge its patches.
            ["log_parser", "eval_type", "eval_script"]
                .into_iter()
                .fold(DATASET.to_string(), |d, f| with_field_of(&d, 0, f, None)),
            &["line 1 (instance \"django__django-10999\"): lacks log_parser, eval_type, eval_script", "v5"][..],
        ),
    ] {
        assert_mentions(&rejected_with(&yaml, &files(&dataset)), parts);
    }
    // Lists of test names as lists, blank lines, a byte-order mark and CRLF are read.
    let lists = with_field(0, "FAIL_TO_PASS", Some(serde_json::json!(["a", "b"])));
    let lists = format!("\u{feff}{}", lists.replace('\n', "\r\n\r\n"));
    assert_eq!(launch(&yaml, &files(&lists)).unwrap().spec.tasks.len(), 1);
}

#[test]
fn bad_swebench_blocks_are_refused_naming_the_field() {
    let ok = files(DATASET);
    for (yaml, parts) in [
        (
            with_block("  instances: [django__django-10999, x__y-1]\n"),
            &["swebench.instances[1] = \"x__y-1\" is not in data/verified.jsonl"][..],
        ),
        (
            with_block("  instances: [x__y-1, django__django-10999, x__y-2]\n"),
            &["swebench.instances[0] = \"x__y-1\"", "nor are swebench.instances[2] = \"x__y-2\"", "3 rows"][..],
        ),
        (
            with_block("  instances: [django__django-10999, django__django-10999]\n"),
            &["swebench.instances[1]", "twice", "[0]"][..],
        ),
        (with_block("  instances: []\n"), &["swebench.instances", "empty", "all"][..]),
        (with_block("  instances: every\n"), &["swebench.instances", "list of instance ids"][..]),
        (with_block("  instances: [12]\n"), &["swebench.instances[0]", "text"][..]),
        (with_block(""), &["swebench.instances", "missing", "no task or recorded run"][..]),
        (
            with_block("  instances: all\n  image: x\n  image_field: image_name\n"),
            &["swebench.image_field", "both"][..],
        ),
        (with_block("  instances: all\n  image: \"x/{id}\"\n"), &["swebench.image", "{id}", "placeholder"][..]),
        (
            with_block("  instances: all\n  image_field: image_name\n"),
            &["swebench.image_field = \"image_name\"", "line 1", "no such field"][..],
        ),
        (with_block("  instances: all\n  workdir: testbed\n"), &["swebench.workdir", "absolute"][..]),
        (with_block("  instances: all\n  base_runs: 0\n"), &["swebench.base_runs = 0", "1..=1000"][..]),
        (with_block("  instance: all\n"), &["swebench.instance", "not a field", "instances"][..]),
        (format!("{SPEC}swebench:\n  instances: all\n"), &["swebench.dataset is missing"][..]),
        (format!("{SPEC}swebench: data/verified.jsonl\n"), &["swebench", "mapping"][..]),
        (
            with_block("  instances: all\n").replace("data/verified.jsonl", "data/none.jsonl"),
            &["swebench.dataset data/none.jsonl: was not found", "relative to the spec"][..],
        ),
        (
            with_block("  instances: all\n").replace("kind: agent, agent: agent", "kind: synthetic"),
            &["swebench", "synthetic"][..],
        ),
    ] {
        assert_mentions(&rejected_with(&yaml, &ok), parts);
    }
}

#[test]
fn loading_a_spec_reads_its_dataset_relative_to_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/verified.jsonl"), DATASET).unwrap();
    std::fs::write(dir.path().join("study.yaml"), with_block("  instances: all\n")).unwrap();
    assert_eq!(load(&dir.path().join("study.yaml")).unwrap().tasks.len(), 3);
    std::fs::remove_file(dir.path().join("data/verified.jsonl")).unwrap();
    let e = load(&dir.path().join("study.yaml")).unwrap_err().to_string();
    assert_mentions(&e, &["swebench.dataset data/verified.jsonl: cannot read"]);
}

#[test]
fn the_papers_agent_settings_run_a_swebench_study_with_their_options_kept() {
    // mini-swe-agent 2.4.6 on vLLM at temperature 0.70, top-p 0.80: the runner's to validate.
    let runner = "runner: {kind: mini-swe-agent, model: {model_name: openai/Qwen/Qwen3-32B, \
                  base_url: \"http://127.0.0.1:8000/v1\", temperature: 0.7, top_p: 0.8}}\n";
    let yaml = with_block("  instances: all\n").replace("runner: {kind: agent, agent: agent}\n", runner);
    let spec = parsed(&yaml);
    assert_eq!((spec.runner.kind(), spec.tasks.len()), ("mini-swe-agent", 3));
    let options = spec.runner.agent_options().expect("mini-swe-agent runs containers");
    assert_eq!(options.model["temperature"], 0.7);
    assert_eq!(options.model["top_p"], 0.8);
}

#[test]
fn a_dataset_the_size_of_verified_is_read() {
    // 500 rows of 20 kB, like SWE-bench Verified's 500 instances in ~10 MB.
    let text = "x".repeat(20_000);
    let dataset: String = (0..500)
        .map(|i| {
            let row = serde_json::json!({
                "instance_id": format!("org__repo-{i}"), "repo": "org/repo", "problem_statement": text,
                "FAIL_TO_PASS": "[\"t\"]", "PASS_TO_PASS": "[]", "version": "1.0",
                "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail", "eval_script": "pytest",
            });
            format!("{row}\n")
        })
        .collect();
    assert!(dataset.len() > 10_000_000);
    let spec = launch(&with_block("  instances: all\n  base_runs: 2\n"), &files(&dataset)).unwrap().spec;
    assert_eq!(spec.tasks.len(), 500);
    assert_eq!(spec.tasks[499].task.image, "swebench/sweb.eval.x86_64.org_1776_repo-499:latest");
}
