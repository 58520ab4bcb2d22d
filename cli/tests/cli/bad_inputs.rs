//! Unbounded inputs as a user would give them, to the `vcurve` binary: `/dev/zero`, a FIFO, a
//! directory, a file over its limit, YAML nested 100,000 levels deep, given as each file a command
//! reads. Each is refused with a message naming the file, what it is and the limit, and nothing is
//! read from it (a FIFO nobody writes to would block a reader forever; `/dev/zero` would fill the
//! memory).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::write;

/// Long enough for any refusal on any machine; only a reader stuck on its input gets near it.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Run `vcurve` to its end; a run that outlives [`HANG_GUARD`] is killed and fails the test.
fn vcurve(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vcurve");
    let start = Instant::now();
    while child.try_wait().expect("wait for vcurve").is_none() {
        if start.elapsed() > HANG_GUARD {
            child.kill().expect("kill vcurve");
            let _ = child.wait();
            panic!("vcurve {} was still running after {HANG_GUARD:?}: it is stuck on its input", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("vcurve's output")
}

/// `vcurve args` fails, and its message mentions each of `parts`.
#[track_caller]
fn assert_refused(args: &[&str], parts: &[&str]) {
    let out = vcurve(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "vcurve {} succeeded: {}", args.join(" "), String::from_utf8_lossy(&out.stdout));
    for part in parts {
        assert!(stderr.contains(part), "vcurve {}: the message does not mention {part:?}: {stderr}", args.join(" "));
    }
}

/// The bad inputs: `/dev/zero`, a FIFO and a directory, with what the message calls each.
struct Bad {
    _dir: tempfile::TempDir,
    fifo: PathBuf,
    dir: PathBuf,
}

impl Bad {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("input.fifo");
        let status = Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
        assert!(status.success());
        let sub = dir.path().join("folder");
        std::fs::create_dir(&sub).unwrap();
        Bad { _dir: dir, fifo, dir: sub }
    }

    fn cases(&self) -> [(String, &'static str); 3] {
        [
            ("/dev/zero".to_string(), "a character device"),
            (self.fifo.display().to_string(), "a FIFO"),
            (self.dir.display().to_string(), "a directory"),
        ]
    }
}

const TRAJECTORIES: &str = "trajectory,length,shape,t_star,decisive_a,decisive_b,pnr\na,20,cliff,11,10,11,11\n";
const LABELS: &str = "trajectory,source,step\na,J,5\n";
const POINTS: &str = "t,n,successes\n0,10,9\n19,10,1\n";

#[test]
fn vcurve_labels_refuses_every_file_that_is_not_a_regular_file() {
    let bad = Bad::new();
    let dir = tempfile::tempdir().unwrap();
    let trajectories = write(dir.path(), "trajectories.csv", TRAJECTORIES);
    let labels = write(dir.path(), "labels.csv", LABELS);
    let (t, l) = (trajectories.to_str().unwrap(), labels.to_str().unwrap());
    for (path, found) in bad.cases() {
        let named = [path.as_str(), found, "not a regular file"];
        assert_refused(&["labels", "--trajectories", t, "--labels", &path], &named);
        assert_refused(&["labels", "--trajectories", &path, "--labels", l], &named);
        assert_refused(&["labels", "--trajectories", t, "--labels", l, "--curves", &path], &named);
        assert_refused(&["labels", "--trajectories", t, "--labels", l, "--thresholds", &path], &named);
    }
}

#[test]
fn vcurve_analyze_refuses_every_file_that_is_not_a_regular_file() {
    let bad = Bad::new();
    let dir = tempfile::tempdir().unwrap();
    let points = write(dir.path(), "points.csv", POINTS);
    let p = points.to_str().unwrap();
    for (path, found) in bad.cases() {
        let named = [path.as_str(), found, "not a regular file"];
        assert_refused(&["analyze", "--points", &path, "--length", "20"], &named);
        assert_refused(&["analyze", "--points", p, "--length", "20", "--base-runs", &path], &named);
        assert_refused(&["analyze", "--points", p, "--length", "20", "--thresholds", &path], &named);
    }
}

#[test]
fn a_file_over_its_limit_is_refused_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let huge = |name: &str, size: u64| {
        let path = dir.path().join(name);
        std::fs::File::create(&path).unwrap().set_len(size).unwrap(); // sparse: nothing is written
        path.to_str().unwrap().to_string()
    };
    let csv = huge("labels.csv", vcurve_cli::input::MAX_CSV_BYTES + 1);
    let trajectories = write(dir.path(), "trajectories.csv", TRAJECTORIES);
    assert_refused(
        &["labels", "--trajectories", trajectories.to_str().unwrap(), "--labels", &csv],
        &[&csv, "268435457 bytes, over the limit of 268435456 bytes (256 MiB)"],
    );
    let thresholds = huge("thresholds.yaml", vcurve_cli::input::MAX_THRESHOLDS_BYTES + 1);
    let points = write(dir.path(), "points.csv", POINTS);
    assert_refused(
        &["analyze", "--points", points.to_str().unwrap(), "--length", "20", "--thresholds", &thresholds],
        &[&thresholds, "1048577 bytes, over the limit of 1048576 bytes (1 MiB)"],
    );
    let spec = huge("spec.yaml", vcurve_coordinator::spec::MAX_SPEC_BYTES + 1);
    assert_refused(
        &["launch", &spec, "--coordinator", "http://127.0.0.1:1"],
        &["the study spec", &spec, "16777217 bytes, over the limit of 16777216 bytes (16 MiB)"],
    );
}

#[test]
fn deeply_nested_yaml_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let deep = write(dir.path(), "deep.yaml", &"[".repeat(100_000));
    let deep = deep.to_str().unwrap();
    let named = [deep, "100000 levels deep", "over the limit of 64 levels"];
    assert_refused(&["launch", deep, "--coordinator", "http://127.0.0.1:1"], &named);
    let points = write(dir.path(), "points.csv", POINTS);
    assert_refused(&["analyze", "--points", points.to_str().unwrap(), "--length", "20", "--thresholds", deep], &named);
}

/// A valid one-trajectory spec whose curve is `curve`.
fn spec_with_curve(dir: &Path, curve: &str) -> String {
    let yaml = format!(
        "name: bad\nseed: 1\nrunner: {{kind: synthetic, duration_ms: 1, no_outcome_rate: 0.0}}\n\
         trajectories:\n  - id: a\n    length: 3\n    curve: {curve}\n"
    );
    write(dir, "spec.yaml", &yaml).to_str().unwrap().to_string()
}

#[test]
fn vcurve_launch_refuses_a_spec_or_curve_that_is_not_a_regular_file_before_any_network() {
    let bad = Bad::new();
    let dir = tempfile::tempdir().unwrap();
    for (path, found) in bad.cases() {
        // The spec itself. The coordinator's address is unreachable: the refusal comes first.
        assert_refused(
            &["launch", &path, "--coordinator", "http://127.0.0.1:1"],
            &["cannot read the study spec", &path, found, "not a regular file"],
        );
        // A curve it names.
        let spec = spec_with_curve(dir.path(), &path);
        assert_refused(
            &["launch", &spec, "--coordinator", "http://127.0.0.1:1"],
            &["trajectory \"a\"", &path, found, "not a regular file"],
        );
    }
}

#[test]
fn vcurve_launch_validates_a_restart_check_spec_locally_and_sends_a_valid_one() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "restart_check: {of: s-1, runs: 0}\n").unwrap();
    let bad = bad.to_string_lossy().into_owned();
    // Refused before any network (nothing listens on port 1).
    assert_refused(&["launch", &bad, "--coordinator", "http://127.0.0.1:1"], &["bad.yaml", "restart_check.runs"]);
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "restart_check: {of: s-1, runs: 8}\n").unwrap();
    let good = good.to_string_lossy().into_owned();
    let out = vcurve(&["launch", &good, "--coordinator", "http://127.0.0.1:1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("restart_check"), "a valid restart-check spec was refused locally: {stderr}");
}
