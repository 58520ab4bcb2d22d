//! `vcurve restart-check STUDY`: launch the online restart check of a study (the paper's
//! Appendix Q). For every trajectory of STUDY with a restart point `t_r`, `--runs` fresh runs of
//! its task from `h_0` with budget `B − t_r` and new seeds; the check's export compares them with
//! the predicted `R̂(x, B − t_r)` and the value of continuing `V(h_{t_r})`.
//!
//! The command writes the spec
//!
//! ```yaml
//! name: NAME                  # with --name; else the coordinator's "<checked study's name>-restart-check"
//! seed: N                     # with --seed; else derived from the checked study's seed
//! restart_check: {of: STUDY, runs: 8}
//! ```
//!
//! and launches it through the same call as `vcurve launch`: the coordinator fills in the runner,
//! budget, thresholds and rows from the checked study. It prints the new study's id on standard
//! output and, on standard error, what the study will run (read from its own export).

use std::collections::BTreeMap;

use anyhow::Context;
use serde::Serialize;
use vcurve_report::restart_check::RestartCheckResults;

use crate::client::{self, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct RestartCheckArgs {
    /// The study whose restart points to check: the id `vcurve launch` printed.
    pub study: String,
    /// Fresh runs per trajectory with a restart point (the paper: 8), 1 to 1000.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// The new study's name [default: the checked study's name followed by `-restart-check`].
    #[arg(long)]
    pub name: Option<String>,
    /// The new study's seed [default: derived from the checked study's seed].
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Serialize)]
struct Spec<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    restart_check: Of<'a>,
}

#[derive(Serialize)]
struct Of<'a> {
    of: &'a str,
    runs: u32,
}

/// The spec the command launches.
pub fn spec_yaml(args: &RestartCheckArgs) -> String {
    let spec =
        Spec { name: args.name.as_deref(), seed: args.seed, restart_check: Of { of: &args.study, runs: args.runs } };
    serde_norway::to_string(&spec).expect("a restart-check spec serializes")
}

/// What the new study runs, one line per trajectory.
pub fn plan_text(id: &str, r: &RestartCheckResults) -> String {
    let rows = &r.check.rows;
    let mut out = format!(
        "study {id} ({}): online restart check of {}, {} fresh runs from h_0 for each of its {} trajectories with a restart point ({} runs)\n",
        r.name,
        r.of,
        r.runs,
        rows.len(),
        r.check.pooled.planned
    );
    let width = rows.iter().map(|row| row.input.trajectory.chars().count()).max().unwrap_or(0);
    for row in rows {
        let i = &row.input;
        out.push_str(&format!(
            "  {:<width$}  t_r {:>3}  budget {:>3}  predicted R̂ {:.2}  continuing V {:.2}\n",
            i.trajectory,
            i.restart_point,
            r.budget.saturating_sub(i.restart_point),
            i.predicted,
            i.continuing
        ));
    }
    out
}

/// Launch the check; print its id, then what it runs.
pub async fn run(args: &RestartCheckArgs) -> anyhow::Result<()> {
    let connection = args.remote.connection()?;
    let at = || format!("the coordinator at {}", connection.url);
    let mut client = client::study_client(&connection).await?;
    let id = client::upload_and_launch(&mut client, spec_yaml(args), &BTreeMap::new()).await.with_context(at)?;
    output::println(&id)?;
    let files = client::export(&mut client, &id)
        .await
        .with_context(|| format!("launched study {id}, but cannot read what it runs from {}", at()))?;
    let (_, json) = files
        .iter()
        .find(|(name, _)| name == "restart_check.json")
        .with_context(|| format!("launched study {id}, but its export has no restart_check.json"))?;
    let results: RestartCheckResults = serde_json::from_slice(json)
        .with_context(|| format!("launched study {id}, but its restart_check.json does not read"))?;
    eprint!("{}", plan_text(&id, &results));
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<RestartCheckArgs, String> {
        let argv = ["vcurve", "restart-check"].iter().chain(args);
        match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.command {
            Command::RestartCheck(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn parses_with_the_defaults() {
        let a = parse(&["s-123"]).unwrap();
        assert_eq!((a.study.as_str(), a.runs, a.name.as_deref(), a.seed), ("s-123", 8, None, None));
        assert_eq!(a.remote.coordinator, "http://127.0.0.1:7070");
        let yaml: serde_json::Value = serde_norway::from_str(&spec_yaml(&a)).unwrap();
        assert_eq!(yaml, serde_json::json!({"restart_check": {"of": "s-123", "runs": 8}}));
    }

    #[test]
    fn parses_every_option() {
        let a = parse(&[
            "s-123",
            "--runs",
            "16",
            "--name",
            "check: the second",
            "--seed",
            "42",
            "--coordinator",
            "https://c:7070",
        ])
        .unwrap();
        assert_eq!((a.runs, a.name.as_deref(), a.seed), (16, Some("check: the second"), Some(42)));
        assert_eq!(a.remote.coordinator, "https://c:7070");
        let yaml: serde_json::Value = serde_norway::from_str(&spec_yaml(&a)).unwrap();
        assert_eq!(
            yaml,
            serde_json::json!({"name": "check: the second", "seed": 42, "restart_check": {"of": "s-123", "runs": 16}})
        );
    }

    #[test]
    fn refuses_runs_outside_1_to_1000_and_a_missing_study() {
        for runs in ["0", "1001", "-1", "eight"] {
            let e = parse(&["s", &format!("--runs={runs}")]).unwrap_err();
            assert!(e.contains("--runs"), "{runs}: {e}");
        }
        assert!(parse(&["s", "--runs", "0"]).unwrap_err().contains("0 is not in 1..=1000"));
        assert_eq!(parse(&["s", "--runs", "1000"]).unwrap().runs, 1000);
        assert_eq!(parse(&["s", "--runs", "1"]).unwrap().runs, 1);
        assert!(parse(&[]).unwrap_err().contains("<STUDY>"));
    }
}
