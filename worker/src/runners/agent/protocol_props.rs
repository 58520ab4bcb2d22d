//! Properties of the agent protocol's line reading and parsing over arbitrary input (issue 24):
//! whatever an agent writes, the worker never panics; an over-long line, a line that is not
//! UTF-8 or not a JSON object is a protocol error naming its line; the lines within the limit come
//! back exactly as written.

use proptest::prelude::*;

use super::lines::{LineError, LineReader};
use super::messages::parse_message;

/// A line read and what parsing it gave (`Err` with the protocol error).
type Parsed = (Vec<u8>, Result<(), String>);

/// What the worker makes of `input`, read `chunk` bytes at a time under the line limit `max`:
/// each line's parse (`Ok` with its bytes, `Err` with the protocol error), ending with the
/// reader's error if there is one.
fn read_all(input: &[u8], chunk: usize, max: usize) -> (Vec<Parsed>, Option<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    runtime.block_on(async {
        let mut reader = LineReader::new(tokio::io::BufReader::with_capacity(chunk, input), max);
        let mut out = Vec::new();
        loop {
            match reader.next_line().await {
                Ok(Some(line)) => {
                    let parsed = parse_message(&line).map(|_| ());
                    out.push((line, parsed));
                }
                Ok(None) => return (out, None),
                Err(LineError::TooLong) => return (out, Some(format!("line {} is too long", reader.line_no + 1))),
                Err(LineError::Io(e)) => return (out, Some(e.to_string())),
            }
        }
    })
}

/// Lines an agent might write: protocol messages, near-misses, garbage and invalid UTF-8.
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(br#"{"type": "exec", "command": "ls", "timeout_s": 5}"#.to_vec()),
        Just(br#"{"type": "step", "messages": [{"role": "assistant", "content": "x"}]}"#.to_vec()),
        Just(br#"{"type": "final", "end_type": "submitted", "submission": null, "messages": []}"#.to_vec()),
        Just(br#"{"type": "exec", "command": 7}"#.to_vec()),
        Just(br#"{"type": "start"}"#.to_vec()),
        Just(b"[1, 2]".to_vec()),
        Just(b"\xff\xfe{\"type\": \"step\"}".to_vec()),
        "[ -~]{0,40}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..80),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_lines_come_back_as_written(
        input in proptest::collection::vec(any::<u8>(), 0..600),
        chunk in 1usize..64,
        max in 0usize..100,
    ) {
        let (lines, error) = read_all(&input, chunk, max);
        // The lines read are the input's, in order, each within the limit.
        let mut expected = input.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect::<Vec<_>>();
        if input.ends_with(b"\n") || input.is_empty() {
            expected.pop();
        }
        for (i, (line, _)) in lines.iter().enumerate() {
            prop_assert_eq!(line, &expected[i]);
            prop_assert!(line.len() <= max);
        }
        match error {
            // Reading stopped at the first line over the limit.
            Some(e) => {
                prop_assert!(e.contains("too long"), "{}", e);
                prop_assert!(expected[lines.len()].len() > max);
            }
            None => prop_assert_eq!(lines.len(), expected.len()),
        }
    }

    #[test]
    fn every_bad_line_is_a_protocol_error_and_every_line_over_the_limit_stops_the_reading(
        lines in proptest::collection::vec(line(), 0..12),
        chunk in 1usize..128,
        max in 20usize..120,
        terminated in any::<bool>(),
    ) {
        let mut input = lines.join(&b'\n');
        // An unterminated empty last line is no line at all.
        if (terminated || lines.last().is_some_and(Vec::is_empty)) && !lines.is_empty() {
            input.push(b'\n');
        }
        let (read, error) = read_all(&input, chunk, max);
        let first_long = lines.iter().position(|l| l.len() > max);
        match first_long {
            Some(i) => {
                prop_assert_eq!(read.len(), i);
                prop_assert_eq!(error, Some(format!("line {} is too long", i + 1)));
            }
            None => {
                prop_assert!(error.is_none());
                prop_assert_eq!(read.len(), lines.len());
            }
        }
        for (line, parsed) in &read {
            let is_object = serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| v.is_object());
            if std::str::from_utf8(line).is_err() || !is_object {
                let reason = parsed.clone().expect_err("a line that is not a JSON object is a protocol error");
                prop_assert!(reason.contains("not JSON") || reason.contains("not a JSON object"), "{}", reason);
            }
        }
    }

    #[test]
    fn parse_message_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_message(&bytes);
    }
}
