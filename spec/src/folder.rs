//! Where the files a spec names may lie: under the spec's own folder, after symbolic links are
//! resolved, or under a folder the user allowed (`vcurve launch --allow-path DIR`).
//!
//! A spec is often someone else's: a colleague's study, a benchmark's folder, an archive from the
//! web. Every file it names — curves, recorded runs, task files, problem statements, a SWE-bench
//! dataset — is read on the launching user's machine and sent to the coordinator, where workers
//! hand it to agents. Were any path allowed, `problem_statement_file: ../../../../etc/passwd` (or
//! a curve that is a symbolic link to `~/.ssh/id_ed25519`) would carry the user's own files to
//! whoever reads the study. So a named file must resolve — `..`, absolute paths and symbolic
//! links all followed, as [`std::fs::canonicalize`] does — to a path under the canonical folder of
//! the spec file (the folder relative paths are read from) or under an allowed folder; otherwise
//! the launch is refused naming the field, the trajectory or task, and the path as written.
//!
//! The check is made on the resolved path the file is then read from, so a symbolic link cannot
//! point the read elsewhere after the check; a file swapped for a link between the two by someone
//! who can write into the folder is outside what this guards (they could write the file itself).

use std::path::{Path, PathBuf};

/// The folders a spec's files may lie in: the spec's own, and those the user allowed; each
/// canonical (absolute, without `.`, `..` or symbolic links).
#[derive(Debug, Clone)]
pub struct SpecFolder {
    /// The folder the spec's relative paths are read from, as the spec's path gives it (for
    /// messages that name the file as the user would find it).
    given: PathBuf,
    /// That folder, canonical.
    folder: PathBuf,
    /// Further folders (or single files) the user allowed, canonical.
    allowed: Vec<PathBuf>,
}

/// Why the folders of a spec could not be made out.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("the folder of the study spec {} cannot be resolved: {source}", path.display())]
    Spec { path: PathBuf, source: std::io::Error },
    #[error("--allow-path {}: cannot be resolved: {source}", path.display())]
    Allowed { path: PathBuf, source: std::io::Error },
}

/// A named file that resolves outside every folder it may lie in. The message is a clause for
/// the caller to prefix with the field and the path as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", outside_message(.resolved, .folder, .allowed))]
pub struct Outside {
    /// Where the path leads, symbolic links resolved.
    pub resolved: PathBuf,
    /// The spec's folder, canonical.
    pub folder: PathBuf,
    /// The allowed folders, canonical.
    pub allowed: Vec<PathBuf>,
}

fn outside_message(resolved: &Path, folder: &Path, allowed: &[PathBuf]) -> String {
    let mut message = format!("lies outside the spec's folder {}", folder.display());
    if !allowed.is_empty() {
        let names: Vec<String> = allowed.iter().map(|a| a.display().to_string()).collect();
        message.push_str(&format!(" and the allowed {}", names.join(", ")));
    }
    message.push_str(&format!(
        " (it resolves to {}); a spec may name only files in its own folder: pass --allow-path DIR to allow another",
        resolved.display()
    ));
    message
}

impl SpecFolder {
    /// The folders of the spec file `spec`, with `allowed` (each resolved now: one that does not
    /// exist is an error, not a silent no-op).
    pub fn of(spec: &Path, allowed: &[PathBuf]) -> Result<SpecFolder, FolderError> {
        let given = spec.parent().map(Path::to_path_buf).unwrap_or_default();
        let folder = std::fs::canonicalize(if given.as_os_str().is_empty() { Path::new(".") } else { &given })
            .map_err(|source| FolderError::Spec { path: given.clone(), source })?;
        let allowed = allowed
            .iter()
            .map(|a| std::fs::canonicalize(a).map_err(|source| FolderError::Allowed { path: a.clone(), source }))
            .collect::<Result<_, _>>()?;
        Ok(SpecFolder { given, folder, allowed })
    }

    /// The path `written` (in the spec: relative to its folder, or absolute) as the user finds it.
    pub fn join(&self, written: &str) -> PathBuf {
        self.given.join(written)
    }

