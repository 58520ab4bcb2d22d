use super::*;
use crate::jobs::{CompareLevel, MismatchKind};
use crate::trajectory::{Action, Fingerprint};

fn norm() -> Normalizer {
    Normalizer::default()
}

/// A rule's name, inputs it masks (with the expected text) and inputs it must leave alone.
type RuleCase<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);

#[test]
fn each_default_rule_masks_its_context_and_nothing_else() {
    let cases: &[RuleCase<'_>] = &[
        (
            "iso8601_datetime",
            &[
                ("at 2026-12-01T11:15:48.123456+00:00 ok", "at <TIMESTAMP> ok"),
                ("2026-12-01 11:15:48,123 INFO x", "<TIMESTAMP> INFO x"),
                ("t=2026-12-01T11:15:48Z", "t=<TIMESTAMP>"),
            ],
            &["released 2026-12-01", "version 2026.12.01"],
        ),
        (
            "weekday_datetime",
            &[
                ("Tue Dec  1 11:15:48 UTC 2026", "<TIMESTAMP>"),
                ("Date:   Tue Dec 1 11:15:48 2026 +0000", "Date:   <TIMESTAMP>"),
            ],
            &["Tue Dec 1", "Meeting on Tue at 11:15"],
        ),
        (
            "rfc2822_datetime",
            &[
                ("Date: Tue, 01 Dec 2026 11:15:48 +0000", "Date: <TIMESTAMP>"),
                ("Tue, 1 Dec 2026 11:15:48 GMT", "<TIMESTAMP>"),
            ],
            &["Tue, 01 Dec 2026"],
        ),
        (
            "syslog_timestamp",
            &[("Dec  1 11:15:48 host cron: x", "<TIMESTAMP> host cron: x")],
            &["Dec 1st at noon", "December 11:15:48"],
        ),
        (
            "syslog_pid",
            &[("Dec  1 11:15:48 host sshd[1234]: ok", "<TIMESTAMP> host sshd[<PID>]: ok")],
            &["    if a[1]:", "x = b[12]: 3"],
        ),
        (
            "ls_mtime",
            &[
                ("-rw-r--r-- 1 root root 12 Dec  1 11:15 a.py", "-rw-r--r-- 1 root root 12 <TIMESTAMP> a.py"),
                ("drwxr-xr-x 2 root root 4096 Jan 12  2019 src", "drwxr-xr-x 2 root root 4096 <TIMESTAMP> src"),
            ],
            &["Dec 1", "in Jan 2019 we"],
        ),
        (
            "labelled_epoch",
            &[
                ("timestamp: 1764587748", "timestamp: <EPOCH>"),
                ("\"mtime\": 1764587748.25,", "\"mtime\": <EPOCH>,"),
                ("created=1764587748123", "created=<EPOCH>"),
            ],
            &["1764587748", "id: 1764587748", "time: 17645877"],
        ),
        (
            "bash_time_report",
            &[("real\t0m0.012s\nuser\t0m0.004s\nsys\t0m0.000s", "real\t<DURATION>\nuser\t<DURATION>\nsys\t<DURATION>")],
            &["surreal 0m0.012 seconds"],
        ),
        (
            "unittest_ran",
            &[
                ("Ran 3 tests in 0.001s", "Ran 3 tests in <DURATION>"),
                ("Ran 1 test in 12s", "Ran 1 test in <DURATION>"),
            ],
            &["Ran 3 tests", "Ran in 3 tests"],
        ),
        (
            "pytest_duration",
            &[
                ("==== 3 passed, 1 warning in 0.12s ====", "==== 3 passed, 1 warning in <DURATION> ===="),
                ("1 failed in 61.02s (0:01:01)", "1 failed in <DURATION>"),
                ("2 passed in 0.35 seconds", "2 passed in <DURATION>"),
                ("no tests ran in 0.01s", "no tests ran in <DURATION>"),
            ],
            &["3 passed", "failed in 3 places"],
        ),
        (
            "labelled_duration",
            &[
                ("took 1.2 seconds", "took <DURATION>"),
                ("Elapsed: 35ms", "Elapsed: <DURATION>"),
                ("Finished in 2 s", "Finished in <DURATION>"),
            ],
            &["took 3 apples", "duration of the task"],
        ),
        (
            "timeit_loop",
            &[("1000 loops, best of 5: 12.3 usec per loop", "1000 loops, best of 5: <DURATION> per loop")],
            &["best of 5 tries"],
        ),
        (
            "fractional_duration",
            &[("step 0.0123s", "step <DURATION>"), ("12.5ms each", "<DURATION> each"), ("3.1µs", "<DURATION>")],
            &["timeout 5s", "version 1.2", "v1.2.3s"],
        ),
        ("python_tempfile", &[("/tmp/tmpab12cd_x/a.py", "/tmp/<TMP>/a.py")], &["/tmp/tmpfile", "/testbed/tmpab12cd_x"]),
        ("mktemp_default", &[("/tmp/tmp.Xq3ZkPa9Lm", "/tmp/<TMP>")], &["/tmp/tmp.txt"]),
        (
            "pip_tempdir",
            &[
                ("/tmp/pip-install-ab12cd34/x", "/tmp/pip-install-<TMP>/x"),
                ("/tmp/pip-req-build-x1y2z3w4", "/tmp/pip-req-build-<TMP>"),
            ],
            &["/tmp/pip-install-log"],
        ),
        (
            "pytest_basetemp",
            &[("/tmp/pytest-of-root/pytest-3/test_a0/f.txt", "<TMP>/test_a0/f.txt")],
            &["/tmp/pytest-of-root", "/testbed/pytest-3"],
        ),
        (
            "repr_address",
            &[
                ("<function f at 0x7f3a2b1c4d50>", "<function f at <ADDR>>"),
                ("<object at 0x10a>", "<object at <ADDR>>"),
            ],
            &["at 0xyz", "look at 0 x"],
        ),
        (
            "hex_address",
            &[
                ("ptr 0x7f3a2b1c", "ptr <ADDR>"),
                ("Thread 0x00007f3a2b1c4d50 (most recent)", "Thread <ADDR> (most recent)"),
            ],
            &["flags 0xff", "mask 0x1234567", "7f3a2b1c4d50"],
        ),
        (
            "git_commit_label",
            &[
                ("commit 3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345", "commit <HASH>"),
                ("HEAD is now at 3f2a1b9 Fix", "HEAD is now at <HASH> Fix"),
                ("revision: abcdef0", "revision: <HASH>"),
            ],
            &["commit the change", "commit abc", "3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345"],
        ),
        (
            "git_commit_summary",
            &[
                ("[main 3f2a1b9] Fix it", "[main <HASH>] Fix it"),
                ("[main (root-commit) 3f2a1b9] x", "[main (root-commit) <HASH>] x"),
            ],
            &["[main] 3f2a1b9", "x [main 3f2a1b9]"],
        ),
        (
            "git_index_line",
            &[("index 3f2a1b9..9c8d7e6 100644", "index <HASH>..<HASH> 100644")],
            &["the index 3f2a1b9..9c8d7e6", "index 1..2"],
        ),
        (
            "git_stash_wip",
            &[
                (
                    "Saved working directory and index state WIP on main: 3f2a1b9 msg",
                    "Saved working directory and index state WIP on main: <HASH> msg",
                ),
                ("stash@{0}: WIP on main: 3f2a1b9 msg", "stash@{0}: WIP on main: <HASH> msg"),
            ],
            &["WIP on main: not a hash"],
        ),
        (
            "git_stash_dropped",
            &[("Dropped refs/stash@{0} (3f2a1b9c0d4e5f60718293a4b5c6d7e8f9012345)", "Dropped refs/stash@{0} (<HASH>)")],
            &["Dropped refs/stash@{0} (3f2a1b9)"],
        ),
        (
            "digest_label",
            &[
                ("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "sha256:<HASH>"),
                ("md5=0123456789abcdef0123456789abcdef", "md5=<HASH>"),
            ],
            &["sha256:abc", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"],
        ),
        ("uuid", &[("id 123e4567-e89b-42d3-a456-426614174000 ok", "id <UUID> ok")], &["123e4567-e89b-42d3-a456"]),
        (
            "labelled_pid",
            &[
                ("pid 1234", "pid <PID>"),
                ("PID: 1234", "PID: <PID>"),
                ("worker pid=77 ppid=1", "worker pid=<PID> ppid=<PID>"),
                ("process id 99", "process id <PID>"),
            ],
            &["rapid 1234", "pids 12"],
        ),
        ("job_control_pid", &[("[1] 12345", "[1] <PID>")], &["x [1] 12345", "[1]+  Done   python x.py"]),
        (
            "ephemeral_port",
            &[("http://127.0.0.1:45123/", "http://127.0.0.1:<PORT>/"), ("localhost:32768", "localhost:<PORT>")],
            &["127.0.0.1:8000", "localhost:32767", "localhost:61000", "10.0.0.1:45123"],
        ),
        ("randomly_seed", &[("Using --randomly-seed=2847562", "Using --randomly-seed=<SEED>")], &["--randomly-seed"]),
        (
            "pip_progress_bar",
            &[
                ("   ━━━━━━━━━━━━━━━━━━━━ 806.6/806.6 kB 3.4 MB/s eta 0:00:00", "   <PROGRESS>"),
                ("━━━━━━━━━━╸━━━━━━━━━ 1.2/2.5 MB 812.3 kB/s eta -:--:--", "<PROGRESS>"),
            ],
            &["━━━ section ━━━", "806.6/806.6 kB"],
        ),
        (
            "curl_progress_meter",
            &[(
                "100  1234  100  1234    0     0  45678      0 --:--:-- --:--:-- --:--:-- 46000",
                "100  1234  100  1234    0     0 <PROGRESS>",
            )],
            &[
                "100  1234  100  1234",
                "  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current",
            ],
        ),
        (
            "wget_rate_time",
            &[("     0K .......... .......... 100% 1.23M=0.01s", "     0K .......... .......... 100% <RATE>")],
            &["100% done", "100% 1.23M"],
        ),
        (
            "transfer_rate",
            &[
                ("(1.23 MB/s) - 'x' saved [1234/1234]", "(<RATE>) - 'x' saved [1234/1234]"),
                (
                    "Receiving objects: 100% (12/12), 1.20 MiB | 3.4MiB/s, done.",
                    "Receiving objects: 100% (12/12), 1.20 MiB | <RATE>, done.",
                ),
                ("at 120 B/s", "at <RATE>"),
            ],
            &["Downloading x.whl (806 kB)", "1.20 MiB", "KB/sec is not a unit here: 5 KB/sec"],
        ),
        (
            "pip_built_wheel_size",
            &[(
                "Created wheel for astropy: filename=astropy-0.0.0-0.editable-cp311-cp311-linux_x86_64.whl size=6484 sha256=0d7057addaa2e094eff0c1e60b7cb0fcbf55668485c560e7060fac58d02f114a",
                "Created wheel for astropy: filename=astropy-0.0.0-0.editable-cp311-cp311-linux_x86_64.whl size=<SIZE> sha256=<HASH>",
            )],
            &["size=6484", "filename=x.whl size=12"],
        ),
    ];
    let n = norm();
    let names: Vec<&str> = n.rule_names().collect();
    for (name, positives, negatives) in cases {
        assert!(names.contains(name), "no rule {name}");
        for (input, expected) in *positives {
            assert_eq!(n.normalize(input), *expected, "rule {name} on {input:?}");
        }
        for input in *negatives {
            assert_eq!(n.normalize(input), *input, "rule {name} must leave {input:?} alone");
        }
    }
    // Every shipped rule has its cases.
    for name in &names {
        assert!(cases.iter().any(|(c, _, _)| c == name), "rule {name} has no test cases");
    }
    assert!(names.len() >= 26, "{} rules", names.len());
}

#[test]
fn a_random_token_is_never_masked() {
    let n = norm();
    for token in
        ["qXkzpTmwbRhavLcYeJdnUgFs", "vjqmzkxwbrtlhpyfdgcsnaeu", "QWERTYUIOPASDFGHJKLZXCVB", "a8f3k2m9q1w7e5r4t6y0u2i3"]
    {
        for text in [token.to_owned(), format!("token: {token}\n"), format!("savepoint s{token}_x1")] {
            assert_eq!(n.normalize(&text), text);
        }
    }
}

#[test]
fn rule_files_are_checked() {
    let rule = |name: &str, pattern: &str| Rule { name: name.into(), pattern: pattern.into(), replacement: "X".into() };
    let err = Normalizer::new(&[rule("broken", "(unclosed")]).unwrap_err();
    assert!(err.contains("\"broken\"") && err.contains("does not compile"), "{err}");
    let err = Normalizer::new(&[rule("empty", "a*")]).unwrap_err();
    assert!(err.contains("\"empty\"") && err.contains("empty string"), "{err}");
    let err = Normalizer::new(&[rule("twice", "a"), rule("twice", "b")]).unwrap_err();
    assert!(err.contains("twice"), "{err}");
    assert!(Normalizer::new(&[rule(" ", "a")]).unwrap_err().contains("empty name"));
    let err = Normalizer::from_yaml("- name: x\n  pattern: a\n").unwrap_err();
    assert!(err.contains("replacement"), "{err}");
    let err = Normalizer::from_yaml("- name: x\n  pattern: a\n  replacement: b\n  extra: 1\n").unwrap_err();
    assert!(err.contains("extra"), "{err}");
    // Rules apply in order, with groups.
    let n = Normalizer::from_yaml(
        "- {name: a, pattern: 'id=(\\d+)', replacement: 'id=<${1}>'}\n- {name: b, pattern: '<\\d+>', replacement: N}\n",
    )
    .unwrap();
    assert_eq!(n.normalize("id=42 id=7"), "id=N id=N");
}

#[test]
fn comparison_levels() {
    assert_eq!(compare("a\nb\n", "a\nb\n"), Some(CompareLevel::Exact));
    assert_eq!(compare("", ""), Some(CompareLevel::Exact));
    assert_eq!(compare("a\nb\nc", "c\na\nb"), Some(CompareLevel::SortedLines));
    // A line whose content changed never matches, even with the same characters (issue 24):
    // `char_multiset` accepts nothing any more.
    assert_eq!(compare("b.py a.py", "a.py b.py"), None);
    assert_eq!(compare("ab\n", "ba\n"), None);
    assert_eq!(compare("a + b", "b + a"), None);
    assert_eq!(compare("x = a + b\ny = 1\n", "y = 1\nx = b + a\n"), None);
    // Reordered whole lines still match, trailing newline and all.
    assert_eq!(compare("x = a + b\ny = 1\n", "y = 1\nx = a + b\n"), Some(CompareLevel::SortedLines));
    assert_eq!(compare("a\nb", "a\nc"), None);
    assert_eq!(compare("a\nb\n", "a\nb"), None);
    assert_eq!(compare("a", "a\n"), None);
    assert_eq!(compare("µa", "aµ"), None);
    assert_eq!(compare("µ\na", "a\nµ"), Some(CompareLevel::SortedLines));
    // Normalization first.
    let n = norm();
    assert_eq!(n.compare("done in 0.12s", "done in 0.98s"), Some(CompareLevel::Exact));
    assert_eq!(n.compare("took 1 s\nx", "x\ntook 2 s"), Some(CompareLevel::SortedLines));
}

fn action(output: &str, returncode: Option<i32>, timed_out: bool) -> Action {
    Action {
        command: "run".into(),
        timeout_s: 10.0,
        output: output.into(),
        returncode,
        timed_out,
        exception: None,
        omitted: None,
    }
}

#[test]
fn actions_are_checked_for_output_code_and_timeout() {
    let n = norm();
    assert_eq!(n.compare_action(&action("ok\n", Some(0), false), "ok\n", Some(0), false), Ok(CompareLevel::Exact));
    assert_eq!(
        n.compare_action(&action("1 passed in 0.1s\n", Some(0), false), "1 passed in 0.3s\n", Some(0), false),
        Ok(CompareLevel::Exact)
    );
    let m = n.compare_action(&action("token abc\n", Some(0), false), "token xyz\n", Some(0), false).unwrap_err();
    assert_eq!(m.level, CompareLevel::SortedLines);
    assert_eq!((m.kind, m.command.as_deref()), (MismatchKind::Observation, Some("run")));
    assert!(m.reason.contains("output differs") && m.reason.contains("line 1"), "{}", m.reason);
    assert!(m.recorded_excerpt.contains("abc") && m.replayed_excerpt.contains("xyz"));
    let m = n.compare_action(&action("b\na\n", Some(0), false), "a\nb\n", Some(1), false).unwrap_err();
    assert_eq!(m.level, CompareLevel::SortedLines);
    assert_eq!(m.kind, MismatchKind::Returncode);
    assert!(m.reason.contains("return code 0 recorded, 1 replayed"), "{}", m.reason);
    let m = n.compare_action(&action("partial", None, true), "partial", Some(0), false).unwrap_err();
    assert_eq!(m.kind, MismatchKind::Timeout);
    assert!(m.reason.contains("recorded command timed out"), "{}", m.reason);
    // A changed line with the same characters is a changed observation (issue 24).
    let m = n.compare_action(&action("a + b\n", Some(0), false), "b + a\n", Some(0), false).unwrap_err();
    assert_eq!((m.kind, m.level), (MismatchKind::Observation, CompareLevel::SortedLines));
    assert!(m.reason.contains("output differs at every level (first at line 1)"), "{}", m.reason);
    // Output and return code both differ: the output is what differed first.
    let m = n.compare_action(&action("a\n", Some(0), false), "b\n", Some(2), false).unwrap_err();
    assert_eq!(m.kind, MismatchKind::Observation);
    assert_eq!(n.compare_action(&action("partial", None, true), "partial", None, true), Ok(CompareLevel::Exact));
    let m = n.compare_action(&action("x", Some(0), false), "x", None, true).unwrap_err();
    assert!(m.reason.contains("replayed command timed out"), "{}", m.reason);
    let report = m.at_step(7);
    assert_eq!(report.step, 7);
    assert_eq!((report.mismatch, report.command.as_deref()), (Some(MismatchKind::Timeout), Some("run")));
    // A long command is clipped.
    let long = Action { command: "x".repeat(1000), ..action("a", Some(0), false) };
    let m = n.compare_action(&long, "b", Some(0), false).unwrap_err();
    assert_eq!(m.command.unwrap().chars().count(), crate::jobs::COMMAND_CHARS + 1);
}

fn fp(paths: &[&str], code: Option<i32>, diff: &str, status: &str) -> Fingerprint {
    Fingerprint {
        changed_paths: paths.iter().map(|p| p.to_string()).collect(),
        returncode: code,
        git_diff: diff.into(),
        git_status: status.into(),
    }
}

#[test]
fn fingerprint_paths_leave_out_caches_logs_and_parents() {
    let paths = [
        "/testbed",
        "/testbed/src",
        "/testbed/src/a.py",
        "/testbed/src/__pycache__",
        "/testbed/src/__pycache__/a.cpython-311.pyc",
        "/testbed/old.pyc",
        "/testbed/.pytest_cache/v/cache/lastfailed",
        "/testbed/.git/index",
        "/testbed/.git",
        "/testbed/.coverage.host.12.xyz",
        "/testbed/src-extra",
        "/root",
        "/root/.cache/pip/x",
        "/home/u/.cache/y",
        "/tmp",
        "/tmp/tmpab12cd_x",
        "/var/log/dpkg.log",
        "/var/cache/apt",
        "/etc/hosts",
        "/etc/passwd",
        "/testbed/new_dir/",
        "/testbed/src/a.py",
    ];
    assert_eq!(
        fingerprint_paths(paths),
        ["/etc/passwd", "/testbed/new_dir", "/testbed/src-extra", "/testbed/src/a.py"]
    );
    assert!(is_excluded_path("src/__pycache__/"));
    assert!(is_excluded_path("/tmp"));
    assert!(!is_excluded_path("/tmpfile"));
    assert!(!is_excluded_path("/testbed/cache.py"));
}

#[test]
fn fingerprints_match_after_normalization_and_name_what_differs() {
    let n = norm();
    let diff = "diff --git a/x.py b/x.py\nindex 3f2a1b9..9c8d7e6 100644\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n";
    let recorded = fp(&["/testbed", "/testbed/x.py"], Some(0), diff, " M x.py\n?? src/__pycache__/\n");
    let same = fp(&["/testbed/x.py", "/tmp/tmpzz99yy00"], Some(0), &diff.replace("3f2a1b9", "1234567"), " M x.py\n");
    assert_eq!(n.compare_fingerprint(&recorded, &same), Ok(()));

    let err = n.compare_fingerprint(&recorded, &fp(&["/testbed/y.py"], Some(0), diff, " M x.py\n")).unwrap_err();
    assert!(err.contains("missing in the replay: /testbed/x.py"), "{err}");
    let m = n.check_fingerprint(&recorded, &fp(&["/testbed/y.py"], Some(0), diff, " M x.py\n")).unwrap_err();
    assert_eq!((m.kind, m.command.as_deref()), (MismatchKind::ChangedPaths, None));
    assert_eq!(m.with_command("echo y > y.py").at_step(2).command.as_deref(), Some("echo y > y.py"));
    let m = n.check_fingerprint(&recorded, &fp(&["/testbed/x.py"], Some(1), diff, " M x.py\n")).unwrap_err();
    assert_eq!((m.kind, m.with_command("").command), (MismatchKind::Returncode, None));
    assert!(err.contains("only in the replay: /testbed/y.py"), "{err}");

    let err = n.compare_fingerprint(&recorded, &fp(&["/testbed/x.py"], Some(1), diff, " M x.py\n")).unwrap_err();
    assert!(err.contains("return code 0 recorded, 1 replayed"), "{err}");

    let m = n.check_fingerprint(&recorded, &fp(&["/testbed/x.py"], Some(0), &diff.replace("+b", "+c"), " M x.py\n"));
    let m = m.unwrap_err();
    assert_eq!((m.level, m.kind), (CompareLevel::Fingerprint, MismatchKind::GitDiff));
    assert!(m.reason.contains("git diff differs (first at line 7)"), "{}", m.reason);
    assert!(m.recorded_excerpt.contains("+b") && m.replayed_excerpt.contains("+c"));

    let changed = fp(&["/testbed/x.py"], Some(0), diff, " M x.py\n?? y.py\n");
    assert_eq!(n.check_fingerprint(&recorded, &changed).unwrap_err().kind, MismatchKind::GitStatus);
    let err = n.compare_fingerprint(&recorded, &changed).unwrap_err();
    assert!(err.contains("git status differs"), "{err}");
    assert!(!err.contains("git diff"), "{err}");
}

#[test]
fn excerpts_surround_the_first_difference() {
    let rec: String = (0..100).map(|i| format!("line {i}\n")).collect();
    let rep = rec.replace("line 50\n", "line fifty\n");
    let (a, b) = excerpt(&rec, &rep);
    assert!(a.starts_with("…line 48\nline 49\nline 50\n"), "{a:?}");
    assert!(b.starts_with("…line 48\nline 49\nline fifty\n"), "{b:?}");
    assert!(a.chars().count() <= EXCERPT_CHARS + 2 && a.ends_with('…'));
    // One long line: the window starts shortly before the difference.
    let long_a = format!("{}X{}", "a".repeat(5000), "b".repeat(5000));
    let long_b = format!("{}Y{}", "a".repeat(5000), "b".repeat(5000));
    let (a, b) = excerpt(&long_a, &long_b);
    assert!(a.contains('X') && b.contains('Y'));
    assert!(a.chars().count() <= EXCERPT_CHARS + 2);
    // Short and equal texts come whole.
    assert_eq!(excerpt("ok\n", "ok\n"), ("ok\n".to_owned(), "ok\n".to_owned()));
    assert_eq!(excerpt("", "x"), (String::new(), "x".to_owned()));
}

#[test]
fn normalizes_real_looking_outputs() {
    let n = norm();
    let recorded = "============================= test session starts ==============================\n\
platform linux -- Python 3.9.20, pytest-7.4.0, pluggy-1.3.0\n\
rootdir: /testbed\n\
collected 2 items\n\n\
tests/test_a.py .F                                                       [100%]\n\n\
E       AssertionError: <Table object at 0x7f3a2b1c4d50> != 3\n\
========================= 1 failed, 1 passed in 0.43s ==========================\n";
    let replayed = recorded.replace("0x7f3a2b1c4d50", "0x7f99aa001122").replace("0.43s", "0.51s");
    assert_eq!(n.compare(recorded, &replayed), Some(CompareLevel::Exact));
}
