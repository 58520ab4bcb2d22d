//! The export read one trajectory at a time gives the bytes of the whole record's export, on both
//! backends; a SQLite file whose path says `memory` is a file. (`vcurve bench memory` itself is
//! tested in `cli/tests/cli/memory.rs`.)

use std::time::Duration;

use vcurve_cli::render::ReportRenderer;
use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::model::{HeldJob, JobReport, ReportVerdict, StudyId, StudyState};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_coordinator::testing::{Tr, spec, step_outcome};
use vcurve_record::EndType;
use vcurve_record::jobs::{Judged, RunOutcome};
use vcurve_testkit::cluster::Cluster;

fn timing() -> Timing {
    Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(10),
        max_lease_wait: Duration::ZERO,
    }
}

/// Run `study` to its end with deterministic outcomes; returns how many were reported.
async fn run_to_end(c: &Coordinator<SqlStore>, study: &StudyId) -> u64 {
    let w = c.register("w", 32, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    let mut reported = 0;
    loop {
        let jobs = c.lease(&w, 32, Duration::ZERO).await.unwrap();
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let key = job.key.continuation().expect("a continuation").clone();
            let cliff = 10 + key.trajectory.trim_start_matches('t').parse::<u32>().unwrap() % 25;
            let outcome = JobReport::Outcome(RunOutcome {
                success: step_outcome(cliff, key.t, key.seed),
                steps: 3,
                end_type: if key.seed % 5 == 4 { EndType::StepCap } else { EndType::Submitted },
                patch_sha256: String::new(),
                judged: Judged::Evaluated,
                recorded: None,
            });
            let held = HeldJob { key: job.key.clone(), attempt: job.attempt };
            assert_eq!(c.report(&w, &held, &outcome).await.unwrap(), ReportVerdict::Accepted);
            reported += 1;
        }
    }
    assert_eq!(c.progress(study).await.unwrap().state, StudyState::Done);
    reported
}

#[tokio::test]
async fn an_export_read_in_parts_has_the_bytes_of_the_whole_records_export() {
    let mut clusters = vec![("sqlite", Cluster::sqlite().await)];
    if let Some(postgres) = Cluster::postgres().await {
        clusters.push(("postgres", postgres));
    }
    let ids: Vec<String> = (0..24).map(|i| format!("t{i:02}")).collect();
    let trs: Vec<Tr> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Tr {
            id: id.clone().leak(),
            length: 40 + i as u32,
            cliff: 10 + i as u32 % 25,
            p: 0.8,
            labels: "",
        })
        .collect();
    let (yaml, files) = spec("many", "controls: {sanity: 2, retest: 2, budget_control: 2}\n", &trs);
    let mut exports = Vec::new();
    for (name, cluster) in clusters {
        let running = cluster.timing(timing()).renderer(ReportRenderer::shared()).start().await;
        let c = running.coordinator().clone();
        let study = c.launch(&yaml, &files).await.unwrap();
        let reported = run_to_end(&c, &study).await;
        assert!(reported > 2_000, "{name}: only {reported} outcomes");
        let streamed = c.export(&study).await.unwrap();
        let whole = vcurve_report::export::files(&c.store().study(&study).await.unwrap()).unwrap();
        assert_eq!(streamed.keys().collect::<Vec<_>>(), whole.keys().collect::<Vec<_>>(), "{name}");
        for (file, bytes) in &whole {
            assert!(streamed[file] == *bytes, "{name}: {file} differs");
        }
        assert!(c.export(&"no-such-study".into()).await.is_err());
        exports.push(streamed);
        running.shutdown().await;
    }
    assert!(exports.windows(2).all(|w| w[0] == w[1]), "the backends export different bytes");
}

#[tokio::test]
async fn a_sqlite_file_whose_path_says_memory_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory-bench").join("store.sqlite");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let store = SqlStore::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    assert!(store.list_studies().await.unwrap().is_empty());
    assert!(path.exists(), "{} was not created", path.display());
}
