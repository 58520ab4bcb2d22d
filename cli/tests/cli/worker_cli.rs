//! `vcurve worker --model-endpoint`: a value that does not parse, or names a key variable that is
//! not set, stops the worker at its start, naming the flag and what is wrong, before it reaches
//! for any coordinator (nothing listens on port 1).

use crate::common::vcurve;

#[track_caller]
fn assert_refused(args: &[&str], parts: &[&str]) {
    let out = vcurve(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "vcurve {} succeeded", args.join(" "));
    for part in parts {
        assert!(stderr.contains(part), "vcurve {}: the message does not mention {part:?}: {stderr}", args.join(" "));
    }
}

#[test]
fn a_model_endpoint_that_does_not_parse_or_whose_key_variable_is_unset_is_refused_at_the_start() {
    let worker = ["worker", "--coordinator", "http://127.0.0.1:1", "--model-endpoint"];
    let with = |value: &'static str| [&worker[..], &[value]].concat();
    assert_refused(&with("ftp://models/v1"), &["--model-endpoint", "not http or https"]);
    assert_refused(&with("http://models/v1=NOT-A-NAME"), &["--model-endpoint", "not an environment variable name"]);
    assert_refused(
        &with("http://models/v1=VCURVE_TEST_UNSET_MODEL_KEY"),
        &["--model-endpoint http://models/v1=VCURVE_TEST_UNSET_MODEL_KEY", "VCURVE_TEST_UNSET_MODEL_KEY is not set"],
    );
    let twice = [&worker[..], &["http://models/v1", "--model-endpoint", "http://models/v1/"]].concat();
    assert_refused(&twice, &["offered twice"]);
}
