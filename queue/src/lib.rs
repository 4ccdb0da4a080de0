//! The run queue both sides share, and the enqueue library.
//!
//! [`schedule`] is freeway's use of apalis-redis, over the [`lane`]s runs are spread on: the
//! storage settings every replica must agree on, pushes in chunks, snoozes parked in a set of our
//! own and woken a chunk at a time, the chunked promotion of due jobs, vacuuming, and the depths
//! the board and metrics show. [`enqueue`] is what a web app calls to enqueue a run or answer an
//! approval, and [`reconcile`] the reconciler a worker runs: a Rust web app links this crate
//! without any web framework.
//!
//! The worker and the producer both depend on this crate; neither depends on the other.
//!
//! # Quick start
//!
//! A web app's back end enqueues a run on the Redis and the store its workers use, then follows
//! the run's events until the last one:
//!
//! ```no_run
//! use freeway::catalog::Catalog;
//! use freeway::events::{StoredEvent, stream_key};
//! use freeway::job::RunRequest;
//! use freeway::route::RouteSpec;
//! use freeway::store::SqlStore;
//! use queue::{Enqueuer, Outcome};
//! use redis::AsyncCommands;
//! use redis::streams::{StreamReadOptions, StreamReadReply};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # async fn quick_start() -> Result<(), Box<dyn std::error::Error>> {
//! let (redis_url, namespace) = ("redis://127.0.0.1:6379", "freeway");
//! let conn = freeway::connect::redis(redis_url).await?;
//! let store = Arc::new(SqlStore::open("sqlite://freeway.db").await?);
//! let enqueuer = Enqueuer::new(conn, namespace, store);
//!
//! // One user's question, on a free model first and a paid one when the free pool rests.
//! let catalog = Catalog::builtin();
//! let routes = ["meta-llama/llama-3.3-70b-instruct:free", "openai/gpt-4o-mini"]
//!     .map(|route| RouteSpec::parse_cli(route, &catalog))
//!     .to_vec();
//! let run_id = match enqueuer.enqueue(RunRequest::new("user-1", "Say hello.", routes)).await? {
//!     Outcome::Enqueued { run_id } | Outcome::Duplicate { run_id } => run_id,
//!     Outcome::Refused { code, retry_after_s } => {
//!         println!("refused ({code:?}): try again in {retry_after_s} s");
//!         return Ok(());
//!     }
//! };
//!
//! // Its events are a Redis stream of JSON events; the last one ends it.
//! let mut reader = freeway::connect::blocking(redis_url, Duration::from_secs(5)).await?;
//! let (key, mut last_id) = (stream_key(namespace, &run_id), "0".to_string());
//! loop {
//!     let options = StreamReadOptions::default().block(5_000);
//!     let reply: Option<StreamReadReply> = reader.xread_options(&[&key], &[&last_id], &options).await?;
//!     for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
//!         last_id = entry.id.clone();
//!         let Some(event) = StoredEvent::read(&entry).event else {
//!             continue;
//!         };
//!         println!("{}: {}", event.kind(), event.to_json());
//!         if event.is_last() {
//!             return Ok(());
//!         }
//!     }
//! }
//! # }
//! ```

#![warn(missing_docs)]

pub mod actions;
pub mod enqueue;
pub mod health;
pub mod lane;
pub mod reconcile;
pub mod schedule;

pub use actions::{Cancelled, Woken};
pub use enqueue::{EnqueueError, Enqueuer, Outcome, Reconciled};
pub use health::{FleetHealth, Health};

/// Why Redis, or apalis on it, failed: the core's one opaque Redis error, so a web app linking
/// this crate need not depend on redis-rs or apalis to read it.
pub use freeway::fleet::FleetError;
pub use schedule::{Queue, QueueError};
