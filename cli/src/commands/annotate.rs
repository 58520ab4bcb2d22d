//! `vcurve annotate`: the human annotation of a task-state study's gap atoms (the study's
//! Tables 2 and 22; docs/task-state.md, "Human annotation"), on an export folder.
//!
//! - `vcurve annotate sample --from EXPORT --out DIR`: the gap atoms (credited in the full context
//!   `T` above the reports `U`, weighted by their gap mass), a category-stratified sample of them
//!   with its inclusion probabilities (`annotation-sample.json`), and a sheet for each annotator
//!   to fill (`annotation.csv`: the probe's question and reference, and the reports the annotator
//!   reads, as the export's view file).
//! - `vcurve annotate score --from EXPORT --sample DIR/annotation-sample.json --labels A.csv
//!   --labels B.csv`: Cohen's κ of two annotators on mention and on sufficiency, and each
//!   annotator's inverse-probability weighted shares of the gap mass by state with task-cluster
//!   bootstrap intervals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use vcurve_method::task_state::annotation::{
    AnnotationSample, Label, Mention, Sufficiency, agreement, gap_atoms, state_shares, stratified_sample,
};
use vcurve_method::task_state::{EstimatorSettings, Population, StudyInput, View};

#[derive(Debug, clap::Subcommand)]
pub enum AnnotateCommand {
    /// Sample the gap atoms of an export for two annotators (annotation-sample.json, annotation.csv).
    Sample(SampleArgs),
    /// Score two annotators' labels of a sample: κ and the shares of the gap mass by state.
    Score(ScoreArgs),
}

