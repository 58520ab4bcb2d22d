//! Test helpers (feature `test-support`): small study specs with synthetic curves. (Stores on
//! fresh databases of both backends are `vcurve_testkit::store::TestStore`.)

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A trajectory of a test study: id, length, cliff (`V = p` before it, 0 from it), labels.
pub struct Tr {
    pub id: &'static str,
    pub length: u32,
    pub cliff: u32,
    pub p: f64,
    pub labels: &'static str,
}

/// A study spec over `trajectories` with synthetic curves, and its curve files.
pub fn spec(name: &str, extra: &str, trajectories: &[Tr]) -> (String, BTreeMap<String, String>) {
    let mut yaml =
        format!("name: {name}\nseed: 7\nrunner: {{kind: synthetic, duration_ms: 0}}\n{extra}trajectories:\n");
    let mut files = BTreeMap::new();
    for tr in trajectories {
        let path = format!("curves/{}.csv", tr.id);
        let mut csv = String::from("t,v\n");
        for t in 0..tr.length {
            let _ = writeln!(csv, "{t},{}", if t < tr.cliff { tr.p } else { 0.0 });
        }
        files.insert(path.clone(), csv);
        let _ = writeln!(yaml, "  - id: {}\n    length: {}\n    curve: {path}", tr.id, tr.length);
        if !tr.labels.is_empty() {
            let _ = writeln!(yaml, "    labels: {{{}}}", tr.labels);
        }
    }
    (yaml, files)
}

/// The success of a key under a step curve: deterministic, so any two runs agree.
pub fn step_outcome(cliff: u32, t: u32, seed: u32) -> bool {
    t < cliff && seed % 4 != 3
}

/// A renderer for tests that never render: every call is an error saying so.
pub struct NoRenderer;

impl crate::Renderer for NoRenderer {
    fn export(&self, _: &vcurve_record::StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }

    fn summaries(
        &self,
        _: &vcurve_record::StudyRecord,
    ) -> Result<Vec<crate::render::TrajectorySummary>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }

    fn figure_svg(&self, _: &vcurve_record::StudyRecord) -> Result<Option<String>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }

    fn restart_check_rows(
        &self,
        _: &vcurve_record::StudyRecord,
    ) -> Result<Vec<vcurve_record::RestartCheckRow>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }
}

/// A [`NoRenderer`] as the coordinator takes it.
pub fn no_renderer() -> std::sync::Arc<dyn crate::Renderer> {
    std::sync::Arc::new(NoRenderer)
}

/// A recorded trajectory of `steps` steps (one `echo` each) on task `task`, as a trajectory file.
pub fn recorded_trajectory(task: &str, steps: u32) -> String {
    recorded_trajectory_with_output(task, steps, "")
}

/// [`recorded_trajectory`] whose every output carries `padding` (to make large files).
pub fn recorded_trajectory_with_output(task: &str, steps: u32, padding: &str) -> String {
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
                output: format!("{i}\n{padding}"),
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

/// A study spec for runner kind `kind` over recorded trajectories `(id, steps)`, and its files.
pub fn recorded_spec(name: &str, kind: &str, trajectories: &[(&str, u32)]) -> (String, BTreeMap<String, String>) {
    let mut yaml = format!("name: {name}\nseed: 7\nrunner: {{kind: {kind}}}\ntrajectories:\n");
    let mut files = BTreeMap::new();
    for (id, steps) in trajectories {
        let path = format!("runs/{id}.json");
        files.insert(path.clone(), recorded_trajectory(&format!("task-{id}"), *steps));
        let _ = writeln!(yaml, "  - id: {id}\n    recorded: {path}");
    }
    (yaml, files)
}
