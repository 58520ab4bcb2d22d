//! The task-state study as recorded data (the CTXGAP study, docs/task-state.md): its settings, the
//! keys of its model calls, what a worker is asked to send ([`CallInput`]) and what comes back
//! ([`CallOutput`]), and a recorded session with its checkpoints ([`RecordedSession`]).
//!
//! The study runs as durable jobs: one `session` job per task, then one `model_call` job per call,
//! each keyed by its [`CallKey`], so a call whose answer is stored is never repeated. The
//! coordinator plans the calls that follow a finished job with the pure functions of [`plan`];
//! the export assembles the estimators' input with [`assemble()`]; [`truth`] computes what a
//! study against the deterministic model server must measure, from the `[[STATE …]]` markers
//! ([`markers`]) of its sessions.

use std::fmt;

pub mod assemble;
pub mod markers;
pub mod plan;
pub mod truth;

#[cfg(test)]
mod tests;

pub use assemble::{AnswerRow, Assembled, ProbeRow, ScoreRow, assemble};
pub use plan::{CheckpointAnswers, PlanError, after_call, after_session};
pub use truth::marker_truth;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use vcurve_method::task_state::View;
use vcurve_method::task_state::usage::{Purpose, Stage};

use crate::llm::answers::{self, MalformedAnswer};
use crate::llm::{ModelCall, TemplateName};
use crate::session::Session;

/// An OpenAI-compatible endpoint and model a stage calls. The worker reads the key from
/// `api_key_env` in its own environment, only for an endpoint its operator offers with that
/// variable (docs/task-state.md, "Endpoints").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// The base URL up to `/v1`.
    pub base_url: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Requests in flight at once on this endpoint, per worker.
    pub concurrency: u32,
    /// The longest one request may take.
    pub request_timeout_s: u32,
    /// Send `chat_template_kwargs` to disable thinking (vLLM, SGLang); false for servers that
    /// refuse unknown fields (the OpenAI API).
    pub thinking_kwargs: bool,
}

/// The sampling parameters of one stage; `None` is not sent.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Ask the server not to think (Table 7: thinking disabled).
    pub disable_thinking: bool,
}

/// One model stage: which endpoint and how it samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageModel {
    pub endpoint: ModelRef,
    pub sampling: StageSampling,
}

/// The study's settings, fixed at launch (the spec's `task_state:` section, validated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskStateSettings {
    /// The settings' name and version (`ctxgap-1`).
    pub version: String,
    /// Instruction `k` opens turn `k` (Table 6).
    pub instructions: Vec<String>,
    /// The text views read (every one of `View::ALL` but the actor, by default).
    pub views: Vec<View>,
    /// Whether the actor fork is asked.
    pub actor: bool,
    /// Answer samples per view and per actor probe (Table 7: 3).
    pub samples: u32,
    /// Atoms below this importance are dropped before probes are generated (Table 7: 2).
    pub min_importance: u32,
    pub atoms: StageModel,
    pub probes: StageModel,
    pub reader: StageModel,
    /// The executing agent's own model, answering from its history.
    pub actor_model: StageModel,
    pub judge: StageModel,
}

/// The key of one model call of a task-state study (a `model_call` job's subject).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum CallKey {
    /// Atom extraction from `T` at checkpoint `k` of `task`'s session.
    Atoms { task: String, k: u32 },
    /// Probes for the kept atoms of checkpoint `k`.
    Probes { task: String, k: u32 },
    /// A reader answering every probe of checkpoint `k` from `view`, answer sample `sample`
    /// (0-based).
    Reader { task: String, k: u32, view: View, sample: u32 },
    /// The actor fork answering probe `probe` of checkpoint `k`, sample `sample`.
    Actor { task: String, k: u32, probe: String, sample: u32 },
    /// The judge of the answers one reader or actor call gave (`of`).
    Judge { of: Box<CallKey> },
    /// Judge `judge` of a curve study labelling the first mistake of trajectory `trajectory`, or
    /// of the decoy of that id when `decoy` (`judges:`, [`crate::judge_labels`]).
    Label { trajectory: String, judge: String, decoy: bool },
}

