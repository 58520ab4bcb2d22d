//! The estimators' input from a task-state study's stored sessions and calls: per checkpoint its
//! record (fixed, view sizes, kept atoms per category), per kept atom its probe with the judge's
//! credits per view, and the rows of the export's `probes.csv`, `answers.csv` and `scores.csv`.
//!
//! A call that ended malformed or failed has no answer and so gives nothing: no follow-up was
//! planned, and no credit comes from it (a reader whose judge failed is not scored either). A kept
//! atom whose probe generation gave no answer is a probe that is not well formed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use vcurve_method::task_state::{Category, CheckpointRecord, Credit, EligibilityFlags, ProbeRecord, StudyInput, View};

use super::plan::{self, PlanError, check_sessions, kept_atoms, probe_id};
use super::{AnswerCheck, CallInput, CallKey, CallOutput, RecordedSession, TaskStateSettings};
use crate::llm::ModelCall;
use crate::llm::answers::{self, GeneratedProbe, Provenance};
use crate::session::views::{self, RenderedView};

/// One row of `probes.csv`: a kept atom and its probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRow {
    pub task: String,
    pub checkpoint: u32,
    /// The probe's id in the study (`{task}/k{k}/{probe}`).
    pub probe: String,
    pub atom: String,
    pub category: Category,
    pub importance: u32,
    pub origin_turn: u32,
    pub provenance: Provenance,
    /// Empty when probe generation gave no answer (the probe is not well formed).
    pub question: Option<String>,
    pub reference: Option<String>,
}

/// One row of `answers.csv`: one answer of a reader or actor call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerRow {
    pub task: String,
    pub checkpoint: u32,
    pub probe: String,
    /// The view read, `actor` for the actor fork.
    pub view: View,
    pub sample: u32,
    pub answer: String,
    /// The answering call's key.
    pub call: String,
}

/// One row of `scores.csv`: the judge's credit of one answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreRow {
    pub task: String,
    pub checkpoint: u32,
    pub probe: String,
    pub view: View,
    pub sample: u32,
    pub credit: Credit,
    /// The judge call's key.
    pub judge_call: String,
}

/// A study assembled from its stored sessions and calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// What `vcurve_method::task_state::analyze` reads.
    pub input: StudyInput,
    pub probes: Vec<ProbeRow>,
    pub answers: Vec<AnswerRow>,
    pub scores: Vec<ScoreRow>,
    /// Every call's log, in call-key order.
    pub calls: Vec<ModelCall>,
    /// The views the calls read (the settings' views and `T`, which extraction reads), each with
    /// its task, by task, checkpoint and [`views_read`] order.
    pub views: Vec<(String, RenderedView)>,
}

/// The text views a study's calls read: the settings' views and `T`, in [`View::ALL`] order.
pub fn views_read(settings: &TaskStateSettings) -> Vec<View> {
    let read: BTreeSet<View> = settings.views.iter().copied().chain([View::Full]).collect();
    View::ALL.into_iter().filter(|v| read.contains(v)).collect()
}

/// A checkpoint's record: fixed, the characters of `rendered`, and the kept atoms per category.
pub(crate) fn checkpoint_record(
    rec: &RecordedSession,
    k: u32,
    rendered: &[RenderedView],
    kept: impl IntoIterator<Item = Category>,
) -> CheckpointRecord {
    let mut atoms = BTreeMap::new();
    for category in kept {
        *atoms.entry(category).or_insert(0) += 1;
    }
    CheckpointRecord {
        task: rec.session.task.id.clone(),
        checkpoint: k,
        fixed: rec.checkpoints.get(k as usize - 1).and_then(|c| c.fixed),
        view_chars: rendered.iter().map(|v| (v.view, v.chars)).collect(),
        atoms,
    }
}

/// Renders `views` of checkpoint `k`.
pub(crate) fn render_views(rec: &RecordedSession, views: &[View], k: u32) -> Result<Vec<RenderedView>, PlanError> {
    views
        .iter()
        .map(|&v| {
            views::render(&rec.session, v, k)
                .map_err(|e| PlanError::Session { task: rec.session.task.id.clone(), reason: e.to_string() })
        })
        .collect()
}

fn call_error(key: &CallKey, reason: impl Into<String>) -> PlanError {
    PlanError::Call { call: key.as_subject(), reason: reason.into() }
}

