//! Listening: bind the socket, load the model off the runtime, serve until a signal,
//! then the grace period.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::json;
use tokio::sync::{oneshot, Semaphore};

use super::routes::router;
use super::schemas::{SchemaCache, ToolCache};
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
    let state: Shared = Arc::new(AppState {
        permits: Arc::new(Semaphore::new(cfg.parallel.max(1) + cfg.max_queue)),
        cache: Arc::new(SchemaCache::new(256)),
        tools: Arc::new(ToolCache::new(256)),
        ready: OnceLock::new(),
        log: Mutex::new(log),
        metrics,
        test_hooks: std::env::var("FORMWORK_SERVE_TEST_HOOKS").as_deref() == Ok("1"),
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
    let shutting_down = Arc::new(AtomicBool::new(false));
    let (tx_signal, rx_signal) = oneshot::channel::<()>();
    {
        let flag = shutting_down.clone();
        let state = state.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            flag.store(true, Ordering::SeqCst);
            log_event(
                &state,
                json!({"event": "shutdown", "grace_s": state.cfg.grace.as_secs_f64()}),
            );
            let _ = tx_signal.send(());
        });
    }
    let (tx_grace, rx_grace) = oneshot::channel::<()>();
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        let _ = rx_signal.await;
        let _ = tx_grace.send(());
    });
    let server = std::future::IntoFuture::into_future(server);
    let grace = cfg.grace;
    tokio::select! {
        r = server => r.map_err(|e| anyhow::anyhow!("server: {e}"))?,
        _ = async {
            let _ = rx_grace.await;
            tokio::time::sleep(grace).await;
        } => {
            log_event(&state, json!({"event": "grace_expired"}));
        }
    }
    log_event(&state, json!({"event": "stopped"}));
    Ok(())
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
