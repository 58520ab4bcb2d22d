//! The planner of a task-state study: pure functions that say which model calls follow a finished
//! job (docs/task-state.md, "The study's calls"; the choices are in docs/decisions.md,
//! "Task-state study: the planner").
//!
//! - [`after_session`]: a recorded session gives one atom extraction per checkpoint, from the full
//!   context `T` of that checkpoint.
//! - [`after_call`]: an answered extraction gives one probe-generation call for the atoms kept
//!   (importance at least the settings' minimum); answered probes give a reader call per view and
//!   answer sample (every probe of the checkpoint in one call) and, with the actor on, an actor
//!   call per probe and sample; an answered reader or actor call gives one judge call for its
//!   answers; a judge's answer and any unanswered call give nothing.
//!
//! The coordinator stores each [`CallInput`] by digest and queues a `model_call` job per
//! [`CallKey`], so planning the same job twice gives the same calls under the same keys.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};
use vcurve_method::task_state::usage::Purpose;
use vcurve_method::task_state::{Category, View};

use super::{AnswerCheck, CallInput, CallKey, CallOutput, RecordedSession, StageModel, TaskStateSettings};
use crate::llm::answers::{self, ExtractedAtom, GeneratedProbe};
use crate::llm::{TemplateError, TemplateName};
use crate::session::views;

/// Why a call cannot be planned or a study assembled. Every message names the task, the call or
/// the setting it is about. None is retryable: each is a fact about stored data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The settings cannot plan a study.
    #[error("task-state settings: {0}")]
    Settings(String),
    /// A recorded session is not what its checkpoints, history or views need.
    #[error("task {task}: recorded session: {reason}")]
    Session { task: String, reason: String },
    /// A call, its stored answer or the answers it depends on are inconsistent.
    #[error("call {call}: {reason}")]
    Call { call: String, reason: String },
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The estimators refused the assembled input.
    #[error("the estimators: {0}")]
    Estimators(String),
}

fn call_error(key: &CallKey, reason: impl Into<String>) -> PlanError {
    PlanError::Call { call: key.as_subject(), reason: reason.into() }
}

/// The answers already stored for the checkpoint of a finished call, which its follow-ups need:
/// the atom extraction's (for a probe-generation call) and the probe generation's (for a reader
/// or actor call).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointAnswers<'a> {
    pub atoms: Option<&'a CallOutput>,
    pub probes: Option<&'a CallOutput>,
}

