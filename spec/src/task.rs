//! What every form of task list (`tasks:`, `swebench:`) shares: a task's checks, and the value of a
//! parameter that may be given at the top level or in `thresholds`.

use crate::error::SpecError;
use crate::value::{problem, top_error, valid_name};

/// The longest a command evaluator may run on one patch, in seconds: one day. A test suite that
/// needs longer is a mistake (a hung evaluation would hold a worker's slot for as long).
pub(crate) const MAX_EVALUATOR_TIMEOUT_S: u32 = 86_400;

pub(crate) fn check_task(task: &vcurve_record::Task) -> Result<(), String> {
    if !valid_name(&task.id) {
        return Err(format!("id {:?} must be a non-empty name of letters, digits, and . _ - characters", task.id));
    }
    if task.image.trim().is_empty() {
        return Err("image is empty".into());
    }
    if !task.workdir.starts_with('/') {
        return Err(format!("workdir {:?} must be an absolute path", task.workdir));
    }
    match &task.evaluator {
        vcurve_record::Evaluator::Command { command, timeout_s } => {
            if command.trim().is_empty() {
                return Err("evaluator.command is empty".into());
            }
            if *timeout_s == 0 {
                return Err("evaluator.timeout_s must be at least 1".into());
            }
            if *timeout_s > MAX_EVALUATOR_TIMEOUT_S {
                return Err(format!("evaluator.timeout_s = {timeout_s} is outside [1, {MAX_EVALUATOR_TIMEOUT_S}]"));
            }
        }
        vcurve_record::Evaluator::Swebench { instance_id, .. } => {
            if instance_id.trim().is_empty() {
                return Err("evaluator.instance_id is empty".into());
            }
        }
    }
    Ok(())
}

/// A parameter that may be set at the top level or in `thresholds`: its value, and the field it
/// came from (for later messages).
pub(crate) struct Twin {
    pub(crate) field: String,
    pub(crate) value: u32,
}

/// Pick the value of such a parameter; both given with different values is an error.
pub(crate) fn twin(
    top: Option<(String, u32)>,
    thresholds: Option<(String, u32)>,
    default: (&str, u32),
) -> Result<Twin, SpecError> {
    match (top, thresholds) {
        (Some((field, a)), Some((other, b))) if a != b => {
            Err(top_error(problem(field, format!("= {a} conflicts with {other} = {b}; give one of them"))))
        }
        (Some((field, value)), _) | (None, Some((field, value))) => Ok(Twin { field, value }),
        (None, None) => Ok(Twin { field: default.0.to_string(), value: default.1 }),
    }
}
