use serde_json::{Value, json};
use vcurve_method::task_state::View;

use super::views::{RenderedView, TEXT_VIEWS, VIEWS_VERSION, approx_tokens, blocks, render, render_all};
use super::*;

const EXAMPLE: &str = include_str!("../../tests/fixtures/session/example-messages.json");

fn example() -> Session {
    messages::parse(EXAMPLE.as_bytes()).unwrap()
}

fn example_value() -> Value {
    serde_json::from_str(EXAMPLE).unwrap()
}

/// Whether every block of `poorer` appears in `richer`, in the same order.
fn nested(poorer: &[String], richer: &[String]) -> bool {
    let mut rest = richer.iter();
    poorer.iter().all(|block| rest.any(|b| b == block))
}

fn b(session: &Session, view: View, k: u32) -> Vec<String> {
    blocks(session, view, k).unwrap()
}

#[test]
fn the_example_session_parses_into_four_turns() {
    let s = example();
    assert_eq!(s.task.id, "demo__pkg-7");
    assert_eq!(s.system.as_deref(), Some("You are a careful software engineer working in a terminal."));
    assert_eq!(s.checkpoints(), 4);
    let instructions: Vec<&str> = s.turns.iter().map(|t| t.instruction.as_str()).collect();
    assert_eq!(
        instructions,
        [
            "Investigate; do not modify code",
            "Implement a fix",
            "Run tests and report the result",
            "Assess remaining risk"
        ]
    );
    let t1 = &s.turns[0];
    assert_eq!(t1.messages.len(), 2);
    assert!(t1.messages[0].reasoning.as_deref().unwrap().starts_with("REASONING-1"));
    assert_eq!(t1.messages[0].tool_calls[0].output, "pkg/core.py:88:def parse(text):\n");
    assert_eq!(t1.messages[1].tool_calls[0].returncode, Some(1));
    // Two calls of one message, their outputs matched by id.
    let t3 = &s.turns[2];
    assert_eq!(t3.messages[1].text, "");
    assert_eq!(t3.messages[1].tool_calls[1].output, "FAILED tests/test_legacy.py::test_strict\n");
    assert!(t3.report.reasoning.as_deref().unwrap().starts_with("REASONING-3"));
    assert_eq!(s.turns[3].report.text, "Risk is low: only parse() changed, and its tests pass.");
}

#[test]
fn a_session_round_trips_in_its_own_format() {
    let s = example();
    let bytes = s.canonical_bytes();
    assert_eq!(Session::from_json(&bytes).unwrap(), s);
    assert_eq!(Session::from_json(&bytes).unwrap().digest(), s.digest());
    assert!(crate::trajectory::is_digest(&s.digest()));
}

#[test]
fn richer_views_show_every_block_of_poorer_ones() {
    let s = example();
    for k in 1..=4 {
        let chains = [
            vec![
                View::TaskOnly,
                View::LatestReport,
                View::Reports,
                View::ReportsNarration,
                View::ReportsHeaders,
                View::Scrollback,
            ],
            vec![View::ReportsHeaders, View::FullMinusReasoning, View::Full],
            vec![View::Reports, View::ReportsLast3, View::ReportsLast10, View::FullMinusReasoning, View::Full],
        ];
        for chain in chains {
            for pair in chain.windows(2) {
                assert!(
                    nested(&b(&s, pair[0], k), &b(&s, pair[1], k)),
                    "checkpoint {k}: {} is not nested in {}",
                    pair[0],
                    pair[1]
                );
            }
        }
        for view in TEXT_VIEWS {
            assert!(nested(&b(&s, View::TaskOnly, k), &b(&s, view, k)), "task only in {view}");
        }
    }
}

