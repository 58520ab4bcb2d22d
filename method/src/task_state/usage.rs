//! The call log of a task-state study and its usage tables (Tables 12 and 59–63).
//!
//! Every request to a model endpoint is one [`CallRecord`]; a call's retries share its `call` id
//! and count up `attempt`. "Effective" usage keeps each call's final successful request; "actual"
//! usage adds every request that reported tokens, retries included. Cache reads are a token class
//! of their own, never added to input + output.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::error::TaskStateError;

/// The stage a call served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The coding agent itself, running its session (collection traffic, Table 60).
    Session,
    /// Atom extraction from the full context.
    Atoms,
    /// Probe and reference generation.
    Probes,
    /// A reader answering probes from a view (the study's "observer").
    Reader,
    /// The actor fork answering a probe.
    Actor,
    /// The judge crediting answers.
    Judge,
    /// A judge model labelling the first mistake of a curve study's trajectory (`judges:`).
    Label,
}

impl Stage {
    /// The stage's name in stored records.
    pub fn key(self) -> &'static str {
        match self {
            Stage::Session => "session",
            Stage::Atoms => "atoms",
            Stage::Probes => "probes",
            Stage::Reader => "reader",
            Stage::Actor => "actor",
            Stage::Judge => "judge",
            Stage::Label => "label",
        }
    }

    /// Collection (the agent's own traffic) or measurement (every other stage), as Table 63 splits.
    pub fn is_collection(self) -> bool {
        self == Stage::Session
    }
}

/// Why a call was made (Table 62).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    #[default]
    Core,
    Sensitivity,
    Audit,
    Supervision,
    Other,
}

impl Purpose {
    /// The purpose's name in stored records.
    pub fn key(self) -> &'static str {
        match self {
            Purpose::Core => "core",
            Purpose::Sensitivity => "sensitivity",
            Purpose::Audit => "audit",
            Purpose::Supervision => "supervision",
            Purpose::Other => "other",
        }
    }
}

/// The sampling parameters a request sent; `None` when the request omitted one (the study's
/// "unknown": not zero, not a verified server default).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Sampling {
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<u32>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// Tokens a response reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    /// Input tokens read from the server's cache.
    #[serde(default)]
    pub cached: u64,
}

impl Tokens {
    fn add(&mut self, other: Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
    }

    /// Input + output (cache reads apart).
    pub fn input_output(self) -> u64 {
        self.input + self.output
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CallOutcome {
    Success,
    /// An HTTP error, a timeout or a malformed answer: recorded, never scored.
    Failed {
        reason: String,
    },
}

/// One request to a model endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The logical call (its job key); its retries share it.
    pub call: String,
    /// 1-based; a retry counts up.
    pub attempt: u32,
    pub stage: Stage,
    #[serde(default)]
    pub purpose: Purpose,
    pub model: String,
    pub endpoint: String,
    /// The prompt template's id and the hash of its static text.
    pub template: String,
    pub template_hash: String,
    #[serde(default)]
    pub sampling: Sampling,
    /// `None` when the response reported no usage.
    #[serde(default)]
    pub tokens: Option<Tokens>,
    pub latency_ms: u64,
    pub outcome: CallOutcome,
}

/// How to group usage rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Stage,
    Purpose,
    Model,
}

/// One group's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The stage, purpose or model.
    pub group: String,
    /// Logical calls.
    pub calls: u64,
    /// Requests, retries included.
    pub requests: u64,
    /// Calls without a successful request.
    pub failed_calls: u64,
    /// Requests whose response reported no usage (Table 59's coverage).
    pub requests_without_usage: u64,
    /// The final successful request of each call.
    pub effective: Tokens,
    /// Every request that reported usage.
    pub actual: Tokens,
    pub latency_ms_total: u64,
    pub latency_ms_mean: Option<f64>,
    pub latency_ms_max: u64,
    /// Calls by the temperature their final request sent (`"0.7"`) or `"unknown"` (Table 12).
    pub temperatures: BTreeMap<String, u64>,
}

/// Table 63: effective tokens of collection (the agent's sessions) and measurement (the rest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub collection: Tokens,
    pub measurement: Tokens,
    pub total: Tokens,
}

