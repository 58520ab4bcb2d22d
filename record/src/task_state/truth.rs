//! The known truth of a task-state study run against the deterministic model server: what the
//! pipeline must measure on sessions carrying `[[STATE …]]` markers ([`super::markers`]), computed
//! from the sessions alone, without any model call.
//!
//! Per checkpoint `k` the server extracts one atom per marker id in `T` at `k` (an answer with an
//! unknown category or an empty id is malformed, so such a checkpoint has no atoms), probes are
//! written for the atoms at or above the minimum importance, a reader answers a probe with its fact
//! exactly when the fact occurs in the view's text (the actor: in the texts of its history), and
//! the judge compares the answer with the fact. Every sample answers alike.

use std::collections::BTreeMap;

use vcurve_method::task_state::{Credit, EligibilityFlags, ProbeRecord, StudyInput, TaskStateReport, View, analyze};

use super::assemble::{checkpoint_record, render_views, views_read};
use super::markers::{extraction_answer, history_text, judge_credit};
use super::plan::{PlanError, check_sessions, probe_id, study_probe_id};
use super::{RecordedSession, TaskStateSettings};
use crate::llm::answers;

/// The estimators' input the pipeline must assemble from `sessions` (by task) under `settings`.
pub fn marker_study(
    settings: &TaskStateSettings,
    sessions: &BTreeMap<String, RecordedSession>,
) -> Result<StudyInput, PlanError> {
    check_sessions(settings, sessions)?;
    let mut input = StudyInput::default();
    let read = views_read(settings);
    for (task, rec) in sessions {
        for k in 1..=rec.session.checkpoints() {
            let rendered = render_views(rec, &read, k)?;
            let text = |view: View| rendered.iter().find(|r| r.view == view).map(|r| r.text.as_str()).unwrap_or("");
            let full = text(View::Full);
            // The server's extraction, read as the worker's check reads it; malformed: no atoms.
            let atoms = answers::parse_atoms(&extraction_answer(full).to_string(), k).unwrap_or_default();
            let kept: Vec<_> =
                atoms.into_iter().filter(|a| u32::from(a.importance) >= settings.min_importance).collect();
            input.checkpoints.push(checkpoint_record(rec, k, &rendered, kept.iter().map(|a| a.category)));
            let history = match rec.history_ends.get(k as usize - 1) {
                Some(&end) if settings.actor => history_text(rec.messages.get(..end).unwrap_or(&[])),
                _ => String::new(),
            };
            for atom in kept {
                let fact = atom.statement.as_str();
                let credit = |seen: &str| {
                    let answer = if seen.contains(fact) { fact } else { "unknown" };
                    vec![judge_credit(fact, answer); settings.samples as usize]
                };
                let mut credits: BTreeMap<View, Vec<Credit>> =
                    settings.views.iter().map(|&v| (v, credit(text(v)))).collect();
                if settings.actor {
                    credits.insert(View::Actor, credit(&history));
                }
                input.probes.push(ProbeRecord {
                    probe: study_probe_id(task, k, &probe_id(&atom.id)),
                    task: task.clone(),
                    checkpoint: k,
                    category: atom.category,
                    importance: u32::from(atom.importance),
                    origin_turn: atom.origin_turn,
                    flags: EligibilityFlags { well_formed: true, excluded: None },
                    credits,
                });
            }
        }
    }
    Ok(input)
}

/// The tables of [`marker_study`] under the study's estimator settings ([`super::estimator_settings`]).
pub fn marker_report(
    settings: &TaskStateSettings,
    sessions: &BTreeMap<String, RecordedSession>,
) -> Result<TaskStateReport, PlanError> {
    let input = marker_study(settings, sessions)?;
    analyze(&input, &super::estimator_settings(settings)).map_err(|e| PlanError::Estimators(e.to_string()))
}

/// The accuracy per view key (`"reports"`, `"full"`, …, `"actor"`) the pipeline must measure.
pub fn marker_truth(
    settings: &TaskStateSettings,
    sessions: &BTreeMap<String, RecordedSession>,
) -> Result<BTreeMap<String, f64>, PlanError> {
    Ok(marker_report(settings, sessions)?.accuracy())
}
