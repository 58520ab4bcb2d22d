//! The inputs of the task-state estimators: what the study stored about each probe and each
//! checkpoint, as serde types (the export writes them, the estimators read them back).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::TaskStateError;

/// A reading view of a checkpoint, or the actor fork. The names are the keys every stored record,
/// export and `truth.json` uses; [`View::symbol`] is the short name the tables print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// The latest turn report alone.
    LatestReport,
    /// All turn reports (`U`).
    Reports,
    /// `U` plus the assistant's narration around tool calls.
    ReportsNarration,
    /// `U` plus narration plus the commands run, without their outputs.
    ReportsHeaders,
    /// `U` plus the outputs of the last 3 tool calls.
    ReportsLast3,
    /// `U` plus the outputs of the last 10 tool calls.
    ReportsLast10,
    /// The terminal scrollback (`V`).
    Scrollback,
    /// The full recorded context without reasoning (`T_minusR`).
    FullMinusReasoning,
    /// The full recorded context (`T`).
    Full,
    /// The task statement alone: the prior, for the non-inferable label.
    TaskOnly,
    /// The executing agent forked at the checkpoint and asked (`A`).
    Actor,
}

impl View {
    /// Every view, in the order of reading depth (Figure 2), the task-only prior and the actor last.
    pub const ALL: [View; 11] = [
        View::LatestReport,
        View::Reports,
        View::ReportsNarration,
        View::ReportsHeaders,
        View::ReportsLast3,
        View::ReportsLast10,
        View::Scrollback,
        View::FullMinusReasoning,
        View::Full,
        View::TaskOnly,
        View::Actor,
    ];

    /// The key of the view in stored records (`"reports"`, `"full"`, …).
    pub fn key(self) -> &'static str {
        match self {
            View::LatestReport => "latest_report",
            View::Reports => "reports",
            View::ReportsNarration => "reports_narration",
            View::ReportsHeaders => "reports_headers",
            View::ReportsLast3 => "reports_last3",
            View::ReportsLast10 => "reports_last10",
            View::Scrollback => "scrollback",
            View::FullMinusReasoning => "full_minus_reasoning",
            View::Full => "full",
            View::TaskOnly => "task_only",
            View::Actor => "actor",
        }
    }

    /// The name the tables print (`U`, `V`, `T_minusR`, `T`, `A`, or a description).
    pub fn symbol(self) -> &'static str {
        match self {
            View::LatestReport => "latest report",
            View::Reports => "U",
            View::ReportsNarration => "U + narration",
            View::ReportsHeaders => "U + command headers",
            View::ReportsLast3 => "U + last 3 outputs",
            View::ReportsLast10 => "U + last 10 outputs",
            View::Scrollback => "V",
            View::FullMinusReasoning => "T_minusR",
            View::Full => "T",
            View::TaskOnly => "task only",
            View::Actor => "A",
        }
    }

    pub(crate) fn index(self) -> usize {
        View::ALL.iter().position(|&v| v == self).expect("every view is in View::ALL")
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The category of a task-state atom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Facts,
    Failures,
    Progress,
    Environment,
    Risks,
    Decisions,
    RejectedOptions,
    Assumptions,
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Facts,
        Category::Failures,
        Category::Progress,
        Category::Environment,
        Category::Risks,
        Category::Decisions,
        Category::RejectedOptions,
        Category::Assumptions,
    ];
}

/// A judge's credit for one answer sample: full (1), partial (0.5) or none (0). Stored as the
/// number; any other number is refused when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub enum Credit {
    None,
    Partial,
    Full,
}

impl Credit {
    pub fn value(self) -> f64 {
        match self {
            Credit::None => 0.0,
            Credit::Partial => 0.5,
            Credit::Full => 1.0,
        }
    }
}

impl From<Credit> for f64 {
    fn from(credit: Credit) -> f64 {
        credit.value()
    }
}

impl TryFrom<f64> for Credit {
    type Error = String;

    fn try_from(value: f64) -> Result<Credit, String> {
        match value {
            0.0 => Ok(Credit::None),
            0.5 => Ok(Credit::Partial),
            1.0 => Ok(Credit::Full),
            v => Err(format!("a credit is 1, 0.5 or 0, not {v}")),
        }
    }
}

/// What the upstream stages recorded about a probe's validity, before any estimator runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EligibilityFlags {
    /// Probe generation gave a question and a reference answer bound to the probe's atom.
    pub well_formed: bool,
    /// A reason a later stage or an audit excluded the probe, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
}

/// One probe at one checkpoint, with the judge's credits of its answer samples per view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// The probe's id, unique in the study.
    pub probe: String,
    /// The task (issue) id: the bootstrap cluster.
    pub task: String,
    /// The checkpoint `k` (1-based: the end of turn `k`).
    pub checkpoint: u32,
    pub category: Category,
    /// The atom's importance as the extraction rated it.
    pub importance: u32,
    /// The turn in which the atom arose (0: before the first turn, from the task itself).
    pub origin_turn: u32,
    pub flags: EligibilityFlags,
    /// The judge's credit of each scored answer sample, per view. A view without a scored sample
    /// (not asked, or every answer malformed) is absent or empty.
    #[serde(default)]
    pub credits: BTreeMap<View, Vec<Credit>>,
}

/// One checkpoint of a session: whether its code state was judged fixed, the characters of each
/// view's text, and the atoms extracted per category (those at or above the minimum importance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub task: String,
    pub checkpoint: u32,
    /// The task's evaluator on the checkpoint's code state; `None` when not judged.
    #[serde(default)]
    pub fixed: Option<bool>,
    #[serde(default)]
    pub view_chars: BTreeMap<View, u64>,
    #[serde(default)]
    pub atoms: BTreeMap<Category, u32>,
}

