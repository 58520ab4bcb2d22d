//! The coordinator's Prometheus endpoint: `GET /metrics` in the Prometheus text format 0.0.4,
//! served on its own listener (`vcurve coordinator --metrics ADDR`) with the dashboard's HTTP
//! stack (axum).
//!
//! What is durable comes from the store at scrape time, through the same per-study progress that
//! `vcurve status` and the dashboard read (counters kept by the store's transactions, no scan of
//! continuations): any coordinator on the store answers the same. What is per process — the
//! latency of this coordinator's leases and where the continuations it leased could start
//! (`vcurve_continuations_leased{snapshot="held"|"registry"|"none"}`: the worker held a snapshot of
//! the trajectory, the worker's registry held one at or before the step, neither) — comes from
//! [`ProcessMetrics`], kept by the
//! [`Coordinator`] as it serves. A non-loopback listener needs the client token, presented as
//! `Authorization: Bearer …` (Prometheus' `authorization` setting).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use process::Labels;
pub use process::{LEASE_LATENCY_BUCKETS, ProcessMetrics};

use crate::core::Coordinator;
use crate::error::CoordinatorError;
use crate::model::{Progress, StudyId, StudyState, WorkerInfo};
use crate::store::Store;
use vcurve_method::schedule::Stage;
use vcurve_record::jobs::JobKind;

pub(crate) mod process;

/// The content type of the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

fn gauge_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

fn counter_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    registry.register(name, help, family.clone());
    family
}

fn count(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The exposition of every family from a scrape's store reads and this process's measurements.
/// What one scrape reads from the store: every study's progress (as [`Coordinator::list`] returns
/// them), each running study's pending continuations by stage, and the live workers.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub studies: Vec<Progress>,
    pub pending_by_stage: Vec<(StudyId, Vec<(Stage, u64)>)>,
    pub workers: Vec<WorkerInfo>,
}

pub fn encode(scrape: &Snapshot, process: &ProcessMetrics) -> String {
    let (studies, workers) = (&scrape.studies, &scrape.workers);
    let mut registry = Registry::default();
    let by_state = gauge_family(&mut registry, "vcurve_studies", "Studies in the store by state");
    for state in [StudyState::Running, StudyState::Done, StudyState::Cancelled] {
        let n = studies.iter().filter(|p| p.state == state).count();
        by_state.get_or_create(&vec![("state", state.as_str().to_string())]).set(count(n));
    }
    let continuations =
        gauge_family(&mut registry, "vcurve_continuations", "Continuations of a study by state (running: leased now)");
    let stages = gauge_family(
        &mut registry,
        "vcurve_trajectories_in_stage",
        "A study's admitted trajectories still in progress, by the schedule stage they wait in",
    );
    let retired_jobs = gauge_family(
        &mut registry,
        "vcurve_jobs_retired",
        "Jobs of a study retired after repeated no-outcomes, by kind (continuation, replay, evaluation, base_run)",
    );
    let non_replayable = gauge_family(
        &mut registry,
        "vcurve_trajectories_non_replayable",
        "A study's trajectories whose replay did not reproduce the recorded run",
    );
    let cache_hits = counter_family(
        &mut registry,
        "vcurve_evaluation_cache_hits",
        "Runs judged by a verdict already in the patch cache",
    );
    let evaluations = counter_family(
        &mut registry,
        "vcurve_evaluations",
        "Patch evaluations carried out (first ones and flake checks)",
    );
    let flake_checks =
        counter_family(&mut registry, "vcurve_evaluation_flake_checks", "Evaluations of a patch after its first one");
    let flakes =
        counter_family(&mut registry, "vcurve_evaluation_flakes", "Flake checks whose verdict differed from the first");
    let queue = gauge_family(
        &mut registry,
        "vcurve_continuations_pending_by_stage",
        "A running study's pending continuations (waiting for a worker) by the schedule stage of their trajectory",
    );
    for (study, depths) in &scrape.pending_by_stage {
        for (stage, n) in depths {
            queue
                .get_or_create(&vec![("study", study.to_string()), ("stage", stage.as_str().to_string())])
                .set(count(*n));
        }
    }
    for p in studies.iter() {
        let study = || vec![("study", p.study.to_string())];
        for (state, n) in [("pending", p.pending), ("running", p.running), ("done", p.done), ("retired", p.retired)] {
            let mut labels = study();
            labels.push(("state", state.to_string()));
            continuations.get_or_create(&labels).set(count(n));
        }
        for (stage, n) in &p.stages {
            let mut labels = study();
            labels.push(("stage", stage.as_str().to_string()));
            stages.get_or_create(&labels).set(count(*n));
        }
        for kind in [JobKind::Continuation, JobKind::Replay, JobKind::Evaluation, JobKind::BaseRun] {
            let n = p.retired_jobs.iter().find(|r| r.kind == kind).map_or(0, |r| r.count);
            let mut labels = study();
            labels.push(("kind", kind.as_str().to_string()));
            retired_jobs.get_or_create(&labels).set(count(n));
        }
        non_replayable.get_or_create(&study()).set(count(p.trajectories_non_replayable));
        // Only a runner that judges patches has a patch cache: a synthetic study has no series.
        if let Some(e) = &p.evaluation {
            cache_hits.get_or_create(&study()).inc_by(e.cache_hits);
            evaluations.get_or_create(&study()).inc_by(e.evaluations);
            flake_checks.get_or_create(&study()).inc_by(e.flake_checks);
            flakes.get_or_create(&study()).inc_by(e.flakes);
        }
    }
    // The store's live workers (seen within the lease timeout).
    let gauge = |registry: &mut Registry, name: &str, help: &str, value: i64| {
        let g = Gauge::<i64>::default();
        g.set(value);
        registry.register(name, help, g);
    };
    gauge(&mut registry, "vcurve_workers", "Live workers (seen within the lease timeout)", count(workers.len()));
    let slots: u64 = workers.iter().map(|w| u64::from(w.slots)).sum();
    let busy: u64 = workers.iter().map(|w| u64::from(w.running)).sum();
    gauge(&mut registry, "vcurve_workers_slots", "Slots of the live workers", count(slots));
    gauge(&mut registry, "vcurve_workers_slots_busy", "Slots of the live workers holding a leased job", count(busy));
    registry.register(
        "vcurve_lease_latency_seconds",
        "This coordinator's leases that handed out work, from request to answer (long-poll waiting included)",
        process.lease_latency.clone(),
    );
    registry.register(
        "vcurve_continuations_leased",
        "Continuations this coordinator leased, by where they could start: a snapshot the worker held (held), one \
         in the worker's snapshot registry (registry), neither: rebuilt by replay (none)",
        process.continuations_leased.clone(),
    );
    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// One scrape: every study's progress from the store, and this process's measurements.
pub async fn scrape<S: Store>(coordinator: &Coordinator<S>) -> Result<String, CoordinatorError> {
    let studies = coordinator.list().await?;
    let mut pending_by_stage = Vec::new();
    for p in studies.iter().filter(|p| p.state == StudyState::Running) {
        pending_by_stage.push((p.study.clone(), coordinator.pending_by_stage(&p.study).await?));
    }
    let workers = coordinator.live_workers().await?;
    Ok(encode(&Snapshot { studies, pending_by_stage, workers }, coordinator.process_metrics()))
}

struct Endpoint<S> {
    coordinator: Arc<Coordinator<S>>,
    token: Option<String>,
}

fn authorized(token: &Option<String>, headers: &HeaderMap) -> bool {
    let Some(expected) = token else { return true };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|p| p.as_bytes().ct_eq(expected.as_bytes()).into())
}

