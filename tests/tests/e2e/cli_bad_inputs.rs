//! Bad inputs at the command line, against a running coordinator on the embedded store: an
//! invalid study spec is rejected with a message naming the trajectory and the field, and nothing
//! is stored; an unknown study id is reported as such.

use std::path::Path;
use std::time::Duration;

use vcurve_e2e::{Process, TestDir, free_port, run_vcurve, vcurve_ok, write_curve};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A valid one-trajectory spec, with `edit` applied to its YAML text.
fn write_spec(dir: &Path, file: &str, edit: impl Fn(String) -> String) -> String {
    let curve = write_curve(dir, "cliff", &[0.8; 10].iter().chain(&[0.1; 10]).copied().collect::<Vec<_>>());
    let yaml = format!(
        "\
name: bad-inputs
seed: 3
schedule: paper
runner: {{kind: synthetic, duration_ms: 1, no_outcome_rate: 0.0}}
trajectories:
  - id: cliff
    task: task-a
    length: 20
    curve: {curve}
    labels: {{judge-a: 11, judge-b: none}}
"
    );
    let path = dir.join(file);
    std::fs::write(&path, edit(yaml)).expect("write the spec");
    path.to_string_lossy().into_owned()
}

struct Coordinator {
    _process: Process,
    url: String,
}

fn embedded_coordinator(dir: &TestDir) -> Coordinator {
    let port = free_port();
    let store = format!("sqlite://{}", dir.path().join("store.sqlite").display());
    let listen = format!("127.0.0.1:{port}");
    let mut process =
        Process::spawn(dir.path(), "coordinator", &["coordinator", "--store", &store, "--listen", &listen]);
    process.wait_for_port(port, TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    Coordinator { _process: process, url: format!("http://127.0.0.1:{port}") }
}

fn studies(url: &str) -> Vec<serde_json::Value> {
    let out = vcurve_ok(&["studies", "--coordinator", url, "--json"], TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("vcurve studies --json printed no JSON list ({e}): {out}"))
}

#[test]
fn an_invalid_spec_is_rejected_by_trajectory_and_field_and_nothing_is_stored() {
    let dir = TestDir::new("bad-inputs");
    let coordinator = embedded_coordinator(&dir);
    // Each case: what is wrong, the text replaced in the valid spec, what the message must name.
    let cases: [(&str, (&str, &str), &[&str]); 3] = [
        ("a label after the last step", ("judge-a: 11", "judge-a: 21"), &["cliff", "labels.judge-a", "1..=20"]),
        ("a label at step 0", ("judge-a: 11", "judge-a: 0"), &["cliff", "labels.judge-a"]),
        ("a length the curve does not have", ("length: 20", "length: 25"), &["cliff", "curve"]),
    ];
    for (i, (problem, (from, to), named)) in cases.iter().enumerate() {
        let spec = write_spec(dir.path(), &format!("bad-{i}.yaml"), |y| {
            assert!(y.contains(from), "the valid spec has no {from:?}");
            y.replace(from, to)
        });
        let out =
            run_vcurve(&["launch", &spec, "--coordinator", &coordinator.url], TIMEOUT).expect("run vcurve launch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{problem}: vcurve launch accepted the spec and printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        for name in named.iter() {
            assert!(stderr.contains(name), "{problem}: the message does not name {name:?}: {stderr}");
        }
    }
    assert_eq!(studies(&coordinator.url), Vec::<serde_json::Value>::new(), "a rejected spec left a study behind");

    // The same spec, fixed, is accepted: the cases above failed for what they changed.
    let good = write_spec(dir.path(), "good.yaml", |y| y);
    let study =
        vcurve_ok(&["launch", &good, "--coordinator", &coordinator.url], TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let listed = studies(&coordinator.url);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["study"], study.trim());
}

#[test]
fn status_of_an_unknown_study_says_there_is_no_such_study() {
    let dir = TestDir::new("unknown-study");
    let coordinator = embedded_coordinator(&dir);
    let unknown = "00000000-0000-4000-8000-000000000000";
    for json in [false, true] {
        let mut args = vec!["status", unknown, "--coordinator", &coordinator.url];
        if json {
            args.push("--json");
        }
        let out = run_vcurve(&args, TIMEOUT).expect("run vcurve status");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "vcurve status of an unknown study succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(stderr.contains("no study"), "the message does not say there is no such study: {stderr}");
        assert!(stderr.contains(unknown), "the message does not name the study id: {stderr}");
    }
}

/// `--store-file`: the URL is read from the file (a coordinator starts on the embedded store it
/// names); an empty or missing file stops the coordinator with a message naming the file.
#[test]
fn the_store_url_is_read_from_store_file_and_a_bad_file_is_named() {
    let dir = TestDir::new("store-file");
    let url_file = dir.path().join("store_url");
    std::fs::write(&url_file, format!("sqlite://{}\n", dir.path().join("from-file.sqlite").display())).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url_arg = url_file.to_string_lossy().into_owned();
    let mut process =
        Process::spawn(dir.path(), "coordinator", &["coordinator", "--store-file", &url_arg, "--listen", &listen]);
    process.wait_for_port(port, TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(studies(&format!("http://127.0.0.1:{port}")).is_empty());
    assert!(dir.path().join("from-file.sqlite").exists(), "the store of the file's URL was not opened");
    drop(process);

    let empty = dir.path().join("empty_url");
    std::fs::write(&empty, "\n").unwrap();
    let missing = dir.path().join("no_such_file");
    for (file, says) in [(&empty, "is empty"), (&missing, "the store file")] {
        let out =
            run_vcurve(&["coordinator", "--store-file", &file.to_string_lossy(), "--listen", "127.0.0.1:0"], TIMEOUT)
                .unwrap_or_else(|e| panic!("{e:#}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a coordinator started with --store-file {}", file.display());
        assert!(
            stderr.contains(says) && stderr.contains(&*file.to_string_lossy()),
            "the error does not name {}: {stderr}",
            file.display()
        );
    }
}
