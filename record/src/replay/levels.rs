//! The three comparison levels of two normalized texts.

use std::collections::BTreeMap;

use crate::jobs::CompareLevel;

/// The first of `exact`, `sorted_lines` (the same multiset of `\n`-separated lines) and
/// `char_multiset` (the same multiset of characters) at which two (normalized) texts match;
/// `None` when none does. Each level accepts everything the stricter ones do.
pub fn compare(recorded: &str, replayed: &str) -> Option<CompareLevel> {
    if recorded == replayed {
        return Some(CompareLevel::Exact);
    }
    if recorded.len() != replayed.len() {
        // Both looser levels keep every byte.
        return None;
    }
    let mut a: Vec<&str> = recorded.split('\n').collect();
    let mut b: Vec<&str> = replayed.split('\n').collect();
    a.sort_unstable();
    b.sort_unstable();
    if a == b {
        return Some(CompareLevel::SortedLines);
    }
    let mut counts: BTreeMap<char, i64> = BTreeMap::new();
    for c in recorded.chars() {
        *counts.entry(c).or_default() += 1;
    }
    for c in replayed.chars() {
        *counts.entry(c).or_default() -= 1;
    }
    counts.values().all(|&n| n == 0).then_some(CompareLevel::CharMultiset)
}
