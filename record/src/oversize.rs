//! Outputs too large for the store: a recorded run is one file, and the store keeps files of at
//! most [`MAX_FILE_BYTES`]. A command that printed that much (issue 24: 64 MiB of output made a
//! base run's trajectory unstorable, so every attempt failed at its upload and the run was
//! retired) would lose the whole run. Instead the longest texts are cut to their head and tail
//! with a [`marker`] between, and each cut command output says so in its action
//! ([`Omitted`]), so that the trajectory still uploads and its replay compares what was kept.
//!
//! - [`Trajectory::fit_within`]: cut the trajectory's command outputs and the strings of its
//!   messages until its canonical encoding fits; [`fit_messages`] the same for a message list
//!   alone (a continuation's transcript).
//! - [`Omitted::cut`]: the same cut of a replayed output, so that replay compares a cut record
//!   with the replay cut alike (head, tail and the number of bytes left out; what was left out is
//!   not compared).
//!
//! The cut is one cap for every text: each text longer than the cap keeps its first and last
//! half-cap bytes (at character boundaries), the smallest cap that makes the file fit, never less
//! than [`MIN_KEPT_BYTES`]. Cutting only the longest texts first would keep one copy of an output
//! whole and reduce another to nothing.

use crate::omitted::MARKER_ENCODED_BYTES;
pub use crate::omitted::{Omitted, marker};
use crate::trajectory::{Trajectory, TrajectoryError};

/// The largest file the store keeps (a curve, a recorded trajectory, a transcript): 64 MiB.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The fewest bytes a cut text keeps, head and tail together.
pub const MIN_KEPT_BYTES: usize = 4 << 10;

/// The most an action's [`Omitted`] record adds to a file's encoding (three numbers of at most
/// 20 digits and their names), with a margin.
const OMITTED_ENCODED_BYTES: u64 = 128;

/// One text a cut may shorten, and where its action records the cut (none for a message's).
struct Text<'a> {
    text: &'a mut String,
    omitted: Option<&'a mut Option<Omitted>>,
}

impl Text<'_> {
    /// What cutting this text adds besides what it keeps: the marker, and its action's record.
    fn overhead(&self) -> u64 {
        MARKER_ENCODED_BYTES + if self.omitted.is_some() { OMITTED_ENCODED_BYTES } else { 0 }
    }
}

/// What a fit cut: how many texts, and how many bytes they left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cuts {
    pub texts: u64,
    pub bytes: u64,
}

/// Why a recorded run cannot be made to fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "is {size} bytes, over the store's limit of {limit} bytes per file even with every command output and message cut \
     to {MIN_KEPT_BYTES} bytes"
)]
pub struct TooLarge {
    pub size: u64,
    pub limit: u64,
}

impl Trajectory {
    /// Make the canonical encoding at most `limit` bytes ([`MAX_FILE_BYTES`] for the store):
    /// unchanged when it fits; else every command output and message string longer than one cap
    /// is cut to its head and tail with a [`marker`], each cut output recording its [`Omitted`]
    /// in its action. The task and the submission are never cut. An error when even the
    /// smallest cap leaves it too large.
    pub fn fit_within(&mut self, limit: u64) -> Result<Cuts, TrajectoryError> {
        let size = self.canonical_bytes().len() as u64;
        if size <= limit {
            return Ok(Cuts::default());
        }
        let Trajectory { steps, messages, .. } = self;
        let mut texts: Vec<Text<'_>> = steps
            .iter_mut()
            .flat_map(|s| s.actions.iter_mut())
            .map(|a| Text { text: &mut a.output, omitted: Some(&mut a.omitted) })
            .collect();
        for m in messages.iter_mut() {
            strings_of(m, &mut texts);
        }
        let cuts = cut_to_fit(texts, size, limit)
            .map_err(|e| TrajectoryError::Field { field: "trajectory".into(), message: e.to_string() })?;
        let fitted = self.canonical_bytes().len() as u64;
        if fitted > limit {
            // The cap is chosen so that this cannot happen (a cut byte is at least one encoded byte).
            return Err(TrajectoryError::Field {
                field: "trajectory".into(),
                message: TooLarge { size: fitted, limit }.to_string(),
            });
        }
        Ok(cuts)
    }
}

/// [`Trajectory::fit_within`] for a message list alone (a continuation's transcript): its JSON
/// encoding at most `limit` bytes, its longest strings cut with a [`marker`].
pub fn fit_messages(messages: &mut [serde_json::Value], limit: u64) -> Result<Cuts, TooLarge> {
    let size = serde_json::to_vec(&*messages).map_or(0, |b| b.len() as u64);
    if size <= limit {
        return Ok(Cuts::default());
    }
    let mut texts = Vec::new();
    for m in messages.iter_mut() {
        strings_of(m, &mut texts);
    }
    cut_to_fit(texts, size, limit)
}

/// Every string of a JSON value, object keys aside, longer than [`MIN_KEPT_BYTES`].
fn strings_of<'a>(value: &'a mut serde_json::Value, out: &mut Vec<Text<'a>>) {
    match value {
        serde_json::Value::String(s) if s.len() > MIN_KEPT_BYTES => out.push(Text { text: s, omitted: None }),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strings_of(v, out)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| strings_of(v, out)),
        _ => {}
    }
}

/// Cut `texts` (of a file of `size` encoded bytes) to one cap so that the file is at most
/// `limit` bytes: the largest cap whose cuts remove enough. A removed byte of a text is at least
/// one encoded byte, so removing `size − limit` bytes plus each cut's marker and record
/// suffices.
fn cut_to_fit(texts: Vec<Text<'_>>, size: u64, limit: u64) -> Result<Cuts, TooLarge> {
    let excess = size.saturating_sub(limit);
    let removed = |cap: usize| -> u64 {
        texts
            .iter()
            .filter(|t| t.text.len() as u64 > cap as u64 + t.overhead())
            .map(|t| t.text.len() as u64 - cap as u64 - t.overhead())
            .sum()
    };
    if removed(MIN_KEPT_BYTES) < excess {
        return Err(TooLarge { size, limit });
    }
    // The largest cap that removes enough: `removed` falls as the cap grows.
    let (mut low, mut high) = (MIN_KEPT_BYTES, texts.iter().map(|t| t.text.len()).max().unwrap_or(MIN_KEPT_BYTES));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if removed(mid) >= excess { low = mid } else { high = mid - 1 }
    }
    let cap = low;
    let mut cuts = Cuts::default();
    for t in texts {
        if t.text.len() as u64 <= cap as u64 + t.overhead() {
            continue;
        }
        // An output cut before (to hand it to the agent) is cut again from what it kept, its
        // record still counting from the whole output.
        let before = t.omitted.as_deref().copied().flatten();
        let cut = match before {
            Some(before) => before.recut(t.text, cap / 2, cap - cap / 2),
            None => Omitted::cut_to(t.text, cap / 2, cap - cap / 2),
        };
        if let Some((cut, omitted)) = cut {
            *t.text = cut;
            cuts.texts += 1;
            cuts.bytes += omitted.bytes - before.map_or(0, |b| b.bytes);
            if let Some(record) = t.omitted {
                *record = Some(omitted);
            }
        }
    }
    Ok(cuts)
}

#[cfg(test)]
mod tests;
