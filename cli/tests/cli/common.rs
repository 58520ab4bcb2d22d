//! Shared pieces of the CLI's tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run the `vcurve` binary as a user would.
pub fn vcurve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vcurve")).args(args).output().expect("run vcurve")
}

/// Write `text` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}
