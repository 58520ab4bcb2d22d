//! Import of the real mini-swe-agent fixtures (`record/tests/fixtures/mini-swe-agent`, or
//! `VCURVE_MSA_FIXTURES`).

use std::path::PathBuf;

use super::*;

fn fixtures() -> PathBuf {
    std::env::var_os("VCURVE_MSA_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mini-swe-agent")))
}

fn read(name: &str) -> Vec<u8> {
    let path = fixtures().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("the fixture {} cannot be read: {e}", path.display()))
}

fn import(name: &str) -> Imported {
    import_mini_swe_agent(name, &read(name), &ImportOptions::default()).unwrap()
}

fn returncodes(imported: &Imported, step: usize) -> Vec<Option<i32>> {
    imported.trajectory.steps[step - 1].actions.iter().map(|a| a.returncode).collect()
}

// Verified with python/json on the files: steps = assistant messages (1.1: every assistant message
// is followed by its `tool` messages, no FormatError `user` message and no parallel calls occur;
// v1: 18 assistant messages, each with one ```bash block); return codes = `extra.returncode` of
// the `tool` message after the step's assistant message (v1: `<returncode>` of the next `user`
// message); first edits found by listing every command with `sed -i`, `>`, `open(`, `tee`.

#[test]
fn resolved_run_1_1() {
    // astropy__astropy-14309: 27 assistant + 26 tool messages, exit Submitted. Non-zero return
    // codes only at steps 4, 8 and 10 (all 1). Step 12 (messages[24]) is the first write:
    // `sed -i 's/return isinstance(args\[0\], …` on astropy/io/fits/connect.py (read at step 2).
    // No failure signal after it: steps 20–21 are pytest usage errors, step 22 "141 passed".
    let i = import("astropy__astropy-14309.traj.json");
    assert_eq!((i.format.as_str(), i.instance_id.as_str()), (FORMAT_V1_1, "astropy__astropy-14309"));
    assert_eq!(i.trajectory.length(), 27);
    assert_eq!(i.exit_status, "Submitted");
    assert_eq!(i.trajectory.end_type, crate::EndType::Submitted);
    for (step, rc) in [(1, 0), (4, 1), (8, 1), (9, 0), (10, 1), (12, 0), (26, 0)] {
        assert_eq!(returncodes(&i, step), vec![Some(rc)], "step {step}");
    }
    let edit = i.first_edit.as_ref().unwrap();
    assert_eq!((edit.step, edit.target.as_deref(), edit.heuristic), (12, Some("astropy/io/fits/connect.py"), true));
    assert!(edit.command.starts_with("sed -i"));
    assert_eq!(i.first_symptom, None);
    // The last step submits: its output is reconstructed from the submission.
    let last = &i.trajectory.steps[26].actions[0];
    assert!(last.command.contains(mini_swe_agent::SUBMIT_MARKER));
    assert_eq!(last.returncode, Some(0));
    let submission = i.trajectory.submission.as_deref().unwrap();
    assert!(submission.starts_with("diff --git a/astropy/io/fits/connect.py"));
    assert!(last.output.ends_with(submission));
    assert!(i.warnings.iter().any(|w| w.contains("step 27") && w.contains("reconstructed")));
    // Prefixes end after each step's observation; the closing exit message is in no prefix.
    assert_eq!(i.trajectory.initial_messages, 2);
    assert_eq!(i.trajectory.steps[0].messages_end, 4);
    assert_eq!(i.trajectory.steps[25].messages_end, 54);
    assert_eq!(i.trajectory.steps[26].messages_end, 55);
    assert_eq!(i.trajectory.messages.len(), 56);
    let task = &i.trajectory.task;
    assert_eq!(task.image, "swebench/sweb.eval.x86_64.astropy_1776_astropy-14309:latest");
    assert_eq!(task.workdir, "/testbed");
    assert!(task.problem_statement.as_deref().unwrap().starts_with("IndexError: tuple index out of range"));
    assert_eq!(i.trajectory.interpreter.argv, ["bash", "-c"]); // SingularityEnvironment
    assert_eq!(i.trajectory.interpreter.env.get("PAGER").map(String::as_str), Some("cat"));
    assert!(i.trajectory.steps.iter().flat_map(|s| &s.actions).all(|a| a.timeout_s == 60.0));
}

