//! A client never fails silently: whenever its call to the coordinator breaks — the connection
//! cut before an answer, in the middle of one, or in the middle of an upload — the command exits
//! non-zero with a message naming the coordinator. A fault-injecting proxy in this test sits
//! between the `vcurve` client and a real coordinator and cuts each connection after a set number
//! of bytes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use vcurve_e2e::{Process, TestDir, free_port, run_vcurve, vcurve_ok, wait_until};

/// Which way the proxy cuts.
#[derive(Clone, Copy)]
enum Cut {
    /// Forward the request whole; cut the answer after this many bytes.
    Answer(usize),
    /// Cut the request after this many bytes (the coordinator never sees the rest).
    Request(usize),
}

/// A proxy on loopback in front of `upstream`, cutting every connection as `cut` says. Runs
/// until the test process ends; each connection is served on its own threads.
fn proxy(upstream: u16, cut: Cut) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
            let (up_limit, down_limit) = match cut {
                Cut::Answer(n) => (usize::MAX, n),
                Cut::Request(n) => (n, usize::MAX),
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pipe(client, server, up_limit));
            std::thread::spawn(move || pipe(s2, c2, down_limit));
        }
    });
    port
}

/// Copy `from` → `to` until `limit` bytes have passed, then cut both sockets both ways.
fn pipe(mut from: TcpStream, mut to: TcpStream, limit: usize) {
    let mut passed = 0;
    let mut buf = [0u8; 16 * 1024];
    while passed < limit {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n.min(limit - passed),
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        passed += n;
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// A finished study on a coordinator serving its store: `(dir, coordinator, port, study, spec)`.
fn finished_study(name: &str) -> (TestDir, Process, u16, String, std::path::PathBuf) {
    let dir = TestDir::new(name);
    let out = dir.path().join("demo");
    let out_arg = out.to_string_lossy().into_owned();
    vcurve_ok(&["demo", "--trajectories", "2", "--workers", "2", "--out", &out_arg], Duration::from_secs(300)).unwrap();
    let port = free_port();
    let store = format!("sqlite://{}", out.join("demo.sqlite").display());
    let listen = format!("127.0.0.1:{port}");
    let coordinator =
        Process::spawn(dir.path(), "coordinator", &["coordinator", "--store", &store, "--listen", &listen]);
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        wait_until(Duration::from_secs(30), || run_vcurve(
            &["studies", "--coordinator", &url],
            Duration::from_secs(10)
        )
        .is_ok_and(|o| o.status.success())),
        "the coordinator did not come up"
    );
    let listing = vcurve_ok(&["studies", "--coordinator", &url, "--json"], Duration::from_secs(10)).unwrap();
    let studies: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let study = studies[0]["study"].as_str().unwrap().to_string();
    (dir, coordinator, port, study, out.join("demo-study.yaml"))
}

fn assert_fails_naming_the_coordinator(args: &[&str], proxy_url: &str, what: &str) {
    let output = run_vcurve(args, Duration::from_secs(60)).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{what}: exited 0 (stdout {:?})", String::from_utf8_lossy(&output.stdout));
    assert!(
        stderr.contains(&format!("the coordinator at {proxy_url}"))
            || stderr.contains(&format!("coordinator at {proxy_url}")),
        "{what}: the message does not name the coordinator: {stderr}"
    );
}

/// A spec whose curve files the coordinator has not seen (about 20 KB to upload).
fn fresh_spec(dir: &std::path::Path) -> String {
    let mut yaml = String::from("name: fresh\nseed: 3\nrunner: {kind: synthetic}\ntrajectories:\n");
    std::fs::create_dir_all(dir.join("curves")).unwrap();
    for i in 0..3 {
        let values: Vec<f64> = (0..600).map(|t| if t < 200 + 100 * i { 0.612_345 } else { 0.0 }).collect();
        let path = vcurve_e2e::write_curve(dir, &format!("fresh-{i}"), &values);
        yaml += &format!("  - id: fresh-{i}\n    length: 600\n    curve: {path}\n");
    }
    let spec = dir.join("fresh.yaml");
    std::fs::write(&spec, yaml).unwrap();
    spec.to_string_lossy().into_owned()
}

#[test]
fn export_and_launch_cut_at_any_point_fail_loudly() {
    let (dir, _coordinator, port, study, _) = finished_study("client-failures");
    let spec = fresh_spec(dir.path());
    let tried = Arc::new(AtomicUsize::new(0));
    // The answer of an export cut before it starts, in the HTTP/2 handshake, inside the export's
    // message: every time a non-zero exit and a message.
    for cut in [0, 9, 60, 400, 4_000, 40_000] {
        let url = format!("http://127.0.0.1:{}", proxy(port, Cut::Answer(cut)));
        let out = dir.path().join(format!("export-{cut}"));
        let out = out.to_string_lossy().into_owned();
        assert_fails_naming_the_coordinator(
            &["export", &study, "--coordinator", &url, "--out", &out],
            &url,
            &format!("export cut after {cut} bytes of the answer"),
        );
        tried.fetch_add(1, Ordering::Relaxed);
    }
    // A launch whose request (the spec and its curve files) is cut on its way.
    for cut in [0, 30, 200, 2_000, 12_000] {
        let url = format!("http://127.0.0.1:{}", proxy(port, Cut::Request(cut)));
        assert_fails_naming_the_coordinator(
            &["launch", &spec, "--coordinator", &url],
            &url,
            &format!("launch cut after {cut} bytes of the request"),
        );
        tried.fetch_add(1, Ordering::Relaxed);
    }
    // Through an uncut proxy both work, so the cuts above are what failed.
    let url = format!("http://127.0.0.1:{}", proxy(port, Cut::Answer(usize::MAX)));
    let out = dir.path().join("export-whole").to_string_lossy().into_owned();
    vcurve_ok(&["export", &study, "--coordinator", &url, "--out", &out], Duration::from_secs(60)).unwrap();
    vcurve_ok(&["launch", &spec, "--coordinator", &url], Duration::from_secs(60)).unwrap();
    assert_eq!(tried.load(Ordering::Relaxed), 11);
}

#[test]
fn a_closed_standard_output_still_ends_quietly() {
    let dir = TestDir::new("closed-stdout");
    let points = dir.path().join("points.csv");
    std::fs::write(&points, "t,n,successes\n0,8,8\n5,8,0\n").unwrap();
    // `vcurve analyze … | head -c 1`: the reader goes away after one byte.
    let mut child = std::process::Command::new(vcurve_e2e::vcurve_bin())
        .args(["analyze", "--points", &points.to_string_lossy(), "--length", "10"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
}
