//! Trajectory payloads by digest: fetched from the coordinator once, checked against the digest
//! that named them, and kept while they fit the cache's byte budget (least recently used out
//! first). Jobs that need the same digest at the same time share one fetch. A payload whose task's
//! problem statement is stored apart (the coordinator stores each once, by digest) has it fetched
//! and filled in with it, so runners always see the whole task.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;
use vcurve_record::TrajectoryPayload;

/// The default budget: real trajectories with their message lists are up to tens of MB.
pub const DEFAULT_BUDGET_BYTES: usize = 512 << 20;

struct Entry {
    cell: Arc<OnceCell<Arc<TrajectoryPayload>>>,
    /// Encoded size, once fetched.
    bytes: usize,
    last_used: u64,
}

/// The cache. Cheap to share behind an `Arc`.
pub struct TrajectoryCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    clock: u64,
    fetches: u64,
}

impl TrajectoryCache {
    pub fn new(budget_bytes: usize) -> Self {
        TrajectoryCache { budget: budget_bytes, inner: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many times a payload was fetched (not served from the cache).
    pub fn fetches(&self) -> u64 {
        self.lock().fetches
    }

    /// The payload `digest` names, fetched with `fetch` (a file by its digest: the payload's, then
    /// its problem statement's if it is stored apart) unless it is cached.
    pub async fn get<F, Fut>(&self, digest: &str, fetch: F) -> Result<Arc<TrajectoryPayload>, String>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<Vec<u8>, String>>,
    {
        let cell = {
            let mut inner = self.lock();
            inner.clock += 1;
            let now = inner.clock;
            let entry = inner.entries.entry(digest.to_owned()).or_insert_with(|| Entry {
                cell: Arc::new(OnceCell::new()),
                bytes: 0,
                last_used: now,
            });
            entry.last_used = now;
            entry.cell.clone()
        };
        let mut fetched = None;
        let payload = cell
            .get_or_try_init(|| async {
                let bytes = fetch(digest.to_owned()).await?;
                let mut payload = TrajectoryPayload::from_fetched(&bytes, digest)
                    .map_err(|e| format!("trajectory {digest} as fetched: {e}"))?;
                let mut size = bytes.len();
                if let Some(statement) = payload.problem_statement_sha256.clone() {
                    let text = fetch(statement.clone())
                        .await
                        .map_err(|e| format!("the problem statement {statement} of trajectory {digest}: {e}"))?;
                    size += text.len();
                    payload.fill_problem_statement(text).map_err(|e| format!("trajectory {digest}: {e}"))?;
                }
                fetched = Some(size);
                Ok::<_, String>(Arc::new(payload))
            })
            .await?
            .clone();
        if let Some(bytes) = fetched {
            let mut inner = self.lock();
            inner.fetches += 1;
            if let Some(entry) = inner.entries.get_mut(digest) {
                entry.bytes = bytes;
            }
            self.evict(&mut inner, digest);
        }
        Ok(payload)
    }

    /// Drop least recently used payloads (never `keep`, never one still being fetched) until the
    /// cache fits its budget. A payload larger than the budget is kept only while it is in use.
    fn evict(&self, inner: &mut Inner, keep: &str) {
        loop {
            let total: usize = inner.entries.values().map(|e| e.bytes).sum();
            if total <= self.budget {
                return;
            }
            let victim = inner
                .entries
                .iter()
                .filter(|(d, e)| d.as_str() != keep && e.cell.initialized())
                .min_by_key(|(_, e)| e.last_used)
                .map(|(d, _)| d.clone());
            match victim {
                Some(d) => {
                    inner.entries.remove(&d);
                }
                None => return,
            }
        }
    }

    /// Digests cached now.
    #[cfg(test)]
    pub fn cached(&self) -> Vec<String> {
        let mut out: Vec<String> =
            self.lock().entries.iter().filter(|(_, e)| e.cell.initialized()).map(|(d, _)| d.clone()).collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn payload(task: &str, n: usize) -> (String, Vec<u8>) {
        let p = TrajectoryPayload {
            task: task.into(),
            length: n as u32,
            curve: Some(vec![0.5; n]),
            recorded: None,
            task_def: None,
            problem_statement_sha256: None,
            instructions: None,
        };
        (p.digest(), p.canonical_bytes())
    }

    #[tokio::test]
    async fn fetches_each_digest_once_and_checks_it() {
        let cache = TrajectoryCache::new(1 << 20);
        let (digest, bytes) = payload("a", 10);
        let calls = AtomicU32::new(0);
        for _ in 0..3 {
            let got = cache
                .get(&digest, |_| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(bytes.clone())
                })
                .await
                .unwrap();
            assert_eq!(got.task, "a");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Bytes that are not what the digest names are refused, and not cached.
        let (other, _) = payload("b", 10);
        let err = cache.get(&other, |_| async { Ok(bytes.clone()) }).await.unwrap_err();
        assert!(err.contains("digest"), "{err}");
        assert_eq!(cache.cached(), vec![digest]);
    }

    #[tokio::test]
    async fn least_recently_used_payloads_leave_first() {
        let (a, a_bytes) = payload("a", 1000);
        let (b, b_bytes) = payload("b", 1000);
        let (c, c_bytes) = payload("c", 1000);
        let cache = TrajectoryCache::new(a_bytes.len() * 2 + 10);
        cache.get(&a, |_| async { Ok(a_bytes.clone()) }).await.unwrap();
        cache.get(&b, |_| async { Ok(b_bytes.clone()) }).await.unwrap();
        cache.get(&a, |_| async { Err("cached: not fetched".to_string()) }).await.unwrap();
        cache.get(&c, |_| async { Ok(c_bytes.clone()) }).await.unwrap();
        let mut expected = vec![a, c];
        expected.sort();
        assert_eq!(cache.cached(), expected);
        assert_eq!(cache.fetches(), 3);
    }

    #[tokio::test]
    async fn a_problem_statement_stored_apart_is_fetched_and_filled_in() {
        use vcurve_record::{Evaluator, Task};
        let task = Task {
            id: "t".into(),
            image: "i".into(),
            workdir: "/w".into(),
            evaluator: Evaluator::Command { command: "true".into(), timeout_s: 5 },
            problem_statement: Some("Fix add().".into()),
        };
        let statement = vcurve_record::trajectory::sha256_hex(b"Fix add().");
        let apart = TrajectoryPayload::of_task_with_statement(&task, Some(&statement));
        let (digest, bytes) = (apart.digest(), apart.canonical_bytes());
        let files = HashMap::from([(digest.clone(), bytes), (statement.clone(), b"Fix add().".to_vec())]);
        let fetched = std::sync::Mutex::new(Vec::new());
        let fetch = |d: String| {
            fetched.lock().unwrap().push(d.clone());
            let file = files.get(&d).cloned().ok_or_else(|| format!("no file {d}"));
            async move { file }
        };
        let cache = TrajectoryCache::new(1 << 20);
        let got = cache.get(&digest, fetch).await.unwrap();
        assert_eq!(*got, TrajectoryPayload::of_task(&task), "the runners see the whole task");
        assert_eq!(*fetched.lock().unwrap(), vec![digest.clone(), statement.clone()]);
        cache.get(&digest, fetch).await.unwrap();
        assert_eq!(fetched.lock().unwrap().len(), 2, "cached with its statement");
        // A statement that is not what its digest names is refused, and nothing is cached.
        let wrong =
            HashMap::from([(digest.clone(), apart.canonical_bytes()), (statement.clone(), b"Fix sub().".to_vec())]);
        let cache = TrajectoryCache::new(1 << 20);
        let err = cache.get(&digest, |d| std::future::ready(Ok(wrong[&d].clone()))).await.unwrap_err();
        assert!(err.contains("problem statement") && err.contains("digest"), "{err}");
        assert!(cache.cached().is_empty());
    }
}
