//! `vcurve status STUDY`: a study's progress, once or followed (`--watch`), and a finished
//! study's checks before any claim (Table 4).

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use vcurve_proto::v1;

use crate::client::at;
use crate::client::{self, Connection, Remote};
use crate::output;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The study id `vcurve launch` printed.
    pub study: String,
    #[command(flatten)]
    pub remote: Remote,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Follow progress until the study ends (live bars; JSON lines with --json).
    #[arg(long)]
    pub watch: bool,
}

/// `vcurve status`.
pub async fn run(a: &StatusArgs) -> anyhow::Result<()> {
    status(&a.study, &a.remote.connection()?, a.json, a.watch).await
}

pub(super) fn progress_json(p: &v1::Progress) -> serde_json::Value {
    serde_json::json!({
        "study": p.study,
        "name": p.name,
        "state": p.state,
        "done": p.done,
        "running": p.running,
        "pending": p.pending,
        "retired": p.retired,
        "retired_jobs": retired_jobs(p),
        "trajectories": p.trajectories,
        "trajectories_admitted": p.trajectories_admitted,
        "trajectories_done": p.trajectories_done,
        "stages": p.stages.iter().map(|s| (s.stage.clone(), s.trajectories)).collect::<std::collections::BTreeMap<_, _>>(),
        "workers": p.workers.iter().map(|w| serde_json::json!({
            "id": w.worker_id, "name": w.name, "slots": w.slots, "running": w.running, "last_seen_ms_ago": w.last_seen_ms_ago,
        })).collect::<Vec<_>>(),
        "throughput_per_min": p.throughput_per_min,
        "trajectories_non_replayable": p.trajectories_non_replayable,
        "waiting_for_runner": (!p.waiting_for_runner.is_empty()).then_some(&p.waiting_for_runner),
        "lease_latency_ms": (p.leases_measured > 0).then(|| serde_json::json!({
            "p50": p.lease_p50_ms, "p99": p.lease_p99_ms, "leases": p.leases_measured,
        })),
        "eta_seconds": (p.eta_seconds >= 0.0).then_some(p.eta_seconds),
        "call_stages": p.call_stages.iter().map(|s| serde_json::json!({
            "stage": s.stage, "done": s.done, "running": s.running, "pending": s.pending, "retired": s.retired,
            "malformed": s.malformed, "failed": s.failed, "expected": s.expected,
            "tokens": {"input": s.input_tokens, "output": s.output_tokens, "cached": s.cached_tokens},
        })).collect::<Vec<_>>(),
        "waiting_for_endpoints": p.waiting_for_endpoints,
        "evaluation": p.evaluation.as_ref().map(|e| serde_json::json!({
            "evaluated_runs": e.evaluated_runs, "cache_hits": e.cache_hits, "unique_patches": e.unique_patches,
            "evaluations": e.evaluations, "flake_checks": e.flake_checks, "flakes": e.flakes,
        })),
    })
}

/// The patch cache's line of a study's progress; empty for a runner that judges no patch.
fn evaluation_text(p: &v1::Progress) -> String {
    let Some(e) = &p.evaluation else { return String::new() };
    let flakes = if e.flake_checks > 0 {
        format!("{} flakes in {} flake checks", e.flakes, e.flake_checks)
    } else {
        "flake rate not measured yet (no flake check)".to_string()
    };
    format!(
        "  patches: {} evaluations, {} runs judged by the cache, {} unique patches; {flakes}\n",
        e.evaluations, e.cache_hits, e.unique_patches
    )
}

/// The jobs retired without an outcome (those of a kind this client does not know left out).
fn retired_jobs(p: &v1::Progress) -> Vec<vcurve_record::jobs::RetiredJobs> {
    p.retired_jobs.iter().cloned().filter_map(vcurve_proto::convert::retired_from_wire).collect()
}

/// The jobs retired without an outcome, a line per kind with the reasons of their last
/// no-outcomes; empty when none was.
fn retired_text(p: &v1::Progress) -> String {
    retired_jobs(p).iter().map(|r| format!("  retired without an outcome: {}\n", r.text())).collect()
}

fn eta(p: &v1::Progress) -> String {
    if p.eta_seconds < 0.0 {
        return "unknown".into();
    }
    let s = p.eta_seconds.round() as u64;
    format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
}