#[test]
fn the_scrollback_cuts_long_outputs_to_their_head_and_tail_and_is_otherwise_in_the_full_context() {
    let s = example();
    let v = render(&s, View::Scrollback, 1).unwrap().text;
    let t = render(&s, View::FullMinusReasoning, 1).unwrap().text;
    // The traceback has 28 lines: 10 + 10 shown.
    assert!(
        v.contains(
            "  File \"pkg/core.py\", line 108, in frame_8\n[… 8 lines not shown …]\n  File \"pkg/core.py\", line 117"
        ),
        "{v}"
    );
    assert!(!v.contains("frame_12") && t.contains("frame_12"));
    assert!(v.contains("ValueError: version '1.0' has no patch component\n[exit code 1]"));
    assert!(!nested(&b(&s, View::Scrollback, 1), &b(&s, View::FullMinusReasoning, 1)));
    // Without long outputs the scrollback is nested in the full context: it lacks the system
    // prompt and the cuts only.
    let mut short = s.clone();
    short.turns[0].messages[1].tool_calls[0].output = "ValueError\n".into();
    for k in 1..=4 {
        let v = b(&short, View::Scrollback, k);
        let t = b(&short, View::FullMinusReasoning, k);
        assert!(nested(&v, &t), "checkpoint {k}");
        assert_eq!(t.len(), v.len() + 1, "checkpoint {k}: the system prompt");
        assert!(t[0].starts_with("[system]\n"));
    }
}

#[test]
fn reasoning_is_in_the_full_context_only() {
    let s = example();
    for k in 1..=4 {
        for view in TEXT_VIEWS {
            let text = render(&s, view, k).unwrap().text;
            assert_eq!(text.contains("REASONING-"), view == View::Full, "{view} at checkpoint {k}");
        }
    }
    let full = render(&s, View::Full, 4).unwrap().text;
    for marker in ["REASONING-1", "REASONING-2", "REASONING-3"] {
        assert!(full.contains(&format!("[assistant reasoning]\n{marker}")), "{marker}");
    }
    // T = T_minusR + the reasoning blocks, nothing else.
    let t: Vec<String> = b(&s, View::Full, 4).into_iter().filter(|x| !x.starts_with("[assistant reasoning]")).collect();
    assert_eq!(t, b(&s, View::FullMinusReasoning, 4));
}

#[test]
fn a_checkpoint_uses_its_turns_only() {
    let s = example();
    for view in TEXT_VIEWS {
        let text = render(&s, view, 1).unwrap().text;
        for later in ["Implement a fix", "TURN2-ONLY", "REASONING-2", "optional in parse()", "## Turn 2"] {
            assert!(!text.contains(later), "{view} at checkpoint 1 shows {later:?}");
        }
    }
    assert!(render(&s, View::Full, 2).unwrap().text.contains("TURN2-ONLY-EDIT"));
    // A later turn changes no earlier checkpoint's views.
    let mut longer = s.clone();
    longer.turns[3].report.text = "Something else.".into();
    longer.turns[1].messages[0].tool_calls[0].output = "changed".into();
    for view in TEXT_VIEWS {
        assert_eq!(render(&s, view, 1).unwrap(), render(&longer, view, 1).unwrap(), "{view}");
    }
    // The last 3 outputs are those of the last 3 calls up to the checkpoint, across turns.
    let last3 = |k| b(&s, View::ReportsLast3, k).into_iter().filter(|x| x.starts_with("$ ")).collect::<Vec<_>>();
    assert_eq!(last3(1), ["$ grep -rn \"def parse\" pkg", "$ python -c \"import pkg; pkg.parse('1.0')\""]);
    assert_eq!(
        last3(3),
        [
            "$ python -m pytest -q",
            "$ python -m pytest -q tests/test_parse.py",
            "$ python -m pytest -q tests/test_legacy.py -x"
        ]
    );
    assert_eq!(last3(4)[0], "$ python -m pytest -q tests/test_parse.py");
    let last10 = b(&s, View::ReportsLast10, 4);
    assert_eq!(last10.iter().filter(|x| x.starts_with("$ ")).count(), 8);
    assert_eq!(last10.iter().filter(|x| x.starts_with("[output]\n")).count(), 8);
    assert!(!last10.iter().any(|x| x.starts_with("[assistant]")), "the output views branch from the reports");
}

#[test]
fn the_latest_report_is_the_checkpoints_turn_alone() {
    let s = example();
    let text = render(&s, View::LatestReport, 3).unwrap().text;
    assert!(text.contains("## Turn 3\n[user]\nRun tests and report the result"));
    assert!(text.contains("[report]\nThe parser's tests pass (3 passed)."));
    assert!(!text.contains("## Turn 2") && !text.contains("optional in parse()"));
    let task_only = render(&s, View::TaskOnly, 3).unwrap().text;
    assert_eq!(
        task_only,
        "# Task demo__pkg-7\n\nparse('1.0') raises ValueError; versions without a patch number should parse.\n"
    );
    assert_eq!(task_only, render(&s, View::TaskOnly, 1).unwrap().text);
}

