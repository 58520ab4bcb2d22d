//! Standard output for the commands' results. A reader that stops reading (`vcurve … | head`)
//! closes the pipe: that ends the command quietly, with success. Only a failed write to standard
//! output is treated so — a broken connection to the coordinator is an error like any other, even
//! though it, too, surfaces as a broken pipe somewhere down its chain.

use std::io::Write;

/// Standard output was closed by its reader.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Write `text` to standard output.
pub fn print(text: impl AsRef<str>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_ref().as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to standard output")),
    }
}

/// Write `text` and a newline to standard output.
pub fn println(text: impl AsRef<str>) -> anyhow::Result<()> {
    print(format!("{}\n", text.as_ref()))
}

/// Whether an error is standard output closed by its reader.
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}