#[test]
fn unresolved_run_1_1() {
    // astropy__astropy-13236: 84 assistant + 83 tool messages, exit Submitted. Return code 1 at
    // steps 5, 23, 25, 28, 35, 52, 55, 60, 79. Step 41 (messages[82]) writes /tmp/patch.py with a
    // heredoc and runs it; the script does `open('/testbed/astropy/table/table.py', 'w')`, a file
    // grepped at step 2. First symptom: step 70, pytest "1 error in 0.27s" (collection error);
    // step 79 is the next (a KeyError traceback).
    let i = import("astropy__astropy-13236.traj.json");
    assert_eq!(i.trajectory.length(), 84);
    assert_eq!(i.exit_status, "Submitted");
    for (step, rc) in [(1, 0), (5, 1), (23, 1), (41, 0), (52, 1), (79, 1), (83, 0)] {
        assert_eq!(returncodes(&i, step), vec![Some(rc)], "step {step}");
    }
    let edit = i.first_edit.as_ref().unwrap();
    assert_eq!((edit.step, edit.target.as_deref()), (41, Some("astropy/table/table.py")));
    let symptom = i.first_symptom.as_ref().unwrap();
    assert_eq!((symptom.step, symptom.signal.as_str()), (70, "failing test"));
}

#[test]
fn context_window_run_1_1() {
    // astropy__astropy-14096: 58 assistant + 58 tool messages, then an exit message
    // ContextWindowExceededError with an empty submission (api_calls = 59: the failed call left no
    // message). Return code 1 at steps 5, 10, 11, 13, 15, 16, 17; 2 at step 58. No edit of a
    // tracked file: the only write is `cat > test_issue.py` (a new file) at step 10.
    let i = import("astropy__astropy-14096.traj.json");
    assert_eq!(i.trajectory.length(), 58);
    assert_eq!(i.exit_status, "ContextWindowExceededError");
    assert_eq!(i.trajectory.end_type, crate::EndType::ContextWindow);
    assert_eq!(i.trajectory.submission, None);
    for (step, rc) in [(1, 0), (5, 1), (10, 1), (17, 1), (18, 0), (58, 2)] {
        assert_eq!(returncodes(&i, step), vec![Some(rc)], "step {step}");
    }
    assert_eq!(i.trajectory.steps[57].messages_end, 118);
    assert_eq!(i.first_edit, None);
    assert_eq!(i.first_symptom, None);
    assert!(i.warnings.iter().any(|w| w.contains("api_calls = 59")));
    assert_eq!(i.summary().submission_sha256, None);
}

#[test]
fn text_run_v1() {
    // django__django-10999 (mini-swe-agent 1.15.0): 18 assistant messages with one ```bash block
    // each; every observation is `<returncode>0</returncode>`; the last user message is the
    // submission. Step 5 (messages[10]) is `sed -i "s/r'((?:(?P<hours>…" django/utils/dateparse.py`
    // (the file was listed at step 1); step 3's `cat <<'EOF' > reproduce_issue.py` creates a new
    // file. No failure signal after step 5 (the test runs end in "OK").
    let i = import("django__django-10999.v1.traj.json");
    assert_eq!(i.format, FORMAT_V1);
    assert_eq!(i.trajectory.length(), 18);
    assert_eq!(i.exit_status, "Submitted");
    for step in [1, 2, 5, 11, 17] {
        assert_eq!(returncodes(&i, step), vec![Some(0)], "step {step}");
    }
    assert_eq!(returncodes(&i, 18), vec![None]); // the submitting command: not recorded
    assert_eq!(i.trajectory.steps[0].actions[0].command, "ls -R django/utils | grep dateparse");
    assert_eq!(i.trajectory.steps[0].actions[0].output, "dateparse.py\n");
    assert_eq!(i.trajectory.steps[16].messages_end, 36);
    assert_eq!(i.trajectory.steps[17].messages_end, 37);
    let edit = i.first_edit.as_ref().unwrap();
    assert_eq!((edit.step, edit.target.as_deref()), (5, Some("django/utils/dateparse.py")));
    assert_eq!(i.first_symptom, None);
    assert_eq!(i.trajectory.interpreter.argv, ["bash", "-lc"]); // DockerEnvironment
    assert_eq!(i.trajectory.task.image, "swebench/sweb.eval.x86_64.django_1776_django-10999:latest");
}

#[test]
fn imported_trajectories_round_trip() {
    for name in FIXTURES {
        let i = import(name);
        let bytes = i.trajectory.canonical_bytes();
        let back = crate::Trajectory::from_json(&bytes).unwrap();
        assert_eq!(back, i.trajectory, "{name}");
        assert_eq!(back.digest(), i.trajectory.digest());
    }
}

const FIXTURES: [&str; 4] = [
    "astropy__astropy-13236.traj.json",
    "astropy__astropy-14096.traj.json",
    "astropy__astropy-14309.traj.json",
    "django__django-10999.v1.traj.json",
];