#[test]
fn the_reports_view_reads_as_fixed_under_views_1() {
    // A change of this text is a change of the view rules: bump VIEWS_VERSION.
    assert_eq!(VIEWS_VERSION, "views-1");
    let u = render(&example(), View::Reports, 2).unwrap();
    assert_eq!(
        u.text,
        "# Task demo__pkg-7\n\nparse('1.0') raises ValueError; versions without a patch number should parse.\n\n\
         ## Turn 1\n[user]\nInvestigate; do not modify code\n\n\
         [report]\nparse() rejects two-component versions: the pattern at pkg/core.py:90 requires a patch number. \
         I changed no code.\n\n\
         ## Turn 2\n[user]\nImplement a fix\n\n\
         [report]\nI made the patch component optional in parse(); `1.0` now parses as (1, 0, 0).\n"
    );
    let headers = render(&example(), View::ReportsHeaders, 2).unwrap().text;
    assert!(headers.contains(
        "[assistant]\nMaking the patch group optional.\n\n$ sed -i 's/(\\\\d+)$/(\\\\d+)?$/' pkg/core.py  # TURN2-ONLY-EDIT\n\n$ git diff --stat\n\n[report]"
    ), "{headers}");
    let full = render(&example(), View::FullMinusReasoning, 2).unwrap().text;
    assert!(full.contains("$ git diff --stat\n\n[output]\n pkg/core.py | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n[exit code 0]"));
    assert!(full.contains("TURN2-ONLY-EDIT\n\n[output]\n\n[exit code 0]"), "an empty output");
}

#[test]
fn views_are_deterministic_and_carry_their_digest_and_sizes() {
    let s = example();
    let again = Session::from_json(&s.canonical_bytes()).unwrap();
    for k in 1..=4 {
        let views = render_all(&s, k).unwrap();
        assert_eq!(views, render_all(&again, k).unwrap());
        assert_eq!(views, render_all(&example(), k).unwrap());
        assert_eq!(views.len(), TEXT_VIEWS.len());
        for v in &views {
            assert_eq!(v.version, VIEWS_VERSION);
            assert_eq!(v.checkpoint, k);
            assert_eq!(v.sha256, crate::trajectory::sha256_hex(v.text.as_bytes()));
            assert_eq!(v.chars, v.text.chars().count() as u64);
            assert_eq!(v.tokens, (v.text.len() as u64).div_ceil(4));
        }
        let json = serde_json::to_string(&views[1]).unwrap();
        assert!(json.contains("\"view\":\"reports\""), "{json}");
        assert_eq!(serde_json::from_str::<RenderedView>(&json).unwrap(), views[1]);
    }
    // The characters count scalar values, the tokens UTF-8 bytes.
    let v = render(&s, View::Scrollback, 1).unwrap();
    assert!(v.text.contains('…') && v.chars < v.text.len() as u64);
    assert_eq!(approx_tokens(""), 0);
    assert_eq!(approx_tokens("abcde"), 2);
    // Different views of one checkpoint differ, and their digests with them.
    let four = render_all(&s, 4).unwrap();
    let digests: std::collections::BTreeSet<&str> = four.iter().map(|v| v.sha256.as_str()).collect();
    assert_eq!(digests.len(), four.len());
}

#[test]
fn a_view_outside_the_session_is_refused() {
    let s = example();
    let err = render(&s, View::Reports, 0).unwrap_err().to_string();
    assert_eq!(err, "checkpoint 0: the session of task demo__pkg-7 has 4 turns: its checkpoints are 1 to 4");
    assert!(render(&s, View::Full, 5).unwrap_err().to_string().starts_with("checkpoint 5: "));
    let err = render(&s, View::Actor, 1).unwrap_err().to_string();
    assert!(err.contains("view actor: is not a text view"), "{err}");
}

