use super::*;
use crate::jobs::{CompareLevel, MismatchKind};
use crate::replay::Normalizer;
use crate::trajectory::tests::sample;

/// The sample trajectory whose first command printed `output`, shown to the agent in the next
/// message as mini-swe-agent does.
fn printing(output: &str) -> Trajectory {
    let mut t = sample();
    t.steps[0].actions[0].output = output.to_owned();
    t.messages[3]["content"] = serde_json::Value::String(format!("<output>\n{output}</output>"));
    t
}

#[test]
fn a_65_mib_output_is_cut_to_fit_the_store_with_a_marker_and_recorded_as_cut() {
    // Issue 24: a command printing 64 MiB or more made its base run's trajectory unstorable.
    let head = "HEAD of the output\n";
    let tail = "the TAIL of the output\n";
    let output = format!("{head}{}{tail}", "x".repeat((65 << 20) - head.len() - tail.len()));
    let mut t = printing(&output);
    assert!(t.canonical_bytes().len() as u64 > 2 * (64 << 20));
    let cuts = t.fit_within(MAX_FILE_BYTES).unwrap();
    let bytes = t.canonical_bytes();
    assert!(bytes.len() as u64 <= MAX_FILE_BYTES, "{} bytes", bytes.len());
    // Both copies cut to one cap, half the limit each, not one kept whole and one emptied.
    assert_eq!(cuts.texts, 2);
    let action = &t.steps[0].actions[0];
    let omitted = action.omitted.expect("the cut is recorded in its action");
    assert_eq!(omitted.head + omitted.bytes + omitted.tail, output.len() as u64);
    assert!(omitted.head + omitted.tail > 30 << 20 && omitted.head.abs_diff(omitted.tail) <= 1, "{omitted:?}");
    assert!(action.output.starts_with(head) && action.output.ends_with(tail));
    assert!(action.output.contains(&format!("\n[vcurve: {} bytes of output omitted]\n", omitted.bytes)));
    let message = t.messages[3]["content"].as_str().unwrap();
    assert!(message.starts_with("<output>\nHEAD") && message.ends_with("TAIL of the output\n</output>"));
    assert!(message.contains(" bytes of output omitted]"));
    // The cut trajectory reads back as a valid recorded run, its cut recorded; fitting it again
    // changes nothing.
    let back = Trajectory::from_json(&bytes).unwrap();
    assert_eq!(back, t);
    let digest = t.digest();
    assert_eq!(t.fit_within(MAX_FILE_BYTES).unwrap(), Cuts::default());
    assert_eq!(t.digest(), digest);
}

#[test]
fn a_run_that_fits_is_left_as_it_is() {
    let mut t = printing(&"y".repeat(100_000));
    let before = t.clone();
    assert_eq!(t.fit_within(MAX_FILE_BYTES).unwrap(), Cuts::default());
    assert_eq!(t, before);
    // Whole outputs are recorded as before: no `omitted` field.
    assert!(!String::from_utf8(t.canonical_bytes()).unwrap().contains("omitted"));
}

#[test]
fn outputs_are_cut_at_character_boundaries_and_the_task_never() {
    let output = "é".repeat(40_000) + "\n" + &"ü".repeat(40_000);
    let mut t = printing(&output);
    let limit = 60_000;
    t.fit_within(limit).unwrap();
    assert!(t.canonical_bytes().len() as u64 <= limit);
    let action = &t.steps[0].actions[0];
    assert!(action.output.starts_with('é') && action.output.ends_with('ü'));
    let omitted = action.omitted.unwrap();
    assert_eq!(omitted.head % 2, 0, "two bytes a character");
    assert_eq!(t.task, sample().task);

    // What cannot be cut (the task's problem statement) is an error naming the sizes.
    let mut t = printing("z");
    t.task.problem_statement = Some("p".repeat(100_000));
    let err = t.fit_within(60_000).unwrap_err().to_string();
    assert!(err.contains("over the store's limit of 60000 bytes per file even with every command output"), "{err}");
}

#[test]
fn a_transcript_is_cut_alike() {
    let mut messages = vec![serde_json::json!({"role": "user", "content": "w".repeat(200_000)})];
    let cuts = fit_messages(&mut messages, 50_000).unwrap();
    assert_eq!(cuts.texts, 1);
    assert!(serde_json::to_vec(&messages).unwrap().len() <= 50_000);
    assert!(messages[0]["content"].as_str().unwrap().contains(" bytes of output omitted]"));
    assert_eq!(messages[0]["role"], "user");
}

#[test]
fn a_cut_record_is_replayed_against_an_output_cut_alike() {
    let output = format!("start\n{}\nend {}\n", "m".repeat(100_000), "n".repeat(1_000));
    let mut t = printing(&output);
    t.fit_within(40_000).unwrap();
    let recorded = t.steps[0].actions[0].clone();
    assert!(recorded.omitted.is_some());
    let n = Normalizer::default();
    // The same output replayed: its cut is the record.
    assert_eq!(n.compare_action(&recorded, &output, Some(0), false), Ok(CompareLevel::Exact));
    // The record itself (a replay that printed the marker) matches too.
    assert_eq!(n.compare_action(&recorded, &recorded.output, Some(0), false), Ok(CompareLevel::Exact));
    // A change in the head, in the tail, or in the length is a changed observation.
    for changed in [output.replace("start", "begin"), output.replace("end ", "fin "), format!("{output}more\n")] {
        let m = n.compare_action(&recorded, &changed, Some(0), false).unwrap_err();
        assert_eq!(m.kind, MismatchKind::Observation, "{changed:.20}");
    }
    // A change inside what was left out, of the same length, is not seen: the record kept only
    // the head, the tail and the number of bytes between (docs/decisions.md).
    let middle = format!(
        "start\n{}{}{}\nend {}\n",
        "m".repeat(40_000),
        "q".repeat(20_000),
        "m".repeat(40_000),
        "n".repeat(1_000)
    );
    assert_eq!(n.compare_action(&recorded, &middle, Some(0), false), Ok(CompareLevel::Exact));
}

#[test]
fn an_output_cut_for_the_agent_and_cut_again_to_fit_still_replays_against_the_whole_output() {
    let output = format!("begin\n{}\nfinish\n", "k".repeat(300_000));
    // The worker handed the agent 100,000 bytes of it, and recorded the cut.
    let (handed, first) = Omitted::cut_to(&output, 50_000, 50_000).unwrap();
    let mut t = printing(&handed);
    t.steps[0].actions[0].omitted = Some(first);
    let cuts = t.fit_within(60_000).unwrap();
    assert!(t.canonical_bytes().len() <= 60_000);
    let action = &t.steps[0].actions[0];
    let again = action.omitted.unwrap();
    // Still counted from the whole output.
    assert_eq!(again.head + again.bytes + again.tail, output.len() as u64);
    assert!(again.head < first.head && again.tail < first.tail, "{again:?}");
    assert!(cuts.bytes > 0 && cuts.bytes < again.bytes);
    assert_eq!(action.output, again.cut(&output), "the record is the whole output cut so");
    let n = Normalizer::default();
    assert_eq!(n.compare_action(action, &output, Some(0), false), Ok(CompareLevel::Exact));
    let longer = format!("{output}x");
    assert!(n.compare_action(action, &longer, Some(0), false).is_err());
}
