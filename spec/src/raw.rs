//! The spec as written: one derived struct per level of the YAML, before validation.
//!
//! Each level is read into its struct by [`level`] as validation reaches it, so an error is still
//! reported where it is found, in the order the validation pass takes the fields, and names the
//! level's path and the trajectory it is in. The structs list each level's fields once: a key
//! outside them is refused naming the key and the fields there are ([`check_keys`]), before any
//! value is looked at. Their values stay YAML values (`None` when absent or an explicit `null`):
//! the validation pass turns each into its type with a message that names the field and says
//! what was expected and what was found, which serde's own messages do not.

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_norway::{Mapping, Value};

use crate::value::{Problem, check_keys, problem};

/// A study spec's top level (a restart check's is [`RawRestartCheckSpec`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStudy {
    pub name: Option<Value>,
    pub seed: Option<Value>,
    pub budget: Option<Value>,
    pub schedule: Option<Value>,
    pub runner: Option<Value>,
    pub thresholds: Option<Value>,
    pub controls: Option<Value>,
    pub admission: Option<Value>,
    pub trajectories: Option<Value>,
    pub decoys: Option<Value>,
    pub tasks: Option<Value>,
    pub base_runs: Option<Value>,
    pub selection: Option<Value>,
    pub swebench: Option<Value>,
    pub task_state: Option<Value>,
    pub judges: Option<Value>,
}

/// One entry of `trajectories`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrajectory {
    pub id: Option<Value>,
    pub task: Option<Value>,
    pub length: Option<Value>,
    pub curve: Option<Value>,
    pub labels: Option<Value>,
    pub base_runs: Option<Value>,
    pub recorded: Option<Value>,
}

/// One entry of a trajectory's `base_runs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBaseRun {
    pub success: Option<Value>,
    pub steps: Option<Value>,
}

/// One entry of `decoys`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDecoy {
    pub id: Option<Value>,
    pub task: Option<Value>,
    pub length: Option<Value>,
    pub labels: Option<Value>,
    pub recorded: Option<Value>,
}

/// `controls:`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawControls {
    pub sanity: Option<Value>,
    pub retest: Option<Value>,
    pub budget_control: Option<Value>,
}

/// `admission:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmission {
    pub mode: Option<Value>,
    pub batch_size: Option<Value>,
    pub pipeline_threshold: Option<Value>,
}

/// An entry of `tasks` that names a task file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTaskFile {
    pub task: Option<Value>,
    pub base_runs: Option<Value>,
}

/// An entry of `tasks` that writes the task inline.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInlineTask {
    pub id: Option<Value>,
    pub image: Option<Value>,
    pub workdir: Option<Value>,
    pub evaluator: Option<Value>,
    pub problem_statement: Option<Value>,
    pub problem_statement_file: Option<Value>,
    pub base_runs: Option<Value>,
}

/// An inline task's `evaluator`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEvaluator {
    pub kind: Option<Value>,
    pub command: Option<Value>,
    pub timeout_s: Option<Value>,
    pub instance_id: Option<Value>,
}

/// `selection:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSelection {
    pub band: Option<Value>,
    pub per_task: Option<Value>,
    pub decoys: Option<Value>,
    pub target: Option<Value>,
    pub seed: Option<Value>,
}

/// `swebench:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSwebench {
    pub dataset: Option<Value>,
    pub instances: Option<Value>,
    pub image: Option<Value>,
    pub image_field: Option<Value>,
    pub workdir: Option<Value>,
    pub base_runs: Option<Value>,
}

/// The top level of a restart check's spec.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRestartCheckSpec {
    pub name: Option<Value>,
    pub seed: Option<Value>,
    pub restart_check: Option<Value>,
}

/// `restart_check:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRestartCheck {
    pub of: Option<Value>,
    pub runs: Option<Value>,
}

/// A mapping of the spec as the raw struct of its level. `prefix` is the level's path as errors
/// name its fields (`controls.`, or `""` where the caller names the level, as for a trajectory)
/// and `what` the level in words ("a trajectory").
pub(crate) fn level<T: DeserializeOwned>(map: &Mapping, prefix: &str, what: &str) -> Result<T, Problem> {
    check_keys(map, fields_of::<T>(), prefix, what)?;
    // With the keys checked and every field an optional value, nothing is left to fail; should
    // serde find something all the same, its message is attributed to the level.
    let value = Value::Mapping(map.clone());
    T::deserialize(&value).map_err(|e| problem(prefix.trim_end_matches('.'), format!("cannot be read: {e}")))
}

/// A value that must be given: the field's value, or "`field` is missing".
pub(crate) fn required<'a>(value: &'a Option<Value>, field: &str) -> Result<&'a Value, Problem> {
    value.as_ref().ok_or_else(|| crate::value::missing(field))
}

/// The field names of a struct with derived `Deserialize`, in declaration order: what the derive
/// hands to `deserialize_struct`, captured by a deserializer that reads nothing.
pub(crate) fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe always stops with an error once it has the names.
    let _ = T::deserialize(FieldProbe(&mut fields));
    fields
}

struct FieldProbe<'a>(&'a mut &'static [&'static str]);

#[derive(Debug)]
struct ProbeStop;

impl std::fmt::Display for ProbeStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the field probe reads no values")
    }
}

impl std::error::Error for ProbeStop {}

impl de::Error for ProbeStop {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        ProbeStop
    }
}

impl<'de> Deserializer<'de> for FieldProbe<'_> {
    type Error = ProbeStop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeStop> {
        Err(ProbeStop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, ProbeStop> {
        *self.0 = fields;
        Err(ProbeStop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_lists_its_fields_in_the_order_messages_name_them() {
        assert_eq!(
            fields_of::<RawStudy>(),
            [
                "name",
                "seed",
                "budget",
                "schedule",
                "runner",
                "thresholds",
                "controls",
                "admission",
                "trajectories",
                "decoys",
                "tasks",
                "base_runs",
                "selection",
                "swebench",
                "task_state",
                "judges"
            ]
        );
        assert_eq!(fields_of::<RawTrajectory>(), ["id", "task", "length", "curve", "labels", "base_runs", "recorded"]);
        assert_eq!(fields_of::<RawBaseRun>(), ["success", "steps"]);
        assert_eq!(fields_of::<RawRestartCheck>(), ["of", "runs"]);
    }

    #[test]
    fn a_level_reads_null_as_absent_and_refuses_an_unknown_key() {
        let map: Mapping = serde_norway::from_str("{success: true, steps: null}").unwrap();
        let run: RawBaseRun = level(&map, "base_runs[0].", "a base run").map_err(|p| p.message).unwrap();
        assert_eq!((run.success, run.steps), (Some(Value::Bool(true)), None));
        let map: Mapping = serde_norway::from_str("{success: true, step: 4}").unwrap();
        let Err(p) = level::<RawBaseRun>(&map, "base_runs[0].", "a base run") else { panic!("accepted") };
        assert_eq!(
            (p.field.as_str(), p.message.as_str()),
            ("base_runs[0].step", "is not a field of a base run (expected one of: success, steps)")
        );
    }
}