#[test]
fn corrupted_copies_are_refused_with_the_reason() {
    for name in FIXTURES {
        let bytes = read(name);
        let truncated = &bytes[..bytes.len() / 2];
        let err = import_mini_swe_agent(name, truncated, &ImportOptions::default()).unwrap_err();
        assert!(matches!(err, ImportError::Json(_)), "{name}: {err}");
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value.as_object_mut().unwrap().remove("messages");
        let err =
            import_mini_swe_agent(name, &serde_json::to_vec(&value).unwrap(), &ImportOptions::default()).unwrap_err();
        assert_eq!(err.to_string(), "`messages` is missing", "{name}");
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["trajectory_format"] = "mini-swe-agent-9".into();
        let err = import_mini_swe_agent(name, &serde_json::to_vec(&value).unwrap(), &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown trajectory_format \"mini-swe-agent-9\""), "{err}");
    }
}

#[test]
fn outcomes_attach_from_the_report() {
    // The report lists astropy__astropy-13236 in unresolved_ids, 14309 in resolved_ids, 14096 in
    // empty_patch_ids; django__django-10999 only in incomplete_ids.
    let report = SwebenchReport::from_json(&read("eval-report.run_qwen_20_216375.json")).unwrap();
    let options = ImportOptions { report: Some(report), ..ImportOptions::default() };
    let outcome = |name: &str| import_mini_swe_agent(name, &read(name), &options).unwrap();
    assert_eq!(outcome("astropy__astropy-14309.traj.json").outcome, Some(ReportOutcome::Resolved));
    assert_eq!(outcome("astropy__astropy-14309.traj.json").resolved(), Some(true));
    assert_eq!(outcome("astropy__astropy-13236.traj.json").outcome, Some(ReportOutcome::Unresolved));
    assert_eq!(outcome("astropy__astropy-14096.traj.json").outcome, Some(ReportOutcome::EmptyPatch));
    assert_eq!(outcome("astropy__astropy-14096.traj.json").resolved(), Some(false));
    assert_eq!(outcome("django__django-10999.v1.traj.json").outcome, None);
}

#[test]
fn format_errors_and_parallel_calls_make_steps() {
    use serde_json::json;
    let tool = |id: &str, out: &str, rc: i64| json!({"role": "tool", "tool_call_id": id, "content": "", "extra": {"raw_output": out, "returncode": rc, "exception_info": ""}});
    let file = json!({
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "demo__demo-1",
        "info": {"exit_status": "LimitsExceeded", "submission": "", "model_stats": {"api_calls": 3},
                 "config": {"agent": {"step_limit": 3}, "environment": {"timeout": 10, "cwd": "/testbed"}}},
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "t"},
            {"role": "assistant", "content": "", "extra": {"actions": [
                {"command": "ls", "tool_call_id": "a"}, {"command": "pwd", "tool_call_id": "b"}]}},
            tool("b", "/testbed\n", 0),
            tool("a", "x\n", 0),
            {"role": "user", "content": "Tool call error", "extra": {"interrupt_type": "FormatError"}},
            {"role": "assistant", "content": "", "extra": {"actions": [{"command": "sleep 99", "tool_call_id": "c"}]}},
            {"role": "tool", "tool_call_id": "c", "content": "", "extra": {"raw_output": "", "returncode": -1,
              "exception_info": "An error occurred while executing the command: timed out after 10 seconds",
              "exception_type": "TimeoutExpired"}},
            {"role": "exit", "content": "LimitsExceeded", "extra": {"exit_status": "LimitsExceeded", "submission": ""}}
        ]
    });
    let i =
        import_mini_swe_agent("x.traj.json", &serde_json::to_vec(&file).unwrap(), &ImportOptions::default()).unwrap();
    let t = &i.trajectory;
    assert_eq!(t.length(), 3);
    assert_eq!(t.end_type, crate::EndType::StepCap);
    let commands: Vec<_> = t.steps[0].actions.iter().map(|a| (a.command.as_str(), a.output.as_str())).collect();
    assert_eq!(commands, [("ls", "x\n"), ("pwd", "/testbed\n")]); // matched by tool_call_id
    assert_eq!(t.steps[0].messages_end, 5);
    assert!(t.steps[1].actions.is_empty());
    assert_eq!(t.steps[1].messages_end, 6);
    let timed_out = &t.steps[2].actions[0];
    assert!(timed_out.timed_out && timed_out.returncode.is_none() && timed_out.timeout_s == 10.0);
    let s = i.summary();
    assert_eq!(s.format_error_steps, [2]);
    assert_eq!(s.timeout_steps, [3]);
    assert_eq!(s.per_step[0].returncodes, [Some(0), Some(0)]);
}