/// Everything the estimators read.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StudyInput {
    pub checkpoints: Vec<CheckpointRecord>,
    pub probes: Vec<ProbeRecord>,
}

impl StudyInput {
    /// Refuses what no estimator can read: duplicate probes or checkpoints, checkpoint 0, an
    /// origin turn after its checkpoint, a probe without its checkpoint, more samples than asked.
    pub fn validate(&self, samples_per_view: u32) -> Result<(), TaskStateError> {
        let mut checkpoints = BTreeMap::new();
        for c in &self.checkpoints {
            if c.checkpoint == 0 {
                return Err(TaskStateError::Input(format!(
                    "checkpoint 0 of task {}: checkpoints are 1-based (the end of turn k)",
                    c.task
                )));
            }
            if checkpoints.insert((c.task.as_str(), c.checkpoint), c).is_some() {
                return Err(TaskStateError::Input(format!(
                    "checkpoint {} of task {} is listed twice",
                    c.checkpoint, c.task
                )));
            }
        }
        let mut probes = BTreeMap::new();
        for p in &self.probes {
            let at = format!("probe {} (task {}, checkpoint {})", p.probe, p.task, p.checkpoint);
            if probes.insert(p.probe.as_str(), ()).is_some() {
                return Err(TaskStateError::Input(format!("{at}: the probe id is used twice")));
            }
            if !checkpoints.contains_key(&(p.task.as_str(), p.checkpoint)) {
                return Err(TaskStateError::Input(format!("{at}: no such checkpoint in the study's checkpoints")));
            }
            if p.origin_turn > p.checkpoint {
                return Err(TaskStateError::Input(format!(
                    "{at}: origin turn {} is after the checkpoint",
                    p.origin_turn
                )));
            }
            for (view, credits) in &p.credits {
                if credits.len() > samples_per_view as usize {
                    return Err(TaskStateError::Input(format!(
                        "{at}: view {view} has {} scored samples, more than the {samples_per_view} asked",
                        credits.len()
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_are_one_half_or_zero_table_7() {
        let credits: Vec<Credit> = serde_json::from_str("[1, 0.5, 0, 1.0]").unwrap();
        assert_eq!(credits, vec![Credit::Full, Credit::Partial, Credit::None, Credit::Full]);
        assert_eq!(serde_json::to_string(&credits).unwrap(), "[1.0,0.5,0.0,1.0]");
        let err = serde_json::from_str::<Credit>("0.7").unwrap_err().to_string();
        assert!(err.contains("a credit is 1, 0.5 or 0, not 0.7"), "{err}");
    }

    #[test]
    fn views_read_and_print_by_key() {
        for view in View::ALL {
            let json = serde_json::to_string(&view).unwrap();
            assert_eq!(json, format!("\"{}\"", view.key()));
            assert_eq!(serde_json::from_str::<View>(&json).unwrap(), view);
            assert_eq!(View::ALL[view.index()], view);
        }
        assert!(serde_json::from_str::<View>("\"reportz\"").is_err());
        let record: ProbeRecord = serde_json::from_str(
            r#"{"probe": "p1", "task": "django-1", "checkpoint": 2, "category": "rejected_options",
                "importance": 3, "origin_turn": 1, "flags": {"well_formed": true},
                "credits": {"reports": [0, 0.5, 0], "full": [1, 1, 1]}}"#,
        )
        .unwrap();
        assert_eq!(record.category, Category::RejectedOptions);
        assert_eq!(record.credits[&View::Full], vec![Credit::Full; 3]);
    }

    fn input() -> StudyInput {
        StudyInput {
            checkpoints: vec![CheckpointRecord {
                task: "t".into(),
                checkpoint: 1,
                fixed: None,
                view_chars: BTreeMap::new(),
                atoms: BTreeMap::new(),
            }],
            probes: vec![ProbeRecord {
                probe: "p".into(),
                task: "t".into(),
                checkpoint: 1,
                category: Category::Facts,
                importance: 2,
                origin_turn: 1,
                flags: EligibilityFlags { well_formed: true, excluded: None },
                credits: BTreeMap::from([(View::Full, vec![Credit::Full; 3])]),
            }],
        }
    }

    #[test]
    fn bad_inputs_name_what_and_where() {
        assert_eq!(input().validate(3), Ok(()));
        let mut bad = input();
        bad.probes.push(bad.probes[0].clone());
        assert!(
            bad.validate(3)
                .unwrap_err()
                .to_string()
                .contains("probe p (task t, checkpoint 1): the probe id is used twice")
        );
        let mut bad = input();
        bad.probes[0].checkpoint = 2;
        assert!(bad.validate(3).unwrap_err().to_string().contains("checkpoint 2): no such checkpoint"));
        let mut bad = input();
        bad.probes[0].origin_turn = 2;
        assert!(bad.validate(3).unwrap_err().to_string().contains("origin turn 2 is after the checkpoint"));
        let mut bad = input();
        bad.probes[0].credits.insert(View::Reports, vec![Credit::None; 4]);
        assert!(
            bad.validate(3)
                .unwrap_err()
                .to_string()
                .contains("view reports has 4 scored samples, more than the 3 asked")
        );
        let mut bad = input();
        bad.checkpoints.push(bad.checkpoints[0].clone());
        assert!(bad.validate(3).unwrap_err().to_string().contains("checkpoint 1 of task t is listed twice"));
        let mut bad = input();
        bad.checkpoints[0].checkpoint = 0;
        bad.probes.clear();
        assert!(bad.validate(3).unwrap_err().to_string().contains("checkpoint 0 of task t"));
    }
}
