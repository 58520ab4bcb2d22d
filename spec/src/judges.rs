//! A curve study's `judges:` (docs/spec.md, "Judge labels"): judge models, by name, that label
//! the first mistake of every trajectory and decoy from its recorded steps. A judge's name is the source of
//! its labels, so it must not be a source the spec's `labels:` already give.
//!
//! ```yaml
//! judges:
//!   gpt-5.5: {base_url: "https://api.openai.com/v1", model: gpt-5.5, api_key_env: OPENAI_API_KEY, thinking: none}
//!   qwen: {base_url: "http://vllm:8000/v1", model: Qwen/Qwen3-32B}
//! ```
//!
//! Each judge's model takes the fields of a task-state stage's model ([`crate::task_state`]), at
//! temperature 0 unless it sets one.

use std::collections::BTreeMap;

use serde_norway::Value;
use vcurve_record::study::{DecoySpec, TrajectorySpec};
use vcurve_record::task_state::StageModel;

use crate::error::{SpecError, TrajectoryRef};
use crate::value::{problem, show, top_error};

/// Parse `judges:` (at `value`) against the study's trajectories and decoys. A study from tasks
/// may have judges too: its trajectories are the failed base runs the selection draws, each judged
/// from the run it recorded when the coordinator makes it a trajectory.
pub(crate) fn parse(
    value: &Value,
    trajectories: &[TrajectorySpec],
    decoys: &[DecoySpec],
) -> Result<BTreeMap<String, StageModel>, SpecError> {
    let Value::Mapping(map) = value else {
        return Err(top_error(problem(
            "judges",
            format!(
                "must be a mapping from a judge's name to its model, like {{o3: {{base_url: …, model: o3}}}}; found {}",
                show(value)
            ),
        )));
    };
    if map.is_empty() {
        return Err(top_error(problem("judges", "is empty: name at least one judge, or leave judges out")));
    }
    if let Some(t) = trajectories.iter().find(|t| t.recorded.is_none()) {
        return Err(SpecError::Trajectory {
            trajectory: TrajectoryRef::Id(t.id.clone()),
            field: "recorded".into(),
            message: "is missing: the study has judges (judges:), and a judge reads a trajectory's recorded steps"
                .into(),
        });
    }
    if let Some((i, d)) = decoys.iter().enumerate().find(|(_, d)| d.recorded.is_none()) {
        return Err(top_error(problem(
            format!("decoys[{i}].recorded"),
            format!(
                "is missing (decoy {:?}): the study has judges (judges:), and a judge reads a decoy's recorded steps",
                d.id
            ),
        )));
    }
    let mut judges = BTreeMap::new();
    for (name, model) in map {
        let Some(name) = name.as_str().filter(|n| is_judge_name(n)) else {
            return Err(top_error(problem(
                "judges",
                format!(
                    "has a judge name that is not a name: {} (letters, digits, `-`, `_` and `.`; it becomes a label source)",
                    show(name)
                ),
            )));
        };
        let field = format!("judges.{name}");
        let labelled = trajectories
            .iter()
            .find(|t| t.labels.iter().any(|l| l.source == name))
            .map(|t| format!("trajectory {}", t.id))
            .or_else(|| {
                decoys.iter().find(|d| d.labels.iter().any(|l| l.source == name)).map(|d| format!("decoy {}", d.id))
            });
        if let Some(owner) = labelled {
            return Err(top_error(problem(
                field,
                format!(
                    "is also a label source given in the spec ({owner}: labels.{name}); a judge's labels take its \
                     name as their source: rename the judge or the source"
                ),
            )));
        }
        let model = crate::task_state::parse_model(model, &field, 0.0).map_err(top_error)?;
        judges.insert(name.to_string(), model);
    }
    Ok(judges)
}

/// A judge's name: letters, digits, `-`, `_` and `.` (no `/`: it ends its calls' keys).
fn is_judge_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
