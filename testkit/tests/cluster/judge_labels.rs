//! Judge labels end to end (docs/spec.md, "Judge labels"): a curve study whose `judges:` are the
//! deterministic model server, on the in-process cluster with a worker running the model calls
//! (the model-call runner) and a double replaying and continuing the recorded trajectories. Each
//! judge labels the first `[[MISTAKE]]` marker of a trajectory's steps: the labels end at the
//! marker's 0-based index + 1 ("no mistake" without a marker), the label probes run at them, and
//! the labels analyses place them under the judges' names. The study's decoys are labelled alike,
//! and the restart analyses' decoy rows (Table 24) count the judges' decoy labels.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vcurve_cli::client::{self, Connection};
use vcurve_coordinator::store::Store as _;
use vcurve_record::EndType;
use vcurve_record::jobs::{CompareLevel, Judged, Replayed, RunOutcome};
use vcurve_testkit::model_server::ModelServer;
use vcurve_worker::{AgentRunner, JobKey, JobReport, JobSpec, ModelCallRunner, ModelEndpoints, Runners};

const DOUBLE: &str = "double";

/// Each trajectory's base runs (as given in the spec): its task's, for the restart analyses.
const BASE_RUNS: &str = "[{success: true, steps: 20}, {success: true, steps: 25}, {success: false, steps: 30}]";

/// A trajectory's labels: `(source, m)`.
type Labels = Vec<(String, Option<u32>)>;

/// Replays every recorded run exactly and continues with a step curve at step 12.
struct Double;

impl AgentRunner for Double {
    fn kind(&self) -> &'static str {
        DOUBLE
    }

    fn run(&self, job: JobSpec, _: CancellationToken) -> BoxFuture<'static, JobReport> {
        let report = match &job.key {
            JobKey::Replay { .. } => {
                let length = job.trajectory.as_ref().and_then(|p| p.recorded.as_ref()).map_or(0, |r| r.length());
                JobReport::Replayed(Replayed {
                    anchors: job.anchors.clone(),
                    levels: vec![CompareLevel::Exact; length as usize],
                    ..Default::default()
                })
            }
            JobKey::Continuation(k) => JobReport::Outcome(RunOutcome {
                success: vcurve_coordinator::testing::step_outcome(12, k.t, k.seed),
                steps: 10,
                end_type: EndType::Submitted,
                patch_sha256: "abc".into(),
                judged: Judged::Evaluated,
                recorded: None,
            }),
            other => JobReport::NoOutcome { reason: format!("the double runs no {other}") },
        };
        Box::pin(async move { report })
    }
}

/// A recorded run of `steps` steps whose step `mistake` (0-based) carries the marker.
fn recorded(task: &str, steps: u32, mistake: Option<usize>) -> String {
    let mut run: serde_json::Value =
        serde_json::from_str(&vcurve_coordinator::testing::recorded_trajectory(task, steps)).unwrap();
    if let Some(i) = mistake {
        // Two messages before the first step, two a step: the assistant's comes first.
        let message = &mut run["messages"][2 + 2 * i]["content"];
        *message = format!("{} [[MISTAKE]] delete the failing test", message.as_str().unwrap()).into();
    }
    run.to_string()
}

