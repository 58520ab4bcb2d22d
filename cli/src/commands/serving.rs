//! What `vcurve coordinator` and `vcurve worker` share: how they stop, and the listener of
//! `--metrics`.

use anyhow::{Context, bail};

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("install SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Bind `--metrics ADDR`; a non-loopback address needs a token (the `role`'s) to scrape with.
pub(super) async fn metrics_listener(
    addr: &str,
    has_token: bool,
    role: &str,
) -> anyhow::Result<tokio::net::TcpListener> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot serve metrics on {addr}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() && !has_token {
        bail!("refusing to serve metrics on {local} without a {role} token");
    }
    eprintln!("vcurve metrics on http://{local}/metrics");
    Ok(listener)
}