/// Where a probe's record and row are, by (task, checkpoint, probe id).
type ProbeIndex = BTreeMap<(String, u32, String), usize>;

/// Assembles a study from its sessions (by task id) and its finished calls (by key, each with what
/// was sent and what came back). Refuses a call of no session's checkpoint, a view or sample the
/// settings did not ask, a stored answer its own check refuses, and answers naming probes the
/// checkpoint does not have.
pub fn assemble(
    settings: &TaskStateSettings,
    sessions: &BTreeMap<String, RecordedSession>,
    outputs: &BTreeMap<CallKey, (CallInput, CallOutput)>,
) -> Result<Assembled, PlanError> {
    check_sessions(settings, sessions)?;
    for (key, (input, _)) in outputs {
        check_key(settings, sessions, key, input)?;
    }
    let answer = |key: &CallKey| outputs.get(key).and_then(|(_, o)| o.answer.as_deref());

    let mut out = Assembled {
        input: StudyInput::default(),
        probes: Vec::new(),
        answers: Vec::new(),
        scores: Vec::new(),
        calls: outputs.values().map(|(_, o)| o.log.clone()).collect(),
        views: Vec::new(),
    };
    let mut index = ProbeIndex::new();
    let read = views_read(settings);
    for (task, rec) in sessions {
        for k in 1..=rec.session.checkpoints() {
            let rendered = render_views(rec, &read, k)?;
            let atoms_key = CallKey::Atoms { task: task.clone(), k };
            let kept = match answer(&atoms_key) {
                Some(a) => kept_atoms(settings, &atoms_key, a)?,
                None => Vec::new(),
            };
            out.input.checkpoints.push(checkpoint_record(rec, k, &rendered, kept.iter().map(|a| a.category)));
            out.views.extend(rendered.into_iter().map(|v| (task.clone(), v)));

            let probes_key = CallKey::Probes { task: task.clone(), k };
            let generated: BTreeMap<String, GeneratedProbe> = match answer(&probes_key) {
                None => BTreeMap::new(),
                Some(a) => {
                    let ids: Vec<&str> = kept.iter().map(|a| a.id.as_str()).collect();
                    answers::parse_probes(a, &ids)
                        .map_err(|e| {
                            call_error(
                                &probes_key,
                                format!("its answer is not one probe per kept atom of {atoms_key}: {e}"),
                            )
                        })?
                        .into_iter()
                        .map(|p| (p.atom.clone(), p))
                        .collect()
                }
            };
            for atom in &kept {
                let id = probe_id(&atom.id);
                let probe = generated.get(&atom.id);
                let study_id = plan::study_probe_id(task, k, &id);
                index.insert((task.clone(), k, id), out.input.probes.len());
                out.input.probes.push(ProbeRecord {
                    probe: study_id.clone(),
                    task: task.clone(),
                    checkpoint: k,
                    category: atom.category,
                    importance: u32::from(atom.importance),
                    origin_turn: atom.origin_turn,
                    flags: EligibilityFlags { well_formed: probe.is_some(), excluded: None },
                    credits: BTreeMap::new(),
                });
                out.probes.push(ProbeRow {
                    task: task.clone(),
                    checkpoint: k,
                    probe: study_id,
                    atom: atom.id.clone(),
                    category: atom.category,
                    importance: u32::from(atom.importance),
                    origin_turn: atom.origin_turn,
                    provenance: atom.provenance,
                    question: probe.map(|p| p.question.clone()),
                    reference: probe.map(|p| p.reference.clone()),
                });
            }
        }
    }

    // Credits by probe and view, each sample once, in sample order.
    let mut credits: BTreeMap<(usize, View), BTreeMap<u32, Credit>> = BTreeMap::new();
    for (key, (input, output)) in outputs {
        let Some(text) = output.answer.as_deref() else { continue };
        match key {
            CallKey::Reader { task, k, view, sample } => {
                let asked = reader_ids(key, &input.check)?;
                for a in answers::parse_reader(text, &refs(asked))
                    .map_err(|e| call_error(key, format!("its stored answer does not parse: {e}")))?
                {
                    let at = probe_at(&index, key, task, *k, &a.id)?;
                    out.answers.push(answer_row(&out.probes[at], *view, *sample, a.answer, key));
                }
            }
            CallKey::Actor { task, k, probe, sample } => {
                let given = answers::parse_actor(text)
                    .map_err(|e| call_error(key, format!("its stored answer does not parse: {e}")))?;
                let at = probe_at(&index, key, task, *k, probe)?;
                out.answers.push(answer_row(&out.probes[at], View::Actor, *sample, given, key));
            }
            CallKey::Judge { of } => {
                let AnswerCheck::Judge { items } = &input.check else {
                    return Err(call_error(key, "a judge call whose check is not a judge's"));
                };
                let (task, k) = of.checkpoint();
                let (view, sample) = match of.as_ref() {
                    CallKey::Reader { view, sample, .. } => (*view, *sample),
                    CallKey::Actor { sample, .. } => (View::Actor, *sample),
                    _ => return Err(call_error(key, "a judge judges a reader or actor call")),
                };
                for j in answers::parse_judge(text, &refs(items))
                    .map_err(|e| call_error(key, format!("its stored answer does not parse: {e}")))?
                {
                    let at = probe_at(&index, key, task, k, &j.id)?;
                    if credits.entry((at, view)).or_default().insert(sample, j.credit).is_some() {
                        return Err(call_error(key, format!("probe {} is judged twice in sample {sample}", j.id)));
                    }
                    let p = &out.probes[at];
                    out.scores.push(ScoreRow {
                        task: p.task.clone(),
                        checkpoint: p.checkpoint,
                        probe: p.probe.clone(),
                        view,
                        sample,
                        credit: j.credit,
                        judge_call: key.as_subject(),
                    });
                }
            }
            CallKey::Atoms { .. } | CallKey::Probes { .. } => {}
            CallKey::Label { .. } => {
                return Err(call_error(key, "a curve study's label call is not a task-state call"));
            }
        }
    }
    for ((at, view), by_sample) in credits {
        out.input.probes[at].credits.insert(view, by_sample.into_values().collect());
    }
    Ok(out)
}