/// Apply `change` to the example document and return the parse error.
fn refused(change: impl FnOnce(&mut Value)) -> String {
    let mut doc = example_value();
    change(&mut doc);
    let bytes = serde_json::to_vec(&doc).unwrap();
    messages::parse(&bytes).unwrap_err().to_string()
}

fn message(doc: &mut Value, i: usize) -> &mut Value {
    &mut doc["messages"][i]
}

/// A change to the example document.
type Change = Box<dyn FnOnce(&mut Value)>;

#[test]
fn bad_session_messages_are_refused_naming_the_place() {
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|d| d["format"] = json!("vcurve.session.v1")),
            "format is \"vcurve.session.v1\"; this version reads \"vcurve.session-messages.v1\"",
        ),
        (Box::new(|d| d.as_object_mut().unwrap().remove("format").map(drop).unwrap()), "format: is missing"),
        (Box::new(|d| d["task"]["id"] = json!(7)), "task.id: is not a string: a number"),
        (Box::new(|d| d["task"]["id"] = json!(" ")), "task.id: is empty"),
        (Box::new(|d| d["messages"] = json!({})), "messages: is missing or not an array"),
        (Box::new(|d| d["messages"] = json!([])), "messages: hold no turn"),
        (Box::new(|d| *message(d, 2) = json!("hi")), "messages[2] (turn 1): is not a JSON object"),
        (Box::new(|d| message(d, 2)["content"] = json!(3)), "messages[2] (turn 1).content: is not a string: a number"),
        (
            Box::new(|d| message(d, 3)["tool_call_id"] = json!("c9")),
            "messages[3] (turn 1).tool_call_id: \"c9\" names no tool call of this turn",
        ),
        (
            Box::new(|d| message(d, 5)["tool_call_id"] = json!("c1")),
            "messages[5] (turn 1).tool_call_id: \"c1\" already has its output",
        ),
        (
            Box::new(|d| message(d, 3)["returncode"] = json!("zero")),
            "messages[3] (turn 1).returncode: \"zero\" is not an integer",
        ),
        (
            Box::new(|d| {
                d["messages"].as_array_mut().unwrap().remove(3);
            }),
            "messages[3] (turn 1): the assistant speaks again before tool call \"c1\" has its \"tool\" message",
        ),
        (
            Box::new(|d| message(d, 4)["role"] = json!("user")),
            "messages[4] (turn 1).role: a user message after the agent began its turn",
        ),
        (Box::new(|d| message(d, 4)["role"] = json!("critic")), "messages[4] (turn 1).role: \"critic\" is not a role"),
        (
            Box::new(|d| message(d, 2)["tool_calls"][0]["command"] = json!("")),
            "messages[2] (turn 1).tool_calls[0].command: is empty",
        ),
        (
            Box::new(|d| message(d, 2)["tool_calls"][0].as_object_mut().unwrap().remove("id").map(drop).unwrap()),
            "messages[2] (turn 1).tool_calls[0].id: is missing",
        ),
        (Box::new(|d| message(d, 2)["tool_calls"] = json!("ls")), "messages[2] (turn 1).tool_calls: is not an array"),
        (
            Box::new(|d| message(d, 10)["tool_call_id"] = json!("c3")),
            "messages[10] (turn 2).tool_call_id: \"c3\" already has its output",
        ),
        (
            Box::new(|d| message(d, 9)["tool_call_id"] = json!("c1")),
            "messages[9] (turn 2).tool_call_id: \"c1\" names no tool call of this turn",
        ),
        (
            Box::new(|d| message(d, 8)["tool_calls"][1]["id"] = json!("c3")),
            "messages[8] (turn 2).tool_calls[1].id: \"c3\" is used twice in this turn",
        ),
        (Box::new(|d| message(d, 6)["turn_end"] = json!("yes")), "messages[6] (turn 1).turn_end: is not true or false"),
        (
            Box::new(|d| message(d, 6)["content"] = json!("  ")),
            "messages[6] (turn 1).content: is empty: a turn ends with a user-facing report",
        ),
        (
            Box::new(|d| message(d, 6)["tool_calls"] = json!([{"id": "c0", "command": "ls"}])),
            "messages[6] (turn 1).tool_calls: a turn's report (\"turn_end\": true) calls no tool",
        ),
        (
            Box::new(|d| message(d, 7)["role"] = json!("assistant")),
            "messages[7] (after turn 1).role: an assistant message outside a turn",
        ),
        (
            Box::new(|d| message(d, 7)["role"] = json!("system")),
            "messages[7] (after turn 1).role: a system message after the first turn began",
        ),
        (
            Box::new(|d| message(d, 7)["role"] = json!("tool")),
            "messages[7] (after turn 1).role: a tool message outside a turn",
        ),
        (
            Box::new(|d| {
                message(d, 22)["turn_end"] = json!(false);
            }),
            "turn 4 (from messages[19]): has no turn end: it needs an assistant message with \"turn_end\": true",
        ),
        (
            Box::new(|d| {
                d["messages"].as_array_mut().unwrap().truncate(21);
            }),
            "turn 4 (from messages[19]): has no turn end: it needs an assistant message with \"turn_end\": true; tool call \"c8\" has no output",
        ),
    ];
    for (change, expected) in cases {
        let err = refused(change);
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    assert!(messages::parse(b"{").unwrap_err().to_string().starts_with("not a session: "));
    assert_eq!(messages::parse(b"[]").unwrap_err().to_string(), "(document): is not a JSON object");
}

