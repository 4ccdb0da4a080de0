//! The worker's command line as an operator uses it: running, checking configuration, and the
//! store commands.

#[path = "../support/mod.rs"]
mod support;

mod config;
mod run;
mod store;
