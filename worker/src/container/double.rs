//! An in-memory runtime for unit tests (being written).