#[test]
fn instructions_may_span_user_messages_and_content_may_be_null() {
    let doc = json!({
        "format": messages::FORMAT,
        "task": {"id": "t-1", "statement": "Fix it."},
        "messages": [
            {"role": "user", "content": "Here is the issue: Fix it."},
            {"role": "user", "content": "Investigate; do not modify code"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "command": "ls"}]},
            {"role": "tool", "tool_call_id": "a", "content": "x\n", "returncode": null},
            {"role": "assistant", "content": "Nothing to report.", "turn_end": true, "timestamp": 17}
        ]
    });
    let s = messages::from_value(&doc).unwrap();
    assert_eq!(s.system, None);
    assert_eq!(s.turns[0].instruction, "Here is the issue: Fix it.\n\nInvestigate; do not modify code");
    assert_eq!(s.turns[0].messages[0].text, "");
    assert_eq!(s.turns[0].messages[0].tool_calls[0].returncode, None);
    let full = render(&s, View::Full, 1).unwrap().text;
    assert!(full.contains("$ ls\n\n[output]\nx\n[no exit code]"), "{full}");
    assert!(!full.contains("[assistant]\n\n"), "empty narration is not a block");
}

#[test]
fn bad_sessions_are_refused_naming_the_field() {
    let s = example();
    let refuse = |change: &dyn Fn(&mut Session)| {
        let mut bad = s.clone();
        change(&mut bad);
        Session::from_json(&bad.canonical_bytes()).unwrap_err().to_string()
    };
    assert_eq!(refuse(&|b| b.turns.clear()), "turns: is empty: a session has at least one turn");
    assert_eq!(refuse(&|b| b.task.id.clear()), "task.id: is empty");
    assert_eq!(
        refuse(&|b| b.turns[1].messages[0].tool_calls[1].command = " ".into()),
        "turns[1] (turn 2).messages[0].tool_calls[1].command: is empty"
    );
    assert_eq!(
        refuse(&|b| b.turns[2].report.text.clear()),
        "turns[2] (turn 3).report.text: is empty: a turn ends with a user-facing report"
    );
    assert_eq!(refuse(&|b| b.turns[0].instruction.clear()), "turns[0] (turn 1).instruction: is empty");
    assert_eq!(refuse(&|b| b.format = "x".into()), "format is \"x\"; this version reads \"vcurve.session.v1\"");
    let mut doc: Value = serde_json::from_slice(&s.canonical_bytes()).unwrap();
    doc["turns"][0]["messages"][0]["tool_calls"][0]["exit"] = json!(0);
    let err = Session::from_json(&serde_json::to_vec(&doc).unwrap()).unwrap_err().to_string();
    assert!(err.contains("unknown field `exit`"), "{err}");
}

