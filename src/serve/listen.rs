//! Listening: bind the socket, load the model off the runtime, serve until a signal,
//! then the grace period.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::sync::{oneshot, Semaphore};

use super::routes::{router, test_hooks_enabled};
use super::schemas::{Compiler, SchemaCache, ToolCache};
use super::{load, log_event, unix_now, AppState, ServeConfig, Shared, LATENCY_BUCKETS_S};

pub(super) async fn serve(cfg: ServeConfig) -> anyhow::Result<()> {
    let addr: SocketAddr = format!("{}:{}", cfg.host, cfg.port)
        .parse()
        .or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(&(cfg.host.as_str(), cfg.port))
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|_| anyhow::anyhow!("--host {}: not an address or a host name", cfg.host))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() && cfg.api_key.is_none() {
        eprintln!("{}", public_warning(local));
    }
    let log: Box<dyn Write + Send> = match &cfg.log {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("--log {}: {e}", p.display()))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    // Buckets, so the request durations are Prometheus histograms (`_bucket{le=…}`,
    // `_sum`, `_count`) that a scraper can aggregate, not client-side summaries.
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS_S)
        .map_err(|e| anyhow::anyhow!("metrics buckets: {e}"))?
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("metrics recorder: {e}"))?;
    let compiler = Arc::new(Compiler::new(cfg.compile_slots));
    let state: Shared = Arc::new(AppState {
        permits: Arc::new(Semaphore::new(cfg.parallel.max(1) + cfg.max_queue)),
        cache: Arc::new(SchemaCache::new(256, compiler.clone())),
        tools: Arc::new(ToolCache::new(256, compiler)),
        ready: OnceLock::new(),
        log: Mutex::new(log),
        metrics,
        test_hooks: test_hooks_enabled(std::env::var("FORMWORK_SERVE_TEST_HOOKS").ok().as_deref()),
        created: unix_now(),
        cfg: cfg.clone(),
    });
    log_event(
        &state,
        json!({"event": "listening", "addr": local.to_string(), "model": cfg.model}),
    );

    // Load the model off the runtime; /health says 503 until it is done.
    {
        let state = state.clone();
        std::thread::spawn(move || match load(&state.cfg) {
            Ok(ready) => {
                let id = ready.model_id.clone();
                let _ = state.ready.set(ready);
                log_event(&state, json!({"event": "ready", "model": id}));
            }
            Err(e) => {
                log_event(
                    &state,
                    json!({"event": "load_failed", "error": format!("{e:#}")}),
                );
                eprintln!("error: loading model {}: {e:#}", state.cfg.model);
                std::process::exit(2);
            }
        });
    }

    let app = router(state.clone());
    let (tx_signal, rx_signal) = oneshot::channel::<()>();
    {
        let state = state.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            log_event(
                &state,
                json!({"event": "shutdown", "grace_s": state.cfg.grace.as_secs_f64()}),
            );
            let _ = tx_signal.send(());
        });
    }
    // hyper's HTTP/1 connections, not axum::serve: it has no header-read timeout.
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_timeout);
    let graceful = GracefulShutdown::new();
    let mut signal = std::pin::pin!(rx_signal);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(e) => {
                        // Out of file descriptors, or the peer gave up before accept:
                        // wait a moment rather than spin.
                        log_event(&state, json!({"event": "accept_failed", "error": e.to_string()}));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    // A client that broke off, or sent its headers too slowly: the
                    // connection is closed, nothing to answer.
                    let _ = conn.await;
                });
            }
            _ = &mut signal => break,
        }
    }
    // No new connections; the open ones end after their running requests.
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(cfg.grace) => {
            log_event(&state, json!({"event": "grace_expired"}));
        }
    }
    log_event(&state, json!({"event": "stopped"}));
    Ok(())
}

/// The one line on stderr when the server listens beyond loopback with no API key.
pub(super) fn public_warning(addr: SocketAddr) -> String {
    format!(
        "warning: listening on {addr}, beyond loopback, without --api-key: anyone who can reach it can use the model"
    )
}

pub(super) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
