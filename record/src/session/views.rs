//! The views of a checkpoint: what a reader is given of a session up to the end of turn `k`,
//! rendered deterministically as text (docs/task-state.md, "Views"; the choices are in
//! docs/decisions.md, "Task-state study (CTXGAP)").
//!
//! A view is a sequence of blocks separated by a blank line; every view opens with the task. The
//! blocks are the same in every view that shows them, so that a richer view shows every block of
//! a poorer one in the same order (reports ⊂ + narration ⊂ + command headers ⊂ scrollback ⊂ full
//! context without reasoning ⊂ full context; reports ⊂ + last 3 outputs ⊂ + last 10 outputs ⊂
//! full context without reasoning), except where the scrollback shows an output cut to its
//! terminal-visible head and tail. The rules are the version [`VIEWS_VERSION`]: a change of any
//! rule or of any block's layout is a new version.

use serde::{Deserialize, Serialize};
use vcurve_method::task_state::View;

use super::{Session, SessionError, Turn, field};

/// The version of the view rules; stored beside every rendered view.
pub const VIEWS_VERSION: &str = "views-1";

/// The token count every rendered view carries: an approximation, the UTF-8 bytes of the text
/// divided by 4, rounded up. Deterministic and independent of any model's tokenizer.
pub const TOKEN_COUNT: &str = "ceil(utf8_bytes / 4)";

/// The scrollback (`V`) shows each output's first this many lines…
pub const SCROLLBACK_HEAD_LINES: usize = 10;
/// …and its last this many, with a marker of the lines between.
pub const SCROLLBACK_TAIL_LINES: usize = 10;

/// The views rendered as text: every [`View`] but the actor, who answers from its own messages,
/// in the order of [`View::ALL`] (a view added there fails this at compile time until counted).
pub const TEXT_VIEWS: [View; 10] = {
    let mut views = [View::LatestReport; 10];
    let (mut i, mut n) = (0, 0);
    while i < View::ALL.len() {
        if !matches!(View::ALL[i], View::Actor) {
            views[n] = View::ALL[i];
            n += 1;
        }
        i += 1;
    }
    assert!(n == views.len(), "TEXT_VIEWS counts every view but the actor");
    views
};

/// A view of one checkpoint as text, with what identifies and sizes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderedView {
    pub view: View,
    /// [`VIEWS_VERSION`] when rendered.
    pub version: String,
    /// The checkpoint `k` (the end of turn `k`).
    pub checkpoint: u32,
    pub text: String,
    /// SHA-256 of the text's UTF-8 bytes, lowercase hex: the key the text is stored by.
    pub sha256: String,
    /// Characters (Unicode scalar values) of the text.
    pub chars: u64,
    /// Tokens of the text, counted as [`TOKEN_COUNT`] says.
    pub tokens: u64,
}

/// The token count of a text ([`TOKEN_COUNT`]).
pub fn approx_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Render `view` of `session` at checkpoint `k` (1-based: the end of turn `k`).
pub fn render(session: &Session, view: View, k: u32) -> Result<RenderedView, SessionError> {
    let mut text = blocks(session, view, k)?.join("\n\n");
    text.push('\n');
    Ok(RenderedView {
        view,
        version: VIEWS_VERSION.into(),
        checkpoint: k,
        sha256: crate::trajectory::sha256_hex(text.as_bytes()),
        chars: text.chars().count() as u64,
        tokens: approx_tokens(&text),
        text,
    })
}

/// Every text view of checkpoint `k`, in the order of [`TEXT_VIEWS`].
pub fn render_all(session: &Session, k: u32) -> Result<Vec<RenderedView>, SessionError> {
    TEXT_VIEWS.iter().map(|&view| render(session, view, k)).collect()
}

/// Which outputs a view shows.
#[derive(Clone, Copy, PartialEq)]
enum Outputs {
    None,
    /// The last `n` tool calls up to the checkpoint, each with its command, in full.
    Last(usize),
    /// Every output, cut to the terminal-visible head and tail.
    Clipped,
    /// Every output in full.
    Full,
}

struct Rules {
    turns: bool,
    latest_only: bool,
    system: bool,
    reasoning: bool,
    narration: bool,
    headers: bool,
    outputs: Outputs,
}

