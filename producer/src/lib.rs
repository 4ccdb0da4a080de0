//! The web side of freeway: the HTTP API and job board ([`api::router`]) over the `queue`
//! crate's [`queue::Enqueuer`], the event streams it relays ([`hub`], [`stream`]) and the
//! `producer` command line. A Rust web app that enqueues in-process links `queue`, not this.

pub mod api;
pub mod hub;
pub mod stream;
pub mod view;
