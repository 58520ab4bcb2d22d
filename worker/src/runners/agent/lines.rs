//! Bounded reading of an agent's output: JSON lines on stdout under a length limit, and the last
//! bytes of stderr for logs and no-outcome reasons.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt};

/// Why [`LineReader::next_line`] gave no line.
#[derive(Debug)]
pub(crate) enum LineError {
    /// The line exceeded the limit (the limit counts the bytes before the `\n`).
    TooLong,
    Io(std::io::Error),
}

/// Reads `\n`-terminated lines, refusing any longer than `max` bytes without reading further
/// into it than `max + 1` bytes' worth of buffering.
pub(crate) struct LineReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    /// Lines returned so far (1-based number of the last one).
    pub(crate) line_no: u64,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(crate) fn new(inner: R, max: usize) -> Self {
        LineReader { inner, max, buf: Vec::new(), line_no: 0 }
    }

    /// The next line without its `\n`; at end of input, the unterminated rest if there is one,
    /// then `None`. Cancel-safe: bytes already read stay buffered for the next call.
    pub(crate) async fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        loop {
            let available = self.inner.fill_buf().await.map_err(LineError::Io)?;
            if available.is_empty() {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                self.line_no += 1;
                return Ok(Some(std::mem::take(&mut self.buf)));
            }
            match available.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    if self.buf.len() + i > self.max {
                        return Err(LineError::TooLong);
                    }
                    self.buf.extend_from_slice(&available[..i]);
                    self.inner.consume(i + 1);
                    self.line_no += 1;
                    return Ok(Some(std::mem::take(&mut self.buf)));
                }
                None => {
                    let n = available.len();
                    if self.buf.len() + n > self.max {
                        return Err(LineError::TooLong);
                    }
                    self.buf.extend_from_slice(available);
                    self.inner.consume(n);
                }
            }
        }
    }
}

/// The last `cap` bytes written to a stream, shared between the task that drains it and the
/// driver that reports them.
#[derive(Clone)]
pub(crate) struct Tail {
    bytes: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Tail {
    pub(crate) fn new(cap: usize) -> Self {
        Tail { bytes: Arc::new(Mutex::new(Vec::new())), cap }
    }

    pub(crate) fn push(&self, chunk: &[u8]) {
        let mut bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        bytes.extend_from_slice(chunk);
        // Trim in batches so that appending stays amortized O(1).
        if bytes.len() > self.cap.saturating_mul(2).max(8192) {
            let cut = bytes.len() - self.cap;
            bytes.drain(..cut);
        }
    }

    /// The last `cap` bytes, decoded as UTF-8 with invalid bytes replaced.
    pub(crate) fn snapshot(&self) -> String {
        let bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let start = bytes.len().saturating_sub(self.cap);
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// Read `stream` to its end (or its first error) into the tail.
    pub(crate) async fn drain(self, mut stream: impl AsyncRead + Unpin) {
        let mut chunk = vec![0u8; 8192];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => self.push(&chunk[..n]),
            }
        }
    }
}

/// The last at most `max` bytes of `s`, starting on a character boundary.
pub(crate) fn last_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The first at most `max` bytes of `s`, ending on a character boundary.
pub(crate) fn first_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, String>> {
        let mut reader = LineReader::new(tokio::io::BufReader::with_capacity(3, input), max);
        let mut out = Vec::new();
        loop {
            match reader.next_line().await {
                Ok(Some(line)) => out.push(Ok(line)),
                Ok(None) => return out,
                Err(LineError::TooLong) => {
                    out.push(Err("too long".to_string()));
                    return out;
                }
                Err(LineError::Io(e)) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn splits_lines_and_keeps_an_unterminated_last_one() {
        let got = lines(b"ab\n\ncdefg\nhi", 5).await;
        assert_eq!(got, vec![Ok(b"ab".to_vec()), Ok(vec![]), Ok(b"cdefg".to_vec()), Ok(b"hi".to_vec())]);
    }

    #[tokio::test]
    async fn refuses_a_line_over_the_limit() {
        assert_eq!(lines(b"abcde\nabcdef\n", 5).await, vec![Ok(b"abcde".to_vec()), Err("too long".into())]);
        assert_eq!(lines(b"abcdef", 5).await, vec![Err("too long".into())]);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let tail = Tail::new(10);
        for i in 0..10_000u32 {
            tail.push(format!("{i}\n").as_bytes());
        }
        assert_eq!(tail.snapshot(), "9998\n9999\n");
        assert_eq!(last_bytes("héllo", 4), "llo");
        assert_eq!(first_bytes("héllo", 2), "h");
    }
}
