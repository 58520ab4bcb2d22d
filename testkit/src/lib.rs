//! # vcurve-testkit
//!
//! What vcurve's tests share, and nothing a production binary links:
//!
//! - [`require`]: the one gate for every test that needs a service (PostgreSQL, Docker, a
//!   browser, a registry). Absent, the test skips with one line saying what to start; with
//!   `VCURVE_TEST_REQUIRE=all` (CI and `scripts/test` set it) an absent service fails the test.

pub mod require;
