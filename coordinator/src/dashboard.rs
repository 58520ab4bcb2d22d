//! The live dashboard: a read-only web page served by the coordinator beside its gRPC port, with
//! every study's progress by stage, the workers, throughput and ETA, and each curve's figure
//! updating as points arrive.
//!
//! The page is one self-contained HTML document (no external assets) that polls a small JSON API.
//! Every route needs the client token, as `Authorization: Bearer …` or `?token=…` (the page passes
//! its own `?token=` on to the API and the figures).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::core::Coordinator;
use crate::error::CoordinatorError;
use crate::model::{StudyId, TrajectoryId};
use crate::render::TrajectorySummary;
use crate::store::{Store, StoreError};

struct Dashboard<S> {
    coordinator: Arc<Coordinator<S>>,
    token: Option<String>,
    /// Each study's trajectory rows with the progress they were rendered at: a poll whose
    /// progress is unchanged is answered without loading or analyzing the study again.
    summaries: std::sync::Mutex<std::collections::HashMap<StudyId, CachedRows>>,
}

/// A study's rendered rows and the progress they were rendered at.
type CachedRows = (ProgressMark, Arc<Vec<TrajectorySummary>>);

/// What changes whenever a study's rows can: outcomes, trajectory states and stages.
type ProgressMark = (u64, u64, u32, u32, u32, Vec<(vcurve_method::schedule::Stage, u32)>);

#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn authorized(token: &Option<String>, headers: &HeaderMap, query: &TokenQuery) -> bool {
    let Some(expected) = token else { return true };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .or_else(|| query.token.clone());
    presented.is_some_and(|p| p.as_bytes().ct_eq(expected.as_bytes()).into())
}

fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, "client token required: add ?token=… to the address\n").into_response()
}

fn error_response(e: CoordinatorError) -> Response {
    let status = match &e {
        CoordinatorError::Store(StoreError::UnknownStudy(_)) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, format!("{e}\n")).into_response()
}

/// The dashboard's routes over a coordinator.
pub fn router<S: Store>(coordinator: Arc<Coordinator<S>>, token: Option<String>) -> Router {
    let state = Arc::new(Dashboard { coordinator, token, summaries: Default::default() });
    Router::new()
        .route("/", get(page::<S>))
        .route("/api/studies", get(studies::<S>))
        .route("/api/studies/{study}/trajectories", get(trajectories::<S>))
        .route("/api/studies/{study}/figures/{trajectory}", get(figure::<S>))
        .with_state(state)
}

/// Serve the dashboard on `listener` until `shutdown` resolves.
pub async fn serve<S: Store>(
    coordinator: Arc<Coordinator<S>>,
    listener: TcpListener,
    token: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::http::serve(listener, router(coordinator, token), "dashboard", shutdown).await
}

async fn page<S: Store>(
    State(d): State<Arc<Dashboard<S>>>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&d.token, &headers, &q) {
        return unauthorized();
    }
    Html(PAGE).into_response()
}

async fn studies<S: Store>(
    State(d): State<Arc<Dashboard<S>>>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&d.token, &headers, &q) {
        return unauthorized();
    }
    match d.coordinator.list().await {
        Ok(list) => axum::Json(list).into_response(),
        Err(e) => error_response(e),
    }
}

/// Per trajectory of a study: state, stage and the curve's headline numbers.
async fn trajectories<S: Store>(
    State(d): State<Arc<Dashboard<S>>>,
    Path(study): Path<StudyId>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&d.token, &headers, &q) {
        return unauthorized();
    }
    // Progress comes from counters: cheap, unlike loading and analyzing the whole study.
    let mark = match d.coordinator.progress(&study).await {
        Ok(p) => (
            p.done,
            p.retired,
            p.trajectories_done,
            p.trajectories_admitted,
            p.trajectories_non_replayable,
            p.stages.clone(),
        ),
        Err(e) => return error_response(e),
    };
    let cached = d.summaries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&study).cloned();
    if let Some((seen, rows)) = cached
        && seen == mark
    {
        return axum::Json(rows.as_ref()).into_response();
    }
    let record = match d.coordinator.store().study(&study).await {
        Ok(r) => r,
        Err(e) => return error_response(e.into()),
    };
    match d.coordinator.render(move |r| r.summaries(&record)).await {
        Ok(rows) => {
            let rows = Arc::new(rows);
            d.summaries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(study, (mark, rows.clone()));
            axum::Json(rows.as_ref()).into_response()
        }
        Err(e) => error_response(e),
    }
}

