//! `sim`: a local OpenRouter-compatible simulator for freeway's demo, tests and benchmarks.
//!
//! It reproduces the wire formats of `docs/providers.md`: chat completions (JSON and SSE
//! with `: OPENROUTER PROCESSING` comments, tool calls, both usage-chunk layouts, `[DONE]`), the
//! shared free-model account with its 429 bodies and `X-RateLimit-*` headers in the 2025 and
//! 2026 shapes, `GET /api/v1/key`, a Groq mode, injectable faults and a call log. It speaks
//! HTTP/1.1 and, to a client with prior knowledge, HTTP/2, as hosted providers do over TLS.
//!
//! Start it in-process with [`start`] (port 0 is fine) or run the `sim` binary.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let sim = sim::start(sim::SimConfig::default(), "127.0.0.1:0".parse().unwrap()).await?;
//! let url = format!("{}/chat/completions", sim.base_url());
//! // … POST to `url` with `Authorization: Bearer <key>` …
//! sim.inject(sim::FaultSpec::new(sim::FaultKind::Upstream429));
//! sim.advance_clock(60_000); // cross the per-minute window without sleeping
//! assert!(sim.calls().iter().all(|c| c.status != 500));
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Endpoints: `POST /api/v1/chat/completions` (also `/openai/v1/…` and `/v1/…`),
//! `GET /api/v1/key` (also `/api/v1/auth/key`), and the control API under `/_sim/`.
//!
//! Order of checks for a chat request: bearer key (401), body (400), the account quota (429,
//! counted even when refused), then the first matching fault, then `latency_ms`, then the answer.
//! The quota 429s are not delayed by `latency_ms`; every served response is.
//!
//! Usage-chunk layout (b) (usage on a second finish chunk) is chosen per request with the
//! `usage_layout_b` fault; layout (a) (a `"choices":[]` chunk) is the default.
//!
#![doc = concat!("```text\n", include_str!("usage.txt"), "```")]

mod account;
mod calllog;
mod clock;
mod config;
mod control;
mod faults;
mod freeway_config;
mod ids;
mod model;
mod price;
mod server;
mod state;
mod stream;
mod wire;

pub use calllog::CallRecord;
pub use config::{
    ConfigPatch, HIGH_BALANCE_RPD, Mode, Provider, Shape, SimConfig, UsageCost, WindowAlign,
    WindowKind,
};
pub use faults::{ErrorCode, FaultKind, FaultSpec, MAX_DELAY_MS, MAX_HUGE_BODY, MidstreamLayout};
pub use price::{DEFAULT_PRICE, DEFAULT_PRICE_KEY, ModelPrice, Price};
pub use server::{PATHS, SimHandle, start};

/// The directives, quota rules, control API and fault kinds, as printed by `sim --help`.
pub const USAGE: &str = include_str!("usage.txt");
