//! The run queue both sides share, and the enqueue library.
//!
//! [`schedule`] is freeway's use of apalis-redis, over the [`lane`]s runs are spread on: the storage settings every replica must agree
//! on, pushes in chunks, snoozes parked in a set of our own and woken a chunk at a time, the
//! chunked promotion of due jobs, vacuuming, and the depths the board and metrics show.
//! [`enqueue`] is what a web app calls to enqueue a run or answer an approval, and the
//! reconciler a worker runs: a Rust web app links this crate without any web framework.
//!
//! The worker and the producer both depend on this crate; neither depends on the other.

pub mod actions;
pub mod enqueue;
pub mod health;
pub mod lane;
pub mod schedule;

pub use actions::{Cancelled, Woken};
pub use enqueue::{EnqueueError, Enqueuer, Outcome, Reconciled};
pub use health::{FleetHealth, Health};

/// Why Redis, or apalis on it, failed: the client's message and error chain, without the
/// client's types in this crate's API (a web app linking it need not depend on redis-rs).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RedisFault(Box<dyn std::error::Error + Send + Sync>);

impl From<redis::RedisError> for RedisFault {
    fn from(e: redis::RedisError) -> RedisFault {
        RedisFault(Box::new(e))
    }
}

impl From<apalis_redis::Error> for RedisFault {
    fn from(e: apalis_redis::Error) -> RedisFault {
        RedisFault(Box::new(e))
    }
}
pub use schedule::{Queue, QueueError};
