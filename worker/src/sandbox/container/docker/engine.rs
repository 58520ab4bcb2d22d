//! The Engine API's small conversions: its errors as [`RuntimeError`]s (a container gone, an exec
//! the engine could not start), the API version it names, image references, label filters and
//! the one-file tar archive an upload sends.

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::ClientVersion;
use bollard::errors::Error as BollardError;

use super::super::RuntimeError;

/// The engine's message when it could not start an exec's process at all.
const START_FAILED: &str = "OCI runtime exec failed";
/// The part of [`START_FAILED`]'s message that means a missing working directory, which fails
/// as under `docker exec` (exit 126, the message as output) rather than as an engine error.
const START_FAILED_CHDIR: &str = "chdir to cwd";

/// The engine error of an exec whose wrapper never ran because the engine could not start its
/// process (the pids limit reached by a fork bomb, say): that is no output of the command. A
/// missing working directory is the exception, kept as `docker exec` shows it.
pub(super) fn start_failure(container: &str, output: &[u8]) -> Option<RuntimeError> {
    let text = String::from_utf8_lossy(output);
    (text.contains(START_FAILED) && !text.contains(START_FAILED_CHDIR)).then(|| {
        RuntimeError::Engine(format!("the engine could not start a command in container {container}: {}", text.trim()))
    })
}

/// `repo:tag` → (`repo`, Some(`tag`)); a colon before the last `/` belongs to a registry's port.
pub(super) fn split_reference(reference: &str) -> (&str, Option<&str>) {
    let slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[slash..].rfind(':') {
        Some(i) => (&reference[..slash + i], Some(&reference[slash + i + 1..])),
        None => (reference, None),
    }
}

pub(super) fn label_filters(filter: &BTreeMap<String, String>) -> HashMap<String, Vec<String>> {
    let mut filters = HashMap::new();
    if !filter.is_empty() {
        filters.insert("label".to_owned(), filter.iter().map(|(k, v)| format!("{k}={v}")).collect());
    }
    filters
}

/// A tar archive of one regular file `name`, owned by root, with `mode`.
pub(super) fn one_file_tar(name: &std::ffi::OsStr, content: &[u8], mode: u32) -> std::io::Result<Vec<u8>> {
    let mut header = tar::Header::new_gnu();
    header.set_size(content.len() as u64);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mtime(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, name, content)?;
    builder.into_inner()
}

/// `1.41` → the client version.
pub(super) fn parse_version(text: &str) -> Option<ClientVersion> {
    let (major, minor) = text.trim().split_once('.')?;
    Some(ClientVersion { major_version: major.parse().ok()?, minor_version: minor.parse().ok()? })
}

/// The newest version an engine that refused a newer client names: "client version 1.53 is too
/// new. Maximum supported API version is 1.41".
pub(super) fn max_version_in(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("Maximum supported API version is ")?;
    let version: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let version = version.trim_end_matches('.').to_owned();
    parse_version(&version).map(|_| version)
}

pub(super) fn status(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The engine's own message for a response error, bollard's text for anything else.
pub(super) fn engine_message(e: &BollardError) -> String {
    match e {
        BollardError::DockerResponseServerError { status_code, message } if message.is_empty() => {
            format!("HTTP {status_code}")
        }
        BollardError::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

pub(super) fn engine(e: BollardError) -> RuntimeError {
    RuntimeError::Engine(engine_message(&e))
}

/// An error of an operation on a running container: a container that does not exist (404 "No
/// such container") or no longer runs (409 "is not running" / "is paused" not included) is
/// [`RuntimeError::Gone`].
pub(super) fn container_error(container: &str, e: BollardError) -> RuntimeError {
    let message = engine_message(&e);
    match status(&e) {
        Some(404) if message.contains("No such container") || message == "HTTP 404" => {
            RuntimeError::Gone(container.to_owned())
        }
        Some(409) if message.contains("is not running") => RuntimeError::Gone(container.to_owned()),
        _ => RuntimeError::Engine(message),
    }
}
