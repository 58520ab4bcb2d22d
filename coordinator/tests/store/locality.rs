//! Snapshot locality in the claim order.

use super::*;

#[tokio::test]
pub(crate) async fn a_worker_holding_a_trajectorys_snapshots_gets_its_continuations_first_and_no_slot_waits() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trajectories = [
            Tr { id: "a", length: 12, cliff: 6, p: 0.75, labels: "" },
            Tr { id: "b", length: 12, cliff: 6, p: 0.75, labels: "" },
        ];
        let (yaml, files) =
            spec("near", "admission: {mode: batch, batch_size: 2, pipeline_threshold: 1}\n", &trajectories);
        c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 64, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        // Screening of both: find b's payload by a lease, then give everything back.
        let all = lease(&c, &w, 64).await;
        let b = all.iter().find(|j| ck(j).trajectory == "b").unwrap().trajectory_digest.clone().unwrap();
        let held: Vec<HeldJob> = all.iter().map(held).collect();
        c.release(&w, &held).await.unwrap();
        let n_b = all.iter().filter(|j| ck(j).trajectory == "b").count();
        assert!(n_b >= 2 && n_b < all.len(), "{}: both trajectories screen", ts.name);
        let jobs = c.lease_near(&w, n_b as u32, Duration::ZERO, std::slice::from_ref(&b)).await.unwrap();
        assert!(jobs.iter().all(|j| ck(j).trajectory == "b"), "{}: b's continuations first", ts.name);
        // The rest still fills free slots.
        let more = c.lease_near(&w, 64, Duration::ZERO, std::slice::from_ref(&b)).await.unwrap();
        assert_eq!(more.len(), all.len() - n_b, "{}", ts.name);
        assert!(more.iter().all(|j| ck(j).trajectory == "a"), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_claim_prefers_held_snapshots_then_the_workers_registry_then_the_rest() {
    use vcurve_coordinator::model::{Locality, RegistrySnapshot};
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trajectories = [
            Tr { id: "a", length: 12, cliff: 6, p: 0.75, labels: "" },
            Tr { id: "b", length: 12, cliff: 6, p: 0.75, labels: "" },
            Tr { id: "c", length: 12, cliff: 6, p: 0.75, labels: "" },
        ];
        let (yaml, files) =
            spec("registry", "admission: {mode: batch, batch_size: 3, pipeline_threshold: 1}\n", &trajectories);
        c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 256, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let all = lease(&c, &w, 256).await;
        let digest = |id: &str| all.iter().find(|j| ck(j).trajectory == id).unwrap().trajectory_digest.clone().unwrap();
        let (a, b) = (digest("a"), digest("b"));
        c.release(&w, &all.iter().map(held).collect::<Vec<_>>()).await.unwrap();
        let of = |id: &str, min_t: u32| all.iter().filter(|j| ck(j).trajectory == id && ck(j).t >= min_t).count();
        // b's snapshot at the smallest positive step screened: its continuations from there on.
        let t_b = all.iter().filter(|j| ck(j).trajectory == "b" && ck(j).t > 0).map(|j| ck(j).t).min().unwrap();
        let (n_a, n_b) = (of("a", 0), of("b", t_b));
        assert!(n_a > 0 && n_b > 0 && n_a + n_b < all.len(), "{}: {} jobs", ts.name, all.len());
        let pushed = RegistrySnapshot { trajectory_digest: b.clone(), t: t_b, image_id: "sha256:b".into() };
        // The worker holds a's snapshots and has pushed b's h_t to its registry.
        let locality = Locality { near: vec![a.clone()], registry: Some("reg.test:5000".into()), pushed: vec![pushed] };
        let first = c.lease_with(&w, n_a as u32, Duration::ZERO, locality).await.unwrap();
        assert!(first.iter().all(|j| ck(j).trajectory == "a"), "{}: held first", ts.name);
        assert!(first.iter().all(|j| j.registry_snapshot.is_none()), "{}", ts.name);
        // Recorded durably: a later request need not push it again.
        let registry_only =
            Locality { registry: Some("reg.test:5000".into()), ..Locality::near(std::slice::from_ref(&a)) };
        let second = c.lease_with(&w, n_b as u32, Duration::ZERO, registry_only.clone()).await.unwrap();
        assert_eq!(second.len(), n_b, "{}", ts.name);
        for job in &second {
            assert_eq!(ck(job).trajectory, "b", "{}: the registry's next", ts.name);
            let snapshot = job.registry_snapshot.as_ref().expect("the job names the registry snapshot");
            assert_eq!((snapshot.t, snapshot.image_id.as_str(), &snapshot.trajectory_digest), (t_b, "sha256:b", &b));
        }
        // The rest fills the slots; no registry snapshot at or before their steps.
        let rest = c.lease_with(&w, 256, Duration::ZERO, registry_only).await.unwrap();
        assert_eq!(first.len() + second.len() + rest.len(), all.len(), "{}: no slot waits", ts.name);
        assert!(rest.iter().all(|j| j.registry_snapshot.is_none()), "{}", ts.name);
        let mut held_all: Vec<HeldJob> = first.iter().chain(&second).chain(&rest).map(held).collect();
        c.release(&w, &held_all).await.unwrap();
        // Another registry knows nothing of it: plain order, no snapshot named.
        let other = Locality { registry: Some("other.test:5000".into()), ..Locality::default() };
        let jobs = c.lease_with(&w, 256, Duration::ZERO, other).await.unwrap();
        assert_eq!(jobs.len(), all.len(), "{}", ts.name);
        assert!(jobs.iter().all(|j| j.registry_snapshot.is_none()), "{}", ts.name);
        held_all = jobs.iter().map(held).collect();
        c.release(&w, &held_all).await.unwrap();
        // A push of the same key again replaces its image id; bad entries are dropped (one at step
        // 0 here; one that names no digest is dropped as it comes off the wire, see `wire`).
        let again = RegistrySnapshot { trajectory_digest: b.clone(), t: t_b, image_id: "sha256:b2".into() };
        let bad = RegistrySnapshot { trajectory_digest: b.clone(), t: 0, image_id: "x".into() };
        assert!(vcurve_coordinator::model::Digest::parse("not-a-digest").is_err());
        let locality =
            Locality { near: vec![], registry: Some("reg.test:5000".into()), pushed: vec![again, bad.clone()] };
        let jobs = c.lease_with(&w, n_b as u32, Duration::ZERO, locality).await.unwrap();
        assert!(jobs.iter().all(|j| j.registry_snapshot.as_ref().map(|s| s.image_id.as_str()) == Some("sha256:b2")));
        ts.finish().await;
    }
}
