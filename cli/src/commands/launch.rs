//! `vcurve launch SPEC`: launch a study from a spec file (checked here first); prints the study id.

use std::path::{Path, PathBuf};

use anyhow::Context;
use vcurve_coordinator::spec;

use crate::client::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// The study spec (YAML); the files it names are read relative to it, and must lie in its
    /// folder (symbolic links resolved) or in a folder given with --allow-path.
    pub spec: PathBuf,
    /// Also let the spec name files in DIR (a folder, or a single file); repeatable. Only for a
    /// spec you trust to read there: its files are sent to the coordinator and its workers.
    #[arg(long = "allow-path", value_name = "DIR")]
    pub allow_paths: Vec<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

/// `vcurve launch`.
pub async fn run(a: &LaunchArgs) -> anyhow::Result<()> {
    output::println(launch(&a.spec, &a.allow_paths, &a.remote.connection()?).await?)
}

/// Launch the spec at `spec_path`, whose files may lie in its folder or in `allow_paths`.
pub async fn launch(spec_path: &Path, allow_paths: &[PathBuf], connection: &Connection) -> anyhow::Result<String> {
    // Validate locally first: a bad spec is reported with its file's path, before any network. A
    // restart check is completed on the coordinator, from the study it checks.
    let (yaml, files) = spec::read_with_files_allowing(spec_path, allow_paths)?;
    let request =
        spec::parse_request(&yaml, &|p| files.get(p).cloned()).with_context(|| format!("{}", spec_path.display()))?;
    if let spec::Request::Study(launch) = &request {
        for note in launch.policy_notes() {
            eprintln!("vcurve: warning: {note}");
        }
    }
    let estimate = match &request {
        spec::Request::Study(launch) => {
            launch.spec.task_state.as_ref().map(|s| expected_calls(s, launch.spec.tasks.len() as u64))
        }
        spec::Request::RestartCheck(_) => None,
    };
    let mut client = client::study_client(connection).await?;
    let study = client::upload_and_launch(&mut client, yaml, &files).await.with_context(at(connection))?;
    if let Some(estimate) = estimate {
        eprint!("{estimate}");
    }
    Ok(study)
}

/// The mean probes per checkpoint a launch estimate assumes before any is generated: the study's
/// main sample (4,799 probes at 148 checkpoints).
const PROBES_PER_CHECKPOINT: f64 = 4_799.0 / 148.0;

/// The mean input and output tokens of one call of each stage a launch estimate assumes before any
/// call has ended: the CTXGAP study's effective usage by stage (Table 61) over its calls (Table
/// 12): atom extraction 5,524,555 / 588,513 over 226 calls; probe generation 21,678,906 / 814,186
/// over 520; observers (readers and the actor) 17,420,919 / 5,541,630 over 8,258; the judge
/// 22,134,005 / 925,035 over 9,929. A prior: the views' sizes, known once the sessions are
/// recorded, set the real figures, which `vcurve status` extrapolates from the calls done.
const TOKENS_PER_CALL: [(&str, f64, f64); 4] = [
    ("atoms", 5_524_555.0 / 226.0, 588_513.0 / 226.0),
    ("probes", 21_678_906.0 / 520.0, 814_186.0 / 520.0),
    ("observer", 17_420_919.0 / 8_258.0, 5_541_630.0 / 8_258.0),
    ("judge", 22_134_005.0 / 9_929.0, 925_035.0 / 9_929.0),
];

/// The expected (input, output) tokens of `calls` calls of `kind` ([`TOKENS_PER_CALL`]).
fn tokens(kind: &str, calls: u64) -> (u64, u64) {
    let (_, input, output) = TOKENS_PER_CALL.iter().find(|(k, _, _)| *k == kind).copied().unwrap_or((kind, 0.0, 0.0));
    ((calls as f64 * input).round() as u64, (calls as f64 * output).round() as u64)
}

