//! A container's changes read from its writable layer on this host, without asking the engine.
//!
//! `docker diff` on Docker 20.10's overlay-style drivers costs seconds: with `fuse-overlayfs` the
//! engine compares the container's whole merged tree with its image's (the "naive" diff), and the
//! cost grows with the image. The writable layer itself is a directory on the engine's host, the
//! storage driver's upper directory (`GraphDriver.Data.UpperDir` of `docker inspect`), and the
//! image's layers are its lower directories (`LowerDir`, topmost first). [`Layers::changes`] walks
//! the upper directory only, looks each entry up in the lower ones, and gives the set `docker diff`
//! gives:
//!
//! - an entry of the upper directory absent from the image is added (`A`), with everything below
//!   it;
//! - one present in the image is changed (`C`) when its stat differs as the engine compares them:
//!   type and permission bits, owner, group, device number, and for anything but a directory its
//!   size and modification time (equal when either side has no nanoseconds), or its
//!   `security.capability` attribute differs. A file copied up and written back to what it was
//!   (same size and time) is no change, and a directory's time never counts;
//! - a whiteout (a character device 0/0, or an AUFS-style `.wh.NAME` file) of a path the image
//!   holds is deleted (`D`), that path only; a whiteout of a path the container made itself is
//!   nothing;
//! - below an opaque directory (the `trusted.overlay.opaque`, `user.overlay.opaque` or
//!   `user.fuseoverlayfs.opaque` attribute set to `y`, or a `.wh..wh..opq` file in it, as
//!   fuse-overlayfs writes next to its `.wh..opq` marker), every entry of the image the upper
//!   directory does not hold again is deleted;
//! - every directory above a change is changed, unless it was added.
//!
//! fuse-overlayfs 1.10 run as root (this machine's) keeps ownership and modes on the files
//! themselves; a layer whose entries carry an `override_stat` attribute (fuse-overlayfs in a user
//! namespace) is refused, and so is anything this module cannot read: the caller falls back to the
//! engine's diff.
//!
//! The same walk yields a [`Layers::changes`] stamp: a hash of every entry's name and stat
//! (inode, size, times including the change time, mode, owner). Two equal stamps mean the layer
//! was not written to in between — a write that restores size and modification time still moves
//! the change time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::super::{Change, ChangeKind};

/// The opaque-directory marker file fuse-overlayfs and AUFS write.
pub(super) const OPAQUE_FILE: &str = ".wh..wh..opq";
/// fuse-overlayfs's whiteout of its own opaque marker, next to it.
pub(super) const OPAQUE_WHITEOUT: &str = ".wh..opq";
pub(super) const WHITEOUT_PREFIX: &str = ".wh.";
/// The attributes that mark an overlay directory opaque (kernel overlay as root, kernel overlay
/// with `userxattr`, fuse-overlayfs without the right to set `trusted.*`).
const OPAQUE_XATTRS: &[&str] = &["trusted.overlay.opaque", "user.overlay.opaque", "user.fuseoverlayfs.opaque"];
/// Attributes under which fuse-overlayfs keeps a stat other than the file's own.
pub(super) const OVERRIDE_XATTRS: &[&str] = &["user.fuseoverlayfs.override_stat", "user.containers.override_stat"];
pub(super) const CAPABILITY_XATTR: &str = "security.capability";

/// A container's writable layer and its image's layers, as directories of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    pub upper: PathBuf,
    /// Topmost first.
    pub lowers: Vec<PathBuf>,
}

/// What [`Layers::changes`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerState {
    /// The changes against the image, sorted by path.
    pub changes: Vec<Change>,
    /// A hash of every entry of the writable layer with its stat.
    pub stamp: String,
    /// No file of the image is held again with the image's size and modification second but
    /// other bytes ([`super::super::LayerStamp::stat_exact`]).
    pub stat_exact: bool,
}

/// What an upper directory entry is.
enum Kind {
    /// A marker of the storage driver's own (an opaque marker): not a file of the container.
    Marker,
    /// A whiteout of the entry of this name.
    Whiteout(String),
    Entry,
}

fn classify(name: &str, meta: &Metadata) -> Kind {
    if name == OPAQUE_FILE || name == OPAQUE_WHITEOUT {
        return Kind::Marker;
    }
    if let Some(target) = name.strip_prefix(WHITEOUT_PREFIX) {
        return Kind::Whiteout(target.to_owned());
    }
    if is_whiteout(meta) { Kind::Whiteout(name.to_owned()) } else { Kind::Entry }
}

