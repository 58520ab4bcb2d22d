//! Parsers of the model stages' answers (the JSON schemas the templates ask for). A parser refuses
//! an answer that does not follow its schema with a [`MalformedAnswer`] naming what is wrong; a
//! malformed answer is recorded as such and never scored.
//!
//! An answer is one JSON object, optionally inside one fenced code block (```` ```json ````), with
//! nothing else around it but whitespace. Fields the schema does not name are refused, so a model
//! that drifts from the schema is seen rather than half-read.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use vcurve_method::task_state::{Category, Credit};

/// An answer that does not follow its stage's schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("malformed {stage} answer: {reason}")]
pub struct MalformedAnswer {
    /// The stage whose schema it broke (`atoms`, `probes`, `reader`, `actor`, `judge`).
    pub stage: String,
    pub reason: String,
}

fn malformed(stage: &str, reason: impl Into<String>) -> MalformedAnswer {
    MalformedAnswer { stage: stage.into(), reason: reason.into() }
}

/// The JSON text of an answer: the whole text, or the body of its one fenced code block.
fn json_body(text: &str) -> &str {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let rest = rest.strip_prefix("json").unwrap_or(rest);
        if let Some(body) = rest.strip_suffix("```") {
            return body.trim();
        }
    }
    t
}

fn parse_json<T: DeserializeOwned>(stage: &str, text: &str) -> Result<T, MalformedAnswer> {
    if text.trim().is_empty() {
        return Err(malformed(stage, "the answer is empty"));
    }
    serde_json::from_str(json_body(text)).map_err(|e| {
        let shown: String = text.trim().chars().take(200).collect();
        malformed(stage, format!("not the schema's JSON object ({e}); the answer began {shown:?}"))
    })
}

fn nonempty(stage: &str, at: &str, field: &str, value: &str) -> Result<(), MalformedAnswer> {
    if value.trim().is_empty() { Err(malformed(stage, format!("{at}.{field} is empty"))) } else { Ok(()) }
}

/// Checks that `got` names each of `want` exactly once and nothing else.
fn same_ids<'a>(
    stage: &str,
    what: &str,
    got: impl IntoIterator<Item = &'a str>,
    want: &[&str],
) -> Result<(), MalformedAnswer> {
    let wanted: BTreeSet<&str> = want.iter().copied().collect();
    let mut seen = BTreeSet::new();
    for id in got {
        if !wanted.contains(id) {
            return Err(malformed(stage, format!("{what} {id:?} was not asked")));
        }
        if !seen.insert(id) {
            return Err(malformed(stage, format!("{what} {id:?} is answered twice")));
        }
    }
    let missing: Vec<&str> = wanted.difference(&seen).copied().collect();
    if !missing.is_empty() {
        return Err(malformed(stage, format!("no answer for {what} {}", missing.join(", "))));
    }
    Ok(())
}

/// Where the session shows an atom first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    Task,
    System,
    Instruction,
    AssistantText,
    Reasoning,
    Command,
    ToolOutput,
    Report,
}

/// One atom of an extraction answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractedAtom {
    pub id: String,
    pub category: Category,
    /// 1 (minor) to 3 (essential).
    pub importance: u8,
    pub statement: String,
    pub provenance: Provenance,
    /// The turn the atom first appears in; 0 for the task statement.
    pub origin_turn: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AtomsAnswer {
    atoms: Vec<ExtractedAtom>,
}

/// Parses an atom-extraction answer of checkpoint `checkpoint` (`{"atoms": [...]}`); refuses an
/// importance outside 1–3, an origin turn after the checkpoint, an empty id or statement and a
/// repeated id. An empty list is a valid answer (a checkpoint with no state to report).
pub fn parse_atoms(text: &str, checkpoint: u32) -> Result<Vec<ExtractedAtom>, MalformedAnswer> {
    const S: &str = "atoms";
    let answer: AtomsAnswer = parse_json(S, text)?;
    let mut ids = BTreeSet::new();
    for (i, a) in answer.atoms.iter().enumerate() {
        let at = format!("atoms[{i}]");
        nonempty(S, &at, "id", &a.id)?;
        nonempty(S, &at, "statement", &a.statement)?;
        if !(1..=3).contains(&a.importance) {
            return Err(malformed(S, format!("{at}.importance is {}, not 1, 2 or 3", a.importance)));
        }
        if a.origin_turn > checkpoint {
            return Err(malformed(
                S,
                format!("{at}.origin_turn is {}, after the checkpoint (turn {checkpoint})", a.origin_turn),
            ));
        }
        if !ids.insert(a.id.as_str()) {
            return Err(malformed(S, format!("{at}.id {:?} is repeated", a.id)));
        }
    }
    Ok(answer.atoms)
}

