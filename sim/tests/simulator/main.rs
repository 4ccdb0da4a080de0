//! The simulator as the engine's tests rely on it: each provider's wire format, accounts and
//! their windows, faults, costs, streaming, the control API and the binary.

#[path = "../common/mod.rs"]
mod common;

mod account;
mod binary;
mod chat;
mod control;
mod cost;
mod faults;
mod groq;
mod providers;
mod stream;
mod windows;