/// A task-state study's progress: a line per stage with its jobs, failures, tokens and expected
/// total, and the endpoints its calls wait for.
fn task_state_text(p: &v1::Progress) -> String {
    let what = if is_task_state(p) { "task state by stage (jobs" } else { "judge labels (calls" };
    let mut out = format!(
        "  {what} done / expected; running, pending, retired; malformed, failed; tokens in / out / cached):\n",
    );
    for s in &p.call_stages {
        let expected = s.expected.map_or_else(|| "not known yet".to_string(), |e| e.to_string());
        out.push_str(&format!(
            "    {:<8} {} / {expected}; {} running, {} pending, {} retired; {} malformed, {} failed; {} / {} / {}\n",
            s.stage,
            s.done,
            s.running,
            s.pending,
            s.retired,
            s.malformed,
            s.failed,
            s.input_tokens,
            s.output_tokens,
            s.cached_tokens
        ));
        // The tokens at the end, at the mean of the calls done so far.
        if let Some(expected) = s.expected
            && s.done > 0
            && s.stage != "session"
            && expected > s.done
        {
            let scale = expected as f64 / s.done as f64;
            out.push_str(&format!(
                "             at this rate ≈ {:.0} / {:.0} tokens in / out when its {expected} calls are done\n",
                s.input_tokens as f64 * scale,
                s.output_tokens as f64 * scale
            ));
        }
    }
    for endpoint in &p.waiting_for_endpoints {
        let url = endpoint.strip_prefix("model:").unwrap_or(endpoint);
        out.push_str(&format!(
            "  waiting for a worker offering the model endpoint {url}: no live worker offers it (vcurve worker --model-endpoint {url}[=KEY_ENV])\n"
        ));
    }
    out
}

/// Whether the progress is a task-state study's (its call stages begin with its sessions); a
/// curve study with judges has the one call stage `label`.
fn is_task_state(p: &v1::Progress) -> bool {
    p.call_stages.iter().any(|s| s.stage == "session")
}

fn progress_text(p: &v1::Progress) -> String {
    if is_task_state(p) {
        return task_state_progress_text(p);
    }
    let labels = if p.call_stages.is_empty() { String::new() } else { task_state_text(p) };
    let stages: Vec<String> = p.stages.iter().map(|s| format!("{} {}", s.stage, s.trajectories)).collect();
    let slots: u32 = p.workers.iter().map(|w| w.slots).sum();
    let latency = if p.leases_measured > 0 {
        format!(
            "lease latency p50 {:.1} ms, p99 {:.1} ms ({} leases)",
            p.lease_p50_ms, p.lease_p99_ms, p.leases_measured
        )
    } else {
        "lease latency not measured (no lease handed out work in the last 5 minutes)".to_string()
    };
    let waiting = if p.waiting_for_runner.is_empty() {
        String::new()
    } else {
        let (runner, network) = match p.waiting_for_runner.split_once(vcurve_record::runner::NETWORK_CAPABILITY_INFIX) {
            Some((runner, network)) => (runner, Some(network)),
            None => (p.waiting_for_runner.as_str(), None),
        };
        let mut hints = Vec::new();
        if let Some(agent) = runner.strip_prefix(vcurve_record::runner::AGENT_CAPABILITY_PREFIX) {
            hints.push(format!(
                "the agent {agent}: a worker offers it when its operator registers it, e.g. vcurve worker --docker \
                 --agent {agent}=COMMAND"
            ));
        }
        match network {
            Some("proxy") => hints.push(
                "the network proxy: a worker offers it when its operator names the deployment's package proxy \
                 network, vcurve worker --network proxy=DOCKER_NETWORK"
                    .to_owned(),
            ),
            Some(network) => hints.push(format!(
                "the network {network}: a worker offers it when its operator allows it, vcurve worker --network {network}"
            )),
            None => {}
        }
        let hint = if hints.is_empty() { String::new() } else { format!(" ({})", hints.join("; ")) };
        format!("  waiting for a worker offering `{}`: no live worker offers it{hint}\n", p.waiting_for_runner)
    };
    let dropped = if p.trajectories_non_replayable > 0 {
        format!(", {} non-replayable", p.trajectories_non_replayable)
    } else {
        String::new()
    };
    format!(
        "study {} ({}): {}\n{waiting}  trajectories: {} done, {} admitted, {} in all{dropped}; in progress by stage: {}\n  continuations: {} done, {} running, {} pending, {} retired\n{labels}{}{}  workers: {} with {} slots; throughput {:.1}/min; ETA {}; {latency}\n",
        p.name,
        p.study,
        p.state,
        p.trajectories_done,
        p.trajectories_admitted,
        p.trajectories,
        if stages.is_empty() { "none".to_string() } else { stages.join(", ") },
        p.done,
        p.running,
        p.pending,
        p.retired,
        retired_text(p),
        evaluation_text(p),
        p.workers.len(),
        slots,
        p.throughput_per_min,
        eta(p)
    )
}