impl CallKey {
    pub fn stage(&self) -> Stage {
        match self {
            CallKey::Atoms { .. } => Stage::Atoms,
            CallKey::Probes { .. } => Stage::Probes,
            CallKey::Reader { .. } => Stage::Reader,
            CallKey::Actor { .. } => Stage::Actor,
            CallKey::Judge { .. } => Stage::Judge,
            CallKey::Label { .. } => Stage::Label,
        }
    }

    /// The task and checkpoint the call belongs to; a label call belongs to no checkpoint:
    /// its trajectory and `0` (checkpoints count from 1).
    pub fn checkpoint(&self) -> (&str, u32) {
        match self {
            CallKey::Atoms { task, k }
            | CallKey::Probes { task, k }
            | CallKey::Reader { task, k, .. }
            | CallKey::Actor { task, k, .. } => (task, *k),
            CallKey::Judge { of } => of.checkpoint(),
            CallKey::Label { trajectory, .. } => (trajectory, 0),
        }
    }

    /// The key as one string, the job's subject: `TASK/k2/atoms`, `TASK/k2/probes`,
    /// `TASK/k2/reader/reports/s0`, `TASK/k2/actor/PROBE/s1`, `judge:` + the judged call's key,
    /// `label:TRAJECTORY/JUDGE` (a judge's name has no `/`), `label-decoy:DECOY/JUDGE` (a prefix
    /// of its own: a trajectory's id may be `decoy/…`).
    /// [`CallKey::parse`] reads it back.
    pub fn as_subject(&self) -> String {
        match self {
            CallKey::Atoms { task, k } => format!("{task}/k{k}/atoms"),
            CallKey::Probes { task, k } => format!("{task}/k{k}/probes"),
            CallKey::Reader { task, k, view, sample } => format!("{task}/k{k}/reader/{}/s{sample}", view.key()),
            CallKey::Actor { task, k, probe, sample } => format!("{task}/k{k}/actor/{probe}/s{sample}"),
            CallKey::Judge { of } => format!("judge:{}", of.as_subject()),
            CallKey::Label { trajectory, judge, decoy: false } => format!("label:{trajectory}/{judge}"),
            CallKey::Label { trajectory, judge, decoy: true } => format!("label-decoy:{trajectory}/{judge}"),
        }
    }