#[derive(Debug, clap::Args)]
pub struct SampleArgs {
    /// A task-state study's export folder (`vcurve export --out DIR`).
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// Folder to write annotation-sample.json and annotation.csv into.
    #[arg(long)]
    pub out: PathBuf,
    /// Gap atoms to sample (the study annotated 195).
    #[arg(long, default_value_t = 195)]
    pub atoms: usize,
    /// The sample's seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, clap::Args)]
pub struct ScoreArgs {
    /// The export folder the sample was drawn from.
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// The sample `vcurve annotate sample` wrote.
    #[arg(long)]
    pub sample: PathBuf,
    /// An annotator's filled sheet (annotation.csv with mention and sufficiency); give two.
    #[arg(long = "labels", value_name = "CSV", num_args = 1, required = true)]
    pub labels: Vec<PathBuf>,
    /// Bootstrap draws of the shares' intervals.
    #[arg(long, default_value_t = 10_000)]
    pub draws: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `vcurve annotate` reads of an export's `task_state.json`.
#[derive(Deserialize)]
struct Export {
    input: StudyInput,
    /// The estimators' settings the export used (`ctxgap-1` when it names none).
    #[serde(default)]
    estimator_settings: Option<EstimatorSettings>,
    #[serde(default)]
    views: Vec<ViewFile>,
    #[serde(default)]
    probes: Vec<ProbeText>,
}

/// A view's text in the export: `views/DIGEST.txt`.
#[derive(Deserialize)]
struct ViewFile {
    task: String,
    checkpoint: u32,
    view: View,
    digest: String,
}

/// A probe's question and reference in the export.
#[derive(Deserialize)]
struct ProbeText {
    probe: String,
    question: String,
    reference: String,
}

fn read_export(dir: &Path) -> anyhow::Result<Export> {
    let path = dir.join("task_state.json");
    let bytes = std::fs::read(&path).with_context(|| {
        format!("cannot read {}: `vcurve annotate` reads a task-state study's export folder", path.display())
    })?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a task-state export", path.display()))
}

/// The gap atoms of the export's eligible probes: `T` above `U`.
fn gap_atoms_of(export: &Export) -> anyhow::Result<Vec<vcurve_method::task_state::annotation::GapAtom>> {
    let settings = export.estimator_settings.clone().unwrap_or_else(EstimatorSettings::ctxgap_1);
    let population = Population::eligible(&export.input, &settings, |_| true).map_err(anyhow::Error::msg)?;
    Ok(gap_atoms(&population, View::Full, View::Reports))
}

/// `vcurve annotate sample`: prints the paths written.
pub fn sample(a: &SampleArgs) -> anyhow::Result<String> {
    let export = read_export(&a.from)?;
    let atoms = gap_atoms_of(&export)?;
    if atoms.is_empty() {
        bail!("{} has no gap atom (no eligible probe is credited more in T than in U)", a.from.display());
    }
    let sample = stratified_sample(&atoms, a.atoms, a.seed);
    std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
    let sample_path = a.out.join("annotation-sample.json");
    std::fs::write(&sample_path, serde_json::to_vec_pretty(&sample)?)?;
    let texts: BTreeMap<&str, &ProbeText> = export.probes.iter().map(|p| (p.probe.as_str(), p)).collect();
    let reports: BTreeMap<(&str, u32), &str> = export
        .views
        .iter()
        .filter(|v| v.view == View::Reports)
        .map(|v| ((v.task.as_str(), v.checkpoint), v.digest.as_str()))
        .collect();
    let mut sheet = csv::Writer::from_writer(Vec::new());
    sheet.write_record([
        "probe",
        "task",
        "checkpoint",
        "category",
        "question",
        "reference",
        "reports",
        "mention",
        "sufficiency",
    ])?;
    for s in &sample.atoms {
        let atom = &s.atom;
        let category = serde_json::to_value(atom.category)?;
        let text = texts.get(atom.probe.as_str());
        let view = reports.get(&(atom.task.as_str(), atom.checkpoint)).map(|d| format!("views/{d}.txt"));
        sheet.write_record([
            atom.probe.as_str(),
            atom.task.as_str(),
            &atom.checkpoint.to_string(),
            category.as_str().unwrap_or_default(),
            text.map_or("", |t| t.question.as_str()),
            text.map_or("", |t| t.reference.as_str()),
            view.as_deref().unwrap_or(""),
            "",
            "",
        ])?;
    }
    let sheet_path = a.out.join("annotation.csv");
    std::fs::write(&sheet_path, sheet.into_inner()?)?;
    Ok(format!(
        "{} gap atoms, {} sampled in {} strata (seed {})\n{}\n{}\nannotators fill mention (mentioned | not_mentioned | uncertain) and, for a mentioned atom, sufficiency (sufficient | insufficient | uncertain)",
        atoms.len(),
        sample.atoms.len(),
        sample.strata.len(),
        a.seed,
        sample_path.display(),
        sheet_path.display()
    ))
}

/// One annotator's labels from a filled sheet, by probe; every error names the file and line.
fn read_labels(path: &Path) -> anyhow::Result<BTreeMap<String, Label>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = reader.headers()?.clone();
    let column = |name: &str| {
        headers.iter().position(|h| h == name).with_context(|| format!("{} has no column {name}", path.display()))
    };
    let (probe, mention, sufficiency) = (column("probe")?, column("mention")?, column("sufficiency")?);
    let mut labels = BTreeMap::new();
    for (i, row) in reader.records().enumerate() {
        let line = i + 2;
        let row = row.with_context(|| format!("{} line {line}", path.display()))?;
        let at = |what: String| anyhow::anyhow!("{} line {line}: {what}", path.display());
        let id = row.get(probe).unwrap_or_default().to_string();
        let m = match row.get(mention).unwrap_or_default().trim() {
            "mentioned" => Mention::Mentioned,
            "not_mentioned" => Mention::NotMentioned,
            "uncertain" => Mention::Uncertain,
            "" => return Err(at(format!("probe {id} has no mention label"))),
            other => return Err(at(format!("mention {other:?} is not mentioned, not_mentioned or uncertain"))),
        };
        let s = match row.get(sufficiency).unwrap_or_default().trim() {
            "" => None,
            "sufficient" => Some(Sufficiency::Sufficient),
            "insufficient" => Some(Sufficiency::Insufficient),
            "uncertain" => Some(Sufficiency::Uncertain),
            other => return Err(at(format!("sufficiency {other:?} is not sufficient, insufficient or uncertain"))),
        };
        let label = Label { mention: m, sufficiency: s };
        label.state().map_err(|e| at(format!("probe {id}: {e}")))?;
        if labels.insert(id.clone(), label).is_some() {
            return Err(at(format!("probe {id} is labelled twice")));
        }
    }
    Ok(labels)
}

/// `vcurve annotate score`.
pub fn score(a: &ScoreArgs) -> anyhow::Result<String> {
    if a.labels.len() != 2 {
        bail!("--labels takes the sheets of exactly two annotators; {} given", a.labels.len());
    }
    let sample: AnnotationSample = serde_json::from_slice(
        &std::fs::read(&a.sample).with_context(|| format!("cannot read {}", a.sample.display()))?,
    )
    .with_context(|| format!("{} is not an annotation sample", a.sample.display()))?;
    // The sample must come from this export: its atoms are gap atoms of it, with the same mass.
    let export = read_export(&a.from)?;
    let atoms: BTreeMap<String, f64> = gap_atoms_of(&export)?.into_iter().map(|g| (g.probe, g.mass)).collect();
    for s in &sample.atoms {
        match atoms.get(&s.atom.probe) {
            Some(mass) if (mass - s.atom.mass).abs() < 1e-9 => {}
            _ => bail!(
                "{}: probe {} is not a gap atom of {} with that mass; draw the sample from this export",
                a.sample.display(),
                s.atom.probe,
                a.from.display()
            ),
        }
    }
    let labels: Vec<BTreeMap<String, Label>> = a.labels.iter().map(|p| read_labels(p)).collect::<Result<_, _>>()?;
    let agree = agreement(&labels[0], &labels[1]);
    let settings = export.estimator_settings.clone().unwrap_or_else(EstimatorSettings::ctxgap_1);
    let mut shares = Vec::new();
    for (path, l) in a.labels.iter().zip(&labels) {
        let s = state_shares(&sample, l, a.draws, settings.seed, settings.confidence)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        shares.push(s);
    }
    if a.json {
        return Ok(serde_json::to_string_pretty(&serde_json::json!({
            "agreement": agree, "shares": shares, "atoms": sample.atoms.len(), "draws": a.draws,
        }))?);
    }
    let kappa = |k: Option<f64>| k.map_or_else(|| "not measured".to_string(), |k| format!("{k:.3}"));
    let mut out = format!(
        "{} atoms labelled by both: mention κ = {}; sufficiency κ = {} ({} atoms both mentioned)\n",
        agree.atoms,
        kappa(agree.mention_kappa),
        kappa(agree.sufficiency_kappa),
        agree.both_mentioned
    );
    for (i, s) in shares.iter().enumerate() {
        out.push_str(&format!(
            "annotator {} ({}): share of the weighted gap mass by state\n",
            i + 1,
            a.labels[i].display()
        ));
        for row in s {
            let ci = row.ci.map_or_else(|| "—".to_string(), |c| format!("[{:.1}, {:.1}]", 100.0 * c.lo, 100.0 * c.hi));
            out.push_str(&format!(
                "  {:<28} {:>4} atoms  {:>5.1}%  {ci}\n",
                row.state.name(),
                row.atoms,
                100.0 * row.share
            ));
        }
    }
    Ok(out)
}