fn is_whiteout(meta: &Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

pub(super) fn xattr(path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 256];
    match rustix::fs::lgetxattr(path, name, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::NOTSUP => Ok(None),
        Err(e) if e == rustix::io::Errno::RANGE => {
            let n = rustix::fs::lgetxattr_query(path, name).map_err(io::Error::from)?;
            let mut buf = vec![0u8; n];
            let n = rustix::fs::lgetxattr(path, name, &mut buf[..]).map_err(io::Error::from)?;
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(e) => Err(io::Error::from(e)),
    }
}

pub(super) fn is_opaque(dir: &Path) -> io::Result<bool> {
    for name in OPAQUE_XATTRS {
        if xattr(dir, name)?.as_deref() == Some(b"y") {
            return Ok(true);
        }
    }
    Ok(std::fs::symlink_metadata(dir.join(OPAQUE_FILE)).is_ok())
}

/// Whether the engine's diff counts `new` as a change of `old` (moby's `statDifferent`).
fn stat_differs(old: &Metadata, new: &Metadata) -> bool {
    if old.mode() != new.mode() || old.uid() != new.uid() || old.gid() != new.gid() || old.rdev() != new.rdev() {
        return true;
    }
    if new.is_dir() {
        return false;
    }
    let same_time = old.mtime() == new.mtime()
        && (old.mtime_nsec() == new.mtime_nsec() || old.mtime_nsec() == 0 || new.mtime_nsec() == 0);
    !same_time || old.size() != new.size()
}

fn join(rel: &str, name: &str) -> String {
    if rel == "/" { format!("/{name}") } else { format!("{rel}/{name}") }
}

fn on_host(root: &Path, rel: &str) -> PathBuf {
    root.join(rel.trim_start_matches('/'))
}

impl Layers {
    /// The entry of the image at `rel` (absolute inside the container), as the lower layers hold
    /// it: its path on this host and its stat; `None` when the image does not hold it.
    fn lower(&self, rel: &str) -> io::Result<Option<(PathBuf, Metadata)>> {
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
        if parts.is_empty() {
            return Ok(None);
        }
        for layer in &self.lowers {
            let mut dir = layer.clone();
            let mut sealed = false;
            for (i, part) in parts.iter().enumerate() {
                if std::fs::symlink_metadata(dir.join(format!("{WHITEOUT_PREFIX}{part}"))).is_ok() {
                    return Ok(None);
                }
                let path = dir.join(part);
                match std::fs::symlink_metadata(&path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        if sealed {
                            return Ok(None);
                        }
                        break;
                    }
                    Err(e) => return Err(e),
                    Ok(meta) => {
                        if is_whiteout(&meta) {
                            return Ok(None);
                        }
                        if i + 1 == parts.len() {
                            return Ok(Some((path, meta)));
                        }
                        if !meta.is_dir() {
                            return Ok(None);
                        }
                        sealed = sealed || is_opaque(&path)?;
                        dir = path;
                    }
                }
            }
        }
        Ok(None)
    }

    /// The names the image holds in its directory `rel`.
    fn lower_names(&self, rel: &str) -> io::Result<BTreeSet<String>> {
        let mut candidates = BTreeSet::new();
        for layer in &self.lowers {
            match std::fs::read_dir(on_host(layer, rel)) {
                Ok(entries) => {
                    for entry in entries {
                        let name = entry?.file_name().to_string_lossy().into_owned();
                        if !name.starts_with(WHITEOUT_PREFIX) {
                            candidates.insert(name);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => {}
                Err(e) => return Err(e),
            }
        }
        let mut names = BTreeSet::new();
        for name in candidates {
            if self.lower(&join(rel, &name))?.is_some() {
                names.insert(name);
            }
        }
        Ok(names)
    }

    /// Read the changes and the stamp (see the module docs). An error means the layer cannot be
    /// read here: use the engine's diff.
    pub fn changes(&self) -> io::Result<LayerState> {
        let mut walk = Walk { layers: self, changes: BTreeMap::new(), hash: Sha256::new(), stat_exact: true };
        walk.dir("/", false)?;
        let Walk { mut changes, hash, stat_exact, .. } = walk;
        // Every directory above a change is changed, unless it was added.
        let paths: Vec<String> = changes.keys().cloned().collect();
        for path in paths {
            let mut dir = path.as_str();
            while let Some(i) = dir.rfind('/') {
                dir = &dir[..i];
                if dir.is_empty() {
                    break;
                }
                changes.entry(dir.to_owned()).or_insert(ChangeKind::Modified);
            }
        }
        let changes = changes.into_iter().map(|(path, kind)| Change { path, kind }).collect();
        let stamp = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(LayerState { changes, stamp, stat_exact })
    }
}

struct Walk<'l> {
    layers: &'l Layers,
    changes: BTreeMap<String, ChangeKind>,
    hash: Sha256,
    stat_exact: bool,
}

/// Whether the files `a` and `b` hold the same bytes.
fn same_bytes(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    let (mut a, mut b) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = a.read(&mut x)?;
        if n == 0 {
            return Ok(b.read(&mut y[..1])? == 0);
        }
        if b.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return Ok(false);
        }
    }
}