/// [`progress_text`] of a task-state study: its sessions and calls instead of trajectories and
/// continuations.
fn task_state_progress_text(p: &v1::Progress) -> String {
    let slots: u32 = p.workers.iter().map(|w| w.slots).sum();
    let waiting = if p.waiting_for_runner.is_empty() {
        String::new()
    } else {
        format!(
            "  waiting for a worker offering `{}` to record the sessions: no live worker offers it\n",
            p.waiting_for_runner
        )
    };
    format!(
        "study {} ({}): {} — a task-state study\n{waiting}{}{}  workers: {} with {} slots; {:.1} jobs/min; ETA {}\n",
        p.name,
        p.study,
        p.state,
        task_state_text(p),
        retired_text(p),
        p.workers.len(),
        slots,
        p.throughput_per_min,
        eta(p)
    )
}

/// Bars for `status --watch` and `demo`: trajectories finished and continuations done.
pub struct ProgressBars {
    trajectories: ProgressBar,
    continuations: ProgressBar,
}

impl ProgressBars {
    pub fn new() -> Self {
        let multi = MultiProgress::new();
        let style = ProgressStyle::with_template("{prefix:>14} [{bar:40.cyan/blue}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> ");
        let trajectories = multi.add(ProgressBar::new(0).with_style(style.clone()).with_prefix("trajectories"));
        let continuations = multi.add(ProgressBar::new(0).with_style(style).with_prefix("continuations"));
        ProgressBars { trajectories, continuations }
    }

    pub fn update(&self, p: &v1::Progress) {
        self.trajectories.set_length(u64::from(p.trajectories));
        self.trajectories.set_position(u64::from(p.trajectories_done));
        let stages: Vec<String> = p.stages.iter().map(|s| format!("{} {}", s.stage, s.trajectories)).collect();
        self.trajectories.set_message(stages.join(", "));
        self.continuations.set_length(p.done + p.running + p.pending + p.retired);
        self.continuations.set_position(p.done + p.retired);
        self.continuations.set_message(format!(
            "{} running, {:.0}/min, ETA {}",
            p.running,
            p.throughput_per_min,
            eta(p)
        ));
    }

    pub fn finish(&self) {
        self.trajectories.finish();
        self.continuations.finish();
    }
}

impl Default for ProgressBars {
    fn default() -> Self {
        ProgressBars::new()
    }
}

pub async fn status(study: &str, connection: &Connection, json: bool, watch: bool) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let request = v1::ProgressRequest { study: study.to_string() };
    if !watch {
        let p = client.get_progress(request).await.with_context(at(connection))?.into_inner();
        let checks = checks_of(&mut client, &p).await.with_context(at(connection))?;
        return if json {
            let mut value = progress_json(&p);
            value["checks"] = checks.unwrap_or(serde_json::Value::Null);
            output::println(serde_json::to_string_pretty(&value)?)
        } else {
            output::print(progress_text(&p) + &checks.map(|c| checks_text(&c)).unwrap_or_default())
        };
    }
    let mut stream = client.watch_progress(request).await.with_context(at(connection))?.into_inner();
    let bars = (!json).then(ProgressBars::new);
    let mut last = None;
    while let Some(p) = stream.message().await.with_context(at(connection))? {
        match &bars {
            Some(b) => b.update(&p),
            None => output::println(serde_json::to_string(&progress_json(&p))?)?,
        }
        last = Some(p);
    }
    if let (Some(b), Some(p)) = (&bars, &last) {
        b.finish();
        let checks = checks_of(&mut client, p).await.with_context(at(connection))?;
        output::print(progress_text(p) + &checks.map(|c| checks_text(&c)).unwrap_or_default())?;
    }
    Ok(())
}

/// A finished study's checks before any claim (Table 4, from its export's `analyses.json`);
/// `None` while it runs (the checks are of the whole study) and for a study without analyses (a
/// restart check).
async fn checks_of(client: &mut client::StudyClient, p: &v1::Progress) -> anyhow::Result<Option<serde_json::Value>> {
    if p.state == "running" {
        return Ok(None);
    }
    let files = client::export(client, &p.study).await?;
    let Some((_, analyses)) = files.into_iter().find(|(name, _)| name == "analyses.json") else { return Ok(None) };
    let analyses: serde_json::Value =
        serde_json::from_slice(&analyses).context("the export's analyses.json is not JSON")?;
    Ok(Some(analyses["checks"].clone()))
}

