//! Misconfiguration caught at launch, and honest progress figures.

use super::replays::{DOUBLE, launch_recorded};
use super::*;

// ------------------------------------------------------------------------------------------------
// Misconfiguration caught at launch, and honest progress figures.
// ------------------------------------------------------------------------------------------------

#[tokio::test]
pub(crate) async fn a_runner_kind_no_build_offers_is_refused_at_launch() {
    let ts = TestStore::sqlite().await;
    let (c, _) = coordinator(&ts.store);
    let (yaml, files) = spec("docker", "", &[Tr { id: "a", length: 20, cliff: 5, p: 1.0, labels: "" }]);
    let yaml = yaml.replace("kind: synthetic, duration_ms: 0", "kind: docker");
    let err = c.launch(&yaml, &files).await.unwrap_err().to_string();
    assert!(
        err.contains(
            "runner.kind = \"docker\" is not a runner this build offers (it offers: agent, mini-swe-agent, synthetic)"
        ),
        "{err}"
    );
    assert!(c.store().list_studies().await.unwrap().is_empty(), "nothing was stored");
    ts.finish().await;
}

#[tokio::test]
pub(crate) async fn progress_says_when_no_live_worker_offers_the_studys_runner() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 10)]).await;
        let other =
            c.register("synthetic-only", 2, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner.as_deref(), Some(DOUBLE), "{}", ts.name);
        let w = c.register("double", 2, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner, None, "{}", ts.name);
        // A worker that stopped heartbeating is not live.
        clock.advance(Duration::from_secs(31));
        let _ = (w, other);
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner.as_deref(), Some(DOUBLE), "{}", ts.name);
        ts.finish().await;
    }
}

