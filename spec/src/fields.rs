//! The fields a spec may have at each level, and the limits on its sizes.

/// The longest trajectory a spec may declare.
pub const MAX_LENGTH: u32 = 100_000;

pub(crate) const TOP_FIELDS: &[&str] = &[
    "name",
    "seed",
    "budget",
    "schedule",
    "runner",
    "thresholds",
    "controls",
    "admission",
    "trajectories",
    "decoys",
    "tasks",
    "base_runs",
    "selection",
    "swebench",
];
/// The most base runs a study may ask of one task.
pub const MAX_BASE_RUNS: u32 = 1000;
pub(crate) const TRAJECTORY_FIELDS: &[&str] = &["id", "task", "length", "curve", "labels", "base_runs", "recorded"];
pub(crate) const DECOY_FIELDS: &[&str] = &["id", "task", "length", "labels"];
pub(crate) const CONTROL_FIELDS: &[&str] = &["sanity", "retest", "budget_control"];
pub(crate) const ADMISSION_FIELDS: &[&str] = &["mode", "batch_size", "pipeline_threshold"];
pub(crate) const ADMISSION_MODES: &[&str] = &["demand", "batch"];
pub(crate) const BASE_RUN_FIELDS: &[&str] = &["success", "steps"];
