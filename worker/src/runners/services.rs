//! What a runner may ask of the coordinator while it runs a job: the patch cache's verdicts, and
//! files by digest (uploading a patch, a recorded run or a transcript; fetching a patch to
//! re-check). The worker's gRPC client implements [`JobServices`]; runners get it through
//! [`AgentRunner::attach`](crate::AgentRunner::attach) when the worker starts.

use futures::future::BoxFuture;

/// The coordinator's services to a running job. Errors are the transport's or the
/// coordinator's, as text: a job that meets one has no outcome and is run again.
pub trait JobServices: Send + Sync {
    /// The verdict of a patch already judged in the study; `None`: not judged yet.
    fn lookup_verdict<'a>(
        &'a self,
        study: &'a str,
        task: &'a str,
        patch_sha256: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, String>>;

    /// Upload a file; returns its SHA-256 (lowercase hex), the digest it is kept under.
    fn put_file<'a>(&'a self, content: &'a [u8]) -> BoxFuture<'a, Result<String, String>>;

    /// A file by its digest (checked against it).
    fn fetch_file<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Vec<u8>, String>>;
}
