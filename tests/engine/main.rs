//! The engine and what it calls, without Redis: a run on the simulator (`on_sim`), its budget,
//! pace and spend; classification's tables; every provider's wire format over HTTP and TLS;
//! the canary; no input panics it; a store that goes away.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod budget;
mod canary;
mod classify_table;
mod no_panic;
mod on_sim;
mod pace;
mod provider_http;
mod providers;
mod spend;
mod store_outage;
