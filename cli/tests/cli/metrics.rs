//! `vcurve coordinator --metrics`, the binary: its Prometheus endpoint scraped over HTTP and read
//! with the strict parser of `vcurve_testkit::prometheus`, and its JSON logs. (The endpoints' counts
//! after a study are tested with the in-process cluster, in `testkit/tests/cluster/metrics.rs`.)

use vcurve_testkit::prometheus::{get, parse};

/// The binary: `vcurve coordinator --metrics` serves the endpoint, and `VCURVE_LOG_FORMAT=json`
/// makes its logs JSON lines with structured fields.
#[tokio::test]
async fn the_coordinator_binary_serves_metrics_and_logs_json_lines() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(["coordinator", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--store"])
        .arg(format!("sqlite://{}", dir.path().join("store.sqlite").display()))
        .env("VCURVE_LOG_FORMAT", "json")
        .env_remove("VCURVE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("VCURVE_CLIENT_TOKEN")
        .env_remove("VCURVE_WORKER_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    // Read until both the metrics address and the JSON log of the metrics listener are in.
    let (lines, addr) = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        let mut addr = None;
        let mut logged = false;
        for line in (&mut stderr).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("vcurve metrics on http://") {
                addr = rest.strip_suffix("/metrics").map(str::to_string);
            }
            logged |= line.contains("metrics listening");
            lines.push(line);
            if addr.is_some() && logged {
                break;
            }
        }
        // Keep draining: a coordinator writing to a closed pipe is not what is tested here.
        std::thread::spawn(move || for _ in stderr.lines() {});
        (lines, addr)
    })
    .await
    .unwrap();
    let addr = addr.unwrap_or_else(|| panic!("no metrics address in {lines:#?}"));
    let (status, content_type, body) = get(&addr, "/metrics", None).await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    assert_eq!(parse(&body).get("vcurve_studies{state=\"running\"}"), 0.0);
    let logs: Vec<serde_json::Value> =
        lines.iter().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let listening = logs
        .iter()
        .find(|l| l["fields"]["message"] == "metrics listening")
        .unwrap_or_else(|| panic!("no JSON log of the metrics listener in {lines:#?}"));
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["fields"]["addr"], addr.as_str());
}