/// A small deterministic generator (a linear congruential sequence), so that the generated
/// sessions need no dependency and are the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A session whose every text names its turn (`T3-…`), with 1–5 turns, 0–4 messages a turn,
/// 0–3 calls a message, outputs of 0–29 lines, reasoning and a system prompt now and then.
fn generated(seed: u64) -> Session {
    let mut r = Lcg(seed);
    let turns = (1..=1 + r.below(5))
        .map(|j| Turn {
            instruction: format!("T{j}-instruction"),
            messages: (0..r.below(5))
                .map(|m| AgentMessage {
                    reasoning: (r.below(2) == 0).then(|| format!("T{j}-reasoning-{m}")),
                    text: if r.below(3) == 0 { String::new() } else { format!("T{j}-narration-{m}") },
                    tool_calls: (0..r.below(4))
                        .map(|c| ToolCall {
                            command: format!("echo T{j}-{m}-{c}"),
                            output: (0..r.below(30)).map(|l| format!("T{j}-{m}-{c} line {l}\n")).collect(),
                            returncode: (r.below(4) != 0).then(|| r.below(3) as i32),
                        })
                        .collect(),
                })
                .collect(),
            report: Report {
                reasoning: (r.below(2) == 0).then(|| format!("T{j}-report-reasoning")),
                text: format!("T{j}-report"),
            },
        })
        .collect();
    Session {
        format: FORMAT.into(),
        task: SessionTask { id: format!("gen-{seed}"), statement: "The task.".into() },
        system: (r.below(2) == 0).then(|| "The system prompt.".into()),
        turns,
    }
}

#[test]
fn generated_sessions_keep_nesting_scope_and_determinism() {
    for seed in 0..80 {
        let s = generated(seed);
        s.validate().unwrap();
        let again = Session::from_json(&s.canonical_bytes()).unwrap();
        for k in 1..=s.checkpoints() {
            let at = format!("seed {seed}, checkpoint {k}");
            let upto = &s.turns[..k as usize];
            let chains = [
                &[
                    View::TaskOnly,
                    View::LatestReport,
                    View::Reports,
                    View::ReportsNarration,
                    View::ReportsHeaders,
                    View::Scrollback,
                ][..],
                &[View::ReportsHeaders, View::FullMinusReasoning, View::Full][..],
                &[View::Reports, View::ReportsLast3, View::ReportsLast10, View::FullMinusReasoning][..],
            ];
            for chain in chains {
                for pair in chain.windows(2) {
                    assert!(nested(&b(&s, pair[0], k), &b(&s, pair[1], k)), "{at}: {} in {}", pair[0], pair[1]);
                }
            }
            let long = upto
                .iter()
                .flat_map(|t| &t.messages)
                .flat_map(|m| &m.tool_calls)
                .any(|c| c.output.lines().count() > views::SCROLLBACK_HEAD_LINES + views::SCROLLBACK_TAIL_LINES);
            let v_in_t = nested(&b(&s, View::Scrollback, k), &b(&s, View::FullMinusReasoning, k));
            assert_eq!(v_in_t, !long, "{at}: the scrollback differs from T_minusR by its cuts only");
            let t: Vec<String> =
                b(&s, View::Full, k).into_iter().filter(|x| !x.starts_with("[assistant reasoning]")).collect();
            assert_eq!(t, b(&s, View::FullMinusReasoning, k), "{at}");
            let calls: usize = upto.iter().map(|t| t.messages.iter().map(|m| m.tool_calls.len()).sum::<usize>()).sum();
            for (view, n) in [(View::ReportsLast3, 3), (View::ReportsLast10, 10)] {
                let outputs = b(&s, view, k).iter().filter(|x| x.starts_with("[output]\n")).count();
                assert_eq!(outputs, calls.min(n), "{at}: {view}");
            }
            let views = render_all(&s, k).unwrap();
            assert_eq!(views, render_all(&again, k).unwrap(), "{at}");
            for v in &views {
                for later in k + 1..=s.checkpoints() {
                    assert!(!v.text.contains(&format!("T{later}-")), "{at}: {} shows turn {later}", v.view);
                }
                assert_eq!(
                    v.text.contains("-reasoning"),
                    v.view == View::Full && v.text.contains("[assistant reasoning]")
                );
            }
        }
    }
}