    /// Reads [`CallKey::as_subject`]'s form back. Task ids and probe ids never contain `/`.
    pub fn parse(subject: &str) -> Result<CallKey, String> {
        let label = match (subject.strip_prefix("label:"), subject.strip_prefix("label-decoy:")) {
            (Some(rest), _) => Some((rest, false)),
            (None, Some(rest)) => Some((rest, true)),
            (None, None) => None,
        };
        if let Some((rest, decoy)) = label {
            return match rest.rsplit_once('/') {
                Some((trajectory, judge)) if !trajectory.is_empty() && !judge.is_empty() => {
                    Ok(CallKey::Label { trajectory: trajectory.to_string(), judge: judge.to_string(), decoy })
                }
                _ => Err(format!("call key {subject:?} is not label:TRAJECTORY/JUDGE or label-decoy:DECOY/JUDGE")),
            };
        }
        if let Some(of) = subject.strip_prefix("judge:") {
            let of = CallKey::parse(of)?;
            return match of {
                CallKey::Reader { .. } | CallKey::Actor { .. } => Ok(CallKey::Judge { of: Box::new(of) }),
                _ => Err(format!("call key {subject:?}: a judge judges a reader or actor call")),
            };
        }
        let bad = || format!("call key {subject:?} is not TASK/kN/atoms|probes|reader/VIEW/sN|actor/PROBE/sN");
        let parts: Vec<&str> = subject.split('/').collect();
        if parts.len() < 3 || parts[0].is_empty() {
            return Err(bad());
        }
        let task = parts[0].to_string();
        let k: u32 = parts[1].strip_prefix('k').and_then(|k| k.parse().ok()).filter(|k| *k > 0).ok_or_else(bad)?;
        let sample = |s: &str| s.strip_prefix('s').and_then(|s| s.parse::<u32>().ok()).ok_or_else(bad);
        match &parts[2..] {
            ["atoms"] => Ok(CallKey::Atoms { task, k }),
            ["probes"] => Ok(CallKey::Probes { task, k }),
            ["reader", view, s] => {
                let view: View = serde_json::from_value(Value::String((*view).to_string())).map_err(|_| bad())?;
                if view == View::Actor {
                    return Err(bad());
                }
                Ok(CallKey::Reader { task, k, view, sample: sample(s)? })
            }
            ["actor", probe, s] if !probe.is_empty() => {
                Ok(CallKey::Actor { task, k, probe: (*probe).to_string(), sample: sample(s)? })
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for CallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_subject())
    }
}

/// How a worker checks an answer before it accepts it (a malformed answer is retried under the
/// client's budget, then recorded as malformed, never scored): the stage's parser with what the
/// call asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "parser", rename_all = "snake_case")]
pub enum AnswerCheck {
    Atoms {
        checkpoint: u32,
    },
    Probes {
        atoms: Vec<String>,
    },
    Reader {
        probes: Vec<String>,
    },
    Actor,
    Judge {
        items: Vec<String>,
    },
    /// A judge label: a step index below `steps`, or -1.
    FirstMistake {
        steps: u32,
    },
}

impl AnswerCheck {
    pub fn check(&self, text: &str) -> Result<(), MalformedAnswer> {
        fn ids(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        match self {
            AnswerCheck::Atoms { checkpoint } => answers::parse_atoms(text, *checkpoint).map(drop),
            AnswerCheck::Probes { atoms } => answers::parse_probes(text, &ids(atoms)).map(drop),
            AnswerCheck::Reader { probes } => answers::parse_reader(text, &ids(probes)).map(drop),
            AnswerCheck::Actor => answers::parse_actor(text).map(drop),
            AnswerCheck::Judge { items } => answers::parse_judge(text, &ids(items)).map(drop),
            AnswerCheck::FirstMistake { steps } => answers::parse_first_mistake(text, *steps).map(drop),
        }
    }
}

/// What a worker sends for one `model_call` job: everything the request needs, rendered by the
/// coordinator (stored by digest; the job names it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallInput {
    pub key: CallKey,
    pub purpose: Purpose,
    pub template: TemplateName,
    /// The chat messages as sent (`{"role", "content"}` objects; the actor's are the agent's own
    /// history with the template's message appended).
    pub messages: Vec<Value>,
    pub model: StageModel,
    pub check: AnswerCheck,
}

/// What a worker reports for one `model_call` job (stored by digest): the accepted answer's text,
/// if any, and the call's log, whatever its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallOutput {
    /// `None` when the call ended malformed or failed (`log.status` says which).
    pub answer: Option<String>,
    pub log: ModelCall,
}

/// The code state at one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointState {
    pub k: u32,
    pub patch_sha256: String,
    /// The task's evaluator on the checkpoint's patch; `None`: not judged.
    pub fixed: Option<bool>,
}

/// A finished `session` job, as a worker uploads it: the session, each checkpoint's code state,
/// and the agent's own message history (as its adapter sends it to the model) with where each
/// checkpoint's history ends, for the actor fork.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedSession {
    pub session: Session,
    pub checkpoints: Vec<CheckpointState>,
    pub messages: Vec<Value>,
    /// `history_ends[k - 1]`: the agent's history at checkpoint `k` is `messages[..end]`.
    pub history_ends: Vec<usize>,
}

/// The estimators' settings of a study: `ctxgap-1` with the study's answer samples per view and
/// minimum importance. The export and the known truth of a study both take them from here.
pub fn estimator_settings(settings: &TaskStateSettings) -> vcurve_method::task_state::EstimatorSettings {
    vcurve_method::task_state::EstimatorSettings {
        samples_per_view: settings.samples,
        min_importance: settings.min_importance,
        ..vcurve_method::task_state::EstimatorSettings::ctxgap_1()
    }
}

