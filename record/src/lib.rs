//! # vcurve-record
//!
//! The data vcurve records, as pure code: no I/O, no async.
//!
//! - [`study`]: a study as data — the validated [`StudySpec`] it runs from and the
//!   [`StudyRecord`] the store hands out (every trajectory's state and outcomes).

pub mod study;

pub use study::{
    Admission, ControlCounts, DecoySpec, Label, RunnerSpec, StudyRecord, StudySpec, StudyState, TrajectoryRecord,
    TrajectorySpec, TrajectoryState,
};
