//! The known truth of the task-state demo and tests: `[[STATE …]]` markers in a session's text,
//! read the same way by the deterministic model server (`vcurve_testkit::model_server`) and by
//! [`super::truth::marker_truth`], which computes what the pipeline must measure without any model
//! call.
//!
//! A marker is `[[STATE id=S1 category=failures importance=3 fact=the suite needs TZ=UTC]]`: the
//! fact runs to the closing `]]`, and a fact in double quotes (`fact="…"`, as the scripted agent
//! writes it) is the text between them.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use vcurve_method::task_state::Credit;

/// One `[[STATE …]]` marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub id: String,
    /// As written; not checked against the study's categories (an extraction answer carrying an
    /// unknown one is malformed, as a model's would be).
    pub category: String,
    pub importance: u8,
    /// Trimmed, without its surrounding double quotes.
    pub fact: String,
    /// Its byte offset in the text.
    pub at: usize,
}

/// The markers of `text`, in order, every occurrence. Text between `[[STATE ` and `]]` that is not
/// `id=… category=… importance=1..3 fact=…` with a non-empty fact is not a marker.
pub fn markers(text: &str) -> Vec<Marker> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find("[[STATE ") {
        let at = from + rel;
        let body_start = at + "[[STATE ".len();
        let Some(end) = text[body_start..].find("]]") else { break };
        let body = &text[body_start..body_start + end];
        from = body_start + end + 2;
        let Some((head, fact)) = body.split_once(" fact=") else { continue };
        let mut fields = BTreeMap::new();
        for part in head.split_whitespace() {
            if let Some((k, v)) = part.split_once('=') {
                fields.insert(k, v);
            }
        }
        let (Some(id), Some(category), Some(importance)) =
            (fields.get("id"), fields.get("category"), fields.get("importance"))
        else {
            continue;
        };
        let Ok(importance) = importance.parse::<u8>() else { continue };
        let fact = unquote(fact.trim()).trim();
        if !(1..=3).contains(&importance) || fact.is_empty() {
            continue;
        }
        out.push(Marker { id: id.to_string(), category: category.to_string(), importance, fact: fact.into(), at });
    }
    out
}

fn unquote(s: &str) -> &str {
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) => inner,
        None => s,
    }
}

/// The markers an extraction from `context` reports: the first occurrence of each id, in order.
pub fn first_markers(context: &str) -> Vec<Marker> {
    let mut seen = std::collections::HashSet::new();
    markers(context).into_iter().filter(|m| seen.insert(m.id.clone())).collect()
}

/// The view block a byte position of a rendered view is in, as an atom's provenance key, and the
/// turn of the `## Turn j` block holding it (0 before the first turn).
pub fn place(context: &str, at: usize) -> (&'static str, u32) {
    let before = &context[..at];
    let mut provenance = None;
    let mut turn = 0;
    for line in before.lines().rev() {
        if provenance.is_none() {
            provenance = match line {
                l if l.starts_with("$ ") => Some("command"),
                "[output]" => Some("tool_output"),
                "[assistant]" => Some("assistant_text"),
                "[assistant reasoning]" => Some("reasoning"),
                "[report]" => Some("report"),
                "[system]" => Some("system"),
                "[user]" => Some("instruction"),
                l if l.starts_with("# ") => Some("task"),
                _ => None,
            };
        }
        if let Some(j) = line.strip_prefix("## Turn ").and_then(|j| j.trim().parse::<u32>().ok()) {
            turn = j;
            break;
        }
    }
    (provenance.unwrap_or("task"), turn)
}

/// The deterministic server's answer to an atom extraction from `context` (the full context of a
/// checkpoint): one atom per marker id, its first occurrence, the statement its fact, the origin
/// turn and provenance those of the view block it is in.
pub fn extraction_answer(context: &str) -> Value {
    let atoms: Vec<Value> = first_markers(context)
        .into_iter()
        .map(|m| {
            let (provenance, origin_turn) = place(context, m.at);
            json!({"id": m.id, "category": m.category, "importance": m.importance, "statement": m.fact,
                   "provenance": provenance, "origin_turn": origin_turn})
        })
        .collect();
    json!({"atoms": atoms})
}

/// The deterministic judge: full credit for an answer equal to the reference (case and spacing
/// aside), partial when one contains the other (the answer neither empty nor `unknown`), else none.
pub fn judge_credit(reference: &str, answer: &str) -> Credit {
    let normalise = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let (reference, answer) = (normalise(reference), normalise(answer));
    if answer == reference {
        Credit::Full
    } else if !answer.is_empty() && answer != "unknown" && (reference.contains(&answer) || answer.contains(&reference))
    {
        Credit::Partial
    } else {
        Credit::None
    }
}

/// A chat message's text: its string content, or its text parts joined; nothing else of the
/// message (tool calls, `reasoning_content`) is read.
pub fn message_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// The text the deterministic server's actor answers from: the texts of the messages before the
/// question, joined by a blank line.
pub fn history_text(history: &[Value]) -> String {
    history.iter().map(message_text).collect::<Vec<_>>().join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_are_read_with_their_fields_quotes_dropped_and_bad_ones_skipped() {
        let t = "x [[STATE id=S1 category=failures importance=3 fact=pip install fails: no network]] y \
                 [[STATE id=S2 category=risks importance=7 fact=z]] [[STATE id=S3 fact=w]] \
                 [[STATE id=t1-a category=facts importance=2 fact=\"parse('1') fails\"]] \
                 [[STATE id=S4 category=facts importance=2 fact=\"\"]] [[STATE id=S1 category=facts importance=1 fact=q]]";
        let m = markers(t);
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].id.as_str(), m[0].category.as_str(), m[0].importance), ("S1", "failures", 3));
        assert_eq!(m[0].fact, "pip install fails: no network");
        assert_eq!(m[0].at, 2);
        assert_eq!(m[1].fact, "parse('1') fails");
        let first = first_markers(t);
        assert_eq!(first.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["S1", "t1-a"]);
        assert_eq!(first[0].fact, "pip install fails: no network");
    }

    #[test]
    fn places_and_message_texts() {
        let ctx = "# Task t\n\nstmt\n\n## Turn 2\n[user]\ndo\n\n$ ls\n[output]\nX";
        assert_eq!(place(ctx, ctx.len() - 1), ("tool_output", 2));
        assert_eq!(place(ctx, 10), ("task", 0));
        let msgs = [
            json!({"role": "system", "content": "a"}),
            json!({"role": "assistant", "content": null, "reasoning_content": "hidden"}),
            json!({"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}),
        ];
        assert_eq!(history_text(&msgs), "a\n\n\n\nbc");
    }

    #[test]
    fn the_judge_rule() {
        assert_eq!(judge_credit("Run crashes  on empty input", "run crashes on empty input"), Credit::Full);
        assert_eq!(judge_credit("run crashes on empty input", "crashes"), Credit::Partial);
        assert_eq!(judge_credit("run crashes on empty input", "unknown"), Credit::None);
        assert_eq!(judge_credit("x", ""), Credit::None);
    }
}