/// The probe id of an atom, unique within its checkpoint: the atom id itself when it is made of
/// ASCII letters, digits, `-`, `_` and `.`, else each other byte written `%XX` (so ids stay
/// distinct and a call key's `/` separators stay unambiguous).
pub fn probe_id(atom: &str) -> String {
    let mut out = String::with_capacity(atom.len());
    for b in atom.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The probe's id in the study (`ProbeRecord::probe`): `{task}/k{k}/{probe}`.
pub fn study_probe_id(task: &str, k: u32, probe: &str) -> String {
    format!("{task}/k{k}/{probe}")
}

/// Refuses settings no study can be planned with, naming the field.
pub fn check_settings(settings: &TaskStateSettings) -> Result<(), PlanError> {
    let bad = |why: String| Err(PlanError::Settings(format!("{}: {why}", settings.version)));
    if settings.samples == 0 {
        return bad("samples: at least 1 answer sample per view".into());
    }
    if settings.min_importance > 3 {
        return bad(format!("min_importance is {}: importance runs from 1 to 3", settings.min_importance));
    }
    let mut seen = BTreeSet::new();
    for view in &settings.views {
        if *view == View::Actor {
            return bad("views: the actor is not a text view (it is the `actor` setting)".into());
        }
        if !seen.insert(*view) {
            return bad(format!("views: {view} is listed twice"));
        }
    }
    Ok(())
}

/// A task id every call key can carry: no `/`, no whitespace, not starting `judge:`.
fn check_task_id(task: &str) -> Result<(), String> {
    if task.is_empty() || task.contains('/') || task.contains(char::is_whitespace) || task.starts_with("judge:") {
        return Err(format!(
            "task id {task:?} cannot name the study's calls (it needs no '/', no whitespace, and not to start with \"judge:\")"
        ));
    }
    Ok(())
}

/// Refuses settings no study can be planned with, and any session [`check_session`] refuses or
/// stored under another task than its own.
pub fn check_sessions(
    settings: &TaskStateSettings,
    sessions: &std::collections::BTreeMap<String, RecordedSession>,
) -> Result<(), PlanError> {
    check_settings(settings)?;
    for (task, rec) in sessions {
        if *task != rec.session.task.id {
            return Err(PlanError::Session {
                task: task.clone(),
                reason: format!("stored under task {task} but its session is of task {}", rec.session.task.id),
            });
        }
        check_session(settings, rec)?;
    }
    Ok(())
}

/// Refuses a recorded session the planner cannot read: an invalid session or task id, checkpoints
/// other than `1..=K` for its `K` turns, or a history whose ends are not `K` increasing positions
/// within its messages (a session recorded without the agent's history has none, and then the
/// actor cannot be asked).
pub fn check_session(settings: &TaskStateSettings, rec: &RecordedSession) -> Result<(), PlanError> {
    let task = rec.session.task.id.clone();
    let bad = |reason: String| PlanError::Session { task: task.clone(), reason };
    rec.session.validate().map_err(|e| bad(e.to_string()))?;
    check_task_id(&task).map_err(bad)?;
    let turns = rec.session.checkpoints();
    if rec.checkpoints.len() != turns as usize {
        return Err(bad(format!(
            "it has {} checkpoint states for {turns} turns (one per turn's end)",
            rec.checkpoints.len()
        )));
    }
    for (i, c) in rec.checkpoints.iter().enumerate() {
        if c.k != i as u32 + 1 {
            return Err(bad(format!("checkpoints[{i}] is checkpoint {}, not {}", c.k, i + 1)));
        }
    }
    if rec.history_ends.is_empty() {
        if settings.actor {
            return Err(bad("it has no agent history (history_ends is empty), which the actor needs".into()));
        }
        return Ok(());
    }
    if rec.history_ends.len() != turns as usize {
        return Err(bad(format!("history_ends has {} entries for {turns} turns", rec.history_ends.len())));
    }
    let mut previous = 0;
    for (i, &end) in rec.history_ends.iter().enumerate() {
        if end <= previous {
            return Err(bad(format!(
                "history_ends[{i}] (checkpoint {}) is {end}, not after the previous end {previous}",
                i + 1
            )));
        }
        if end > rec.messages.len() {
            return Err(bad(format!(
                "history_ends[{i}] (checkpoint {}) is {end}, beyond the {} messages",
                i + 1,
                rec.messages.len()
            )));
        }
        previous = end;
    }
    for (i, m) in rec.messages[..previous].iter().enumerate() {
        if !m.get("role").is_some_and(Value::is_string) {
            return Err(bad(format!("messages[{i}] is not a chat message with a \"role\"")));
        }
    }
    Ok(())
}

/// The rendered text of `view` at checkpoint `k`.
pub(crate) fn view_text(rec: &RecordedSession, view: View, k: u32) -> Result<String, PlanError> {
    views::render(&rec.session, view, k)
        .map(|v| v.text)
        .map_err(|e| PlanError::Session { task: rec.session.task.id.clone(), reason: e.to_string() })
}

fn call(
    key: CallKey,
    template: TemplateName,
    values: &[(&'static str, String)],
    model: &StageModel,
    check: AnswerCheck,
) -> Result<CallInput, PlanError> {
    let values: BTreeMap<&str, String> = values.iter().cloned().collect();
    let messages = template.template().render(&values)?;
    Ok(CallInput {
        key,
        purpose: Purpose::Core,
        template,
        messages: messages.iter().map(|m| json!({"role": m.role.key(), "content": m.content})).collect(),
        model: model.clone(),
        check,
    })
}

/// A JSON array with one compact object per line, each object's fields in the order its struct
/// declares them (the order a template's documentation gives): valid JSON a model reads item by
/// item.
fn json_lines<T: Serialize>(items: &[T]) -> String {
    if items.is_empty() {
        return "[]".into();
    }
    let lines: Vec<String> = items
        .iter()
        .map(|v| format!("  {}", serde_json::to_string(v).expect("plain structs of strings and numbers serialize")))
        .collect();
    format!("[\n{}\n]", lines.join(",\n"))
}

/// An atom as probe generation is given it.
#[derive(Serialize)]
struct AtomItem<'a> {
    id: &'a str,
    category: Category,
    importance: u8,
    statement: &'a str,
}

/// A question as a reader is given it.
#[derive(Serialize)]
struct QuestionItem<'a> {
    id: &'a str,
    question: &'a str,
}

/// An answer as the judge is given it.
#[derive(Serialize)]
struct JudgeItem<'a> {
    id: &'a str,
    question: &'a str,
    reference: &'a str,
    answer: &'a str,
}

/// The calls a recorded session starts: one atom extraction per checkpoint `k`, from `T` at `k`.
pub fn after_session(settings: &TaskStateSettings, rec: &RecordedSession) -> Result<Vec<CallInput>, PlanError> {
    check_settings(settings)?;
    check_session(settings, rec)?;
    let task = &rec.session.task.id;
    (1..=rec.session.checkpoints())
        .map(|k| {
            call(
                CallKey::Atoms { task: task.clone(), k },
                TemplateName::ExtractAtoms,
                &[
                    ("task_id", task.clone()),
                    ("checkpoint", k.to_string()),
                    ("context", view_text(rec, View::Full, k)?),
                ],
                &settings.atoms,
                AnswerCheck::Atoms { checkpoint: k },
            )
        })
        .collect()
}

