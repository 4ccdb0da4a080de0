//! What every handler is handed: the state of one producer, built once by `producer serve` (or
//! a test) and shared behind an `Arc`, with the limits and tokens it is checked against. It
//! lives below the handlers, so each of them imports it and none of them imports `api/mod.rs`.

use super::request_rate::RateLimits;
use super::stream_slots::StreamSlots;
use super::totals::TotalsCache;
use crate::hub::Hub;
use freeway::fleet::RedisFleet;
use freeway::provider::ApiKey;
use freeway::signed::EventsSigner;
use freeway::store::{SecretKey, SqlStore};
use queue::enqueue::Enqueuer;
use std::sync::Arc;
use tokio::sync::watch;

/// The largest request body (docs/api.md §1): 256 KiB.
pub const BODY_LIMIT: usize = 256 * 1024;
/// How long a client has to send a request's body once its headers are in (the accept loop
/// bounds the headers).
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest `POST /v1/runs:batch` body: a thousand runs of 16 KiB.
pub const BATCH_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Everything a handler needs.
pub struct AppState {
    pub enqueuer: Enqueuer,
    /// The fleet's state: rests, limiters, counters, spend, events (the enqueuer's own).
    pub fleet: RedisFleet,
    /// The SQL store: runs, attempts and users' connections.
    pub store: SqlStore,
    /// The shared reader of the runs' event streams, for every open `…/events` response.
    pub hub: Hub,
    /// One slot per open event stream (`FREEWAY_MAX_STREAMS`), counted per run and per user.
    pub stream_slots: Arc<StreamSlots>,
    /// Each credential's request rate (`FREEWAY_RATE_LIMIT`).
    pub rate_limits: RateLimits,
    pub tokens: Tokens,
    /// `FREEWAY_SECRET_KEY`: without it connections cannot be stored.
    pub secret_key: Option<SecretKey>,
    /// Signs each run's `events_url` (derived from `FREEWAY_SECRET_KEY`); without it the URL
    /// needs the API token like any other.
    pub signer: Option<EventsSigner>,
    /// `FREEWAY_CORS_ORIGINS`: web app pages that may read a run's events with its `events_url`.
    pub cors_origins: Vec<String>,
    /// The day's totals of the board, read once for every board that polls them.
    pub totals: TotalsCache,
    /// Turns `true` when the server shuts down, so open event streams end and the graceful
    /// shutdown does not wait for them.
    pub shutdown: watch::Receiver<bool>,
}

impl AppState {
    /// Resolves when the server shuts down; never when no one can signal it any more.
    pub async fn shutting_down(&self) {
        let mut rx = self.shutdown.clone();
        if rx.wait_for(|&down| down).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The tokens the API accepts. `Debug` never shows them (`ApiKey` is redacted).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// `FREEWAY_API_TOKEN`; `None` leaves `/v1` open (the server then binds loopback only).
    pub api: Option<ApiKey>,
    /// `FREEWAY_ADMIN_TOKEN`; `None` disables the operator's clear.
    pub admin: Option<ApiKey>,
    /// `FREEWAY_METRICS_TOKEN`: opens `/metrics` and nothing else.
    pub metrics: Option<ApiKey>,
}
