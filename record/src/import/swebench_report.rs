//! A SWE-bench harness report (`swebench` 5.x `run_evaluation`'s summary JSON): which instances
//! resolved, which did not, which had an empty patch or an error.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::error::{ImportError, invalid};

/// What a report says of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Resolved,
    Unresolved,
    /// Submitted an empty patch: fails without evaluation (docs/method.md §6).
    EmptyPatch,
    /// The evaluation did not complete (an error, an infrastructure failure): no outcome.
    Error,
}

impl ReportOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportOutcome::Resolved => "resolved",
            ReportOutcome::Unresolved => "unresolved",
            ReportOutcome::EmptyPatch => "empty_patch",
            ReportOutcome::Error => "error",
        }
    }

    /// `Y`: resolved, not resolved, or no outcome.
    pub fn resolved(self) -> Option<bool> {
        match self {
            ReportOutcome::Resolved => Some(true),
            ReportOutcome::Unresolved | ReportOutcome::EmptyPatch => Some(false),
            ReportOutcome::Error => None,
        }
    }
}

/// The id lists of a report, read into one outcome per instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwebenchReport {
    outcomes: BTreeMap<String, ReportOutcome>,
}

/// The lists read, in the order a later list overrides an earlier one (an id in two lists: the
/// definite outcome wins over an error).
const LISTS: [(&str, ReportOutcome); 6] = [
    ("error_ids", ReportOutcome::Error),
    ("infra_failure_ids", ReportOutcome::Error),
    ("ambiguous_failure_ids", ReportOutcome::Error),
    ("empty_patch_ids", ReportOutcome::EmptyPatch),
    ("unresolved_ids", ReportOutcome::Unresolved),
    ("resolved_ids", ReportOutcome::Resolved),
];

impl SwebenchReport {
    pub fn from_json(bytes: &[u8]) -> Result<SwebenchReport, ImportError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| ImportError::Json(e.to_string()))?;
        let top = value.as_object().ok_or_else(|| invalid("a SWE-bench report is a JSON object"))?;
        if !top.contains_key("resolved_ids") {
            return Err(invalid("not a SWE-bench report: `resolved_ids` is missing"));
        }
        let mut outcomes = BTreeMap::new();
        for (list, outcome) in LISTS {
            let Some(ids) = top.get(list) else { continue };
            let ids = ids.as_array().ok_or_else(|| invalid(format!("`{list}` is not a list")))?;
            for id in ids {
                let id = id.as_str().ok_or_else(|| invalid(format!("`{list}` holds {id}, not an instance id")))?;
                outcomes.insert(id.to_string(), outcome);
            }
        }
        Ok(SwebenchReport { outcomes })
    }

    /// The instance's outcome; `None` when the report does not judge it (not submitted, or not
    /// completed).
    pub fn outcome_of(&self, instance_id: &str) -> Option<ReportOutcome> {
        self.outcomes.get(instance_id).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_lists() {
        let report = SwebenchReport::from_json(
            br#"{"resolved_ids": ["a"], "unresolved_ids": ["b"], "empty_patch_ids": ["c"], "error_ids": ["d", "a"]}"#,
        )
        .unwrap();
        assert_eq!(report.outcome_of("a"), Some(ReportOutcome::Resolved));
        assert_eq!(report.outcome_of("b"), Some(ReportOutcome::Unresolved));
        assert_eq!(report.outcome_of("c").and_then(ReportOutcome::resolved), Some(false));
        assert_eq!(report.outcome_of("d").and_then(ReportOutcome::resolved), None);
        assert_eq!(report.outcome_of("e"), None);
        assert!(SwebenchReport::from_json(b"{}").unwrap_err().to_string().contains("resolved_ids"));
        assert!(SwebenchReport::from_json(br#"{"resolved_ids": 3}"#).is_err());
    }
}
