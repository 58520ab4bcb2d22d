//! # vcurve-proto
//!
//! The wire types and service stubs of `vcurve.v1`, generated from `proto/vcurve.proto` at build
//! time, and [`convert`]: the conversions between these types and `vcurve-record`'s job types that
//! the coordinator and the worker share (job keys, held jobs, registry snapshots, a report's
//! enums). Each side converts the rest in a single module of its own, and wire types never reach
//! the method.

#![allow(clippy::all, missing_docs)]

pub mod convert;

pub mod v1 {
    tonic::include_proto!("vcurve.v1");
}

/// The protocol version a worker states when it registers. The coordinator refuses a different
/// major version. 3.0: a base run's payload names its problem statement by digest (the worker fetches it).
/// 4.0: a study's agent runner names a registered agent (`agent`) instead of a host command, and a
/// worker registers the agents it offers (`RegisterRequest.agents`); a 3.x worker would refuse
/// every such job's options, and would run a 3.x study's host command. 4.1: a worker registers
/// the networks its operator lets agent containers have (`RegisterRequest.networks`); a 4.0
/// worker offers none beyond `none`, so it gets no study on another network. 4.2: the task-state
/// study's `session` and `model_call` jobs, their reports, and the model endpoints a worker offers
/// (`RegisterRequest.model_endpoints`); a 4.1 worker offers none, so it gets no model call.
pub const PROTOCOL_VERSION: &str = "4.2";

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

/// The pieces in which a coordinator sends the export file `name`: at most [`CHUNK_BYTES`] of its
/// contents each, every one naming the file; a file with no contents is one piece with no data.
/// Lazy: a piece is copied out only when it is taken, and the contents are dropped after the last.
pub fn export_chunks(name: String, contents: Vec<u8>) -> impl Iterator<Item = v1::ExportChunk> + Send {
    let pieces = contents.len().div_ceil(CHUNK_BYTES).max(1);
    (0..pieces).map(move |i| {
        let range = (i * CHUNK_BYTES).min(contents.len())..((i + 1) * CHUNK_BYTES).min(contents.len());
        v1::ExportChunk { name: name.clone(), data: contents[range].to_vec() }
    })
}

/// Export files put back together from their pieces ([`export_chunks`]), in the order they came:
/// a piece naming another file than the one before starts the next file.
#[derive(Debug, Default)]
pub struct ExportAssembler {
    files: Vec<(String, Vec<u8>)>,
}

impl ExportAssembler {
    /// Take the next piece.
    pub fn push(&mut self, chunk: v1::ExportChunk) {
        match self.files.last_mut() {
            Some((name, contents)) if *name == chunk.name => contents.extend_from_slice(&chunk.data),
            _ => self.files.push((chunk.name, chunk.data)),
        }
    }

    /// The files, by name, in the order they came.
    pub fn finish(self) -> Vec<(String, Vec<u8>)> {
        self.files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_files_come_back_whole_from_their_pieces() {
        let big: Vec<u8> = (0..(2 * CHUNK_BYTES + 17)).map(|i| (i % 251) as u8).collect();
        let files = [("a.csv", b"t,v\n0,1\n".to_vec()), ("empty.json", Vec::new()), ("big.bin", big)];
        let chunks: Vec<v1::ExportChunk> =
            files.iter().flat_map(|(n, c)| export_chunks(n.to_string(), c.clone())).collect();
        assert_eq!(chunks.len(), 1 + 1 + 3);
        assert!(chunks.iter().all(|c| c.data.len() <= CHUNK_BYTES));
        let mut assembler = ExportAssembler::default();
        chunks.into_iter().for_each(|c| assembler.push(c));
        let expected: Vec<(String, Vec<u8>)> = files.iter().map(|(n, c)| (n.to_string(), c.clone())).collect();
        assert_eq!(assembler.finish(), expected);
    }
}
