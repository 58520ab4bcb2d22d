use super::engine::start_failure;
use super::output::{Collector, Header, glob_escape};
use super::*;

#[test]
fn references_split_at_the_tag_colon() {
    assert_eq!(split_reference("vcurve-snapshot:abc-15"), ("vcurve-snapshot", Some("abc-15")));
    assert_eq!(split_reference("vcurve-snapshot"), ("vcurve-snapshot", None));
    assert_eq!(split_reference("localhost:5000/x/y:t"), ("localhost:5000/x/y", Some("t")));
    assert_eq!(split_reference("localhost:5000/x/y"), ("localhost:5000/x/y", None));
}

#[test]
fn the_newest_version_an_old_engine_names_is_read() {
    let message = "client version 1.53 is too new. Maximum supported API version is 1.41";
    assert_eq!(max_version_in(message).as_deref(), Some("1.41"));
    assert_eq!(max_version_in("Maximum supported API version is 1.41."), Some("1.41".to_owned()));
    assert_eq!(max_version_in("something else"), None);
    let v = parse_version("1.41").expect("parses");
    assert_eq!((v.major_version, v.minor_version), (1, 41));
    assert!(parse_version("x.41").is_none());
}

#[test]
fn the_header_is_stripped_however_it_is_split() {
    let stream = b"vcurve-exec 42 pipe:[9876]\nhello\xff world\n";
    for cut in 0..stream.len() {
        let mut c = Collector::default();
        c.push(&stream[..cut]);
        c.push(&stream[cut..]);
        c.finish();
        assert_eq!(c.header, Some(Header { pgid: 42, pipe: Some("pipe:[9876]".to_owned()) }), "cut at {cut}");
        assert_eq!(c.output, b"hello\xff world\n", "cut at {cut}");
    }
}

#[test]
fn output_without_a_header_is_all_output() {
    let mut c = Collector::default();
    c.push(b"OCI runtime exec failed: no such file\n");
    c.finish();
    assert!(c.header.is_none());
    assert_eq!(c.output, b"OCI runtime exec failed: no such file\n");

    let mut c = Collector::default();
    c.push(b"vcurve-e");
    c.finish();
    assert!(c.header.is_none());
    assert_eq!(c.output, b"vcurve-e");

    let mut c = Collector::default();
    c.push(b"vcurve-exec 9 -\nrest");
    assert_eq!(c.header, Some(Header { pgid: 9, pipe: None }));
    assert_eq!(c.output, b"rest");

    // At the container's pids limit the wrapper cannot fork `$(readlink …)`: an empty pipe word.
    let mut c = Collector::default();
    c.push(b"vcurve-exec 201 \nafter\n");
    assert_eq!(c.header, Some(Header { pgid: 201, pipe: None }));
    assert_eq!(c.output, b"after\n");

    let mut c = Collector::default();
    c.push(b"vcurve-exec nonsense\nrest");
    assert!(c.header.is_none());
    assert_eq!(c.output, b"vcurve-exec nonsense\nrest");
}

#[test]
fn output_is_capped() {
    let mut c = Collector::default();
    c.push(b"vcurve-exec 7 pipe:[1]\n");
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..70 {
        c.push(&chunk);
    }
    assert_eq!(c.output.len(), OUTPUT_CAP);
}

#[test]
fn pipe_names_are_escaped_for_find() {
    assert_eq!(glob_escape("pipe:[123]"), r"pipe:\[123\]");
}

#[test]
fn a_one_file_archive_holds_the_file_owned_by_root() {
    let bytes = one_file_tar(std::ffi::OsStr::new("run.sh"), b"echo hi\n", 0o755).expect("packs");
    let mut archive = tar::Archive::new(&bytes[..]);
    let mut entries = archive.entries().expect("entries");
    let mut entry = entries.next().expect("one entry").expect("reads");
    assert_eq!(entry.path().expect("path").to_str(), Some("run.sh"));
    assert_eq!(entry.header().mode().expect("mode"), 0o755);
    assert_eq!(entry.header().uid().expect("uid"), 0);
    let mut content = Vec::new();
    std::io::Read::read_to_end(&mut entry, &mut content).expect("content");
    assert_eq!(content, b"echo hi\n");
    assert!(entries.next().is_none());
}

#[test]
fn an_exec_the_engine_could_not_start_is_an_engine_error_but_a_missing_workdir_is_output() {
    let forked_out = b"OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: unknown\r\n";
    let error = start_failure("c1", forked_out).expect("an engine error");
    assert!(
        matches!(&error, RuntimeError::Engine(m) if m.contains("could not start a command in container c1")),
        "{error}"
    );
    let workdir = b"OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/nope\") set in config.json failed: no such file or directory: unknown";
    assert_eq!(start_failure("c1", workdir), None);
    assert_eq!(start_failure("c1", b"hello"), None);
}
