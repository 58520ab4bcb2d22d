//! Why a spec was rejected, naming the trajectory, the field and the line.

use std::fmt;
use std::path::PathBuf;

use crate::bounds::ReadError;

/// Which trajectory an error is about: its id, or its position when the id is the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrajectoryRef {
    Id(String),
    /// 0-based position in `trajectories`.
    Index(usize),
}

impl fmt::Display for TrajectoryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrajectoryRef::Id(id) => write!(f, "trajectory {id:?}"),
            TrajectoryRef::Index(i) => write!(f, "trajectories[{i}]"),
        }
    }
}

/// Why a study spec was rejected. Every variant is fatal: the user must fix the spec (or a file it
/// names); nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec file is not a regular file, too large, not UTF-8, or too deeply nested.
    #[error("cannot read the study spec {}: {source}", path.display())]
    Read { path: PathBuf, source: ReadError },
    /// The spec's folder, or a folder the user allowed, cannot be resolved.
    #[error(transparent)]
    Folder(#[from] crate::folder::FolderError),
    /// The spec's text is too large or too deeply nested to be parsed.
    #[error("the study spec was not parsed: {0}")]
    Bounds(ReadError),
    #[error("the study spec is not valid YAML: {0}")]
    Yaml(String),
    /// A study-level field.
    #[error("{field} {message}")]
    Field { field: String, message: String },
    /// A field of one trajectory.
    #[error("{trajectory}: {field} {message}")]
    Trajectory { trajectory: TrajectoryRef, field: String, message: String },
    /// A trajectory's curve file as a whole (missing, no header, rows missing).
    #[error("{trajectory}: curve {path}: {message}")]
    CurveFile { trajectory: TrajectoryRef, path: String, message: String },
    /// One line of a trajectory's curve file (1-based; the header is line 1).
    #[error("{trajectory}: curve {path} line {line}: {message}")]
    CurveLine { trajectory: TrajectoryRef, path: String, line: u64, message: String },
}
