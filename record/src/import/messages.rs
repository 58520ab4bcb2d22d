//! What both the import and the observations read off mini-swe-agent's recorded messages: a
//! message's text, and the marker by which a command submits.

use serde_json::Value;

/// The first output line by which a command submits.
pub const SUBMIT_MARKER: &str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// A message's text: its content string, or its text parts joined.
pub(crate) fn text_of(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}
