//! Waiting for a state, not for a time: [`until`] polls a condition until it holds, failing the
//! test with what it last saw once a deadline has passed.

use std::time::Duration;

/// How often [`until`] looks again.
pub const POLL: Duration = Duration::from_millis(10);

/// Poll `check` every [`POLL`] until it gives `Ok(value)`; panics with `what` and the last
/// `Err(state)` it gave once `deadline` has passed. The deadline is a guard against a hang, not a
/// time the test waits: `until` returns as soon as the state is there.
pub async fn until<T, S: std::fmt::Debug>(
    deadline: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, S>,
) -> T {
    let end = tokio::time::Instant::now() + deadline;
    loop {
        let state = match check().await {
            Ok(value) => return value,
            Err(state) => state,
        };
        assert!(tokio::time::Instant::now() < end, "{what}: not within {deadline:?}; last seen {state:?}");
        tokio::time::sleep(POLL).await;
    }
}
