//! freeway's core: everything a run needs that is neither the queue nor the web.
//!
//! A run walks a chain of routes; some routes spend one shared free quota (a *pool*). The core
//! classifies every failed attempt ([`classify`]), writes the rest it calls for where every
//! replica sees it ([`rest`], part of the [`fleet`]'s shared state), bounds every run's calls by
//! construction ([`budget`]), talks to OpenAI-compatible providers without hidden retries
//! ([`provider`]) and drives the whole run as a resumable state machine ([`engine`]). It knows nothing of apalis or axum: the `worker` and
//! `producer` crates wire it to the queue and the web.

pub mod budget;
pub mod canary;
pub mod catalog;
pub mod chat;
pub mod classify;
pub mod clock;
pub mod config;
pub mod connect;
pub mod connection;
pub mod day;
pub mod dialect;
pub mod engine;
mod error;
pub mod events;
pub mod fleet;
pub mod headers;
pub mod job;
pub mod lease;
#[cfg(feature = "logging")]
pub mod logging;
pub mod metrics;
pub mod pace;
pub mod preflight;
pub mod provider;
pub mod quota;
pub mod rest;
pub mod route;
pub mod run;
pub mod signed;
pub mod spend;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tools;
pub mod unsaved;
