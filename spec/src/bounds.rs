//! Bounded inputs: the files vcurve reads from users, and the YAML it parses.
//!
//! Every file a `vcurve` command reads goes through [`read_bounded`]: it must be a regular file
//! (`/dev/zero`, a FIFO or a directory is refused without being opened, so it can neither hang
//! nor fill the memory) of at most the limit its caller states, and is read only up to that
//! limit. YAML is checked by [`check_yaml`] before any YAML parser sees it: its size, and how
//! deeply its collections nest, counted by [`yaml_depth`] in one linear pass (a few milliseconds
//! for 100,000 levels). The parser (`serde_norway`, on libyaml) is slow on deep nesting: it loads
//! every level before its own limit of 128 refuses the value, at some 5 µs a level in a release
//! build (100,000 `[` took 7.6 s to be refused by a debug build of `vcurve launch`, 45 s where
//! the issue measured it), so the depth has to be known before it runs. Within the limits the
//! parser's time is linear in the text: about a second per 4 MiB of the densest YAML.
//!
//! [`yaml_depth`] follows libyaml's scanner token by token — its rules for comments, quoted,
//! plain and block scalars, indentation, simple keys and flow levels — without building
//! anything: it counts the collections open at each token (block collections by their
//! indentation, flow collections by their brackets, and the one-pair mappings a `key: value`
//! makes inside a flow sequence), which is the depth of the parsed value (aliases aside: an alias
//! is not expanded here, and `serde_norway`'s own limit of 128 levels still applies to the
//! expanded value). Where libyaml would stop with a syntax error the count goes on: the text is
//! refused either way, and counting on can only make the check stricter, never looser.

use std::io::Read as _;
use std::path::Path;

mod scanner;
use scanner::{Scanner, printable};

/// Why a user's file was not read, or its text not handed to a parser. Each message is a clause
/// for the caller to prefix with what the file is ("cannot read the study spec X: …").
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is {found}, not a regular file (vcurve reads only regular files)")]
    NotRegular { found: &'static str },
    #[error("it is {found} bytes, over the limit of {limit} bytes ({})", show_bytes(*limit))]
    TooLarge { found: u64, limit: u64 },
    #[error("it is not UTF-8 text (byte {valid_up_to} starts an invalid sequence)")]
    NotUtf8 { valid_up_to: usize },
    #[error(
        "it nests {found} levels deep, over the limit of {limit} levels (level {} opens at line {line}, column {column})",
        limit + 1
    )]
    TooDeep { found: usize, limit: usize, line: u64, column: u64 },
}

/// `limit` bytes as a user would write it: "64 MiB", "512 KiB", "100 bytes".
pub fn show_bytes(limit: u64) -> String {
    if limit >= 1 << 20 && limit.is_multiple_of(1 << 20) {
        format!("{} MiB", limit >> 20)
    } else if limit >= 1 << 10 && limit.is_multiple_of(1 << 10) {
        format!("{} KiB", limit >> 10)
    } else {
        format!("{limit} bytes")
    }
}

/// What a path that is not a regular file is, in words.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() { "a directory" } else { "something other than a file" }
}

/// Check, without opening it, that `path` is a regular file (symbolic links followed) of at most
/// `limit` bytes; its size.
pub fn inspect(path: &Path, limit: u64) -> Result<u64, ReadError> {
    check_metadata(std::fs::metadata(path)?, limit)
}

fn check_metadata(meta: std::fs::Metadata, limit: u64) -> Result<u64, ReadError> {
    if !meta.is_file() {
        return Err(ReadError::NotRegular { found: kind_of(meta.file_type()) });
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { found: meta.len(), limit });
    }
    Ok(meta.len())
}

/// Read `path` whole: a regular file (symbolic links followed) of at most `limit` bytes.
///
/// The path is inspected before it is opened (opening a FIFO for reading blocks until a writer
/// comes), the open file again (the path may have changed in between), and at most `limit + 1`
/// bytes are read (the file may grow while it is read).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    inspect(path, limit)?;
    let file = std::fs::File::open(path)?;
    let size = check_metadata(file.metadata()?, limit)?;
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { found: bytes.len() as u64, limit });
    }
    Ok(bytes)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|e| ReadError::NotUtf8 { valid_up_to: e.utf8_error().valid_up_to() })
}

/// Check YAML text before it is parsed: at most `max_bytes` long, nesting at most `max_depth`
/// levels ([`yaml_depth`]).
pub fn check_yaml(text: &str, max_bytes: u64, max_depth: usize) -> Result<(), ReadError> {
    if text.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge { found: text.len() as u64, limit: max_bytes });
    }
    let depth = yaml_depth(text, max_depth);
    match depth.first_over {
        None => Ok(()),
        Some((line, column)) => Err(ReadError::TooDeep { found: depth.max, limit: max_depth, line, column }),
    }
}

/// How deeply a YAML text nests, from [`yaml_depth`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YamlDepth {
    /// The most collections open at once.
    pub max: usize,
    /// Where the depth first went over the limit asked about: 1-based line and column.
    pub first_over: Option<(u64, u64)>,
    /// libyaml would stop with a syntax error (the first, as a 1-based line and column).
    pub syntax_error: Option<(u64, u64)>,
}

/// The nesting depth of a YAML text, in one pass over it in time linear in its length, following
/// libyaml's scanner (see the module's documentation). `limit` only decides where
/// [`YamlDepth::first_over`] is; the whole text is counted.
pub fn yaml_depth(text: &str, limit: usize) -> YamlDepth {
    // libyaml's reader refuses a character outside YAML's printable set and stops there, before
    // the scanner sees it: nothing after it is ever parsed.
    let end = text.char_indices().find(|&(_, c)| !printable(c)).map_or(text.len(), |(i, _)| i);
    let mut scanner = Scanner::new(&text.as_bytes()[..end], limit);
    scanner.run();
    YamlDepth { max: scanner.max, first_over: scanner.first_over, syntax_error: scanner.error }
}

#[cfg(test)]
mod tests;