/// The atoms of an accepted extraction answer that probes are written for: importance at least
/// `min_importance`, in the answer's order.
pub fn kept_atoms(settings: &TaskStateSettings, key: &CallKey, answer: &str) -> Result<Vec<ExtractedAtom>, PlanError> {
    let (_, k) = key.checkpoint();
    let atoms = answers::parse_atoms(answer, k)
        .map_err(|e| call_error(key, format!("its accepted answer does not parse: {e}")))?;
    Ok(atoms.into_iter().filter(|a| u32::from(a.importance) >= settings.min_importance).collect())
}

/// The probes of an accepted probe-generation answer, in the answer's order.
pub(crate) fn accepted_probes(key: &CallKey, answer: &str) -> Result<Vec<GeneratedProbe>, PlanError> {
    answers::parse_probes_accepted(answer)
        .map_err(|e| call_error(key, format!("its accepted answer does not parse: {e}")))
}

/// What a finished call starts (nothing when it has no accepted answer): see the module's doc.
/// `rec` is the session of the call's task; `checkpoint` the stored answers of its checkpoint that
/// the follow-ups need.
pub fn after_call(
    settings: &TaskStateSettings,
    rec: &RecordedSession,
    done: &CallInput,
    output: &CallOutput,
    checkpoint: &CheckpointAnswers,
) -> Result<Vec<CallInput>, PlanError> {
    check_settings(settings)?;
    check_session(settings, rec)?;
    let key = &done.key;
    let (task, k) = key.checkpoint();
    if task != rec.session.task.id {
        return Err(call_error(key, format!("planned with the session of task {}", rec.session.task.id)));
    }
    if k == 0 || k > rec.session.checkpoints() {
        return Err(call_error(key, format!("the session has checkpoints 1 to {}", rec.session.checkpoints())));
    }
    let Some(answer) = output.answer.as_deref() else { return Ok(Vec::new()) };
    let task = task.to_string();
    match key {
        CallKey::Atoms { .. } => {
            let kept = kept_atoms(settings, key, answer)?;
            if kept.is_empty() {
                return Ok(Vec::new());
            }
            Ok(vec![probes_call(settings, &task, k, &kept)?])
        }
        CallKey::Probes { .. } => {
            let atoms_key = CallKey::Atoms { task: task.clone(), k };
            let atoms = checkpoint
                .atoms
                .and_then(|o| o.answer.as_deref())
                .ok_or_else(|| call_error(key, format!("the answer of {atoms_key} is not given")))?;
            let kept = kept_atoms(settings, &atoms_key, atoms)?;
            let ids: Vec<&str> = kept.iter().map(|a| a.id.as_str()).collect();
            if done.check != (AnswerCheck::Probes { atoms: ids.iter().map(|s| s.to_string()).collect() }) {
                return Err(call_error(key, format!("it asked other atoms than the kept atoms of {atoms_key}")));
            }
            let probes = answers::parse_probes(answer, &ids)
                .map_err(|e| call_error(key, format!("its accepted answer does not parse: {e}")))?;
            let by_atom: BTreeMap<&str, &GeneratedProbe> = probes.iter().map(|p| (p.atom.as_str(), p)).collect();
            let ordered: Vec<&GeneratedProbe> = ids.iter().map(|id| by_atom[id]).collect();
            answer_calls(settings, rec, k, &ordered)
        }
        CallKey::Reader { .. } => {
            let probes = checkpoint_probes(key, &task, k, checkpoint)?;
            let AnswerCheck::Reader { probes: asked } = &done.check else {
                return Err(call_error(key, "a reader call whose check is not a reader's"));
            };
            let asked_refs: Vec<&str> = asked.iter().map(String::as_str).collect();
            let given = answers::parse_reader(answer, &asked_refs)
                .map_err(|e| call_error(key, format!("its accepted answer does not parse: {e}")))?;
            let given: BTreeMap<&str, &str> = given.iter().map(|a| (a.id.as_str(), a.answer.as_str())).collect();
            let items = asked
                .iter()
                .map(|id| {
                    let p = probes
                        .get(id.as_str())
                        .ok_or_else(|| call_error(key, format!("probe {id} is not a probe of checkpoint {k}")))?;
                    Ok(judge_item(id, p, given[id.as_str()]))
                })
                .collect::<Result<Vec<_>, PlanError>>()?;
            Ok(vec![judge_call(settings, key, asked.clone(), &items)?])
        }
        CallKey::Actor { probe, .. } => {
            let probes = checkpoint_probes(key, &task, k, checkpoint)?;
            let p = probes
                .get(probe.as_str())
                .ok_or_else(|| call_error(key, format!("probe {probe} is not a probe of checkpoint {k}")))?;
            let given = answers::parse_actor(answer)
                .map_err(|e| call_error(key, format!("its accepted answer does not parse: {e}")))?;
            Ok(vec![judge_call(settings, key, vec![probe.clone()], &[judge_item(probe, p, &given)])?])
        }
        CallKey::Judge { .. } => Ok(Vec::new()),
        CallKey::Label { .. } => Err(call_error(key, "a curve study's label call is not a task-state call")),
    }
}