/// One probe of a probe-generation answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratedProbe {
    /// The atom it is bound to.
    pub atom: String,
    pub question: String,
    pub reference: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbesAnswer {
    probes: Vec<GeneratedProbe>,
}

/// Parses a probe-generation answer for the atoms `atoms` (`{"probes": [...]}`): exactly one probe
/// per atom, with a non-empty question and reference.
pub fn parse_probes(text: &str, atoms: &[&str]) -> Result<Vec<GeneratedProbe>, MalformedAnswer> {
    const S: &str = "probes";
    let answer: ProbesAnswer = parse_json(S, text)?;
    for (i, p) in answer.probes.iter().enumerate() {
        let at = format!("probes[{i}]");
        nonempty(S, &at, "question", &p.question)?;
        nonempty(S, &at, "reference", &p.reference)?;
    }
    same_ids(S, "atom", answer.probes.iter().map(|p| p.atom.as_str()), atoms)?;
    Ok(answer.probes)
}

/// Parses a probe-generation answer whose atoms were checked when it was accepted
/// ([`parse_probes`]), reading the atoms it names: a non-empty question and reference per probe,
/// each atom once.
pub fn parse_probes_accepted(text: &str) -> Result<Vec<GeneratedProbe>, MalformedAnswer> {
    let answer: ProbesAnswer = parse_json("probes", text)?;
    let atoms: Vec<&str> = answer.probes.iter().map(|p| p.atom.as_str()).collect();
    parse_probes(text, &atoms)
}

/// One answer of a reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeAnswer {
    /// The probe's id, as the question was given.
    pub id: String,
    /// The answer; `"unknown"` when the reader could not tell (that is an answer, credited 0).
    pub answer: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReaderAnswer {
    answers: Vec<ProbeAnswer>,
}