/// Refuses a log no table can read: attempt 0, a request logged twice, one call across stages,
/// purposes or models.
pub fn validate_calls(calls: &[CallRecord]) -> Result<(), TaskStateError> {
    let mut seen = BTreeSet::new();
    let mut first: BTreeMap<&str, &CallRecord> = BTreeMap::new();
    for c in calls {
        let at = format!("call {} attempt {}", c.call, c.attempt);
        if c.attempt == 0 {
            return Err(TaskStateError::CallLog(format!("{at}: attempts are 1-based")));
        }
        if !seen.insert((c.call.as_str(), c.attempt)) {
            return Err(TaskStateError::CallLog(format!("{at}: logged twice")));
        }
        let f = *first.entry(c.call.as_str()).or_insert(c);
        if (f.stage, f.purpose, f.model.as_str()) != (c.stage, c.purpose, c.model.as_str()) {
            return Err(TaskStateError::CallLog(format!(
                "{at}: stage, purpose or model differs from the call's attempt {} ({:?}/{:?}/{} against {:?}/{:?}/{})",
                f.attempt, f.stage, f.purpose, f.model, c.stage, c.purpose, c.model
            )));
        }
    }
    Ok(())
}

fn group_key(c: &CallRecord, by: GroupBy) -> String {
    match by {
        GroupBy::Stage => c.stage.key().into(),
        GroupBy::Purpose => c.purpose.key().into(),
        GroupBy::Model => c.model.clone(),
    }
}

/// Usage grouped by stage, purpose or model, groups in name order.
pub fn usage(calls: &[CallRecord], by: GroupBy) -> Result<Vec<UsageRow>, TaskStateError> {
    validate_calls(calls)?;
    let mut groups: BTreeMap<String, Vec<&CallRecord>> = BTreeMap::new();
    for c in calls {
        groups.entry(group_key(c, by)).or_default().push(c);
    }
    Ok(groups.into_iter().map(|(group, requests)| row(group, &requests)).collect())
}

fn row(group: String, requests: &[&CallRecord]) -> UsageRow {
    let mut by_call: BTreeMap<&str, Vec<&CallRecord>> = BTreeMap::new();
    let mut actual = Tokens::default();
    let mut without = 0;
    for r in requests {
        by_call.entry(r.call.as_str()).or_default().push(r);
        match r.tokens {
            Some(t) => actual.add(t),
            None => without += 1,
        }
    }
    let mut effective = Tokens::default();
    let mut failed_calls = 0;
    let mut temperatures = BTreeMap::new();
    for attempts in by_call.values() {
        let last = attempts.iter().max_by_key(|r| r.attempt).expect("a call has a request");
        let success = attempts.iter().filter(|r| r.outcome == CallOutcome::Success).max_by_key(|r| r.attempt);
        match success {
            Some(s) => effective.add(s.tokens.unwrap_or_default()),
            None => failed_calls += 1,
        }
        let sent = success.unwrap_or(last).sampling.temperature;
        *temperatures.entry(sent.map_or("unknown".to_string(), |t| format!("{t:?}"))).or_insert(0) += 1;
    }
    let latency_ms_total: u64 = requests.iter().map(|r| r.latency_ms).sum();
    UsageRow {
        group,
        calls: by_call.len() as u64,
        requests: requests.len() as u64,
        failed_calls,
        requests_without_usage: without,
        effective,
        actual,
        latency_ms_total,
        latency_ms_mean: (!requests.is_empty()).then(|| latency_ms_total as f64 / requests.len() as f64),
        latency_ms_max: requests.iter().map(|r| r.latency_ms).max().unwrap_or(0),
        temperatures,
    }
}