#[test]
fn the_recorded_policy_is_kept() {
    // astropy__astropy-14309: mini-swe-agent 2.4.6, hosted_vllm/Qwen/Qwen3.6-35B-A3B at
    // temperature 0, recorded in SingularityEnvironment (info.config).
    let i = import("astropy__astropy-14309.traj.json");
    let p = i.trajectory.policy.as_ref().unwrap();
    assert_eq!(
        (p.agent.as_str(), p.format.as_str(), p.version.as_deref()),
        ("mini-swe-agent", FORMAT_V1_1, Some("2.4.6"))
    );
    assert_eq!(p.model_name.as_deref(), Some("hosted_vllm/Qwen/Qwen3.6-35B-A3B"));
    assert_eq!(p.model_kwargs["temperature"], 0);
    assert_eq!(p.model_kwargs["api_base"], "http://localhost:8000/v1");
    assert_eq!(p.environment.as_deref(), Some("minisweagent.environments.singularity.SingularityEnvironment"));
    assert!(p.singularity() && !p.text_format());
    assert!(
        i.warnings.iter().any(|w| w.contains("SingularityEnvironment") && w.contains("Docker")),
        "{:?}",
        i.warnings
    );
    // The policy travels in the trajectory file, and the file reads back with it.
    let back = crate::Trajectory::from_json(&serde_json::to_vec(&i.trajectory).unwrap()).unwrap();
    assert_eq!(back.policy.as_ref(), Some(p));
    // A 1.x run: the text scaffold, Docker, gemini at temperature 0.0.
    let v1 = import("django__django-10999.v1.traj.json");
    let p = v1.trajectory.policy.as_ref().unwrap();
    assert!(p.text_format() && !p.singularity());
    assert_eq!((p.version.as_deref(), p.model_name.as_deref()), (Some("1.15.0"), Some("google/gemini-3-pro-preview")));
    assert_eq!(p.environment.as_deref(), Some("minisweagent.environments.docker.DockerEnvironment"));
}

#[test]
fn the_problem_statement_keeps_its_trailing_newline() {
    // The recorded task message renders `{{task}}\n</pr_description>`: the statement is what lies
    // between, less the template's one newline (14309's ends "-->\r\n\n\n</pr_description>").
    let i = import("astropy__astropy-14309.traj.json");
    let statement = i.trajectory.task.problem_statement.as_deref().unwrap();
    assert!(statement.ends_with("-->\r\n\n"), "{:?}", &statement[statement.len() - 10..]);
    let task = super::messages::text_of(&i.trajectory.messages[1]);
    let rendered = format!("Consider the following PR description:\n{statement}\n</pr_description>");
    assert!(task.contains(&rendered));
}

/// The context-window fixture with its end replaced by the exception `name` and its traceback.
fn ended_on(name: &str, traceback_last_line: &str) -> Imported {
    let mut file: serde_json::Value = serde_json::from_slice(&read("astropy__astropy-14096.traj.json")).unwrap();
    file["info"]["exit_status"] = name.into();
    file["info"]["traceback"] = format!("Traceback (most recent call last):\n  ...\n{traceback_last_line}\n").into();
    let messages = file["messages"].as_array_mut().unwrap();
    if let Some(last) = messages.last_mut().filter(|m| m["role"] == "exit") {
        last["extra"]["exit_status"] = name.into();
    }
    let report = SwebenchReport::from_json(&read("eval-report.run_qwen_20_216375.json")).unwrap();
    let options = ImportOptions { report: Some(report), ..ImportOptions::default() };
    import_mini_swe_agent("x.traj.json", &serde_json::to_vec(&file).unwrap(), &options).unwrap()
}

#[test]
fn model_server_outages_import_as_infrastructure_runs() {
    for (name, last) in [
        ("ServiceUnavailableError", "litellm.exceptions.ServiceUnavailableError: litellm.ServiceUnavailableError: 503"),
        ("Timeout", "litellm.exceptions.Timeout: litellm.Timeout: Connection timed out after 600.0 seconds."),
        ("APIConnectionError", "litellm.exceptions.APIConnectionError: Connection refused"),
        // Not in the list, but a litellm exception in the recorded traceback: the adapter's rule.
        ("NotFoundError", "litellm.exceptions.NotFoundError: model not found"),
    ] {
        let i = ended_on(name, last);
        assert_eq!(i.outage.as_deref(), Some(name));
        // No outcome, whatever the harness made of the patch (the report lists 14096).
        assert_eq!((i.outcome, i.resolved()), (None, None), "{name}");
    }
    // The agent's own ends are not outages: the context window (a litellm exception too), a
    // crash of the agent's own code.
    assert_eq!(import("astropy__astropy-14096.traj.json").outage, None);
    let window = ended_on(
        "ContextWindowExceededError",
        "litellm.exceptions.ContextWindowExceededError: litellm.ContextWindowExceededError: too long",
    );
    assert_eq!((window.outage.as_deref(), window.resolved()), (None, Some(false)));
    assert_eq!(ended_on("KeyError", "KeyError: 'x'").outage, None);
}
