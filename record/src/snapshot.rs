//! A snapshot in a registry: what a worker reports it pushed and what a continuation is handed to
//! start from, shared by the coordinator (which keeps where each snapshot is) and the worker
//! (which pushes and pulls them).

/// `h_t` of the trajectory with payload digest `trajectory_digest`, pushed to a snapshot registry
/// as the image `image_id`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegistrySnapshot {
    pub trajectory_digest: crate::Digest,
    pub t: u32,
    pub image_id: String,
}
