//! An exec's output: the wrapper's header line, stripped, and the cap.

/// The most output an exec keeps, in bytes (64 MiB); the rest is read and dropped.
pub const OUTPUT_CAP: usize = 64 << 20;

/// The header's first word (the wrapper's `printf 'vcurve-exec %s %s\n'`).
const HEADER_PREFIX: &[u8] = b"vcurve-exec ";
/// The longest header line we wait for.
const HEADER_MAX: usize = 256;

/// The header the wrapper prints before the command starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) pgid: u32,
    /// The output pipe as `/proc/*/fd/*` links name it, e.g. `pipe:[12345]`; `None` when the
    /// wrapper could not read it (`-`, or nothing when it could not fork to read it).
    pub(super) pipe: Option<String>,
}

pub(super) fn parse_header(line: &[u8]) -> Option<Header> {
    let rest = line.strip_prefix(HEADER_PREFIX)?;
    let text = std::str::from_utf8(rest).ok()?;
    let mut words = text.split(' ');
    let pgid: u32 = words.next()?.parse().ok()?;
    let pipe = words.next()?;
    if pgid == 0 || words.next().is_some() {
        return None;
    }
    // `-`: the wrapper could not read its output's link; empty: it could not even fork the
    // command substitution (a container at its pids limit). Either way the group is known.
    Some(Header { pgid, pipe: (!pipe.is_empty() && pipe != "-").then(|| pipe.to_owned()) })
}

/// Collects an exec's output: strips the header line from its front, caps the rest.
#[derive(Debug, Default)]
pub(super) struct Collector {
    pub(super) output: Vec<u8>,
    /// The bytes before the header's newline, while it has not come.
    pub(super) pending: Vec<u8>,
    pub(super) header: Option<Header>,
    /// The output did not start with a header (the wrapper never ran): everything is output.
    pub(super) header_failed: bool,
}

impl Collector {
    pub(super) fn push(&mut self, chunk: &[u8]) {
        if self.header.is_some() || self.header_failed {
            self.keep(chunk);
            return;
        }
        self.pending.extend_from_slice(chunk);
        let prefix_len = self.pending.len().min(HEADER_PREFIX.len());
        if self.pending[..prefix_len] != HEADER_PREFIX[..prefix_len] {
            self.fail_header();
            return;
        }
        if let Some(newline) = self.pending.iter().position(|b| *b == b'\n') {
            match parse_header(&self.pending[..newline]) {
                Some(header) => {
                    self.header = Some(header);
                    let rest = self.pending.split_off(newline + 1);
                    self.pending.clear();
                    self.keep(&rest);
                }
                None => self.fail_header(),
            }
        } else if self.pending.len() > HEADER_MAX {
            self.fail_header();
        }
    }

    /// The stream ended: a partial header is output.
    pub(super) fn finish(&mut self) {
        if self.header.is_none() && !self.pending.is_empty() {
            self.fail_header();
        }
    }

    pub(super) fn fail_header(&mut self) {
        self.header_failed = true;
        let pending = std::mem::take(&mut self.pending);
        self.keep(&pending);
    }

    pub(super) fn keep(&mut self, chunk: &[u8]) {
        let room = OUTPUT_CAP.saturating_sub(self.output.len());
        self.output.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
}

/// Escape `[`, `]`, `*`, `?` and `\` for a `find -lname` pattern.
pub(super) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '[' | ']' | '*' | '?' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
