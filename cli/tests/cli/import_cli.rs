//! `vcurve import mini-swe-agent` and `vcurve inspect` as a user runs them, on the real
//! mini-swe-agent fixtures (`record/tests/fixtures/mini-swe-agent`, or `VCURVE_MSA_FIXTURES`).

use std::path::PathBuf;

use crate::common::vcurve;
use serde_json::Value;

fn fixtures() -> PathBuf {
    std::env::var_os("VCURVE_MSA_FIXTURES").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../record/tests/fixtures/mini-swe-agent"))
    })
}

const FIXTURES: [&str; 4] = [
    "astropy__astropy-13236.traj.json",
    "astropy__astropy-14096.traj.json",
    "astropy__astropy-14309.traj.json",
    "django__django-10999.v1.traj.json",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn imports_the_fixtures_and_inspects_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("imported");
    let mut args: Vec<String> = vec!["import".into(), "mini-swe-agent".into()];
    args.extend(FIXTURES.iter().map(|f| fixtures().join(f).display().to_string()));
    args.extend(["--out".into(), out.display().to_string()]);
    let report = fixtures().join("eval-report.run_qwen_20_216375.json");
    args.extend(["--report".into(), report.display().to_string()]);
    let run = vcurve(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout).lines().count(), 4);

    // One trajectory per file, loading and round-tripping.
    for id in ["astropy__astropy-13236", "astropy__astropy-14096", "astropy__astropy-14309", "django__django-10999"] {
        let bytes = std::fs::read(out.join(format!("{id}.json"))).unwrap();
        let t = vcurve_record::Trajectory::from_json(&bytes).unwrap();
        assert_eq!(t.task.id, id);
        assert_eq!(vcurve_record::Trajectory::from_json(&t.canonical_bytes()).unwrap(), t);
    }
    let csv = std::fs::read_to_string(out.join("import.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "file,instance_id,format,steps,exit_status,end_type,outcome,first_edit,first_symptom,digest,\
         outage,model_name,temperature,agent_version,environment"
    );
    // The recorded settings: the 1.1 runs' vLLM model at temperature 0 under Singularity, the
    // 1.x run's gemini at 0.0 under Docker.
    let row = rows.iter().find(|r| r.contains(",astropy__astropy-14309,")).unwrap();
    assert!(
        row.ends_with(
            ",,hosted_vllm/Qwen/Qwen3.6-35B-A3B,0,2.4.6,minisweagent.environments.singularity.SingularityEnvironment"
        ),
        "{row}"
    );
    let row = rows.iter().find(|r| r.contains(",django__django-10999,")).unwrap();
    assert!(
        row.ends_with(",,google/gemini-3-pro-preview,0.0,1.15.0,minisweagent.environments.docker.DockerEnvironment"),
        "{row}"
    );
    assert!(text(&run.stderr).contains("SingularityEnvironment (Singularity): replayed and resumed in Docker"));
    let row = rows.iter().find(|r| r.contains(",astropy__astropy-13236,")).unwrap();
    assert!(row.contains(",mini-swe-agent-1.1,84,Submitted,submitted,unresolved,41,70,"), "{row}");
    let row = rows.iter().find(|r| r.contains(",astropy__astropy-14096,")).unwrap();
    assert!(row.contains(",58,ContextWindowExceededError,context_window,empty_patch,,,"), "{row}");

    // inspect --json, on the raw file and on the imported one.
    let raw = vcurve(&["inspect", &fixtures().join(FIXTURES[2]).display().to_string(), "--json"]);
    assert!(raw.status.success(), "{}", text(&raw.stderr));
    let v: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(v["format"], "mini-swe-agent-1.1");
    assert_eq!(v["instance_id"], "astropy__astropy-14309");
    assert_eq!(v["steps"], 27);
    assert_eq!(v["exit_status"], "Submitted");
    assert_eq!(v["first_edit"]["step"], 12);
    assert_eq!(v["first_edit"]["heuristic"], true);
    assert!(v["first_symptom"].is_null());
    assert_eq!(v["submission_sha256"].as_str().unwrap().len(), 64);
    let per_step = v["per_step"].as_array().unwrap();
    assert_eq!(per_step.len(), 27);
    assert_eq!(per_step[3], serde_json::json!({"step": 4, "actions": 1, "returncodes": [1]}));
    assert_eq!(per_step[0], serde_json::json!({"step": 1, "actions": 1, "returncodes": [0]}));

    let imported = vcurve(&["inspect", &out.join("astropy__astropy-14096.json").display().to_string(), "--json"]);
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    let v: Value = serde_json::from_slice(&imported.stdout).unwrap();
    assert_eq!(v["format"], "vcurve.trajectory.v1");
    assert_eq!(v["steps"], 58);
    assert!(v["submission_sha256"].is_null());
    assert_eq!(v["per_step"][57]["returncodes"], serde_json::json!([2]));

    let readable = vcurve(&["inspect", &fixtures().join(FIXTURES[3]).display().to_string()]);
    assert!(readable.status.success());
    let readable = text(&readable.stdout);
    assert!(readable.contains("first edit:     step 5 (heuristic"), "{readable}");
}

