//! The gate for tests that need a service.