/// An agent study waits, with the reason shown, until a live worker offers its agent: a worker
/// offering the `agent` runner with other agents does not run it; only its agent's capability
/// (`agent:NAME`, what a worker registering the agent NAME is stored with) does.
#[tokio::test]
pub(crate) async fn an_agent_study_waits_for_a_worker_offering_its_agent() {
    for ts in TestStore::both().await {
        let (c, _clock) = coordinator(&ts.store);
        let (yaml, files) = vcurve_coordinator::testing::recorded_spec("agents", "agent", &[("r", 10)]);
        let yaml = yaml.replace("{kind: agent}", "{kind: agent, agent: scripted}");
        let study = c.launch(&yaml, &files).await.unwrap();
        let others = vcurve_coordinator::core::capabilities_offered(&["agent".into()], &["other".into()], &[]).unwrap();
        let other = c.register("other-agents", 2, &others, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let waiting = c.progress(&study).await.unwrap().waiting_for_runner;
        assert_eq!(waiting.as_deref(), Some("agent:scripted"), "{}", ts.name);
        assert!(c.lease(&other, 2, Duration::ZERO).await.unwrap().is_empty(), "{}: not its agent", ts.name);
        let offering =
            vcurve_coordinator::core::capabilities_offered(&["agent".into()], &["scripted".into()], &[]).unwrap();
        let w = c.register("scripted", 2, &offering, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner, None, "{}", ts.name);
        assert!(!c.lease(&w, 2, Duration::ZERO).await.unwrap().is_empty(), "{}: its agent's jobs", ts.name);
        ts.finish().await;
    }
}

/// A study whose agent containers need a network (`runner.network: bridge`) waits until a live
/// worker offers its agent *and* the network: a worker offering the agent without the network
/// gets none of its jobs.
#[tokio::test]
pub(crate) async fn a_study_on_a_network_waits_for_a_worker_offering_that_network() {
    for ts in TestStore::both().await {
        let (c, _clock) = coordinator(&ts.store);
        let (yaml, files) = vcurve_coordinator::testing::recorded_spec("networks", "agent", &[("r", 10)]);
        let yaml = yaml.replace("{kind: agent}", "{kind: agent, agent: scripted, network: bridge}");
        let study = c.launch(&yaml, &files).await.unwrap();
        let offer = |networks: &[&str]| {
            let networks: Vec<String> = networks.iter().map(|n| n.to_string()).collect();
            vcurve_coordinator::core::capabilities_offered(&["agent".into()], &["scripted".into()], &networks).unwrap()
        };
        let closed = c.register("no-network", 2, &offer(&[]), vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let proxy = c.register("proxy-only", 2, &offer(&["proxy"]), vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let waiting = c.progress(&study).await.unwrap().waiting_for_runner;
        assert_eq!(waiting.as_deref(), Some("agent:scripted+net:bridge"), "{}", ts.name);
        assert!(c.lease(&closed, 2, Duration::ZERO).await.unwrap().is_empty(), "{}: no network", ts.name);
        assert!(c.lease(&proxy, 2, Duration::ZERO).await.unwrap().is_empty(), "{}: another network", ts.name);
        let bridge = offer(&["bridge", "proxy"]);
        assert!(bridge.contains(&"agent:scripted".to_owned()), "{bridge:?}: none is always offered");
        let w = c.register("bridge", 2, &bridge, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner, None, "{}", ts.name);
        assert!(!c.lease(&w, 2, Duration::ZERO).await.unwrap().is_empty(), "{}: its network's jobs", ts.name);
        ts.finish().await;
    }
}

#[test]
fn a_worker_offering_an_unknown_network_is_refused() {
    let e = vcurve_coordinator::core::capabilities_offered(&["agent".into()], &[], &["host".into()]).unwrap_err();
    assert!(e.to_string().contains("the worker offers the network \"host\" is not a network"), "{e}");
    let synthetic_only =
        vcurve_coordinator::core::capabilities_offered(&["synthetic".into()], &[], &["bridge".into()]).unwrap();
    assert_eq!(synthetic_only, ["synthetic"], "no container runner, nothing on a network");
}

#[tokio::test]
pub(crate) async fn throughput_is_over_the_time_the_study_ran_and_lease_latency_is_measured() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        assert_eq!(c.progress(&study).await.unwrap().lease_latency, None, "{}: not measured yet", ts.name);
        let w = c.register("w", 10, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        clock.advance(Duration::from_secs(3));
        for job in lease(&c, &w, 10).await {
            c.report(&w, &held(&job), &outcome(true)).await.unwrap();
        }
        clock.advance(Duration::from_secs(3));
        // 10 outcomes 6 s into the study: 100 per minute (not 10 / 5 minutes = 2).
        let p = c.progress(&study).await.unwrap();
        assert!((p.throughput_per_min - 100.0).abs() < 1e-9, "{}: {}", ts.name, p.throughput_per_min);
        let latency = p.lease_latency.expect("measured");
        assert_eq!(latency.leases, 1, "{}", ts.name);
        assert!(latency.p50_ms >= 0.0 && latency.p99_ms >= latency.p50_ms);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn continuations_are_timed_and_the_estimated_end_reads_their_durations() {
    use std::collections::HashMap;
    use vcurve_coordinator::durations::{self, Timed};
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let trajectories = [
            Tr { id: "fast", length: 8, cliff: 2, p: 0.75, labels: "" },
            Tr { id: "slow", length: 90, cliff: 70, p: 0.75, labels: "" },
        ];
        let (yaml, files) = spec("timed", "", &trajectories);
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 10_000, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        // Every round leases all the work; "fast"'s continuations report after 1 s, "slow"'s
        // after 10 s: their durations as the store must time them.
        let mut timed: HashMap<String, Timed> = HashMap::new();
        loop {
            let jobs = lease(&c, &w, 10_000).await;
            assert!(!jobs.is_empty(), "{}: the study stalled", ts.name);
            let (fast, slow): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|j| ck(j).trajectory == "fast");
            for (wait_s, jobs, cliff) in [(1, fast, 2), (9, slow, 70)] {
                clock.advance(Duration::from_secs(wait_s));
                for job in &jobs {
                    let k = ck(job);
                    c.report(&w, &held(job), &outcome(step_outcome(cliff, k.t, k.seed))).await.unwrap();
                    let ms = if k.trajectory == "fast" { 1_000 } else { 10_000 };
                    let t = timed.entry(k.trajectory.clone()).or_default();
                    *t = t.plus(ms, i64::from(job.budget));
                }
            }
            let p = c.progress(&study).await.unwrap();
            assert!(p.trajectories_done < 2, "{}: both trajectories ended in one round", ts.name);
            if p.trajectories_done == 1 {
                break;
            }
        }
        // The open continuations of the trajectory left: what a worker leases now.
        clock.advance(Duration::from_secs(31));
        let w2 = c.register("w2", 10_000, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let open = lease(&c, &w2, 10_000).await;
        assert!(open.len() > 2, "{}: {} open", ts.name, open.len());
        let running = ck(&open[0]).trajectory.clone();
        assert!(open.iter().all(|j| ck(j).trajectory == running), "{}", ts.name);
        let finished = if running == "fast" { "slow" } else { "fast" };
        // One live worker of one slot: the work left dominates the estimated end. It is the
        // finished trajectory's budget less what the running one ran (the expected total of one
        // that ran that much, the finished one being the only one observed; nothing beyond the
        // finished one's total is known), at least its open continuations' budgets, at the
        // running one's rate shrunk toward the study's, and one continuation of the study's
        // budget (100 steps) at the study's rate after it.
        clock.advance(Duration::from_secs(31));
        c.register("w3", 1, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let (own, done) = (timed[&running], timed[finished]);
        // One finished trajectory cannot say whether they differ: not pooled.
        let study_timed = own.and(done);
        let rate = durations::rate(own, study_timed, false);
        let open_budget: f64 = open.iter().map(|j| f64::from(j.budget)).sum();
        let beyond = if own.budget < done.budget { (done.budget - own.budget) as f64 } else { 0.0 };
        let expected = (rate * beyond.max(open_budget) + study_timed.rate().unwrap() * 100.0) / 1000.0;
        let eta = c.progress(&study).await.unwrap().eta_seconds.expect("an estimate");
        assert!((eta - expected).abs() < 1e-6 * expected, "{}: eta {eta} s, expected {expected} s", ts.name);
        let (lo, hi) = (
            own.rate().unwrap().min(study_timed.rate().unwrap()),
            own.rate().unwrap().max(study_timed.rate().unwrap()),
        );
        assert!(lo < rate && rate < hi, "{}: {rate} between its own rate and the study's", ts.name);
        ts.finish().await;
    }
}
