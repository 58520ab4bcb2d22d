//! `calls.csv`: a row per request of every model call a study made — its call (the job key),
//! attempt, stage, purpose, model, endpoint, prompt template and the template's hash, sampling,
//! tokens ("not reported" when the endpoint gave no usage), latency, outcome (`success` or
//! `failed`) and a failure's reason (a malformed answer's starts `malformed:`). A task-state
//! study's export has it, and so does a curve study's whose judges labelled its runs.

use vcurve_method::task_state::CallRecord;
use vcurve_method::task_state::usage::CallOutcome;

/// Why `calls.csv` could not be written.
#[derive(Debug, thiserror::Error)]
#[error("calls.csv: {0}")]
pub struct CallsCsvError(String);

/// `calls.csv` of `requests` ([`vcurve_record::llm::ModelCall::requests`]), a row each in their order.
pub fn calls_csv(requests: &[CallRecord]) -> Result<Vec<u8>, CallsCsvError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = [
        "call",
        "attempt",
        "stage",
        "purpose",
        "model",
        "endpoint",
        "template",
        "template_hash",
        "temperature",
        "top_p",
        "max_tokens",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "latency_ms",
        "outcome",
        "reason",
    ];
    w.write_record(header).map_err(|e| CallsCsvError(e.to_string()))?;
    let opt = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
    for r in requests {
        let (outcome, reason) = match &r.outcome {
            CallOutcome::Success => ("success", ""),
            CallOutcome::Failed { reason } => ("failed", reason.as_str()),
        };
        w.write_record([
            r.call.clone(),
            r.attempt.to_string(),
            r.stage.key().to_string(),
            r.purpose.key().to_string(),
            r.model.clone(),
            r.endpoint.clone(),
            r.template.clone(),
            r.template_hash.clone(),
            opt(r.sampling.temperature.map(|v| v.to_string())),
            opt(r.sampling.top_p.map(|v| v.to_string())),
            opt(r.sampling.max_tokens.map(|v| v.to_string())),
            r.tokens.map_or_else(|| "not reported".into(), |t| t.input.to_string()),
            r.tokens.map_or_else(|| "not reported".into(), |t| t.output.to_string()),
            r.tokens.map_or_else(|| "not reported".into(), |t| t.cached.to_string()),
            r.latency_ms.to_string(),
            outcome.to_string(),
            reason.to_string(),
        ])
        .map_err(|e| CallsCsvError(e.to_string()))?;
    }
    w.into_inner().map_err(|e| CallsCsvError(e.to_string()))
}
