//! The run queue both sides share, and the enqueue library.
//!
//! [`schedule`] is freeway's use of apalis-redis: the storage settings every replica must agree
//! on, pushes in chunks, snoozes parked in a set of our own and woken a chunk at a time, the
//! chunked promotion of due jobs, vacuuming, and the depths the board and metrics show.
//! [`enqueue`] is what a web app calls to enqueue a run or answer an approval, and the
//! reconciler a worker runs: a Rust web app links this crate without any web framework.
//!
//! The worker and the producer both depend on this crate; neither depends on the other.

pub mod enqueue;
pub mod schedule;

pub use enqueue::{EnqueueError, Enqueuer, Outcome};
pub use schedule::{Queue, QueueError};
