//! The end-to-end tests, in one test binary (`e2e`), one module per subject: each drives the built
//! `vcurve` binary as separate processes, with the helpers of this crate's library (`vcurve_e2e`).
//! Tests that need PostgreSQL, Docker or the images say so in their first line
//! (`vcurve_testkit::require!`); `scripts/test` runs this binary's container tests one at a time.

mod cli_bad_inputs;
mod client_failures;
mod containers;
mod fault_tolerance;
mod images;
mod mini_swe_agent;
mod task_state;