fn refs(ids: &[String]) -> Vec<&str> {
    ids.iter().map(String::as_str).collect()
}

fn reader_ids<'a>(key: &CallKey, check: &'a AnswerCheck) -> Result<&'a [String], PlanError> {
    match check {
        AnswerCheck::Reader { probes } => Ok(probes),
        _ => Err(call_error(key, "a reader call whose check is not a reader's")),
    }
}

fn probe_at(index: &ProbeIndex, key: &CallKey, task: &str, k: u32, probe: &str) -> Result<usize, PlanError> {
    index
        .get(&(task.to_string(), k, probe.to_string()))
        .copied()
        .ok_or_else(|| call_error(key, format!("probe {probe} is not a kept atom's probe of checkpoint {k}")))
}

fn answer_row(probe: &ProbeRow, view: View, sample: u32, answer: String, key: &CallKey) -> AnswerRow {
    AnswerRow {
        task: probe.task.clone(),
        checkpoint: probe.checkpoint,
        probe: probe.probe.clone(),
        view,
        sample,
        answer,
        call: key.as_subject(),
    }
}

/// A stored call must be of a session's checkpoint, stored under its own key, and (for answers)
/// of a view and sample the settings ask.
fn check_key(
    settings: &TaskStateSettings,
    sessions: &BTreeMap<String, RecordedSession>,
    key: &CallKey,
    input: &CallInput,
) -> Result<(), PlanError> {
    if input.key != *key {
        return Err(call_error(key, format!("stored under this key but its input is call {}", input.key)));
    }
    let (task, k) = key.checkpoint();
    let rec = sessions.get(task).ok_or_else(|| call_error(key, format!("no session of task {task} is given")))?;
    if k == 0 || k > rec.session.checkpoints() {
        return Err(call_error(key, format!("the session has checkpoints 1 to {}", rec.session.checkpoints())));
    }
    let answered = match key {
        CallKey::Judge { of } => of.as_ref(),
        other => other,
    };
    let sample = match answered {
        CallKey::Reader { view, sample, .. } => {
            if !settings.views.contains(view) {
                return Err(call_error(key, format!("view {view} is not one of the settings' views")));
            }
            *sample
        }
        CallKey::Actor { sample, .. } => {
            if !settings.actor {
                return Err(call_error(key, "the settings do not ask the actor"));
            }
            *sample
        }
        _ => return Ok(()),
    };
    if sample >= settings.samples {
        return Err(call_error(
            key,
            format!("sample {sample}: the settings ask {} samples (0-based)", settings.samples),
        ));
    }
    Ok(())
}
