//! The worker's variables an agent process inherits ([`INHERITED`], `LC_*`), and the whole
//! environment of a process whose command adds its own ([`process_environment`]). What a
//! registration and a study add is [`agent_environment`](super::agents::agent_environment)'s.

use std::collections::BTreeMap;

/// The variables an agent process takes from the worker's environment, by name; `LC_*` too.
pub const INHERITED: &[&str] = &["PATH", "HOME", "LANG", "LANGUAGE", "TZ"];

/// The whole environment of an agent process whose command adds `added`: the worker's inherited
/// variables ([`inherited`]) with `added` over them, and nothing else.
pub fn process_environment(added: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = worker_environment().filter(|(k, _)| inherited(k)).collect();
    env.extend(added.clone());
    env
}

/// The worker's own environment, as pairs.
pub fn worker_environment() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// Whether an agent process takes the worker's variable `name` ([`INHERITED`] and `LC_*`).
pub fn inherited(name: &str) -> bool {
    INHERITED.contains(&name) || name.starts_with("LC_")
}
