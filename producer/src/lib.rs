//! The enqueue side of freeway, as a library: Rust web apps call [`Enqueuer`] (validate,
//! pre-flight, record, push) on a [`Queue`], the `producer` binary serves the HTTP API on it
//! ([`api::router`]), and the worker re-pushes snoozed runs through [`Queue`].

pub mod api;
pub mod enqueue;
pub mod hub;
pub mod logging;
pub mod queue;
pub mod stream;
pub mod view;

pub use enqueue::{EnqueueError, Enqueuer, Outcome};
pub use queue::{Queue, QueueError};
