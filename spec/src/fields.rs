//! The limits on a spec's sizes, and the values a field may take. (The fields each level may have
//! are its raw struct's, [`crate::raw`].)

/// The longest trajectory a spec may declare.
pub const MAX_LENGTH: u32 = 100_000;

/// The most base runs a study may ask of one task.
pub const MAX_BASE_RUNS: u32 = 1000;
pub(crate) const ADMISSION_MODES: &[&str] = &["demand", "batch"];
