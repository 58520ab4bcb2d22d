//! A snapshot image made from the container's writable layer on this host and loaded into the
//! engine, instead of the engine's commit.
//!
//! `docker commit` on Docker 20.10's `fuse-overlayfs` driver computes the new layer with the
//! "naive" diff: it walks the container's whole merged tree against its image's, a second or more
//! on a small image and more on a large one, however little changed. The writable layer itself is
//! a directory on this host ([`super::layer`]), and it *is* the new layer: [`layer_tar`] writes it
//! as the tar the engine's commit would write — the same entries, owners, modes, links and
//! whiteouts, modification times cut to the second as the engine cuts them — and [`image_archive`]
//! wraps it in a `docker save` archive whose image is the container's image plus that one layer.
//! `docker load` (`POST /images/load`) finds the image's own layers already present (by their
//! chain id) and reads only the new one, so the cost is that of the changed files.
//!
//! The image's config is what the commit writes: the container's config with its labels and the
//! given ones (the given ones win), no host name, the parent's history plus one entry for the new
//! layer (so the history's newest entry is the snapshot's own size, as after a commit). Unlike a
//! commit, the image records no parent image: nothing vcurve does reads it, and a loaded snapshot
//! never blocks the removal of the image it was made from.
//!
//! [`layer_tar`] refuses (and the caller commits through the engine) a layer it cannot write
//! exactly: a file whose stat fuse-overlayfs keeps in an attribute, a file with a
//! `security.capability` attribute (the engine's tar carries it; this writer does not), a name
//! that is not UTF-8, or more than [`LOAD_CAP`] bytes of file content (the layer is held in
//! memory).

use std::collections::HashMap;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use std::collections::BTreeMap;

use bollard::models::{ContainerInspectResponse, ImageHistoryResponseItem, ImageInspect};
use bollard::query_parameters::ImportImageOptionsBuilder;
use futures::StreamExt;

use super::engine::{container_error, engine};
use super::layer::{self, Layers, OPAQUE_FILE, OPAQUE_WHITEOUT, WHITEOUT_PREFIX};
use super::{DockerRuntime, PendingImage, RuntimeError};

/// The most file content a loaded snapshot carries; a larger layer is committed by the engine.
pub const LOAD_CAP: u64 = 256 << 20;

/// Attributes by which kernel overlay makes an entry stand for one elsewhere in the image (a
/// renamed directory, a file whose data stays below): the entry alone is not the change.
const OVERLAY_XATTRS: &[&str] = &["trusted.overlay.redirect", "trusted.overlay.metacopy"];

fn unsupported(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, what)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `sha256:` digest of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

struct Writer {
    tar: tar::Builder<Vec<u8>>,
    /// The first path written of each multiply linked inode.
    links: HashMap<(u64, u64), String>,
    content: u64,
}

fn header_of(meta: &Metadata, kind: tar::EntryType) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(meta.mode() & 0o7777);
    header.set_uid(u64::from(meta.uid()));
    header.set_gid(u64::from(meta.gid()));
    // The engine's tar cuts times to the second.
    header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
    header.set_size(0);
    header
}

/// A whiteout entry as the engine writes one (`.wh.NAME`, an empty regular file).
fn whiteout_header() -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(0);
    header
}