async fn figure<S: Store>(
    State(d): State<Arc<Dashboard<S>>>,
    Path((study, trajectory)): Path<(StudyId, String)>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&d.token, &headers, &q) {
        return unauthorized();
    }
    let trajectory = TrajectoryId::from(trajectory.trim_end_matches(".svg"));
    // Only this trajectory: a page of many figures must not load the whole study per figure.
    let record = match d.coordinator.store().trajectory(&study, &trajectory).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return (StatusCode::NOT_FOUND, format!("no trajectory {trajectory:?} in study {study}\n")).into_response();
        }
        Err(e) => return error_response(e.into()),
    };
    match d.coordinator.render(move |r| r.figure_svg(&record)).await {
        // The page names a figure by its trajectory's continuation count, so a URL's figure
        // never changes and the browser may keep it.
        Ok(Some(svg)) => {
            ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "private, max-age=3600")], svg)
                .into_response()
        }
        Ok(None) => (StatusCode::NOT_FOUND, "no curve yet\n").into_response(),
        Err(e) => error_response(e),
    }
}

/// The page: polls the API every two seconds and redraws.
const PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>vcurve dashboard</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .5em; }
  .study { border: 1px solid #ccc; border-radius: 6px; padding: 1em; margin-bottom: 1.5em; }
  .bar { background: #eee; height: 12px; border-radius: 6px; overflow: hidden; width: 100%; max-width: 640px; }
  .bar > div { background: #3b7dd8; height: 100%; }
  table { border-collapse: collapse; margin: .5em 0; }
  td, th { padding: 2px 10px 2px 0; text-align: left; }
  .gallery { display: flex; flex-wrap: wrap; gap: 10px; }
  .gallery img { width: 480px; border: 1px solid #ddd; }
  .muted { color: #777; }
</style>
</head>
<body>
<h1>vcurve dashboard</h1>
<p class="muted">refreshed <span id="refreshes" data-refreshes="0">0</span> times; last at <span id="updated">–</span></p>
<div id="studies">loading…</div>
<script>
const token = new URLSearchParams(location.search).get("token");
const q = token ? "?token=" + encodeURIComponent(token) : "";
const api = (path) => fetch(path + q, { cache: "no-store" }).then(r => { if (!r.ok) throw new Error(r.status); return r.json(); });
const esc = (s) => String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c]));
function eta(s) { if (s === null || s === undefined) return "unknown"; s = Math.round(s); return Math.floor(s/3600) + "h" + String(Math.floor(s/60)%60).padStart(2,"0") + "m" + String(s%60).padStart(2,"0") + "s"; }
let refreshes = 0;
async function refresh() {
  try {
    const studies = await api("/api/studies");
    const parts = [];
    for (const p of studies) {
      const total = p.done + p.running + p.pending + p.retired;
      const share = total ? (p.done + p.retired) / total : 0;
      const stages = p.stages.map(([s, n]) => esc(s) + " " + n).join(", ") || "none";
      const workers = p.workers.map(w => "<tr><td>" + esc(w.name) + "</td><td>" + w.running + "/" + w.slots + " busy</td><td>seen " + (w.last_seen_ms_ago/1000).toFixed(1) + " s ago</td></tr>").join("");
      let gallery = "";
      try {
        const trs = await api("/api/studies/" + encodeURIComponent(p.study) + "/trajectories");
        gallery = trs.filter(t => t.state !== "waiting" && t.state !== "doomed").map(t =>
          "<figure><img alt=\"V-curve of " + esc(t.trajectory) + "\" data-trajectory=\"" + esc(t.trajectory) + "\" src=\"/api/studies/" + encodeURIComponent(p.study) + "/figures/" + encodeURIComponent(t.trajectory) + ".svg" + q + (q ? "&" : "?") + "n=" + t.continuations + "\"><figcaption>" + esc(t.trajectory) + ": " + esc(t.stage) + "</figcaption></figure>").join("");
      } catch (e) { gallery = "<p class=muted>curves unavailable: " + esc(e.message) + "</p>"; }
      parts.push("<div class=\"study\" data-study=\"" + esc(p.study) + "\"><h2>" + esc(p.name) + " <span class=muted>" + esc(p.study) + "</span></h2>" +
        "<p>state <b class=\"state\">" + esc(p.state) + "</b> · trajectories <span class=\"trajectories-done\">" + p.trajectories_done + "</span>/" + p.trajectories + " done (" + p.trajectories_admitted + " admitted) · in progress by stage: " + stages + "</p>" +
        "<div class=\"bar\"><div style=\"width:" + (100*share).toFixed(1) + "%\"></div></div>" +
        (p.waiting_for_runner ? "<p class=\"waiting\"><b>waiting for a worker offering <code>" + esc(p.waiting_for_runner) + "</code></b>: no live worker offers it</p>" : "") +
        "<p>continuations: <span class=\"done\">" + p.done + "</span> done, " + p.running + " running, " + p.pending + " pending, " + p.retired + " retired · throughput " + p.throughput_per_min.toFixed(1) + "/min · ETA " + eta(p.eta_seconds) + " · " +
        (p.lease_latency ? "lease latency p50 " + p.lease_latency.p50_ms.toFixed(1) + " ms, p99 " + p.lease_latency.p99_ms.toFixed(1) + " ms" : "lease latency not measured") + "</p>" +
        (p.call_stages.length ? "<table class=\"call-stages\"><tr><th>model-call stage</th><th>done / expected</th><th>running</th><th>pending</th><th>retired</th><th>malformed</th><th>failed</th><th>tokens in / out / cached</th></tr>" +
          p.call_stages.map(s => "<tr data-stage=\"" + esc(s.stage) + "\"><td>" + esc(s.stage) + "</td><td>" + s.done + " / " + (s.expected === null ? "not known yet" : s.expected) + "</td><td>" + s.running + "</td><td>" + s.pending + "</td><td>" + s.retired + "</td><td>" + s.malformed + "</td><td>" + s.failed + "</td><td>" + s.input_tokens + " / " + s.output_tokens + " / " + s.cached_tokens + "</td></tr>").join("") + "</table>" : "") +
        p.waiting_for_endpoints.map(e => "<p class=\"waiting\"><b>waiting for a worker offering the model endpoint <code>" + esc(e.replace(/^model:/, "")) + "</code></b>: no live worker offers it</p>").join("") +
        p.retired_jobs.map(r => "<p class=\"retired\">retired without an outcome: " + r.count + " " + esc(r.kind) + ": " + r.reasons.map(x => x.count + "× " + esc(x.reason)).join(", ") + "</p>").join("") +
        "<table>" + workers + "</table><div class=\"gallery\">" + gallery + "</div></div>");
    }
    document.getElementById("studies").innerHTML = parts.join("") || "<p>no studies yet</p>";
  } catch (e) {
    document.getElementById("studies").innerHTML = "<p>cannot reach the coordinator: " + esc(e.message) + "</p>";
  }
  refreshes += 1;
  const r = document.getElementById("refreshes");
  r.textContent = refreshes; r.dataset.refreshes = refreshes;
  document.getElementById("updated").textContent = new Date().toISOString();
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"##;