/// Table 4 as text: each check, its criterion, its value ("not measured" when it has none) and
/// whether it passes, then the verdict.
pub fn checks_text(checks: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut text = String::from("\nchecks before any claim (Table 4):\n");
    for c in checks["checks"].as_array().into_iter().flatten() {
        let status = match c["status"].as_str().unwrap_or("") {
            "fail" => "FAIL",
            "not_measured" => "not measured",
            other => other,
        };
        let _ = writeln!(
            text,
            "  {:<36} {:<34} {:<28} {status}",
            c["check"].as_str().unwrap_or(""),
            c["criterion"].as_str().unwrap_or(""),
            c["value"].as_str().unwrap_or("not measured"),
        );
    }
    let verdict = checks["verdict"].as_str().unwrap_or("not measured");
    let _ = writeln!(
        text,
        "  verdict: {verdict}{}",
        if verdict == "fail" { " — the analyses are exported, marked as not passing the checks" } else { "" }
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_jobs_of_every_kind_are_shown_with_their_reasons() {
        let mut p = v1::Progress { study: "s".into(), name: "n".into(), state: "running".into(), ..Default::default() };
        assert!(!progress_text(&p).contains("retired without an outcome"), "{}", progress_text(&p));
        let base_runs = vcurve_record::jobs::RetiredJobs::of(
            vcurve_record::jobs::JobKind::BaseRun,
            [(Some("PutFile: over the limit".into()), 2), (Some("killed".into()), 1)],
        )
        .unwrap();
        p.retired_jobs = vec![vcurve_proto::convert::retired_to_wire(&base_runs)];
        let text = progress_text(&p);
        // Continuations alone are `0 retired`; the base runs have their own line.
        assert!(text.contains(", 0 retired\n"), "{text}");
        assert!(
            text.contains("  retired without an outcome: 3 base runs: 2× \"PutFile: over the limit\", 1× \"killed\"\n"),
            "{text}"
        );
        let json = progress_json(&p);
        assert_eq!(json["retired_jobs"][0]["kind"], "base_run");
        assert_eq!(json["retired_jobs"][0]["count"], 3);
        assert_eq!(json["retired_jobs"][0]["reasons"][1]["reason"], "killed");
    }

    #[test]
    fn a_curve_study_with_judges_shows_its_continuations_and_its_label_calls() {
        let mut p = v1::Progress { study: "s".into(), name: "n".into(), state: "running".into(), ..Default::default() };
        p.call_stages =
            vec![v1::CallStage { stage: "label".into(), done: 3, pending: 1, expected: Some(4), ..Default::default() }];
        p.waiting_for_endpoints = vec!["model:http://vllm:8000/v1".into()];
        let text = progress_text(&p);
        assert!(text.contains("continuations: 0 done") && !text.contains("a task-state study"), "{text}");
        assert!(text.contains("  judge labels (calls done / expected;"), "{text}");
        assert!(text.contains("    label    3 / 4; 0 running, 1 pending"), "{text}");
        assert!(text.contains("--model-endpoint http://vllm:8000/v1"), "{text}");
    }

    #[test]
    fn a_study_waiting_for_its_agent_says_which_and_how_a_worker_offers_it() {
        let mut p = v1::Progress { study: "s".into(), name: "n".into(), state: "running".into(), ..Default::default() };
        p.waiting_for_runner = "agent:my-agent".into();
        let text = progress_text(&p);
        assert!(text.contains("waiting for a worker offering `agent:my-agent`: no live worker offers it"), "{text}");
        assert!(text.contains("the agent my-agent") && text.contains("--agent my-agent=COMMAND"), "{text}");
        p.waiting_for_runner = "quantum".into();
        assert!(!progress_text(&p).contains("--agent"), "{}", progress_text(&p));
        p.waiting_for_runner = "mini-swe-agent+net:bridge".into();
        let text = progress_text(&p);
        assert!(text.contains("the network bridge") && text.contains("vcurve worker --network bridge"), "{text}");
        p.waiting_for_runner = "agent:a+net:proxy".into();
        let text = progress_text(&p);
        assert!(text.contains("--agent a=COMMAND") && text.contains("--network proxy=DOCKER_NETWORK"), "{text}");
    }

    #[test]
    fn checks_read_as_table_4_with_failures_and_what_was_not_measured() {
        let checks = serde_json::json!({
            "checks": [
                {"id": "replay", "check": "Replay match", "criterion": "≥ 70% of selected", "value": "3/7 (43%)", "status": "fail"},
                {"id": "flake", "check": "Harness flake rate", "criterion": "≤ 3%", "value": null, "status": "not_measured"},
                {"id": "cache", "check": "Evaluations via cache", "criterion": "all", "value": "10/10", "status": "pass"}
            ],
            "verdict": "fail"
        });
        let text = checks_text(&checks);
        assert!(text.contains("Replay match") && text.contains("3/7 (43%)") && text.contains("FAIL"), "{text}");
        let flake = text.lines().find(|l| l.contains("Harness flake rate")).unwrap();
        assert!(flake.matches("not measured").count() == 2 && !flake.contains('0'), "{flake}");
        assert!(text.contains("verdict: fail — the analyses are exported, marked as not passing"), "{text}");
        assert!(checks_text(&serde_json::json!({"checks": [], "verdict": "pass"})).ends_with("verdict: pass\n"));
    }
}
