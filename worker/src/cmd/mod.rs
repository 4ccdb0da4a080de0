//! The worker's commands, one file each: `serve` (the queue worker, the default), `run-one`,
//! `classify`, `prune`, `reseal-keys` and `config check`. What they share lives beside this
//! folder: exit codes (`exit`), wiring the engine to Redis and the store (`wiring`).

pub(crate) mod classify;
pub(crate) mod config;
pub(crate) mod prune;
pub(crate) mod reseal;
pub(crate) mod run_one;
pub(crate) mod serve;
