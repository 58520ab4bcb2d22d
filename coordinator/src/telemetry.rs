//! Logging for the `vcurve` binary: `tracing` to stderr, filtered by `VCURVE_LOG` (or `RUST_LOG`),
//! as JSON lines with `VCURVE_LOG_FORMAT=json`.

use tracing_subscriber::EnvFilter;

/// Install the global subscriber; `default` is the filter when no variable sets one.
pub fn init(default: &str) {
    let filter = std::env::var("VCURVE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .map(EnvFilter::new)
        .unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if std::env::var("VCURVE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