impl Writer {
    fn dir(&mut self, host: &Path, rel: &str) -> io::Result<()> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(host)? {
            let entry = entry?;
            let name = entry
                .file_name()
                .into_string()
                .map_err(|n| unsupported(format!("a file name that is not UTF-8: {n:?}")))?;
            entries.push(name);
        }
        entries.sort();
        for name in entries {
            let path = host.join(&name);
            let meta = std::fs::symlink_metadata(&path)?;
            let child = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            self.entry(&path, &name, &child, &meta)?;
        }
        Ok(())
    }

    fn entry(&mut self, path: &Path, name: &str, rel: &str, meta: &Metadata) -> io::Result<()> {
        // The driver's own opaque markers: a directory's opacity is written with the directory.
        if name == OPAQUE_FILE || name == OPAQUE_WHITEOUT {
            return Ok(());
        }
        let kind = meta.file_type();
        if kind.is_char_device() && meta.rdev() == 0 {
            let parent = rel.rsplit_once('/').map(|(p, _)| format!("{p}/")).unwrap_or_default();
            return self.tar.append_data(
                &mut whiteout_header(),
                format!("{parent}{WHITEOUT_PREFIX}{name}"),
                io::empty(),
            );
        }
        if name.starts_with(WHITEOUT_PREFIX) && kind.is_file() {
            // An AUFS-style whiteout the driver wrote as a file: already the engine's form.
            return self.tar.append_data(&mut whiteout_header(), rel, io::empty());
        }
        for attr in layer::OVERRIDE_XATTRS.iter().chain([&layer::CAPABILITY_XATTR]).chain(OVERLAY_XATTRS) {
            if layer::xattr(path, attr)?.is_some() {
                return Err(unsupported(format!("{} has the attribute {attr}", path.display())));
            }
        }
        if kind.is_dir() {
            self.tar.append_data(&mut header_of(meta, tar::EntryType::Directory), format!("{rel}/"), io::empty())?;
            if layer::is_opaque(path)? {
                self.tar.append_data(&mut whiteout_header(), format!("{rel}/{OPAQUE_FILE}"), io::empty())?;
            }
            return self.dir(path, rel);
        }
        if kind.is_symlink() {
            let target = std::fs::read_link(path)?;
            return self.tar.append_link(&mut header_of(meta, tar::EntryType::Symlink), rel, target);
        }
        if kind.is_file() {
            if meta.nlink() > 1 {
                let key = (meta.dev(), meta.ino());
                if let Some(first) = self.links.get(&key) {
                    let first = first.clone();
                    return self.tar.append_link(&mut header_of(meta, tar::EntryType::Link), rel, first);
                }
                self.links.insert(key, rel.to_owned());
            }
            self.content += meta.len();
            if self.content > LOAD_CAP {
                return Err(unsupported(format!("the writable layer holds more than {LOAD_CAP} bytes")));
            }
            let mut header = header_of(meta, tar::EntryType::Regular);
            header.set_size(meta.len());
            let file = std::fs::File::open(path)?;
            return self.tar.append_data(&mut header, rel, io::Read::take(file, meta.len()));
        }
        if kind.is_fifo() || kind.is_char_device() || kind.is_block_device() {
            let entry = if kind.is_fifo() {
                tar::EntryType::Fifo
            } else if kind.is_char_device() {
                tar::EntryType::Char
            } else {
                tar::EntryType::Block
            };
            let mut header = header_of(meta, entry);
            let rdev = meta.rdev();
            header.set_device_major(rustix::fs::major(rdev))?;
            header.set_device_minor(rustix::fs::minor(rdev))?;
            return self.tar.append_data(&mut header, rel, io::empty());
        }
        // A socket: the engine's tar leaves it out too.
        Ok(())
    }
}

/// The writable layer `layers.upper` as the layer tar the engine's commit writes (module docs).
pub fn layer_tar(layers: &Layers) -> io::Result<Vec<u8>> {
    let mut writer = Writer { tar: tar::Builder::new(Vec::new()), links: HashMap::new(), content: 0 };
    writer.dir(&layers.upper, "")?;
    writer.tar.into_inner()
}

/// A `docker save` archive of one image: the image `config` (the image config without `rootfs`)
/// over the layers `parent_diff_ids` (already in the engine, not carried) and `layer`, tagged
/// `reference`. Returns the archive and the image's id.
pub fn image_archive(
    mut config: serde_json::Value,
    parent_diff_ids: &[String],
    layer: &[u8],
    reference: &str,
) -> io::Result<(Vec<u8>, String)> {
    let mut diff_ids = parent_diff_ids.to_vec();
    diff_ids.push(digest(layer));
    config["rootfs"] = serde_json::json!({ "type": "layers", "diff_ids": diff_ids });
    let config = serde_json::to_vec(&config).map_err(io::Error::other)?;
    let id = digest(&config);
    // Every layer needs a file name in the manifest; the parents' are never read (the engine has
    // their chain) and so are not carried.
    let mut layers: Vec<String> = (0..parent_diff_ids.len()).map(|i| format!("parent-{i}/layer.tar")).collect();
    layers.push("layer/layer.tar".to_owned());
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": "config.json",
        "RepoTags": [reference],
        "Layers": layers,
    }]))
    .map_err(io::Error::other)?;
    let mut tar = tar::Builder::new(Vec::with_capacity(layer.len() + config.len() + 4096));
    for (name, data) in [("config.json", &config[..]), ("manifest.json", &manifest[..]), ("layer/layer.tar", layer)] {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        tar.append_data(&mut header, name, data)?;
    }
    Ok((tar.into_inner()?, id))
}

/// `secs` since the epoch as RFC 3339 (UTC), as image configs write times.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3_600, rest % 3_600 / 60, rest % 60)
}

