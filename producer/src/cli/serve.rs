//! `producer serve [--addr A]`: the HTTP API until SIGINT or SIGTERM, then a graceful shutdown
//! (open event streams are ended so in-flight requests can finish).

use super::{EXIT_BAD_INPUT, EXIT_FAILED, connect_fleet, fail, listen, open_store};
use freeway::config::Settings;
use freeway::signed::EventsSigner;
use producer::api::request_rate::RateLimits;
use producer::api::stream_slots::StreamSlots;
use producer::api::{self, AppState, auth::Tokens};
use producer::hub::Hub;
use queue::Enqueuer;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::watch;

pub(crate) async fn run(settings: Settings, addr: SocketAddr) -> ExitCode {
    if settings.api_token.is_none() && !addr.ip().is_loopback() {
        return fail(
            EXIT_BAD_INPUT,
            &format!(
                "refusing to listen on {addr}: FREEWAY_API_TOKEN is not set, and without it the API listens only on a loopback address"
            ),
        );
    }
    let store = match open_store(&settings).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let fleet = match connect_fleet(&settings).await {
        Ok(fleet) => fleet,
        Err(code) => return code,
    };
    let file_limit = listen::file_limit();
    let limits = listen::Limits::for_file_limit(file_limit);
    // Streams are held for minutes: half the connections are kept for everything else, or a
    // flood of streams would leave no connection for a request.
    let max_streams = settings.max_streams.min(limits.connections / 2);
    let (shutdown_tx, shutdown) = watch::channel(false);
    let enqueuer = Enqueuer::on(fleet.clone(), Arc::new(store.clone()))
        .with_catalog(settings.catalog.clone())
        .with_lanes(settings.queues);
    let state = Arc::new(AppState {
        hub: Hub::new(&settings.redis_url, fleet.connection(), max_streams),
        fleet,
        stream_slots: StreamSlots::new(max_streams),
        rate_limits: RateLimits::new(settings.rate_limit),
        enqueuer,
        store,
        tokens: Tokens {
            api: settings.api_token.clone(),
            admin: settings.admin_token.clone(),
            metrics: settings.metrics_token.clone(),
        },
        secret_key: settings.secret_key.clone(),
        signer: settings.secret_key.as_ref().map(EventsSigner::new),
        cors_origins: settings.cors_origins.clone(),
        totals: Default::default(),
        shutdown,
    });
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => return fail(EXIT_FAILED, &format!("cannot listen on {addr}: {e}")),
    };
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(
        addr = %bound,
        auth = settings.api_token.is_some(),
        file_limit,
        connections = limits.connections,
        max_streams,
        header_timeout_s = limits.header_timeout.as_secs(),
        body_timeout_s = api::BODY_TIMEOUT.as_secs(),
        "producer listening"
    );
    let _file_size_limit = freeway::store::survive_file_size_limit();
    listen::serve(listener, api::router(state), limits, async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = shutdown_tx.send(true);
    })
    .await;
    ExitCode::SUCCESS
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = term.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; SIGINT still stops the server");
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
