//! What replay compares, as pure code (docs/method.md §5): the normalization of observations, the two
//! comparison levels, the state fingerprint and the excerpts a non-replayable trajectory is
//! reported with. The worker runs the commands; everything it decides about their results is
//! decided here.
//!
//! - [`Normalizer`]: an ordered list of [`Rule`]s (regexes with replacements) that mask values
//!   with a recognizable context — timestamps, durations, temporary paths, memory addresses,
//!   labelled hashes, process ids under a label. The default set ships in
//!   `record/rules/normalization.yaml`, one comment per rule.
//! - [`compare`]: the first of `exact`, `sorted_lines` (whole lines in another order) that matches
//!   two normalized texts (`char_multiset` is no longer accepted: it let a changed line pass); [`Normalizer::compare_action`] checks one recorded action against what
//!   its re-execution observed (output, return code, timeout).
//! - [`fingerprint_paths`]: the changed paths a fingerprint compares — a container diff outside
//!   caches, logs and temporary files; [`Normalizer::compare_fingerprint`] names what differs.
//! - [`excerpt`]: short excerpts around the first difference, for [`NonReplayable`].
//!
//! Inside: `normalize` ([`Normalizer`], its rules), `levels` ([`compare`]), `check` (an action's or
//! a fingerprint's [`Mismatch`]), `paths` (what a fingerprint's changed paths leave out) and
//! `excerpt` (where two texts first differ).

mod check;
mod excerpt;
mod levels;
mod normalize;
mod paths;

pub use check::Mismatch;
pub use excerpt::{EXCERPT_CHARS, excerpt};
pub use levels::compare;
pub use normalize::{DEFAULT_RULES_YAML, Normalizer, Rule};
pub use paths::{GIT_DIFF_COMMAND, GIT_STATUS_COMMAND, fingerprint_paths, is_excluded_path};

#[cfg(test)]
mod tests;