    /// The spec's folder, canonical.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Resolve `path` (from [`SpecFolder::join`]; it must exist) and check that it lies in the
    /// spec's folder or an allowed one; the resolved path, to read the file from.
    pub fn confine(&self, path: &Path) -> Result<PathBuf, ConfineError> {
        let resolved = std::fs::canonicalize(path).map_err(ConfineError::Io)?;
        if resolved.starts_with(&self.folder) || self.allowed.iter().any(|a| resolved.starts_with(a)) {
            Ok(resolved)
        } else {
            Err(ConfineError::Outside(Outside { resolved, folder: self.folder.clone(), allowed: self.allowed.clone() }))
        }
    }
}

/// Why [`SpecFolder::confine`] refused a path.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot be resolved: {0}")]
    Io(std::io::Error),
    #[error(transparent)]
    Outside(Outside),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_resolves_inside_the_spec_folder_or_an_allowed_one() {
        let dir = tempfile::tempdir().unwrap();
        let study = dir.path().join("study");
        let other = dir.path().join("other");
        std::fs::create_dir_all(study.join("curves")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(study.join("curves/a.csv"), "t,v\n").unwrap();
        std::fs::write(other.join("b.csv"), "t,v\n").unwrap();
        // A folder named like the spec's folder with a suffix is not inside it.
        std::fs::create_dir_all(dir.path().join("study-2")).unwrap();
        std::fs::write(dir.path().join("study-2/c.csv"), "t,v\n").unwrap();
        let spec = study.join("spec.yaml");

        let folder = SpecFolder::of(&spec, &[]).unwrap();
        let inside = folder.confine(&folder.join("curves/../curves/a.csv")).unwrap();
        assert_eq!(inside, std::fs::canonicalize(study.join("curves/a.csv")).unwrap());
        for written in ["../other/b.csv", "../study-2/c.csv"] {
            let err = folder.confine(&folder.join(written)).unwrap_err();
            assert!(matches!(err, ConfineError::Outside(_)), "{written}: {err}");
            let message = err.to_string();
            assert!(
                message.contains("lies outside the spec's folder") && message.contains("--allow-path"),
                "{message}"
            );
        }
        let absolute = other.join("b.csv");
        assert!(folder.confine(&folder.join(absolute.to_str().unwrap())).is_err(), "an absolute path elsewhere");

        let allowing = SpecFolder::of(&spec, std::slice::from_ref(&other)).unwrap();
        allowing.confine(&allowing.join("../other/b.csv")).unwrap();
        allowing.confine(&absolute).unwrap();
        let err = allowing.confine(&allowing.join("../study-2/c.csv")).unwrap_err().to_string();
        assert!(err.contains("and the allowed") && err.contains("other"), "{err}");

        let err = SpecFolder::of(&spec, &[dir.path().join("nowhere")]).unwrap_err().to_string();
        assert!(err.starts_with("--allow-path ") && err.contains("nowhere"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_is_judged_by_where_it_leads() {
        let dir = tempfile::tempdir().unwrap();
        let study = dir.path().join("study");
        std::fs::create_dir_all(&study).unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::fs::write(study.join("a.csv"), "t,v\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), study.join("out.csv")).unwrap();
        std::os::unix::fs::symlink("a.csv", study.join("in.csv")).unwrap();
        // The spec's own folder through a link: relative paths are read from the link's folder.
        std::os::unix::fs::symlink(&study, dir.path().join("link")).unwrap();
        let folder = SpecFolder::of(&dir.path().join("link/spec.yaml"), &[]).unwrap();
        assert_eq!(folder.folder(), std::fs::canonicalize(&study).unwrap());
        folder.confine(&folder.join("in.csv")).unwrap();
        let err = folder.confine(&folder.join("out.csv")).unwrap_err().to_string();
        assert!(err.contains("resolves to") && err.contains("secret"), "{err}");
        // A spec given by a bare file name: its folder is the working directory.
        let here = std::fs::canonicalize(std::env::current_dir().unwrap()).unwrap();
        assert_eq!(SpecFolder::of(Path::new("spec.yaml"), &[]).unwrap().folder(), here);
    }
}
