//! # vcurve-proto
//!
//! The wire types and service stubs of `vcurve.v1`, generated from `proto/vcurve.proto` at build
//! time. Nothing else lives here: the coordinator and the worker each convert between these types
//! and their own in a single module, and wire types never reach the method.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("vcurve.v1");
}

/// The protocol version a worker states when it registers. The coordinator refuses a different
/// major version.
pub const PROTOCOL_VERSION: &str = "2.0";

/// The largest piece of a file or payload one message carries.
pub const CHUNK_BYTES: usize = 1 << 20;
