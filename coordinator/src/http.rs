//! The coordinator's HTTP listeners (the dashboard, the metrics): one axum router on one listener
//! until shutdown, logged as it starts.

use tokio::net::TcpListener;

pub use axum::Router;

/// Serve `router` on `listener` until `shutdown` resolves; `what` names it in the log
/// (`"{what} listening"`, with the address).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    what: &'static str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "{what} listening");
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}
