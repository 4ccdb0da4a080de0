//! The producer as processes: its command line, a fleet of workers beside it, Redis and the
//! store going away under it, a full store, and (last, on a cluster) a primary killed.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod failover;
mod fleet;
mod outage;
mod store_full;