fn two_turn_trajectory() -> crate::Trajectory {
    use crate::trajectory::{Action, EndType, Evaluator, Interpreter, Step, Task};
    let msg = |role: &str, content: &str| json!({"role": role, "content": content});
    let action = |command: &str, output: &str, returncode| Action {
        command: command.into(),
        timeout_s: 60.0,
        output: output.into(),
        returncode,
        timed_out: false,
        exception: None,
        omitted: None,
    };
    let step = |actions, messages_end| Step { actions, messages_end, fingerprint: None };
    crate::Trajectory {
        format: crate::trajectory::FORMAT.into(),
        task: Task {
            id: "demo__pkg-1".into(),
            image: "vcurve/task:abc".into(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
            problem_statement: Some("fix it".into()),
        },
        interpreter: Interpreter::default(),
        messages: vec![
            msg("system", "you are an agent"),
            msg("user", "fix it. Investigate; do not modify code"),
            json!({"role": "assistant", "content": "listing\n```bash\nls\n```", "reasoning_content": "R1"}),
            msg("user", "<returncode>0</returncode>a b"),
            json!({"role": "assistant", "content": [{"type": "text", "text": "Found a and b."}]}),
            msg("user", "Implement a fix"),
            msg("assistant", "```bash\ntouch c\n```"),
            msg("user", "<returncode>0</returncode>"),
            json!({"role": "assistant", "content": "Created c.", "reasoning": "R2"}),
        ],
        initial_messages: 2,
        steps: vec![
            step(vec![action("ls", "a b\n", Some(0))], 4),
            step(vec![], 5),
            step(vec![action("touch c", "", None)], 8),
            step(vec![], 9),
        ],
        end_type: EndType::Submitted,
        submission: None,
        policy: None,
    }
}

#[test]
fn a_trajectory_with_its_turn_ends_is_a_session() {
    let t = two_turn_trajectory();
    let s = trajectory::from_trajectory(&t, &[2, 4]).unwrap();
    assert_eq!(s.task, SessionTask { id: "demo__pkg-1".into(), statement: "fix it".into() });
    assert_eq!(s.system.as_deref(), Some("you are an agent"));
    assert_eq!(s.turns.len(), 2);
    assert_eq!(s.turns[0].instruction, "fix it. Investigate; do not modify code");
    assert_eq!(s.turns[0].messages[0].reasoning.as_deref(), Some("R1"));
    assert_eq!(
        s.turns[0].messages[0].tool_calls,
        [ToolCall { command: "ls".into(), output: "a b\n".into(), returncode: Some(0) }]
    );
    assert_eq!(s.turns[0].report, Report { reasoning: None, text: "Found a and b.".into() });
    assert_eq!(s.turns[1].instruction, "Implement a fix");
    assert_eq!(s.turns[1].messages[0].tool_calls[0].returncode, None);
    assert_eq!(s.turns[1].report, Report { reasoning: Some("R2".into()), text: "Created c.".into() });
    assert!(render(&s, View::Full, 2).unwrap().text.contains("[assistant reasoning]\nR2\n\n[report]\nCreated c."));

    let refuse = |ends: &[u32]| trajectory::from_trajectory(&t, ends).unwrap_err().to_string();
    assert_eq!(refuse(&[]), "turn ends: are empty: a session has at least one turn");
    assert_eq!(
        refuse(&[2, 2]),
        "turn ends[1] (turn 2): = 2 must be a step after 2 and at most the trajectory's 4 steps"
    );
    assert_eq!(refuse(&[2]), "turn ends: the last turn ends at step 2 but the trajectory has 4 steps");
    assert_eq!(
        refuse(&[1, 4]),
        "steps[0] (step 1, turn 1): ends turn 1 but ran 1 command(s): a turn's report runs none"
    );
    assert_eq!(
        refuse(&[4]),
        "steps[2] (step 3, turn 1).messages[5]: a user message inside a turn: turn ends must fall where instructions were given"
    );
    let mut bad = t.clone();
    bad.messages[6] = json!({"role": "user", "content": "?"});
    assert_eq!(
        trajectory::from_trajectory(&bad, &[2, 4]).unwrap_err().to_string(),
        "steps[2] (step 3, turn 2): messages[5..8] hold no assistant message"
    );
    bad.messages[6] = json!({"role": "assistant", "content": 5});
    assert_eq!(
        trajectory::from_trajectory(&bad, &[2, 4]).unwrap_err().to_string(),
        "messages[6].content: is neither a string nor a list of text parts"
    );
}
