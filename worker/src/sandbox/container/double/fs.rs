//! A fake container's file system ([`FakeFs`]) and what a command does to it ([`ExecHandler`]):
//! what the runtime and its default handler, [`fake_shell`](super::fake_shell), share.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::sandbox::container::{ExecOutput, ExecRequest};

/// Files by absolute path. Directories are implied by the files under them.
pub type Files = BTreeMap<String, Vec<u8>>;

/// A container's file system as an exec handler sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeFs {
    files: Files,
    /// The files of the task image at the root of the container's image chain (what `git diff`
    /// and `git status` of [`fake_shell`] compare with).
    origin: Arc<Files>,
}

impl FakeFs {
    /// A file system holding `files`, whose origin is itself.
    pub fn new(files: Files) -> FakeFs {
        FakeFs { origin: Arc::new(files.clone()), files }
    }

    /// A file system holding `files`, whose origin is `origin` (a container of an image committed
    /// on top of a task image: its origin is the task image's files).
    pub fn with_origin(files: Files, origin: Files) -> FakeFs {
        FakeFs { files, origin: Arc::new(origin) }
    }

    pub fn read(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    /// A file's content as text (invalid UTF-8 replaced).
    pub fn read_string(&self, path: &str) -> Option<String> {
        self.read(path).map(|b| String::from_utf8_lossy(b).into_owned())
    }

    pub fn write(&mut self, path: &str, content: impl Into<Vec<u8>>) {
        self.files.insert(path.to_owned(), content.into());
    }

    pub fn append(&mut self, path: &str, content: &[u8]) {
        self.files.entry(path.to_owned()).or_default().extend_from_slice(content);
    }

    /// Remove a file, or a directory with everything under it; whether anything was removed.
    pub fn remove(&mut self, path: &str) -> bool {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let before = self.files.len();
        self.files.retain(|p, _| p != path && !p.starts_with(&prefix));
        self.files.len() != before
    }

    /// Whether `path` is a file or a directory (has files under it).
    pub fn exists(&self, path: &str) -> bool {
        self.files.contains_key(path) || self.is_dir(path)
    }

    pub fn is_dir(&self, path: &str) -> bool {
        let prefix = if path == "/" { "/".to_owned() } else { format!("{}/", path.trim_end_matches('/')) };
        self.files.range(prefix.clone()..).next().is_some_and(|(p, _)| p.starts_with(&prefix))
    }

    pub fn files(&self) -> &Files {
        &self.files
    }

    /// The files of the task image the container's chain started from.
    pub fn origin(&self) -> &Files {
        &self.origin
    }
}

/// What a command does in a [`FakeRuntime`].
pub type ExecHandler = Arc<dyn Fn(&mut FakeFs, &ExecRequest) -> ExecOutput + Send + Sync>;