/// The capability a worker offering the model endpoint `base_url` registers (and a model call on
/// it needs): `model:` + the base URL without a trailing `/`.
pub fn endpoint_capability(base_url: &str) -> String {
    format!("model:{}", base_url.trim_end_matches('/'))
}

/// A worker's `--model-endpoint` entry, `BASE_URL` or `BASE_URL=KEY_ENV`: the base URL (without a
/// trailing `/`) and the variable its key is read from. Refuses what is not an http(s) base URL
/// or not a variable's name.
pub fn parse_offered_endpoint(entry: &str) -> Result<(String, Option<String>), String> {
    let (url, var) = match entry.split_once('=') {
        Some((url, var)) => (url, Some(var)),
        None => (entry, None),
    };
    let url = url.trim_end_matches('/');
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("model endpoint {entry:?}: not an http:// or https:// base URL"))?;
    if rest.split('/').next().is_none_or(str::is_empty)
        || url.contains(['?', '#', ',', '@'])
        || url.chars().any(char::is_whitespace)
    {
        return Err(format!(
            "model endpoint {entry:?}: a base URL up to /v1 with a host, without credentials, query, commas or blanks"
        ));
    }
    if let Some(var) = var
        && (var.is_empty()
            || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || var.starts_with(|c: char| c.is_ascii_digit()))
    {
        return Err(format!("model endpoint {entry:?}: {var:?} is not an environment variable's name"));
    }
    Ok((url.to_string(), var.map(str::to_string)))
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn call_keys_read_back_as_written() {
        let reader = CallKey::Reader { task: "calc-1".into(), k: 2, view: View::Reports, sample: 1 };
        let keys = [
            CallKey::Atoms { task: "calc-1".into(), k: 1 },
            CallKey::Probes { task: "calc-1".into(), k: 4 },
            reader.clone(),
            CallKey::Actor { task: "calc-1".into(), k: 3, probe: "S1".into(), sample: 0 },
            CallKey::Judge { of: Box::new(reader) },
            CallKey::Label { trajectory: "astropy/run-1".into(), judge: "gpt-5.5".into(), decoy: false },
            CallKey::Label { trajectory: "decoy/run-1".into(), judge: "gpt-5.5".into(), decoy: true },
        ];
        for key in keys {
            assert_eq!(CallKey::parse(&key.as_subject()), Ok(key.clone()), "{key}");
        }
        assert_eq!(
            CallKey::Reader { task: "t".into(), k: 2, view: View::Full, sample: 0 }.as_subject(),
            "t/k2/reader/full/s0"
        );
        for bad in [
            "t/k0/atoms",
            "t/k1/reader/actor/s0",
            "t/k1/reader/reportz/s0",
            "judge:t/k1/atoms",
            "/k1/atoms",
            "t/1/atoms",
            "label:t",
            "label:/j",
            "label:t/",
            "label-decoy:t",
            "label-decoy:/j",
        ] {
            assert!(CallKey::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn offered_endpoints_are_base_urls_with_an_optional_key_variable() {
        assert_eq!(parse_offered_endpoint("http://vllm:8000/v1/"), Ok(("http://vllm:8000/v1".into(), None)));
        assert_eq!(
            parse_offered_endpoint("https://api.example/v1=OPENAI_API_KEY"),
            Ok(("https://api.example/v1".into(), Some("OPENAI_API_KEY".into())))
        );
        assert_eq!(endpoint_capability("http://vllm:8000/v1/"), "model:http://vllm:8000/v1");
        for bad in ["vllm:8000", "http://", "http://u:p@h/v1", "http://h/v1=1KEY", "http://h/v1=A-B", "http://h/v1?x=1"]
        {
            assert!(parse_offered_endpoint(bad).is_err(), "{bad}");
        }
    }
}

/// What a task-state study stored, as its export reads it: its settings, each recorded session by
/// task, and each ended model call with its input (whose `messages` the store may leave empty:
/// the export needs the key and the check, and the log carries what was sent) and output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStateData {
    pub settings: TaskStateSettings,
    pub sessions: std::collections::BTreeMap<String, RecordedSession>,
    pub calls: std::collections::BTreeMap<CallKey, (CallInput, CallOutput)>,
}