#[test]
fn a_corrupted_file_is_refused_and_the_others_import() {
    let dir = tempfile::tempdir().unwrap();
    let good = fixtures().join(FIXTURES[2]);
    let bytes = std::fs::read(&good).unwrap();
    let truncated = dir.path().join("truncated.traj.json");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    let mut value: Value = serde_json::from_slice(&bytes).unwrap();
    value.as_object_mut().unwrap().remove("messages");
    let no_messages = dir.path().join("no-messages.traj.json");
    std::fs::write(&no_messages, serde_json::to_vec(&value).unwrap()).unwrap();
    let mut value: Value = serde_json::from_slice(&bytes).unwrap();
    value["trajectory_format"] = "mini-swe-agent-7".into();
    let unknown = dir.path().join("unknown.traj.json");
    std::fs::write(&unknown, serde_json::to_vec(&value).unwrap()).unwrap();
    let out = dir.path().join("out");
    let run = vcurve(&[
        "import",
        "mini-swe-agent",
        &truncated.display().to_string(),
        &good.display().to_string(),
        &no_messages.display().to_string(),
        &unknown.display().to_string(),
        // The same instance again: written with a suffix.
        &good.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert!(!run.status.success());
    let stderr = text(&run.stderr);
    assert!(stderr.contains(&format!("{}: not imported: not JSON", truncated.display())), "{stderr}");
    assert!(stderr.contains(&format!("{}: not imported: `messages` is missing", no_messages.display())), "{stderr}");
    assert!(
        stderr
            .contains(&format!("{}: not imported: unknown trajectory_format \"mini-swe-agent-7\"", unknown.display())),
        "{stderr}"
    );
    assert!(stderr.contains("3 of 5 files were not imported"), "{stderr}");
    assert!(out.join("astropy__astropy-14309.json").exists());
    assert!(out.join("astropy__astropy-14309.2.json").exists());
    assert_eq!(std::fs::read_to_string(out.join("import.csv")).unwrap().lines().count(), 3);

    let inspect = vcurve(&["inspect", &unknown.display().to_string(), "--json"]);
    assert!(!inspect.status.success());
    assert!(text(&inspect.stderr).contains("unknown trajectory_format"));
}

#[test]
fn a_task_file_replaces_the_derived_swebench_task_of_its_instance() {
    let dir = tempfile::tempdir().unwrap();
    let task = serde_json::json!({
        "id": "astropy__astropy-14309", "image": "my-registry/astropy-14309:v2", "workdir": "/work",
        "evaluator": {"kind": "command", "command": "pytest -q", "timeout_s": 600},
        "problem_statement": "IndexError: tuple index out of range in identify_format",
    });
    let task_path = dir.path().join("task.json");
    std::fs::write(&task_path, task.to_string()).unwrap();
    let other = dir.path().join("other.json");
    std::fs::write(&other, serde_json::json!({"id": "nobody", "image": "i", "workdir": "/", "evaluator": {"kind": "command", "command": "true", "timeout_s": 1}, "problem_statement": "p"}).to_string()).unwrap();
    let out = dir.path().join("out");
    let files = [FIXTURES[1], FIXTURES[2]].map(|f| fixtures().join(f).display().to_string());
    let (t1, t2, o) = (task_path.display().to_string(), other.display().to_string(), out.display().to_string());
    let run = vcurve(&["import", "mini-swe-agent", &files[0], &files[1], "--task", &t1, "--task", &t2, "--out", &o]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains("--task nobody: no imported trajectory is of instance nobody"),
        "{}",
        text(&run.stderr)
    );
    let read = |id: &str| {
        vcurve_record::Trajectory::from_json(&std::fs::read(out.join(format!("{id}.json"))).unwrap()).unwrap()
    };
    let given = read("astropy__astropy-14309");
    assert_eq!(serde_json::to_value(&given.task).unwrap(), task);
    let derived = read("astropy__astropy-14096");
    assert_eq!(derived.task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14096:latest");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"id\": 3}").unwrap();
    let b = bad.display().to_string();
    let run = vcurve(&["import", "mini-swe-agent", &files[0], "--task", &b, "--out", &o]);
    assert!(!run.status.success());
    assert!(text(&run.stderr).contains("--task") && text(&run.stderr).contains("bad.json"), "{}", text(&run.stderr));
}

#[test]
fn a_run_ended_by_a_model_server_outage_is_an_infrastructure_run() {
    // The context-window fixture as if the server had gone away: litellm's ServiceUnavailableError.
    let dir = tempfile::tempdir().unwrap();
    let mut file: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("astropy__astropy-14096.traj.json")).unwrap()).unwrap();
    file["info"]["exit_status"] = "ServiceUnavailableError".into();
    file["info"]["traceback"] =
        "Traceback (most recent call last):\nlitellm.exceptions.ServiceUnavailableError: 503\n".into();
    let outage = dir.path().join("outage.traj.json");
    std::fs::write(&outage, serde_json::to_vec(&file).unwrap()).unwrap();
    let out = dir.path().join("imported");
    let report = fixtures().join("eval-report.run_qwen_20_216375.json");
    let run = vcurve(&[
        "import",
        "mini-swe-agent",
        &outage.display().to_string(),
        &fixtures().join(FIXTURES[2]).display().to_string(),
        "--out",
        &out.display().to_string(),
        "--report",
        &report.display().to_string(),
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(stdout.contains("ServiceUnavailableError: a model-server outage, an infrastructure run"), "{stdout}");
    // Listed, with no outcome (the report has one for the instance), and set aside from the
    // folder's trajectories.
    let csv = std::fs::read_to_string(out.join("import.csv")).unwrap();
    let row = csv.lines().find(|r| r.contains(",astropy__astropy-14096,")).unwrap();
    assert!(row.contains(",58,ServiceUnavailableError,infrastructure,,"), "{row}");
    assert!(row.contains(",ServiceUnavailableError,hosted_vllm/"), "{row}");
    assert!(!out.join("astropy__astropy-14096.json").exists());
    assert!(out.join("infrastructure/astropy__astropy-14096.json").exists());
    assert!(out.join("astropy__astropy-14309.json").exists());
}

#[test]
fn launch_says_where_the_spec_changes_the_recorded_policy_and_refuses_a_text_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let mut args: Vec<String> = vec!["import".into(), "mini-swe-agent".into()];
    args.extend([FIXTURES[2], FIXTURES[3]].iter().map(|f| fixtures().join(f).display().to_string()));
    for id in ["astropy__astropy-14309", "django__django-10999"] {
        let task = dir.path().join(format!("{id}.task.json"));
        std::fs::write(
            &task,
            serde_json::json!({"id": id, "image": "i", "workdir": "/testbed",
            "evaluator": {"kind": "command", "command": "true", "timeout_s": 60}})
            .to_string(),
        )
        .unwrap();
        args.extend(["--task".into(), task.display().to_string()]);
    }
    args.extend(["--out".into(), out.display().to_string()]);
    let run = vcurve(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(run.status.success(), "{}", text(&run.stderr));
    let spec = |model: &str, run: &str| {
        let path = dir.path().join("study.yaml");
        std::fs::write(
            &path,
            format!(
                "name: s\nseed: 1\nrunner: {{kind: mini-swe-agent, model: {model}}}\n\
            trajectories:\n  - id: r\n    recorded: runs/{run}.json\n"
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    // The recorded run: hosted_vllm/Qwen/Qwen3.6-35B-A3B at temperature 0, under Singularity.
    let launched = vcurve(&[
        "launch",
        &spec("{model_name: openai/qwen, temperature: 0.7}", "astropy__astropy-14309"),
        "--coordinator",
        "http://127.0.0.1:1",
    ]);
    let stderr = text(&launched.stderr);
    assert!(stderr.contains("vcurve: warning: r: the resumed policy differs from the recorded one: temperature: the spec's 0.7, recorded 0"), "{stderr}");
    assert!(
        stderr.contains("model_name: the spec's \"openai/qwen\", recorded \"hosted_vllm/Qwen/Qwen3.6-35B-A3B\""),
        "{stderr}"
    );
    assert!(stderr.contains("SingularityEnvironment, replayed and resumed in Docker"), "{stderr}");
    // Resuming the recorded temperature 0: the user is told the curves will be near-degenerate.
    let launched = vcurve(&[
        "launch",
        &spec("{model_name: openai/qwen}", "astropy__astropy-14309"),
        "--coordinator",
        "http://127.0.0.1:1",
    ]);
    let stderr = text(&launched.stderr);
    assert!(stderr.contains("vcurve: warning: r: the policy samples at temperature 0"), "{stderr}");
    // A 1.x (text) run is refused by the tool-call runner, before anything is sent.
    let launched =
        vcurve(&["launch", &spec("{model_name: m}", "django__django-10999"), "--coordinator", "http://127.0.0.1:1"]);
    assert!(!launched.status.success());
    let stderr = text(&launched.stderr);
    assert!(stderr.contains("was recorded by mini-swe-agent 1.15.0's text scaffold"), "{stderr}");
}
