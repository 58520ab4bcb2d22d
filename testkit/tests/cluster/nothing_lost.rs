//! Nothing silently lost (issue 24): a study cancelled before its trajectories were measured
//! exports each with its state and no curve, never a flat one with `pnr = T`.

use std::collections::BTreeMap;

use vcurve_cli::client::{self, Connection};
use vcurve_coordinator::testing::{Tr, spec};
use vcurve_proto::v1;

#[tokio::test]
async fn a_study_cancelled_before_any_continuation_exports_its_trajectories_unmeasured() {
    // No worker: nothing ever runs.
    let server = super::cluster().await.start().await;
    let trs = [
        Tr { id: "alpha", length: 45, cliff: 17, p: 0.8, labels: "" },
        Tr { id: "beta", length: 60, cliff: 44, p: 0.6, labels: "" },
        Tr { id: "gamma", length: 30, cliff: 29, p: 1.0, labels: "" },
    ];
    // One trajectory admitted at a time: the others wait.
    let (yaml, files) = spec("cancelled", "admission: {mode: batch, batch_size: 1, pipeline_threshold: 1}\n", &trs);
    let mut c = client::study_client(&Connection { url: server.grpc_url(), ..Default::default() }).await.unwrap();
    let study = client::upload_and_launch(&mut c, yaml, &files).await.unwrap();
    // A worker leases alpha's first continuations (admitting it) and is never heard of again.
    let coordinator = server.coordinator();
    let w = coordinator.register("w", 4, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    let leased = coordinator.lease(&w, 4, std::time::Duration::ZERO).await.unwrap();
    assert!(!leased.is_empty());
    let state = c.cancel(v1::CancelRequest { study: study.clone() }).await.unwrap().into_inner().state;
    assert_eq!(state, "cancelled");

    let files: BTreeMap<String, Vec<u8>> = client::export(&mut c, &study).await.unwrap().into_iter().collect();
    let csv = String::from_utf8(files["trajectories.csv"].clone()).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert_eq!(rows[0], "alpha,45,,,,,,,,,,0,running", "{csv}");
    assert_eq!(rows[1], "beta,60,,,,,,,,,,0,waiting", "{csv}");
    assert_eq!(rows[2], "gamma,30,,,,,,,,,,0,waiting", "{csv}");
    assert_eq!(String::from_utf8(files["curves.csv"].clone()).unwrap().lines().count(), 1, "the header alone");
    let results: serde_json::Value = serde_json::from_slice(&files["results.json"]).unwrap();
    for tr in results["trajectories"].as_array().unwrap() {
        for field in ["shape", "pnr", "pnr_certified", "t_star", "concentration"] {
            assert_eq!(tr[field], serde_json::Value::Null, "{field} of {tr}");
        }
    }
    // Nothing was retired: the export says none.
    assert!(results.get("retired_jobs").is_none(), "{results}");
    server.shutdown().await;
}