/// The image config a commit of a container whose inspection is `container` writes, over the
/// image `parent` (its history `history`, newest first as the engine lists it), with `labels`
/// added, without `rootfs` ([`image_archive`] adds it).
fn image_config(
    container: &ContainerInspectResponse,
    parent: &ImageInspect,
    history: &[ImageHistoryResponseItem],
    labels: &BTreeMap<String, String>,
    now: i64,
) -> serde_json::Value {
    let mut config = serde_json::to_value(container.config.clone().unwrap_or_default()).unwrap_or_default();
    let mut merged: serde_json::Map<String, serde_json::Value> =
        config.get("Labels").and_then(|l| l.as_object()).cloned().unwrap_or_default();
    for (k, v) in labels {
        merged.insert(k.clone(), serde_json::Value::String(v.clone()));
    }
    if let Some(fields) = config.as_object_mut() {
        fields.insert("Labels".to_owned(), serde_json::Value::Object(merged));
        // The engine's commit does not carry the container's host and domain names.
        fields.remove("Hostname");
        fields.remove("Domainname");
    }
    let parent_layers = parent.root_fs.as_ref().and_then(|r| r.layers.as_ref()).map_or(0, Vec::len);
    // The parent's history oldest first; an entry of no size is taken for one without a layer.
    // Where that does not pair each layer with an entry (a layer of no size), one entry per layer
    // stands in, so that the newest entry is always this snapshot's own layer.
    let mut entries: Vec<serde_json::Value> = history
        .iter()
        .rev()
        .map(|h| {
            let mut entry = serde_json::json!({ "created": rfc3339(h.created), "created_by": h.created_by });
            if !h.comment.is_empty() {
                entry["comment"] = serde_json::Value::String(h.comment.clone());
            }
            if h.size == 0 {
                entry["empty_layer"] = serde_json::Value::Bool(true);
            }
            entry
        })
        .collect();
    let with_layers = history.iter().filter(|h| h.size != 0).count();
    if with_layers != parent_layers {
        let id = parent.id.clone().unwrap_or_default();
        entries = (0..parent_layers)
            .map(|i| serde_json::json!({ "created_by": format!("layer {} of {id}", i + 1) }))
            .collect();
    }
    entries.push(
        serde_json::json!({ "created": rfc3339(now), "comment": "vcurve snapshot of the container's writable layer" }),
    );
    serde_json::json!({
        "architecture": parent.architecture,
        "os": parent.os,
        "variant": parent.variant,
        "created": rfc3339(now),
        "container": container.id,
        "config": config,
        "history": entries,
    })
}

impl DockerRuntime {
    /// Take the state of `container` (writable layer `layers`) for the image `reference`: its
    /// layer and configuration, packed; the returned future loads them (module docs) and may run
    /// while the container goes on. `Ok(None)`: this layer cannot be written here, commit through
    /// the engine.
    pub(super) async fn load_later(
        &self,
        container: &str,
        layers: Layers,
        reference: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<PendingImage>, RuntimeError> {
        let began = std::time::Instant::now();
        let inspect =
            self.docker.inspect_container(container, None).await.map_err(|e| container_error(container, e))?;
        let Some(image) = inspect.image.clone() else { return Ok(None) };
        let parent = self.docker.inspect_image(&image).await.map_err(engine)?;
        let history = self.docker.image_history(&image).await.map_err(engine)?;
        let parent_diff_ids = parent.root_fs.as_ref().and_then(|r| r.layers.clone()).unwrap_or_default();
        let layer = match tokio::task::spawn_blocking(move || layer_tar(&layers)).await {
            Ok(Ok(layer)) => layer,
            Ok(Err(e)) => {
                tracing::debug!(container, error = %e, "the writable layer cannot be loaded as it is; committing through the engine");
                return Ok(None);
            }
            Err(e) => {
                return Err(RuntimeError::Engine(format!("writing the layer of container {container} failed: {e}")));
            }
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
        let config = image_config(&inspect, &parent, &history, labels, now);
        let layer_bytes = layer.len();
        let (archive, id) = image_archive(config, &parent_diff_ids, &layer, reference)
            .map_err(|e| RuntimeError::Engine(format!("packing the snapshot of container {container}: {e}")))?;
        drop(layer);
        let captured = began.elapsed();
        let docker = self.docker.clone();
        let (container, reference) = (container.to_owned(), reference.to_owned());
        Ok(Some(Box::pin(async move {
            let began = std::time::Instant::now();
            let options = ImportImageOptionsBuilder::default().quiet(true).build();
            let mut stream = docker.import_image(options, bollard::body_full(archive.into()), None);
            while let Some(item) = stream.next().await {
                let item = item.map_err(engine)?;
                if let Some(detail) = item.error_detail {
                    return Err(RuntimeError::Engine(format!(
                        "loading the snapshot {reference} of container {container}: {}",
                        detail.message.unwrap_or_default()
                    )));
                }
            }
            tracing::debug!(
                container,
                reference,
                layer_bytes,
                capture_ms = captured.as_millis() as u64,
                load_ms = began.elapsed().as_millis() as u64,
                "snapshot loaded from the writable layer"
            );
            Ok(id)
        })))
    }
}

#[cfg(test)]
mod tests;