#[tokio::test]
async fn judges_label_the_first_marked_step_and_the_label_probes_and_analyses_use_it() {
    let model = ModelServer::start().await.unwrap();
    let url = model.base_url();
    let endpoints = ModelEndpoints::from_flags(std::slice::from_ref(&url)).unwrap();
    let runners = Runners::new().with(Double).with_model_calls(ModelCallRunner::new(endpoints));
    let server = super::cluster().await.accept_runner_kind(DOUBLE).workers(1, runners).slots(4).start().await;

    let yaml = format!(
        "name: judged\nseed: 5\nrunner: {{kind: {DOUBLE}}}\n\
         judges:\n  judge-a: {{base_url: \"{url}\", model: judge-a}}\n  judge-b: {{base_url: \"{url}\", model: judge-b, thinking: none}}\n\
         trajectories:\n  - {{id: marked, recorded: runs/marked.json, base_runs: {BASE_RUNS}}}\n  - {{id: clean, recorded: runs/clean.json, base_runs: {BASE_RUNS}}}\n\
         decoys:\n  - {{id: decoy-marked, task: task-marked, recorded: runs/decoy-marked.json}}\n  - {{id: decoy-clean, task: task-clean, recorded: runs/decoy-clean.json}}\n"
    );
    let files = BTreeMap::from([
        ("runs/marked.json".to_string(), recorded("task-marked", 30, Some(9))),
        ("runs/clean.json".to_string(), recorded("task-clean", 30, None)),
        ("runs/decoy-marked.json".to_string(), recorded("task-marked", 20, Some(4))),
        ("runs/decoy-clean.json".to_string(), recorded("task-clean", 20, None)),
    ]);
    let connection = Connection { url: server.grpc_url(), ..Default::default() };
    let mut c = client::study_client(&connection).await.unwrap();
    let study = client::upload_and_launch(&mut c, yaml, &files).await.unwrap();
    let last = vcurve_cli::demo::watch(&mut c, &study, false).await.unwrap().expect("progress");
    assert_eq!(last.state, "done");
    let label = last.call_stages.iter().find(|s| s.stage == "label").expect("the judges' stage");
    assert_eq!(
        (label.done, label.malformed, label.expected),
        (8, 0, Some(8)),
        "a call per trajectory or decoy and judge"
    );
    assert_eq!(model.requests_by_template().get("labels.first_mistake.v1"), Some(&8), "each call asked once");

    // The labels: marker index 9 → m = 10; no marker → no mistake; under the judges' names.
    let record = server.store().study(&study.as_str().into()).await.unwrap();
    let labels: Vec<(String, Labels)> = record
        .spec
        .trajectories
        .iter()
        .map(|t| (t.id.clone(), t.labels.iter().map(|l| (l.source.clone(), l.step)).collect()))
        .collect();
    let both = |m: Option<u32>| vec![("judge-a".to_string(), m), ("judge-b".to_string(), m)];
    assert_eq!(labels, [("marked".to_string(), both(Some(10))), ("clean".to_string(), both(None))]);
    // The label probes ran at m − 1 and m.
    let marked = &record.trajectories[0];
    assert_eq!(marked.plan.labels, [10, 10]);
    for t in [9, 10] {
        assert!(marked.outcomes.iter().any(|o| o.1 == t), "no continuation from step {t}");
    }

    // The labels analyses place them like the spec's.
    let results = vcurve_report::results::results(&record).unwrap();
    let analyses = vcurve_report::analyses::analyses(&results).unwrap();
    assert_eq!(analyses.labels.sources.keys().collect::<Vec<_>>(), ["judge-a", "judge-b"]);
    let placed: Vec<(&str, &str, Option<u32>)> =
        analyses.labels.labels.iter().map(|l| (l.trajectory.as_str(), l.source.as_str(), l.step)).collect();
    assert!(
        placed.contains(&("marked", "judge-a", Some(10))) && placed.contains(&("clean", "judge-b", None)),
        "{placed:?}"
    );
    let probed = analyses.labels.labels.iter().find(|l| l.trajectory == "marked").and_then(|l| l.probe.as_ref());
    assert!(probed.is_some(), "the label's probed drop is measured");

    // The decoys' labels: marker index 4 → m = 5; no marker → no mistake; and the restart
    // analyses' decoy rows count them: each judge answered both decoys and restarted the marked one.
    let decoys: Vec<(String, Labels)> = record
        .spec
        .decoys
        .iter()
        .map(|d| (d.id.clone(), d.labels.iter().map(|l| (l.source.clone(), l.step)).collect()))
        .collect();
    assert_eq!(decoys, [("decoy-marked".to_string(), both(Some(5))), ("decoy-clean".to_string(), both(None))]);
    let restart = analyses.restart.as_ref().expect("every task has base runs: the restart analyses run");
    for judge in ["judge-a", "judge-b"] {
        let row = restart.decoys.iter().find(|r| r.source == judge).expect("a decoy row per judge");
        assert_eq!((row.decoys, row.restarted), (2, 1), "{row:?}");
        assert!(row.loss.is_some(), "{row:?}");
    }

    // And the export's results carry them.
    let exported: BTreeMap<String, Vec<u8>> = client::export(&mut c, &study).await.unwrap().into_iter().collect();
    let results: serde_json::Value = serde_json::from_slice(&exported["results.json"]).unwrap();
    assert_eq!(results["trajectories"][0]["labels"], serde_json::json!([["judge-a", 10], ["judge-b", 10]]));
    // And calls.csv logs every request the judges were sent, with its template's hash.
    let calls = String::from_utf8(exported["calls.csv"].clone()).unwrap();
    // No cell here has a comma or a quote: split on commas.
    let mut lines = calls.lines().map(|l| l.split(',').collect::<Vec<_>>());
    let header = lines.next().unwrap();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.collect();
    let called: Vec<&str> = rows.iter().map(|r| r[col("call")]).collect();
    assert_eq!(
        called,
        [
            "label-decoy:decoy-clean/judge-a",
            "label-decoy:decoy-clean/judge-b",
            "label-decoy:decoy-marked/judge-a",
            "label-decoy:decoy-marked/judge-b",
            "label:clean/judge-a",
            "label:clean/judge-b",
            "label:marked/judge-a",
            "label:marked/judge-b"
        ],
        "one request a call, in call-key order"
    );
    let hash = vcurve_record::llm::TemplateName::FirstMistake.template().sha256.clone();
    for r in &rows {
        assert_eq!(
            (r[col("stage")], r[col("template")], r[col("template_hash")], r[col("outcome")]),
            ("label", "labels.first_mistake.v1", hash.as_str(), "success"),
            "{r:?}"
        );
        assert!(r[col("model")].starts_with("judge-") && r[col("endpoint")] == url, "{r:?}");
        assert!(r[col("input_tokens")].parse::<u64>().unwrap() > 0, "the model server reports usage: {r:?}");
    }
    server.shutdown().await;
}
