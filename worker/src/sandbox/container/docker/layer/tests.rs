use std::fs;
use std::time::{Duration, SystemTime};

use super::*;

fn kinds(state: &LayerState) -> Vec<(String, char)> {
    state
        .changes
        .iter()
        .map(|c| {
            let k = match c.kind {
                ChangeKind::Added => 'A',
                ChangeKind::Modified => 'C',
                ChangeKind::Deleted => 'D',
            };
            (c.path.clone(), k)
        })
        .collect()
}

fn set_time(path: &Path, secs: u64) {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
}

/// A two-layer image (`/r/a`, `/r/b`, `/r/d/x`, `/gone` shadowed by a whiteout in the top
/// layer) and an empty writable layer.
fn layers() -> (tempfile::TempDir, Layers) {
    let root = tempfile::tempdir().unwrap();
    let (upper, top, bottom) = (root.path().join("upper"), root.path().join("top"), root.path().join("bottom"));
    for d in [&upper, &top, &bottom] {
        fs::create_dir_all(d).unwrap();
    }
    fs::create_dir_all(bottom.join("r/d")).unwrap();
    for f in ["r/a", "r/b", "r/d/x", "gone"] {
        fs::write(bottom.join(f), f).unwrap();
        set_time(&bottom.join(f), 1_000);
    }
    fs::write(top.join(".wh.gone"), "").unwrap();
    let layers = Layers { upper, lowers: vec![top, bottom] };
    (root, layers)
}

#[test]
fn an_empty_layer_has_no_changes() {
    let (_root, layers) = layers();
    assert!(layers.changes().unwrap().changes.is_empty());
}

#[test]
fn additions_changes_and_deletions_are_read_from_the_upper_directory() {
    let (_root, layers) = layers();
    let up = &layers.upper;
    fs::create_dir_all(up.join("r/new/sub")).unwrap();
    fs::write(up.join("r/new/sub/f"), "f").unwrap();
    // A copy-up with its size and time kept is no change; a written one is.
    fs::write(up.join("r/a"), "r/a").unwrap();
    set_time(&up.join("r/a"), 1_000);
    fs::write(up.join("r/b"), "changed").unwrap();
    // A whiteout of an image file, of a file the image does not hold, of one already shadowed.
    fs::create_dir_all(up.join("r/d")).unwrap();
    fs::write(up.join("r/d/.wh.x"), "").unwrap();
    fs::write(up.join("r/.wh.never"), "").unwrap();
    fs::write(up.join(".wh.gone"), "").unwrap();
    let state = layers.changes().unwrap();
    assert_eq!(
        kinds(&state),
        vec![
            ("/r".to_owned(), 'C'),
            ("/r/b".to_owned(), 'C'),
            ("/r/d".to_owned(), 'C'),
            ("/r/d/x".to_owned(), 'D'),
            ("/r/new".to_owned(), 'A'),
            ("/r/new/sub".to_owned(), 'A'),
            ("/r/new/sub/f".to_owned(), 'A'),
        ]
    );
}

#[test]
fn an_opaque_directory_deletes_what_it_does_not_hold_again() {
    let (_root, layers) = layers();
    let up = &layers.upper;
    fs::create_dir_all(up.join("r")).unwrap();
    fs::write(up.join("r/.wh..wh..opq"), "").unwrap();
    fs::write(up.join("r/c"), "c").unwrap();
    let state = layers.changes().unwrap();
    assert_eq!(
        kinds(&state),
        vec![
            ("/r".to_owned(), 'C'),
            ("/r/a".to_owned(), 'D'),
            ("/r/b".to_owned(), 'D'),
            ("/r/c".to_owned(), 'A'),
            ("/r/d".to_owned(), 'D'),
        ]
    );
}

#[test]
fn the_stamp_moves_with_any_write_even_one_that_restores_size_and_time() {
    let (_root, layers) = layers();
    fs::create_dir_all(layers.upper.join("r")).unwrap();
    fs::write(layers.upper.join("r/a"), "r/a").unwrap();
    set_time(&layers.upper.join("r/a"), 1_000);
    let before = layers.changes().unwrap();
    assert_eq!(layers.changes().unwrap().stamp, before.stamp);
    std::thread::sleep(Duration::from_millis(20));
    fs::write(layers.upper.join("r/a"), "r/A").unwrap();
    set_time(&layers.upper.join("r/a"), 1_000);
    let after = layers.changes().unwrap();
    assert_eq!(after.changes, before.changes, "the same size and time: no change for the engine either");
    assert_ne!(after.stamp, before.stamp);
    // Only the bytes tell the rewrite: a stat check would miss it.
    assert!(before.stat_exact, "a copy-up of the image's own bytes");
    assert!(!after.stat_exact, "other bytes under the image's size and time");
    // Another second, or another size, is seen by a stat check.
    set_time(&layers.upper.join("r/a"), 1_001);
    assert!(layers.changes().unwrap().stat_exact);
    fs::write(layers.upper.join("r/a"), "r/AA").unwrap();
    set_time(&layers.upper.join("r/a"), 1_000);
    assert!(layers.changes().unwrap().stat_exact);
}
