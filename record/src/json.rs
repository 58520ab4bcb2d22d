//! Small helpers for errors about JSON a client or an agent sent.

use serde_json::Value;

/// What kind of JSON value `value` is, as an error message names it ("an array", "null", …).
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
