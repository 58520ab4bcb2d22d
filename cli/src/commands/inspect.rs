//! `vcurve inspect FILE [--json]`: a summary of one trajectory, a mini-swe-agent `.traj.json` of
//! either format or an imported `vcurve.trajectory.v1` file.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use vcurve_record::Trajectory;
use vcurve_record::import::{ImportOptions, Summary, import_mini_swe_agent};
use vcurve_record::trajectory::FORMAT;

use crate::output;

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A `.traj.json` file of mini-swe-agent, or a trajectory `vcurve import` wrote.
    pub file: PathBuf,
    /// One JSON object instead of the readable summary.
    #[arg(long)]
    pub json: bool,
}

/// The summary of the file: a vcurve trajectory by its `format`, otherwise a mini-swe-agent file.
pub fn summary(path: &std::path::Path) -> anyhow::Result<(Summary, Vec<String>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let is_vcurve = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .is_some_and(|v| v.get("format").and_then(|f| f.as_str()) == Some(FORMAT));
    if is_vcurve {
        let t = Trajectory::from_json(&bytes).with_context(|| format!("{}", path.display()))?;
        Ok((Summary::new(&t, FORMAT, t.end_type.as_str()), Vec::new()))
    } else {
        let imported = import_mini_swe_agent(&path.to_string_lossy(), &bytes, &ImportOptions::default())
            .with_context(|| format!("{}", path.display()))?;
        Ok((imported.summary(), imported.warnings))
    }
}

pub fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let (summary, warnings) = summary(&args.file)?;
    if args.json {
        return output::println(serde_json::to_string_pretty(&summary)?);
    }
    output::print(readable(&summary, &warnings))
}

fn readable(s: &Summary, warnings: &[String]) -> String {
    let mut out = String::new();
    let steps = |v: &[u32]| {
        if v.is_empty() { "none".to_string() } else { v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ") }
    };
    let _ = writeln!(out, "{} ({})", s.instance_id, s.format);
    let _ = writeln!(out, "steps:          {} model calls, {} commands", s.steps, s.actions);
    let _ = writeln!(out, "exit status:    {} (end type {})", s.exit_status, s.end_type);
    let _ = writeln!(
        out,
        "submission:     {}",
        s.submission_sha256.as_deref().map_or("empty".into(), |h| format!("sha256 {h}"))
    );
    let _ = match &s.first_edit {
        Some(e) => writeln!(
            out,
            "first edit:     step {} (heuristic on the commands){}",
            e.step,
            e.target.as_deref().map_or(String::new(), |t| format!(": {t}"))
        ),
        None => writeln!(out, "first edit:     none found (heuristic on the commands)"),
    };
    let _ = match &s.first_symptom {
        Some(x) => writeln!(out, "first symptom:  step {} ({})", x.step, x.signal),
        None => writeln!(out, "first symptom:  none"),
    };
    let kinds: Vec<String> = s.commands_by_kind.iter().map(|(k, n)| format!("{} {n}", k.as_str())).collect();
    let _ = writeln!(out, "commands:       {}", if kinds.is_empty() { "none".into() } else { kinds.join(", ") });
    let _ = writeln!(out, "timeouts:       {}", steps(&s.timeout_steps));
    let _ = writeln!(out, "format errors:  {}", steps(&s.format_error_steps));
    let failing: Vec<String> = s
        .per_step
        .iter()
        .filter(|p| p.returncodes.iter().any(|rc| *rc != Some(0)))
        .map(|p| {
            let codes: Vec<String> = p.returncodes.iter().map(|rc| rc.map_or("-".into(), |c| c.to_string())).collect();
            format!("{}: {}", p.step, codes.join(" "))
        })
        .collect();
    let _ = writeln!(out, "non-zero exits: {}", if failing.is_empty() { "none".into() } else { failing.join(", ") });
    for w in warnings {
        let _ = writeln!(out, "note: {w}");
    }
    out
}