fn rules(view: View) -> Result<Rules, SessionError> {
    let r = |turns, latest_only, system, reasoning, narration, headers, outputs| Rules {
        turns,
        latest_only,
        system,
        reasoning,
        narration,
        headers,
        outputs,
    };
    Ok(match view {
        View::TaskOnly => r(false, false, false, false, false, false, Outputs::None),
        View::LatestReport => r(true, true, false, false, false, false, Outputs::None),
        View::Reports => r(true, false, false, false, false, false, Outputs::None),
        View::ReportsNarration => r(true, false, false, false, true, false, Outputs::None),
        View::ReportsHeaders => r(true, false, false, false, true, true, Outputs::None),
        View::ReportsLast3 => r(true, false, false, false, false, false, Outputs::Last(3)),
        View::ReportsLast10 => r(true, false, false, false, false, false, Outputs::Last(10)),
        View::Scrollback => r(true, false, false, false, true, true, Outputs::Clipped),
        View::FullMinusReasoning => r(true, false, true, false, true, true, Outputs::Full),
        View::Full => r(true, false, true, true, true, true, Outputs::Full),
        View::Actor => {
            return Err(field(
                "view actor",
                "is not a text view: the actor answers from its own message history at the checkpoint",
            ));
        }
    })
}

/// The blocks of a view, in order; the text is their join with a blank line.
pub(crate) fn blocks(session: &Session, view: View, k: u32) -> Result<Vec<String>, SessionError> {
    let turns = session.turns.len() as u32;
    if k == 0 || k > turns {
        return Err(SessionError::Checkpoint {
            checkpoint: k,
            message: format!(
                "the session of task {} has {turns} turns: its checkpoints are 1 to {turns}",
                session.task.id
            ),
        });
    }
    let rules = rules(view)?;
    let mut out = Vec::new();
    if rules.system
        && let Some(system) = &session.system
    {
        out.push(format!("[system]\n{}", trim_end(system)));
    }
    out.push(format!("# Task {}\n\n{}", session.task.id, trim_end(&session.task.statement)));
    if !rules.turns {
        return Ok(out);
    }
    let upto = &session.turns[..k as usize];
    let total_calls: usize = upto.iter().map(calls).sum();
    let first_shown = match rules.outputs {
        Outputs::Last(n) => total_calls.saturating_sub(n),
        _ => 0,
    };
    let mut call_index = 0;
    for (j, turn) in upto.iter().enumerate() {
        let latest = j + 1 == k as usize;
        if rules.latest_only && !latest {
            call_index += calls(turn);
            continue;
        }
        out.push(format!("## Turn {}\n[user]\n{}", j + 1, trim_end(&turn.instruction)));
        for message in &turn.messages {
            if rules.reasoning
                && let Some(reasoning) = &message.reasoning
                && !reasoning.trim().is_empty()
            {
                out.push(format!("[assistant reasoning]\n{}", trim_end(reasoning)));
            }
            if rules.narration && !message.text.trim().is_empty() {
                out.push(format!("[assistant]\n{}", trim_end(&message.text)));
            }
            for call in &message.tool_calls {
                let (header, output) = match rules.outputs {
                    Outputs::None => (rules.headers, None),
                    Outputs::Last(_) => {
                        let shown = call_index >= first_shown;
                        (shown, shown.then_some(false))
                    }
                    Outputs::Clipped => (true, Some(true)),
                    Outputs::Full => (true, Some(false)),
                };
                if header {
                    out.push(format!("$ {}", trim_end(&call.command)));
                }
                if let Some(clip) = output {
                    let text = if clip { clipped(&call.output) } else { trim_end(&call.output).to_string() };
                    let code = match call.returncode {
                        Some(code) => format!("[exit code {code}]"),
                        None => "[no exit code]".to_string(),
                    };
                    out.push(format!("[output]\n{text}\n{code}"));
                }
                call_index += 1;
            }
        }
        if rules.reasoning
            && let Some(reasoning) = &turn.report.reasoning
            && !reasoning.trim().is_empty()
        {
            out.push(format!("[assistant reasoning]\n{}", trim_end(reasoning)));
        }
        out.push(format!("[report]\n{}", trim_end(&turn.report.text)));
    }
    Ok(out)
}

fn calls(turn: &Turn) -> usize {
    turn.messages.iter().map(|m| m.tool_calls.len()).sum()
}

fn trim_end(text: &str) -> &str {
    text.trim_end_matches(['\n', '\r'])
}

/// An output as the terminal leaves it visible: its first and last lines, with a marker of the
/// lines between when there are more than both.
fn clipped(output: &str) -> String {
    let lines: Vec<&str> = trim_end(output).split('\n').collect();
    if lines.len() <= SCROLLBACK_HEAD_LINES + SCROLLBACK_TAIL_LINES {
        return lines.join("\n");
    }
    let hidden = lines.len() - SCROLLBACK_HEAD_LINES - SCROLLBACK_TAIL_LINES;
    let mut out = lines[..SCROLLBACK_HEAD_LINES].join("\n");
    out.push_str(&format!("\n[… {hidden} lines not shown …]\n"));
    out.push_str(&lines[lines.len() - SCROLLBACK_TAIL_LINES..].join("\n"));
    out
}