impl Walk<'_> {
    fn stamp(&mut self, rel: &str, meta: &Metadata) {
        let line = format!(
            "{rel}\0{} {} {} {} {} {} {}.{} {}.{}\n",
            meta.ino(),
            meta.mode(),
            meta.uid(),
            meta.gid(),
            meta.rdev(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        );
        self.hash.update(line.as_bytes());
    }

    /// Walk the upper directory `rel`; `added`: it is not in the image, so everything in it is
    /// added.
    fn dir(&mut self, rel: &str, added: bool) -> io::Result<()> {
        let host = on_host(&self.layers.upper, rel);
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&host)? {
            let entry = entry?;
            let name = entry.file_name().into_string().map_err(|n| {
                io::Error::new(io::ErrorKind::InvalidData, format!("a file name that is not UTF-8: {n:?}"))
            })?;
            let meta = std::fs::symlink_metadata(entry.path())?;
            entries.push((name, meta));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut present = BTreeSet::new();
        let mut whiteouts = BTreeSet::new();
        let mut opaque = false;
        for (name, meta) in &entries {
            let child = join(rel, name);
            self.stamp(&child, meta);
            match classify(name, meta) {
                Kind::Marker => opaque |= name == OPAQUE_FILE,
                Kind::Whiteout(target) => {
                    whiteouts.insert(target);
                }
                Kind::Entry => {
                    present.insert(name.clone());
                }
            }
        }
        if added {
            for (name, meta) in &entries {
                if present.contains(name) {
                    let child = join(rel, name);
                    self.changes.insert(child.clone(), ChangeKind::Added);
                    if meta.is_dir() {
                        self.dir(&child, true)?;
                    }
                }
            }
            return Ok(());
        }
        opaque = opaque || (rel != "/" && is_opaque(&host)?);
        for target in &whiteouts {
            if !present.contains(target) {
                let child = join(rel, target);
                if self.layers.lower(&child)?.is_some() {
                    self.changes.insert(child, ChangeKind::Deleted);
                }
            }
        }
        if opaque {
            for name in self.layers.lower_names(rel)? {
                if !present.contains(&name) {
                    self.changes.insert(join(rel, &name), ChangeKind::Deleted);
                }
            }
        }
        for (name, meta) in &entries {
            if !present.contains(name) {
                continue;
            }
            let child = join(rel, name);
            let path = host.join(name);
            for attr in OVERRIDE_XATTRS {
                if xattr(&path, attr)?.is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("{} keeps its stat in {attr}", path.display()),
                    ));
                }
            }
            match self.layers.lower(&child)? {
                None => {
                    self.changes.insert(child.clone(), ChangeKind::Added);
                    if meta.is_dir() {
                        self.dir(&child, true)?;
                    }
                }
                Some((lower_path, lower)) => {
                    let changed = stat_differs(&lower, meta)
                        || xattr(&lower_path, CAPABILITY_XATTR)? != xattr(&path, CAPABILITY_XATTR)?;
                    // A rewrite that kept the size and the second: only its bytes tell.
                    if self.stat_exact
                        && meta.is_file()
                        && lower.is_file()
                        && meta.size() == lower.size()
                        && meta.mtime() == lower.mtime()
                        && !same_bytes(&lower_path, &path)?
                    {
                        self.stat_exact = false;
                    }
                    if changed {
                        self.changes.insert(child.clone(), ChangeKind::Modified);
                    }
                    if meta.is_dir() {
                        // Below a directory that replaced a file, everything is new.
                        self.dir(&child, !lower.is_dir())?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
