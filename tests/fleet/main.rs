//! The fleet's shared parts, each suite run on both implementations (in memory and on Redis):
//! rests, pace, spend, fair share between tenants, and the day watch.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod day_watch;
mod fair_share;
mod pace;
mod rests;
mod spend;
