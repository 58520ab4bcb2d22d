//! Study-sized work stays off the async runtime: while a large export is rendered, the same
//! coordinator keeps answering heartbeats. The runtime has one thread, so an export rendered on it
//! would stall every heartbeat until it finished.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::model::{HeldJob, JobReport, ReportVerdict, StudyId};
use vcurve_coordinator::store::SqlStore;
use vcurve_coordinator::testing::{Tr, spec, step_outcome};
use vcurve_record::EndType;
use vcurve_record::jobs::{Judged, RunOutcome};
use vcurve_testkit::store::TestStore;

async fn finished_study(c: &Coordinator<SqlStore>, trajectories: &[Tr]) -> StudyId {
    let (yaml, files) = spec("large", "controls: {sanity: 2, retest: 2, budget_control: 2}\n", trajectories);
    let study = c.launch(&yaml, &files).await.unwrap();
    let w = c.register("driver", 64, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    loop {
        let jobs = c.lease(&w, 64, Duration::ZERO).await.unwrap();
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let k = job.key.continuation().unwrap();
            let cliff = trajectories.iter().find(|t| t.id == k.trajectory).unwrap().cliff;
            let report = JobReport::Outcome(RunOutcome {
                success: step_outcome(cliff, k.t, k.seed),
                steps: 5,
                end_type: EndType::Submitted,
                patch_sha256: format!("{k}"),
                judged: Judged::Evaluated,
                recorded: None,
            });
            let held = HeldJob { key: job.key.clone(), attempt: job.attempt };
            assert_eq!(c.report(&w, &held, &report).await.unwrap(), ReportVerdict::Accepted);
        }
    }
    study
}

#[tokio::test(flavor = "current_thread")]
async fn heartbeats_keep_flowing_while_a_large_export_runs() {
    let ts = TestStore::sqlite().await;
    let c = Coordinator::new(ts.store.clone(), Timing::default(), vcurve_cli::render::ReportRenderer::shared());
    let ids: Vec<String> = (0..16).map(|i| format!("t{i:02}")).collect();
    let trajectories: Vec<Tr> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Tr {
            id: Box::leak(id.clone().into_boxed_str()),
            length: 60 + i as u32,
            cliff: 10 + 3 * i as u32,
            p: 0.75,
            labels: "j1: 12, j2: 30, j3: none",
        })
        .collect();
    let study = finished_study(&c, &trajectories).await;
    let worker = c.register("heartbeater", 1, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();

    let beats = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let stop = tokio_util::sync::CancellationToken::new();
    let heartbeats = {
        let (c, beats, stop, worker) = (c.clone(), beats.clone(), stop.clone(), worker.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                c.heartbeat(&worker, &[]).await.unwrap();
                beats.lock().unwrap().push(Instant::now());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    // The heartbeater is running: a gap before the export starts is measured too.
    vcurve_testkit::wait::until(Duration::from_secs(10), "the first heartbeats", async || {
        let n = beats.lock().unwrap().len();
        if n >= 2 { Ok(()) } else { Err(n) }
    })
    .await;
    let started = Instant::now();
    let files = c.export(&study).await.unwrap();
    let ended = Instant::now();
    stop.cancel();
    heartbeats.await.unwrap();
    assert!(files["analyses.json"].len() > 10_000, "a large export");

    let beats = beats.lock().unwrap().clone();
    let during: Vec<Instant> = beats.iter().copied().filter(|b| *b > started && *b < ended).collect();
    let mut gaps: Vec<Duration> =
        beats.windows(2).filter(|w| w[1] > started && w[0] < ended).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    let export = ended - started;
    let max_gap = gaps.last().copied().unwrap_or_default();
    eprintln!(
        "export of {} bytes took {export:?}; {} heartbeats answered meanwhile; longest gap {max_gap:?}",
        files.values().map(Vec::len).sum::<usize>(),
        during.len()
    );
    // Rendered on the runtime's only thread, the export would answer no heartbeat until done.
    assert!(!during.is_empty(), "no heartbeat was answered during a {export:?} export");
    assert!(max_gap < export || export < Duration::from_millis(50), "heartbeats stalled for {max_gap:?} of {export:?}");
    ts.finish().await;
}