/// The probes of the checkpoint by probe id, from the stored probe-generation answer.
fn checkpoint_probes(
    key: &CallKey,
    task: &str,
    k: u32,
    checkpoint: &CheckpointAnswers,
) -> Result<BTreeMap<String, GeneratedProbe>, PlanError> {
    let probes_key = CallKey::Probes { task: task.to_string(), k };
    let answer = checkpoint
        .probes
        .and_then(|o| o.answer.as_deref())
        .ok_or_else(|| call_error(key, format!("the answer of {probes_key} is not given")))?;
    Ok(accepted_probes(&probes_key, answer)?.into_iter().map(|p| (probe_id(&p.atom), p)).collect())
}

fn probes_call(
    settings: &TaskStateSettings,
    task: &str,
    k: u32,
    kept: &[ExtractedAtom],
) -> Result<CallInput, PlanError> {
    let atoms: Vec<AtomItem> = kept
        .iter()
        .map(|a| AtomItem { id: &a.id, category: a.category, importance: a.importance, statement: &a.statement })
        .collect();
    call(
        CallKey::Probes { task: task.to_string(), k },
        TemplateName::GenerateProbes,
        &[("task_id", task.to_string()), ("checkpoint", k.to_string()), ("atoms", json_lines(&atoms))],
        &settings.probes,
        AnswerCheck::Probes { atoms: kept.iter().map(|a| a.id.clone()).collect() },
    )
}

/// The reader calls (view × sample) and the actor calls (probe × sample) of a checkpoint's probes.
fn answer_calls(
    settings: &TaskStateSettings,
    rec: &RecordedSession,
    k: u32,
    probes: &[&GeneratedProbe],
) -> Result<Vec<CallInput>, PlanError> {
    let task = &rec.session.task.id;
    let ids: Vec<String> = probes.iter().map(|p| probe_id(&p.atom)).collect();
    let questions: Vec<QuestionItem> =
        probes.iter().zip(&ids).map(|(p, id)| QuestionItem { id, question: &p.question }).collect();
    let questions = json_lines(&questions);
    let mut calls = Vec::new();
    for &view in &settings.views {
        let context = view_text(rec, view, k)?;
        for sample in 0..settings.samples {
            calls.push(call(
                CallKey::Reader { task: task.clone(), k, view, sample },
                TemplateName::Reader,
                &[("context", context.clone()), ("questions", questions.clone())],
                &settings.reader,
                AnswerCheck::Reader { probes: ids.clone() },
            )?);
        }
    }
    if settings.actor {
        // check_session: with the actor on, every checkpoint has a history end within the messages.
        let history =
            rec.history_ends.get(k as usize - 1).and_then(|&end| rec.messages.get(..end)).ok_or_else(|| {
                PlanError::Session { task: task.clone(), reason: format!("it has no agent history at checkpoint {k}") }
            })?;
        for (p, id) in probes.iter().zip(&ids) {
            for sample in 0..settings.samples {
                let mut input = call(
                    CallKey::Actor { task: task.clone(), k, probe: id.clone(), sample },
                    TemplateName::ActorProbe,
                    &[("question", p.question.clone())],
                    &settings.actor_model,
                    AnswerCheck::Actor,
                )?;
                input.messages.splice(0..0, history.iter().cloned());
                calls.push(input);
            }
        }
    }
    Ok(calls)
}

fn judge_item<'a>(id: &'a str, probe: &'a GeneratedProbe, answer: &'a str) -> JudgeItem<'a> {
    JudgeItem { id, question: &probe.question, reference: &probe.reference, answer }
}

fn judge_call(
    settings: &TaskStateSettings,
    of: &CallKey,
    ids: Vec<String>,
    items: &[JudgeItem],
) -> Result<CallInput, PlanError> {
    call(
        CallKey::Judge { of: Box::new(of.clone()) },
        TemplateName::Judge,
        &[("items", json_lines(items))],
        &settings.judge,
        AnswerCheck::Judge { items: ids },
    )
}
