//! Logging for the `vcurve` binary: `tracing` to stderr, filtered by `VCURVE_LOG` (or `RUST_LOG`),
//! as JSON lines with `VCURVE_LOG_FORMAT=json`.

use tracing_subscriber::EnvFilter;

/// Install the global subscriber; `default` is the filter when no variable sets one (sqlx's own
/// statement logs stay at warnings).
pub fn init(default: &str) {
    let filter = std::env::var("VCURVE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .map(EnvFilter::new)
        .unwrap_or_else(|_| EnvFilter::new(format!("{default},sqlx=warn")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    // A write to a closed stderr loses that line; the default would print the error with
    // `eprintln!`, which panics on the same closed stderr and takes the task with it.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .log_internal_errors(false);
    let _ = if std::env::var("VCURVE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
