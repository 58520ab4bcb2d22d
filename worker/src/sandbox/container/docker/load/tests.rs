use std::io::Read;

use super::*;

#[test]
fn times_are_written_as_rfc3339() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_796_434_003), "2026-12-05T01:26:43Z");
    assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
}

fn entries(tar_bytes: &[u8]) -> Vec<(String, tar::EntryType, Vec<u8>, String)> {
    let mut archive = tar::Archive::new(tar_bytes);
    let mut out = Vec::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("reads");
        let path = entry.path().expect("path").to_string_lossy().into_owned();
        let kind = entry.header().entry_type();
        let link = entry.link_name().expect("link").map(|l| l.to_string_lossy().into_owned()).unwrap_or_default();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).expect("data");
        out.push((path, kind, data, link));
    }
    out
}

/// The layer's entries in walk order, whiteouts and opaque markers in the engine's form, links
/// as links, times cut to the second.
#[test]
fn the_layer_tar_is_the_upper_directory_in_the_engines_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let upper = dir.path();
    std::fs::create_dir_all(upper.join("etc/apt")).expect("mkdir");
    std::fs::write(upper.join("etc/apt/.wh..wh..opq"), b"").expect("marker");
    std::fs::write(upper.join("etc/apt/new"), b"y\n").expect("write");
    std::fs::write(upper.join("etc/.wh.issue"), b"").expect("aufs whiteout");
    std::fs::create_dir(upper.join("root")).expect("mkdir");
    std::fs::write(upper.join("root/hello"), b"hello\n").expect("write");
    std::fs::hard_link(upper.join("root/hello"), upper.join("root/hard")).expect("link");
    std::os::unix::fs::symlink("/nowhere", upper.join("root/link")).expect("symlink");
    let whiteout = rustix::fs::mknodat(
        rustix::fs::CWD,
        upper.join("root/gone"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0),
        0,
    )
    .is_ok();
    let layers = Layers { upper: upper.to_path_buf(), lowers: Vec::new() };
    let bytes = layer_tar(&layers).expect("writes");
    let got = entries(&bytes);
    let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
    let mut expected = vec!["etc/", "etc/.wh.issue", "etc/apt/", "etc/apt/.wh..wh..opq", "etc/apt/new", "root/"];
    if whiteout {
        expected.push("root/.wh.gone");
    }
    expected.extend(["root/hard", "root/hello", "root/link"]);
    assert_eq!(names, expected);
    let by_name = |n: &str| got.iter().find(|e| e.0 == n).expect("present");
    assert_eq!(by_name("root/hard").1, tar::EntryType::Regular);
    assert_eq!(by_name("root/hard").2, b"hello\n");
    assert_eq!(by_name("root/hello").1, tar::EntryType::Link);
    assert_eq!(by_name("root/hello").3, "root/hard");
    assert_eq!(by_name("root/link").1, tar::EntryType::Symlink);
    assert_eq!(by_name("root/link").3, "/nowhere");
    assert_eq!(by_name("etc/apt/new").2, b"y\n");
    let mut archive = tar::Archive::new(&bytes[..]);
    for entry in archive.entries().expect("entries") {
        let entry = entry.expect("reads");
        let header = entry.header();
        assert!(header.as_gnu().is_some());
        let path = entry.path().expect("path").into_owned();
        if path.ends_with("new") {
            let meta = std::fs::metadata(upper.join("etc/apt/new")).expect("stat");
            assert_eq!(header.mtime().expect("mtime"), meta.mtime() as u64);
            assert_eq!(header.mode().expect("mode"), meta.mode() & 0o7777);
        }
    }
}

#[test]
fn the_archive_names_every_layer_and_its_id_is_the_configs_digest() {
    let config = serde_json::json!({ "architecture": "amd64", "os": "linux", "config": { "Labels": { "a": "b" } } });
    let parents = vec!["sha256:aa".to_owned(), "sha256:bb".to_owned()];
    let (bytes, id) = image_archive(config, &parents, b"layer bytes", "vcurve-snapshot:x-5").expect("writes");
    let got = entries(&bytes);
    assert_eq!(
        got.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["config.json", "manifest.json", "layer/layer.tar"]
    );
    assert_eq!(id, digest(&got[0].2));
    let config: serde_json::Value = serde_json::from_slice(&got[0].2).expect("json");
    assert_eq!(config["rootfs"]["diff_ids"], serde_json::json!(["sha256:aa", "sha256:bb", digest(b"layer bytes")]));
    assert_eq!(config["config"]["Labels"]["a"], "b");
    let manifest: serde_json::Value = serde_json::from_slice(&got[1].2).expect("json");
    assert_eq!(manifest[0]["RepoTags"], serde_json::json!(["vcurve-snapshot:x-5"]));
    assert_eq!(manifest[0]["Layers"].as_array().expect("layers").len(), 3);
    assert_eq!(manifest[0]["Layers"][2], "layer/layer.tar");
    assert_eq!(got[2].2, b"layer bytes");
}

#[test]
fn a_layer_it_cannot_write_exactly_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f"), b"x").expect("write");
    let set = rustix::fs::setxattr(
        dir.path().join("f"),
        "user.fuseoverlayfs.override_stat",
        b"0:0:0644",
        rustix::fs::XattrFlags::empty(),
    );
    if set.is_err() {
        return; // no user attributes on this file system
    }
    let layers = Layers { upper: dir.path().to_path_buf(), lowers: Vec::new() };
    let error = layer_tar(&layers).expect_err("refused");
    assert_eq!(error.kind(), io::ErrorKind::Unsupported, "{error}");
}
