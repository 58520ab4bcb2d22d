//! What several test modules need: the test task of the calc image, and a trajectory recorded by
//! running commands in a container, one step each.

use std::path::{Path, PathBuf};

use vcurve_record::trajectory::{EndType, FORMAT, Interpreter, Step, Task};
use vcurve_record::{Action, Trajectory};
use vcurve_worker::sandbox::container::Container;
use vcurve_worker::sandbox::exec::run_command;

/// The repository (the worker crate's parent).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the worker crate sits in the repository").to_path_buf()
}

/// The calc test task (deploy/images/task-calc/task.json) on `image`.
pub fn calc_task(image: &str) -> Task {
    let path = repo().join("deploy/images/task-calc/task.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut value: serde_json::Value = serde_json::from_str(&text).expect("task.json is JSON");
    value["image"] = image.into();
    serde_json::from_value(value).expect("task.json is a vcurve Task")
}

/// Run `commands` in `container`, one step each with `timeout_s`, with vcurve's own interpreter,
/// and record them as a valid trajectory of `task` (system and user messages first, one assistant
/// and one observation message per step, no fingerprints). The container is left as it is.
pub async fn record_commands<S: AsRef<str>>(
    container: &Container,
    task: &Task,
    commands: &[S],
    timeout_s: f64,
) -> Trajectory {
    let mut trajectory = Trajectory {
        format: FORMAT.into(),
        task: task.clone(),
        interpreter: Interpreter::default(),
        messages: vec![serde_json::json!({"role": "system"}), serde_json::json!({"role": "user"})],
        initial_messages: 2,
        steps: Vec::new(),
        end_type: EndType::StepCap,
        submission: None,
        policy: None,
    };
    for command in commands {
        let command = command.as_ref().to_owned();
        let o = run_command(container, task, &trajectory.interpreter, &command, timeout_s).await.unwrap();
        trajectory.messages.push(serde_json::json!({"role": "assistant"}));
        trajectory.messages.push(serde_json::json!({"role": "user"}));
        trajectory.steps.push(Step {
            actions: vec![Action {
                command,
                timeout_s,
                output: o.output,
                returncode: o.returncode,
                timed_out: o.timed_out,
                exception: None,
                omitted: None,
            }],
            messages_end: trajectory.messages.len(),
            fingerprint: None,
        });
    }
    trajectory.validate().unwrap();
    trajectory
}
