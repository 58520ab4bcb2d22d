//! Where two texts first differ, and the excerpts around it a non-replayable trajectory is reported
//! with.

/// The longest excerpt [`excerpt`] returns, in characters (plus the `…` marks).
pub const EXCERPT_CHARS: usize = 400;

/// Excerpts of both texts around their first difference: from up to two lines before the line
/// where they first differ (and at most 160 characters before the first differing character), at
/// most [`EXCERPT_CHARS`] characters each, `…` marking what was cut.
pub fn excerpt(recorded: &str, replayed: &str) -> (String, String) {
    let common = recorded.chars().zip(replayed.chars()).take_while(|(a, b)| a == b).count();
    (window(recorded, common), window(replayed, common))
}

fn window(text: &str, at: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = at.min(chars.len());
    // The start of the line two lines before the one holding `at`.
    let mut start = at;
    let mut newlines = 0;
    while start > 0 {
        if chars[start - 1] == '\n' {
            newlines += 1;
            if newlines == 3 {
                break;
            }
        }
        start -= 1;
    }
    let start = start.max(at.saturating_sub(160));
    let end = (start + EXCERPT_CHARS).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&chars[start..end]);
    if end < chars.len() {
        out.push('…');
    }
    out
}

/// The 0-based index of the first `\n`-separated line at which two texts differ.
pub(super) fn first_differing_line(a: &str, b: &str) -> usize {
    let mut la = a.split('\n');
    let mut lb = b.split('\n');
    let mut i = 0;
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => i += 1,
            (None, None) => return i,
            _ => return i,
        }
    }
}