/// The metrics route over a coordinator; with a `token`, every request must present it.
pub fn router<S: Store>(coordinator: Arc<Coordinator<S>>, token: Option<String>) -> Router {
    Router::new().route("/metrics", get(metrics::<S>)).with_state(Arc::new(Endpoint { coordinator, token }))
}

/// Serve `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve<S: Store>(
    coordinator: Arc<Coordinator<S>>,
    listener: TcpListener,
    token: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::http::serve(listener, router(coordinator, token), "metrics", shutdown).await
}

async fn metrics<S: Store>(State(e): State<Arc<Endpoint<S>>>, headers: HeaderMap) -> Response {
    if !authorized(&e.token, &headers) {
        return (StatusCode::UNAUTHORIZED, "client token required: Authorization: Bearer …\n").into_response();
    }
    match scrape(&e.coordinator).await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::warn!(%error, "metrics scrape failed");
            (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkerInfo;

    fn progress(study: &str, state: StudyState) -> Progress {
        Progress {
            study: study.into(),
            name: "n".into(),
            state,
            done: 0,
            running: 0,
            pending: 0,
            retired: 0,
            retired_jobs: Vec::new(),
            trajectories: 0,
            trajectories_admitted: 0,
            trajectories_done: 0,
            trajectories_doomed: 0,
            trajectories_non_replayable: 0,
            stages: Vec::new(),
            workers: Vec::new(),
            throughput_per_min: 0.0,
            eta_seconds: None,
            waiting_for_runner: None,
            lease_latency: None,
            evaluation: None,
            call_stages: Vec::new(),
            waiting_for_endpoints: Vec::new(),
        }
    }

    fn lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn every_family_is_read_from_the_progress_and_the_process() {
        let worker = |name: &str, slots, running| WorkerInfo {
            id: name.into(),
            name: name.into(),
            slots,
            running,
            last_seen_ms_ago: 0,
            capabilities: vec!["agent".into()],
        };
        let mut a = progress("a", StudyState::Running);
        (a.done, a.running, a.pending, a.retired) = (10, 3, 7, 1);
        a.stages = vec![(Stage::Screen, 2), (Stage::Bisect, 1)];
        a.trajectories_non_replayable = 4;
        a.retired_jobs = Vec::from_iter(vcurve_record::jobs::RetiredJobs::of(JobKind::BaseRun, [(None, 3)]));
        let workers = vec![worker("w1", 4, 3), worker("w2", 2, 0)];
        a.workers = workers.clone();
        a.evaluation = Some(vcurve_record::EvaluationStats {
            cache_hits: 5,
            evaluations: 9,
            flake_checks: 3,
            flakes: 1,
            ..Default::default()
        });
        let b = progress("b", StudyState::Done);
        let process = ProcessMetrics::default();
        for seconds in [0.0005, 0.003, 0.003, 7.0] {
            process.lease_latency.observe(seconds);
        }
        for snapshot in ["held", "registry", "registry", "none"] {
            process.continuation_leased(snapshot);
        }
        let scrape = Snapshot {
            studies: vec![a.clone(), b],
            pending_by_stage: vec![("a".into(), vec![(Stage::Screen, 5), (Stage::Bisect, 2)])],
            workers,
        };
        let text = encode(&scrape, &process);
        let samples = lines(&text);
        for expected in [
            r#"vcurve_continuations_leased_total{snapshot="held"} 1"#,
            r#"vcurve_continuations_leased_total{snapshot="registry"} 2"#,
            r#"vcurve_continuations_leased_total{snapshot="none"} 1"#,
            r#"vcurve_studies{state="running"} 1"#,
            r#"vcurve_studies{state="done"} 1"#,
            r#"vcurve_studies{state="cancelled"} 0"#,
            r#"vcurve_continuations{study="a",state="done"} 10"#,
            r#"vcurve_continuations{study="a",state="running"} 3"#,
            r#"vcurve_continuations{study="a",state="pending"} 7"#,
            r#"vcurve_continuations{study="a",state="retired"} 1"#,
            r#"vcurve_continuations{study="b",state="done"} 0"#,
            r#"vcurve_jobs_retired{study="a",kind="base_run"} 3"#,
            r#"vcurve_jobs_retired{study="a",kind="replay"} 0"#,
            r#"vcurve_jobs_retired{study="b",kind="continuation"} 0"#,
            r#"vcurve_trajectories_in_stage{study="a",stage="screen"} 2"#,
            r#"vcurve_trajectories_in_stage{study="a",stage="bisect"} 1"#,
            r#"vcurve_trajectories_non_replayable{study="a"} 4"#,
            r#"vcurve_continuations_pending_by_stage{study="a",stage="screen"} 5"#,
            r#"vcurve_continuations_pending_by_stage{study="a",stage="bisect"} 2"#,
            r#"vcurve_evaluation_cache_hits_total{study="a"} 5"#,
            r#"vcurve_evaluations_total{study="a"} 9"#,
            r#"vcurve_evaluation_flake_checks_total{study="a"} 3"#,
            r#"vcurve_evaluation_flakes_total{study="a"} 1"#,
            "vcurve_workers 2",
            "vcurve_workers_slots 6",
            "vcurve_workers_slots_busy 3",
            r#"vcurve_lease_latency_seconds_bucket{le="0.001"} 1"#,
            r#"vcurve_lease_latency_seconds_bucket{le="0.0025"} 1"#,
            r#"vcurve_lease_latency_seconds_bucket{le="0.005"} 3"#,
            r#"vcurve_lease_latency_seconds_bucket{le="5"} 3"#,
            r#"vcurve_lease_latency_seconds_bucket{le="+Inf"} 4"#,
            "vcurve_lease_latency_seconds_count 4",
        ] {
            assert!(samples.contains(&expected), "no {expected:?} in\n{text}");
        }
        // A study without a patch cache (synthetic) has no evaluation series.
        assert!(!text.contains(r#"vcurve_evaluations_total{study="b"}"#), "{text}");
        assert!(text.contains("# TYPE vcurve_lease_latency_seconds histogram"), "{text}");
        assert!(text.contains("# TYPE vcurve_evaluation_flakes_total counter"), "{text}");
        assert!(!text.contains("# EOF"), "the 0.0.4 format has no EOF marker");
    }

    #[test]
    fn without_a_study_the_workers_are_still_counted() {
        let idle = WorkerInfo {
            id: "id-w".into(),
            name: "w".into(),
            slots: 8,
            running: 0,
            last_seen_ms_ago: 0,
            capabilities: vec!["synthetic".into()],
        };
        let text = encode(&Snapshot { workers: vec![idle], ..Snapshot::default() }, &ProcessMetrics::default());
        for expected in ["vcurve_workers 1", "vcurve_workers_slots 8", "vcurve_workers_slots_busy 0"] {
            assert!(lines(&text).contains(&expected), "no {expected:?} in\n{text}");
        }
        let text = encode(&Snapshot::default(), &ProcessMetrics::default());
        assert!(lines(&text).contains(&"vcurve_workers 0"), "{text}");
        assert!(lines(&text).contains(&"vcurve_lease_latency_seconds_count 0"), "{text}");
    }
}