/// What a task-state study of `tasks` tasks is expected to call, and the tokens it is expected to
/// take, per stage, printed at launch.
fn expected_calls(s: &vcurve_record::task_state::TaskStateSettings, tasks: u64) -> String {
    let checkpoints = tasks * s.instructions.len() as u64;
    let readers = checkpoints * s.views.len() as u64 * u64::from(s.samples);
    let actor =
        if s.actor { (checkpoints as f64 * PROBES_PER_CHECKPOINT * f64::from(s.samples)).round() as u64 } else { 0 };
    let rows = [
        ("sessions", tasks, None, "one per task, of the agent's own model (not counted below)".to_string()),
        (
            "atoms",
            checkpoints,
            Some("atoms"),
            format!("one per checkpoint ({} turns), {}", s.instructions.len(), s.atoms.endpoint.model),
        ),
        ("probes", checkpoints, Some("probes"), format!("at most one per checkpoint, {}", s.probes.endpoint.model)),
        (
            "reader",
            readers,
            Some("observer"),
            format!("{} views × {} samples per checkpoint, {}", s.views.len(), s.samples, s.reader.endpoint.model),
        ),
        (
            "actor",
            actor,
            Some("observer"),
            format!(
                "~{PROBES_PER_CHECKPOINT:.1} probes per checkpoint × {} samples (the study's mean), {}",
                s.samples, s.actor_model.endpoint.model
            ),
        ),
        ("judge", readers + actor, Some("judge"), format!("one per reader and actor call, {}", s.judge.endpoint.model)),
    ];
    let mut out = String::from(
        "vcurve: expected model calls and tokens (in / out) by stage, tokens at the CTXGAP study's mean per call \
         (vcurve status counts them as calls end):\n",
    );
    let (mut total_in, mut total_out) = (0, 0);
    for (stage, n, kind, how) in rows {
        let expected = match kind {
            Some(kind) => {
                let (input, output) = tokens(kind, n);
                (total_in, total_out) = (total_in + input, total_out + output);
                format!("≈ {input} / {output} tokens")
            }
            None => "tokens not counted".to_string(),
        };
        let unit = if kind.is_some() { "calls" } else { "runs " };
        out.push_str(&format!("  {stage:<8} {n:>8} {unit}  {expected:<28}  {how}\n"));
    }
    out.push_str(&format!("  {:<8} {:>8}        ≈ {total_in} / {total_out} tokens\n", "total", ""));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The estimate for one task of the default settings (4 turns, 10 views, 3 samples): calls as
    /// the planner makes them, tokens at the study's mean per call.
    #[test]
    fn the_launch_estimate_gives_each_stages_calls_and_tokens() {
        let yaml = "name: ts\nseed: 1\nbudget: 20\nrunner: {kind: agent, agent: a}\ntask_state:\n  models:\n    default: {base_url: \"http://127.0.0.1:9/v1\", model: m}\ntasks:\n  - task: t.json\n";
        let task = r#"{"id": "t", "image": "i", "workdir": "/w", "evaluator": {"kind": "command", "command": "true", "timeout_s": 60}}"#;
        let request = spec::parse_request(yaml, &|p| (p == "t.json").then(|| task.to_string())).unwrap();
        let spec::Request::Study(launch) = request else { panic!("a study") };
        let settings = launch.spec.task_state.as_ref().unwrap();
        let text = expected_calls(settings, 1);
        let checkpoints = settings.instructions.len() as u64;
        let readers = checkpoints * settings.views.len() as u64 * u64::from(settings.samples);
        let (input, output) = tokens("observer", readers);
        assert!(text.contains(&format!("≈ {input} / {output} tokens")), "{text}");
        let (input, output) = tokens("atoms", checkpoints);
        assert_eq!(
            (input, output),
            ((checkpoints as f64 * 24_444.9).round() as u64, (checkpoints as f64 * 2_604.0).round() as u64)
        );
        assert!(text.lines().last().unwrap().trim_start().starts_with("total"), "{text}");
        assert!(text.contains("sessions") && text.contains("tokens not counted"), "{text}");
    }
}
