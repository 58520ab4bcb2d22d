//! The live dashboard against a running coordinator: its API and pages over HTTP, and the page
//! itself in a real headless browser (Debian's chromium; `scripts/test` installs it).

use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vcurve_coordinator::testing::{Tr, spec};
use vcurve_testkit::wait;

/// `GET path` over a plain HTTP/1.1 connection: (status, body).
async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

fn chromium() -> &'static str {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(candidate).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return candidate;
        }
    }
    panic!("no headless browser found: install Debian's chromium (scripts/test does)");
}

/// The page's DOM after its scripts ran for `budget_ms` of (virtual) time.
fn dump_dom(url: &str, budget_ms: u32) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.path().display()),
            &format!("--virtual-time-budget={budget_ms}"),
            "--dump-dom",
            url,
        ])
        .output()
        .expect("run chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_progress_and_curves_and_refreshes() {
    vcurve_testkit::require!(vcurve_testkit::require::Service::Chromium);
    let mut web = crate::cluster().await.tokens("w-token", "c-token").dashboard().start().await;
    let (coordinator, web_addr) = (web.coordinator().clone(), web.dashboard_addr().unwrap().to_string());

    let trs = [
        Tr { id: "alpha", length: 40, cliff: 17, p: 0.9, labels: "j: 17" },
        Tr { id: "beta", length: 50, cliff: 30, p: 0.7, labels: "" },
    ];
    let (yaml, files) = spec("dash-study", "", &trs);
    let yaml = yaml.replace("duration_ms: 0", "duration_ms: 40");
    let study = coordinator.launch(&yaml, &files).await.unwrap();
    let mut config = web.worker_config();
    config.slots = 2;
    web.spawn_worker(config, vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner), None);
    // Let some points arrive.
    wait::until(Duration::from_secs(60), "a first point arrives", async || {
        let p = coordinator.progress(&study).await.unwrap();
        if p.done > 0 { Ok(()) } else { Err(p.done) }
    })
    .await;

    // Every route needs the client token.
    assert_eq!(get(&web_addr, "/").await.0, 401);
    assert_eq!(get(&web_addr, "/api/studies?token=wrong").await.0, 401);
    assert_eq!(get(&web_addr, "/api/studies?token=w-token").await.0, 401);
    let (status, body) = get(&web_addr, "/api/studies?token=c-token").await;
    assert_eq!(status, 200, "{body}");
    let studies: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(studies[0]["name"], "dash-study");
    assert!(studies[0]["done"].as_u64().unwrap() > 0, "{body}");
    // The worker leased work, so this coordinator measured its lease latency; its runner is offered.
    assert!(studies[0]["lease_latency"]["leases"].as_u64().unwrap() > 0, "{body}");
    assert!(studies[0]["waiting_for_runner"].is_null(), "{body}");
    let (status, svg) = get(&web_addr, &format!("/api/studies/{study}/figures/alpha.svg?token=c-token")).await;
    assert_eq!(status, 200, "{svg}");
    assert!(svg.contains("<svg") && svg.contains("alpha"), "{svg}");
    assert_eq!(get(&web_addr, &format!("/api/studies/{study}/figures/nope.svg?token=c-token")).await.0, 404);
    assert_eq!(get(&web_addr, "/api/studies/no-such-study/trajectories?token=c-token").await.0, 404);

    // The page in a real browser: it loads, shows the study and a curve, and refreshes.
    let url = format!("http://{web_addr}/?token=c-token");
    let dom = tokio::task::spawn_blocking(move || dump_dom(&url, 7_000)).await.unwrap();
    assert!(dom.contains("dash-study"), "study missing from the page:\n{dom}");
    assert!(dom.contains(study.as_str()), "study id missing");
    assert!(dom.contains("class=\"state\""), "progress missing:\n{dom}");
    assert!(dom.contains("V-curve of alpha"), "curve figure missing:\n{dom}");
    assert!(dom.contains("lease latency p50"), "lease latency missing:\n{dom}");
    let refreshes: u32 = dom
        .split("data-refreshes=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .expect("refresh counter");
    assert!(refreshes >= 3, "the page refreshed only {refreshes} times");

    web.shutdown().await;
}