/// Parses a reader's answer to the probes `probes` (`{"answers": [...]}`): one answer per probe.
/// An empty answer string is kept (the judge credits it 0); a missing probe is malformed.
pub fn parse_reader(text: &str, probes: &[&str]) -> Result<Vec<ProbeAnswer>, MalformedAnswer> {
    const S: &str = "reader";
    let answer: ReaderAnswer = parse_json(S, text)?;
    same_ids(S, "probe", answer.answers.iter().map(|a| a.id.as_str()), probes)?;
    Ok(answer.answers)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActorAnswer {
    answer: String,
}

/// Parses the actor fork's answer (`{"answer": "..."}`).
pub fn parse_actor(text: &str) -> Result<String, MalformedAnswer> {
    let answer: ActorAnswer = parse_json("actor", text)?;
    Ok(answer.answer)
}

/// One credit of a judge's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgedItem {
    pub id: String,
    /// 1, 0.5 or 0; any other number is malformed.
    pub credit: Credit,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeAnswer {
    scores: Vec<JudgedItem>,
}

/// Parses a judge's answer for the items `items` (`{"scores": [...]}`): one credit of 1, 0.5 or
/// 0 per item.
pub fn parse_judge(text: &str, items: &[&str]) -> Result<Vec<JudgedItem>, MalformedAnswer> {
    const S: &str = "judge";
    let answer: JudgeAnswer = parse_json(S, text)?;
    same_ids(S, "item", answer.scores.iter().map(|s| s.id.as_str()), items)?;
    Ok(answer.scores)
}

/// A judge's first-mistake label of a trajectory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstMistake {
    /// The 1-based step `m = i + 1` of the answer's 0-based index `i`; `None` for "no mistake"
    /// (`-1`), as `Label::step` stores it.
    pub step: Option<u32>,
    pub explanation: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FirstMistakeAnswer {
    first_mistake: i64,
    #[serde(default)]
    explanation: String,
}

/// Parses a first-mistake answer for a trajectory of `steps` steps
/// (`{"first_mistake": i, "explanation": "..."}`): `i` is 0-based, `-1` for no mistake; an index
/// outside `-1..steps` is malformed.
pub fn parse_first_mistake(text: &str, steps: u32) -> Result<FirstMistake, MalformedAnswer> {
    const S: &str = "first_mistake";
    let answer: FirstMistakeAnswer = parse_json(S, text)?;
    let step = match answer.first_mistake {
        -1 => None,
        i if (0..i64::from(steps)).contains(&i) => Some(i as u32 + 1),
        i => {
            return Err(malformed(
                S,
                format!("first_mistake is {i}: a 0-based step index below {steps}, or -1 for no mistake"),
            ));
        }
    };
    Ok(FirstMistake { step, explanation: answer.explanation })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoms_parse_and_bad_fields_are_named() {
        let ok = r#"```json
{"atoms": [{"id": "a1", "category": "rejected_options", "importance": 3, "statement": "s",
            "provenance": "tool_output", "origin_turn": 2}]}
```"#;
        let atoms = parse_atoms(ok, 2).unwrap();
        assert_eq!(atoms[0].category, Category::RejectedOptions);
        assert_eq!(atoms[0].provenance, Provenance::ToolOutput);
        assert_eq!(parse_atoms(r#"{"atoms": []}"#, 1).unwrap(), vec![]);
        let err = |t: &str| parse_atoms(t, 1).unwrap_err().to_string();
        assert!(err(ok).contains("atoms[0].origin_turn is 2, after the checkpoint (turn 1)"));
        assert!(err(&ok.replace("\"importance\": 3", "\"importance\": 4")).contains("importance is 4"));
        assert!(err(&ok.replace("rejected_options", "vibes")).contains("not the schema's JSON object"));
        assert!(
            err("Sure! Here are the atoms: {}").starts_with("malformed atoms answer: not the schema's JSON object")
        );
        assert!(err("  ").contains("empty"));
        assert!(err(&ok.replace("\"origin_turn\": 2", "\"origin_turn\": 1, \"extra\": 1")).contains("unknown field"));
    }

    #[test]
    fn probes_readers_and_judges_answer_exactly_what_was_asked() {
        let p = r#"{"probes": [{"atom": "a1", "question": "q", "reference": "r"}]}"#;
        assert_eq!(parse_probes(p, &["a1"]).unwrap().len(), 1);
        assert!(parse_probes(p, &["a1", "a2"]).unwrap_err().reason.contains("no answer for atom a2"));
        assert!(parse_probes(p, &["a2"]).unwrap_err().reason.contains("atom \"a1\" was not asked"));
        assert!(parse_probes(&p.replace("\"r\"", "\" \""), &["a1"]).unwrap_err().reason.contains("reference is empty"));

        let r = r#"{"answers": [{"id": "p1", "answer": "unknown"}, {"id": "p1", "answer": "x"}]}"#;
        assert!(parse_reader(r, &["p1"]).unwrap_err().reason.contains("answered twice"));
        assert_eq!(parse_reader(r#"{"answers": [{"id": "p1", "answer": ""}]}"#, &["p1"]).unwrap()[0].answer, "");

        assert_eq!(parse_actor(r#"{"answer": "pinned numpy"}"#).unwrap(), "pinned numpy");
        assert!(parse_actor("pinned numpy").is_err());

        let j = r#"{"scores": [{"id": "s1", "credit": 0.5}, {"id": "s2", "credit": 1}]}"#;
        let scores = parse_judge(j, &["s1", "s2"]).unwrap();
        assert_eq!(scores[0].credit, Credit::Partial);
        assert_eq!(scores[1].credit, Credit::Full);
        assert_eq!(parse_first_mistake(r#"{"first_mistake": 0, "explanation": "e"}"#, 3).unwrap().step, Some(1));
        assert_eq!(parse_first_mistake(r#"{"first_mistake": -1}"#, 3).unwrap().step, None);
        assert!(parse_first_mistake(r#"{"first_mistake": 3}"#, 3).unwrap_err().reason.contains("below 3"));
        assert!(parse_first_mistake(r#"{"first_mistake": -2}"#, 3).is_err());
        let bad = parse_judge(&j.replace("0.5", "0.7"), &["s1", "s2"]).unwrap_err();
        assert!(bad.reason.contains("a credit is 1, 0.5 or 0, not 0.7"), "{bad}");
    }
}
