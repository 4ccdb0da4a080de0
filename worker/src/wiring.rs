//! Building the engine from the environment: the one place that decides which store, provider,
//! rests, targets and tools a worker process uses.

use freeway::config::Settings;
use freeway::engine::Engine;
use freeway::events::EventSink;
use freeway::fleet::{Fleet, RedisFleet};
use freeway::provider::{HttpProvider, Timeouts, Transport};
use freeway::quota::DayWatch;
use freeway::store::{SqlStore, StoreTargets};
use freeway::tools::ToolRunner;
use std::sync::Arc;

/// Why a worker process cannot start; `bad_config` decides the exit code (2, else 1).
#[derive(Debug)]
pub(crate) struct StartError {
    pub message: String,
    pub bad_config: bool,
}

impl StartError {
    fn unavailable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            bad_config: false,
        }
    }
}

/// Open the store of `DATABASE_URL`, applying its migrations.
pub(crate) async fn store(url: &str) -> Result<SqlStore, StartError> {
    SqlStore::open(url).await.map_err(|e| StartError {
        bad_config: matches!(e, freeway::store::StoreError::BadUrl(_)),
        message: e.to_string(),
    })
}

/// The parts an engine is made of that the caller may want to keep using.
pub(crate) struct Wired {
    pub engine: Engine,
    /// The process's one handle on the fleet's state; the engine's [`Fleet`] is derived from it.
    pub redis: RedisFleet,
    /// Lifts spent days the provider's quota endpoint shows open again.
    pub day_watch: DayWatch,
    /// The store itself, for probing its writer (`/healthz` reports every replica's).
    pub store: SqlStore,
}

/// Open the store (applying migrations) and Redis, and build an engine that makes up to
/// `calls_at_once` calls at once and publishes its events through `events(the fleet's sink)`.
pub(crate) async fn engine(
    settings: &Settings,
    worker: String,
    calls_at_once: usize,
    events: impl FnOnce(Arc<dyn EventSink>) -> Arc<dyn EventSink>,
) -> Result<Wired, StartError> {
    settings.require_platform_keys().map_err(|e| StartError {
        message: e.to_string(),
        bad_config: true,
    })?;
    let store = store(&settings.database_url).await?;
    let conn = freeway::connect::redis(&settings.redis_url)
        .await
        .map_err(|e| StartError::unavailable(e.to_string()))?;
    let transport = Transport {
        http2: settings.http2,
        calls_at_once,
    };
    let provider = HttpProvider::with_transport(Timeouts::default(), transport)
        .map_err(|e| StartError::unavailable(e.to_string()))?;
    let tools = ToolRunner::new(settings.tool_url.clone())
        .map_err(|e| StartError::unavailable(e.to_string()))?;
    let targets = StoreTargets::new(
        settings.env_targets(),
        store.clone(),
        settings.secret_keys(),
    );
    let redis = RedisFleet::new(conn, &settings.namespace).keeping_events(settings.events_keep_s);
    let shared = redis.fleet();
    let fleet = Fleet {
        events: events(shared.events),
        ..shared
    };
    let day_watch = DayWatch::new(
        settings.catalog.clone(),
        Arc::new(settings.env_targets()),
        provider.clone(),
        fleet.clone(),
    );
    let engine = Engine::new(
        Arc::new(provider),
        Arc::new(targets),
        Arc::new(store.clone()),
        fleet,
    )
    .with_tools(tools)
    .with_summary(settings.summary)
    .with_learning(settings.learn_limits)
    .with_catalog(settings.catalog.clone())
    .named(worker);
    Ok(Wired {
        engine,
        redis,
        day_watch,
        store,
    })
}
