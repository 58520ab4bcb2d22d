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

/// The chunks of one upload of `content` (whose SHA-256 is `sha256`): at most [`CHUNK_BYTES`]
/// each, the first stating the digest and the whole size; an empty file is one empty chunk.
pub fn upload_chunks(content: &[u8], sha256: &str) -> Vec<v1::UploadChunk> {
    let mut chunks: Vec<v1::UploadChunk> =
        content.chunks(CHUNK_BYTES).map(|c| v1::UploadChunk { data: c.to_vec(), ..Default::default() }).collect();
    if chunks.is_empty() {
        chunks.push(v1::UploadChunk::default());
    }
    chunks[0].sha256 = sha256.to_owned();
    chunks[0].size = content.len() as u64;
    chunks
}
