//! `vcurve export STUDY --out DIR`: write a study's export (curves, results, analyses…) into a
//! folder, streamed file by file.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use vcurve_proto::v1;

use crate::client::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The study id `vcurve launch` printed.
    pub study: String,
    #[command(flatten)]
    pub remote: Remote,
    /// Folder to write curves.csv, trajectories.csv and results.json into.
    #[arg(long)]
    pub out: PathBuf,
}

/// `vcurve export`.
pub async fn run(a: &ExportArgs) -> anyhow::Result<()> {
    export(&a.study, &a.remote.connection()?, &a.out).await
}

/// Where the export file `name` goes under `out`, its folder made; a name that would leave `out`
/// (empty, absolute, `..`) is refused.
fn export_path(out: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let relative = Path::new(name);
    if name.is_empty()
        || relative.is_absolute()
        || relative.components().any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        bail!("refusing to write a file named {name:?} outside {}", out.display());
    }
    let path = out.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    Ok(path)
}

/// Write an export's files into `out`.
pub fn write_files(out: &Path, files: impl IntoIterator<Item = (String, Vec<u8>)>) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut written = Vec::new();
    for (name, contents) in files {
        let path = export_path(out, &name)?;
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Write a study's export into `out` piece by piece as the coordinator sends it, never holding a
/// file whole; returns the files written. Each file is written as `.NAME.part` beside its place
/// and renamed once its last piece has come, so a transfer that breaks leaves no file that looks
/// whole (the error says so).
pub async fn export_into(client: &mut client::StudyClient, study: &str, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use std::io::Write as _;
    /// The file being written: its name in the export, its place, its `.part` file.
    struct Open {
        name: String,
        path: PathBuf,
        part: PathBuf,
        file: std::io::BufWriter<std::fs::File>,
    }
    fn close(open: Open) -> anyhow::Result<PathBuf> {
        let Open { path, part, file, .. } = open;
        file.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&part, &path))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut stream = client.export_files(v1::ExportRequest { study: study.to_string() }).await?.into_inner();
    let mut written = Vec::new();
    let mut open: Option<Open> = None;
    loop {
        let chunk = match stream.message().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(status) => {
                let broken = open.take().map(|o| {
                    let _ = std::fs::remove_file(&o.part);
                    o.name
                });
                return Err(anyhow::Error::new(status).context(match broken {
                    Some(name) => {
                        format!("the export broke off while sending {name} ({} files written whole)", written.len())
                    }
                    None => format!("the export broke off ({} files written whole)", written.len()),
                }));
            }
        };
        if open.as_ref().is_none_or(|o| o.name != chunk.name) {
            if let Some(o) = open.take() {
                written.push(close(o)?);
            }
            let path = export_path(out, &chunk.name)?;
            let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let part = path.with_file_name(format!(".{file_name}.part"));
            let file = std::fs::File::create(&part).with_context(|| format!("cannot write {}", part.display()))?;
            open = Some(Open { name: chunk.name, path, part, file: std::io::BufWriter::new(file) });
        }
        let o = open.as_mut().expect("a file is open");
        o.file.write_all(&chunk.data).with_context(|| format!("cannot write {}", o.part.display()))?;
    }
    if let Some(o) = open.take() {
        written.push(close(o)?);
    }
    Ok(written)
}

pub async fn export(study: &str, connection: &Connection, out: &Path) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let mut listing = String::new();
    for path in export_into(&mut client, study, out).await.with_context(at(connection))? {
        listing.push_str(&format!("{}\n", path.display()));
    }
    output::print(listing)
}