/// Table 63.
pub fn totals(calls: &[CallRecord]) -> Result<UsageTotals, TaskStateError> {
    let rows = usage(calls, GroupBy::Stage)?;
    let (mut collection, mut measurement) = (Tokens::default(), Tokens::default());
    for r in &rows {
        if r.group == Stage::Session.key() { collection.add(r.effective) } else { measurement.add(r.effective) }
    }
    let mut total = collection;
    total.add(measurement);
    Ok(UsageTotals { collection, measurement, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(call: &str, stage: Stage, tokens: Tokens) -> CallRecord {
        CallRecord {
            call: call.into(),
            attempt: 1,
            stage,
            purpose: Purpose::Core,
            model: "hy4-preview".into(),
            endpoint: "http://127.0.0.1:8000/v1".into(),
            template: format!("{stage:?}"),
            template_hash: "sha256:0".into(),
            sampling: Sampling::default(),
            tokens: Some(tokens),
            latency_ms: 100,
            outcome: CallOutcome::Success,
        }
    }

    fn tokens(input: u64, output: u64, cached: u64) -> Tokens {
        Tokens { input, output, cached }
    }

    #[test]
    fn table_12_calls_and_explicit_temperatures_by_stage() {
        // Atom extraction 226 (226 unknown); probes 520 (211 at 0.0, 309 unknown); readers 8,258
        // (697 at 0.7, 7,561 unknown); judge 9,929 (1,064 at 0.0, 8,865 unknown).
        let mut calls = Vec::new();
        for (stage, n, explicit, t) in [
            (Stage::Atoms, 226, 0, 0.0),
            (Stage::Probes, 520, 211, 0.0),
            (Stage::Reader, 8_258, 697, 0.7),
            (Stage::Judge, 9_929, 1_064, 0.0),
        ] {
            for i in 0..n {
                let mut c = call(&format!("{stage:?}-{i}"), stage, Tokens::default());
                c.sampling.temperature = (i < explicit).then_some(t);
                calls.push(c);
            }
        }
        let rows = usage(&calls, GroupBy::Stage).unwrap();
        let by: BTreeMap<&str, &UsageRow> = rows.iter().map(|r| (r.group.as_str(), r)).collect();
        assert_eq!(by["atoms"].calls, 226);
        assert_eq!(by["atoms"].temperatures, BTreeMap::from([("unknown".into(), 226)]));
        assert_eq!(by["probes"].temperatures, BTreeMap::from([("0.0".into(), 211), ("unknown".into(), 309)]));
        assert_eq!(by["reader"].temperatures, BTreeMap::from([("0.7".into(), 697), ("unknown".into(), 7_561)]));
        assert_eq!(by["judge"].temperatures, BTreeMap::from([("0.0".into(), 1_064), ("unknown".into(), 8_865)]));
        assert_eq!(rows.iter().map(|r| r.calls).sum::<u64>(), 226 + 520 + 8_258 + 9_929);
    }

    #[test]
    fn tables_60_to_63_effective_tokens_add_up() {
        let mut calls = Vec::new();
        // Table 60: collection traffic by coding agent.
        for (agent, t) in [
            ("claude-code", tokens(1_554_998, 846_179, 40_115_328)),
            ("dsh", tokens(1_520_598, 649_127, 40_074_112)),
            ("pi", tokens(3_482_598, 1_867_266, 34_649_536)),
        ] {
            let mut c = call(agent, Stage::Session, t);
            c.model = agent.into();
            calls.push(c);
        }
        // Table 62: measurement by purpose (input, output); the measurement cache reads of Table 63.
        for (purpose, t) in [
            (Purpose::Core, tokens(53_491_784, 3_674_329, 41_607_360)),
            (Purpose::Sensitivity, tokens(16_827_200, 4_855_505, 0)),
            (Purpose::Other, tokens(2_813_018, 150_674, 0)),
            (Purpose::Supervision, tokens(310_177, 13_422, 0)),
            (Purpose::Audit, tokens(218_783, 1_021_353, 0)),
        ] {
            let mut c = call(&format!("{purpose:?}"), Stage::Judge, t);
            c.purpose = purpose;
            calls.push(c);
        }
        let by_model = usage(&calls, GroupBy::Model).unwrap();
        let pi = by_model.iter().find(|r| r.group == "pi").unwrap();
        assert_eq!(pi.effective, tokens(3_482_598, 1_867_266, 34_649_536));
        let totals = totals(&calls).unwrap();
        // Table 60's total row and Table 63.
        assert_eq!(totals.collection, tokens(6_558_194, 3_362_572, 114_838_976));
        assert_eq!(totals.measurement, tokens(73_660_962, 9_715_283, 41_607_360));
        assert_eq!(totals.total, tokens(80_219_156, 13_077_855, 156_446_336));
        assert_eq!(
            (totals.collection.input_output(), totals.measurement.input_output(), totals.total.input_output()),
            (9_920_766, 83_376_245, 93_297_011)
        );
        let by_purpose = usage(&calls, GroupBy::Purpose).unwrap();
        assert_eq!(by_purpose.iter().find(|r| r.group == "audit").unwrap().effective.output, 1_021_353);
    }

    #[test]
    fn table_61_stages_and_table_59_coverage_effective_against_actual() {
        // A judge call that failed once (a 429 reporting usage) and then succeeded; a reader call
        // that never succeeded; a request without usage.
        let mut first = call("judge-1", Stage::Judge, tokens(100, 0, 0));
        first.outcome = CallOutcome::Failed { reason: "HTTP 429".into() };
        first.sampling.temperature = Some(0.0);
        let mut second = call("judge-1", Stage::Judge, tokens(100, 10, 40));
        second.attempt = 2;
        second.latency_ms = 300;
        second.sampling.temperature = Some(0.0);
        let mut lost = call("reader-1", Stage::Reader, tokens(0, 0, 0));
        lost.tokens = None;
        lost.outcome = CallOutcome::Failed { reason: "malformed answer: no JSON object".into() };
        let rows = usage(&[first, second, lost], GroupBy::Stage).unwrap();
        let judge = &rows[rows.iter().position(|r| r.group == "judge").unwrap()];
        assert_eq!((judge.calls, judge.requests, judge.failed_calls), (1, 2, 0));
        assert_eq!(judge.effective, tokens(100, 10, 40));
        assert_eq!(judge.actual, tokens(200, 10, 40));
        assert_eq!((judge.latency_ms_total, judge.latency_ms_mean, judge.latency_ms_max), (400, Some(200.0), 300));
        assert_eq!(judge.temperatures, BTreeMap::from([("0.0".into(), 1)]));
        let reader = &rows[rows.iter().position(|r| r.group == "reader").unwrap()];
        assert_eq!((reader.failed_calls, reader.requests_without_usage), (1, 1));
        assert_eq!(reader.effective, Tokens::default());
        // Table 61: effective usage by stage, each stage's calls summed (several calls per stage).
        let table_61 = [
            (Stage::Judge, tokens(22_134_005, 925_035, 3_107_264)),
            (Stage::Probes, tokens(21_678_906, 814_186, 941_440)),
            (Stage::Reader, tokens(17_420_919, 5_541_630, 32_200_704)),
            (Stage::Atoms, tokens(5_524_555, 588_513, 536_576)),
        ];
        let mut calls = Vec::new();
        for (stage, t) in table_61 {
            calls.push(call(&format!("{stage:?}-a"), stage, tokens(t.input / 2, t.output / 2, t.cached / 2)));
            calls.push(call(
                &format!("{stage:?}-b"),
                stage,
                tokens(t.input - t.input / 2, t.output - t.output / 2, t.cached - t.cached / 2),
            ));
        }
        let rows = usage(&calls, GroupBy::Stage).unwrap();
        for (stage, t) in table_61 {
            let r = rows.iter().find(|r| r.group == stage.key()).unwrap();
            assert_eq!((r.calls, r.effective, r.actual), (2, t, t));
        }
    }

    #[test]
    fn the_call_log_round_trips_and_refuses_what_it_cannot_read() {
        let c = call("atoms-1", Stage::Atoms, tokens(5, 6, 0));
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains(r#""stage":"atoms""#) && json.contains(r#""outcome":{"status":"success"}"#), "{json}");
        assert_eq!(serde_json::from_str::<CallRecord>(&json).unwrap(), c);

        let mut zero = c.clone();
        zero.attempt = 0;
        assert!(
            usage(&[zero], GroupBy::Stage)
                .unwrap_err()
                .to_string()
                .contains("call atoms-1 attempt 0: attempts are 1-based")
        );
        let err = usage(&[c.clone(), c.clone()], GroupBy::Stage).unwrap_err().to_string();
        assert!(err.contains("call atoms-1 attempt 1: logged twice"), "{err}");
        let mut moved = c.clone();
        moved.attempt = 2;
        moved.stage = Stage::Judge;
        let err = totals(&[c, moved]).unwrap_err().to_string();
        assert!(err.contains("call atoms-1 attempt 2: stage, purpose or model differs"), "{err}");
        assert_eq!(totals(&[]).unwrap().total, Tokens::default());
        for stage in [Stage::Session, Stage::Atoms, Stage::Probes, Stage::Reader, Stage::Actor, Stage::Judge] {
            assert_eq!(serde_json::to_string(&stage).unwrap(), format!("\"{}\"", stage.key()));
        }
        for purpose in [Purpose::Core, Purpose::Sensitivity, Purpose::Audit, Purpose::Supervision, Purpose::Other] {
            assert_eq!(serde_json::to_string(&purpose).unwrap(), format!("\"{}\"", purpose.key()));
        }
    }
}
