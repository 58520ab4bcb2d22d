//! A command output cut to its head and tail ([`Omitted`]) with a [`marker`] of what was left out
//! between: what a recorded step says of its cut output, and the cut of a replayed output alike.
//! When and how much to cut a trajectory is [`oversize`](crate::oversize)'s.

use serde::{Deserialize, Serialize};

/// The text that stands for the `bytes` bytes a cut left out, between the head and the tail.
pub fn marker(bytes: u64) -> String {
    format!("\n[vcurve: {bytes} bytes of output omitted]\n")
}

/// The most a marker adds to a file's encoding: its text (the two newlines escaped) and
/// the quotes of a string, with a margin.
pub(crate) const MARKER_ENCODED_BYTES: u64 = 64;

/// What of a command's output was left out of its record: the recorded `output` is its first
/// `head` bytes, the [`marker`] of `bytes`, and its last `tail` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Omitted {
    pub head: u64,
    pub tail: u64,
    /// The bytes left out.
    pub bytes: u64,
}

impl Omitted {
    /// Cut `text` to its first `head` and last `tail` bytes, each rounded inward to a character
    /// boundary, with the marker of what was left out between; `None` when it is no longer than
    /// `head + tail` plus a marker (nothing to gain).
    pub fn cut_to(text: &str, head: usize, tail: usize) -> Option<(String, Omitted)> {
        if text.len() <= head + tail + MARKER_ENCODED_BYTES as usize {
            return None;
        }
        let mut head_end = head;
        while !text.is_char_boundary(head_end) {
            head_end -= 1;
        }
        let mut tail_start = text.len() - tail;
        while !text.is_char_boundary(tail_start) {
            tail_start += 1;
        }
        let omitted = Omitted {
            head: head_end as u64,
            tail: (text.len() - tail_start) as u64,
            bytes: (tail_start - head_end) as u64,
        };
        let mut cut = String::with_capacity(head_end + 64 + text.len() - tail_start);
        cut.push_str(&text[..head_end]);
        cut.push_str(&marker(omitted.bytes));
        cut.push_str(&text[tail_start..]);
        Some((cut, omitted))
    }

    /// Cut again `text`, an output already cut as this record says, to at most `head` and `tail`
    /// bytes of the original's head and tail: the text and the record are those of the original
    /// cut so, and the marker counts the bytes left out of the original.
    pub fn recut(&self, text: &str, head: usize, tail: usize) -> Option<(String, Omitted)> {
        let kept_tail = (self.tail as usize).min(text.len());
        let mut head_end = head.min(self.head as usize).min(text.len());
        while !text.is_char_boundary(head_end) {
            head_end -= 1;
        }
        let mut tail_start = text.len() - tail.min(kept_tail);
        while !text.is_char_boundary(tail_start) {
            tail_start += 1;
        }
        let kept = (head_end + text.len() - tail_start) as u64;
        let original = self.head + self.bytes + self.tail;
        if kept + MARKER_ENCODED_BYTES >= text.len() as u64 || kept > original {
            return None;
        }
        let omitted = Omitted { head: head_end as u64, tail: (text.len() - tail_start) as u64, bytes: original - kept };
        let mut cut = String::with_capacity(kept as usize + 64);
        cut.push_str(&text[..head_end]);
        cut.push_str(&marker(omitted.bytes));
        cut.push_str(&text[tail_start..]);
        Some((cut, omitted))
    }

    /// `text` cut as this record was: its first [`Omitted::head`] and last [`Omitted::tail`]
    /// bytes with the marker of what lies between; `text` itself when it is too short to be cut
    /// so (it then differs from the record, which has a marker).
    pub fn cut(&self, text: &str) -> String {
        match Omitted::cut_to(text, self.head as usize, self.tail as usize) {
            Some((cut, _)) => cut,
            None => text.to_owned(),
        }
    }
}
