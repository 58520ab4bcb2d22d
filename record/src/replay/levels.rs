//! The comparison levels of two normalized texts.

use crate::jobs::CompareLevel;

/// The first of `exact` and `sorted_lines` (the same multiset of whole `\n`-separated lines: the
/// same lines in another order) at which two (normalized) texts match; `None` when neither does.
/// `sorted_lines` accepts only a change of the lines' order, never a line whose content changed.
///
/// No text matches at `char_multiset` (the same characters in another order) any more: it
/// accepted a changed line whose characters were the same (`a + b` replayed as `b + a`), so it
/// is kept only to read replays stored before (docs/decisions.md, "Replay").
pub fn compare(recorded: &str, replayed: &str) -> Option<CompareLevel> {
    if recorded == replayed {
        return Some(CompareLevel::Exact);
    }
    if recorded.len() != replayed.len() {
        // The same lines in another order have the same bytes.
        return None;
    }
    let mut a: Vec<&str> = recorded.split('\n').collect();
    let mut b: Vec<&str> = replayed.split('\n').collect();
    a.sort_unstable();
    b.sort_unstable();
    (a == b).then_some(CompareLevel::SortedLines)
}
