//! Shared pieces of the CLI's tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run the `vcurve` binary as a user would.
pub fn vcurve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vcurve")).args(args).output().expect("run vcurve")
}

/// Write `text` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A coordinator in this process on a fresh embedded store, serving gRPC (worker token `w-token`,
/// client token `c-token`) and one HTTP router (its dashboard's or its metrics', made by `web` with
/// the client token) on loopback ports until [`InProcess::shutdown`].
pub struct InProcess {
    pub coordinator: std::sync::Arc<vcurve_coordinator::core::Coordinator<vcurve_coordinator::store::SqlStore>>,
    pub grpc_url: String,
    pub web_addr: String,
    stop: tokio_util::sync::CancellationToken,
    web_task: tokio::task::JoinHandle<std::io::Result<()>>,
    grpc: tokio::task::JoinHandle<Result<(), vcurve_coordinator::server::ServeError>>,
    _store: vcurve_coordinator::testing::TestStore,
}

impl InProcess {
    pub async fn start(
        web: fn(
            std::sync::Arc<vcurve_coordinator::core::Coordinator<vcurve_coordinator::store::SqlStore>>,
            Option<String>,
        ) -> vcurve_coordinator::http::Router,
        what: &'static str,
    ) -> InProcess {
        use vcurve_coordinator::server::{self, ServeOptions, Tokens};
        let store = vcurve_coordinator::testing::TestStore::sqlite().await;
        let timing = vcurve_coordinator::core::Timing {
            lease: vcurve_coordinator::store::LeasePolicy { timeout_ms: 10_000 },
            heartbeat_interval: std::time::Duration::from_secs(1),
            max_lease_wait: std::time::Duration::from_millis(200),
        };
        let coordinator = vcurve_coordinator::core::Coordinator::new(
            store.store.clone(),
            timing,
            vcurve_cli::render::ReportRenderer::shared(),
        );
        let stop = tokio_util::sync::CancellationToken::new();
        let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_url = format!("http://{}", grpc_listener.local_addr().unwrap());
        let web_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let web_addr = web_listener.local_addr().unwrap().to_string();
        let tokens = Tokens { worker: Some("w-token".into()), client: Some("c-token".into()) };
        let s = stop.clone();
        let grpc = tokio::spawn(server::serve(
            coordinator.clone(),
            grpc_listener,
            ServeOptions { tokens, tls: None },
            async move { s.cancelled().await },
        ));
        let s = stop.clone();
        let router = web(coordinator.clone(), Some("c-token".into()));
        let web_task =
            tokio::spawn(vcurve_coordinator::http::serve(
                web_listener,
                router,
                what,
                async move { s.cancelled().await },
            ));
        InProcess { coordinator, grpc_url, web_addr, stop, web_task, grpc, _store: store }
    }

    /// A token that stops the coordinator's listeners, for other servers of the test to stop with.
    pub fn stop(&self) -> tokio_util::sync::CancellationToken {
        self.stop.clone()
    }

    /// Stop every listener and check that each ended cleanly.
    pub async fn shutdown(self) {
        self.stop.cancel();
        self.grpc.await.unwrap().unwrap();
        self.web_task.await.unwrap().unwrap();
    }
}
