//! Pacing (docs/design.md §4.4): spend a pool's quota without earning its 429s.
//!
//! Reacting to refusals costs a call into every closed window (the 21st call of OpenRouter's
//! minute is the one that learns the account is full) and a slot of the day's quota with it. A
//! pool with a known limit instead gets a limiter every replica shares: before a call on one of
//! its routes the engine asks it for a slot, and a full pool closes its routes until its next
//! slot without a call being made. Runs that must wait take a *reservation* of a later slot, so
//! N waiting runs wake at N admitted moments instead of as a herd into a window with room for a
//! few.
//!
//! Windows are `fixed` (aligned to the epoch, as OpenRouter's minute: a count per window index)
//! or `rolling` (GCRA, as Groq's: a theoretical arrival time moving by window / limit per call);
//! a window the provider shows to slide is paced by a log of its calls' moments.
//! A day counter on the pool's day clock stops admitting at the day's limit. A refusal of a call
//! the limiter admitted is a *pacing miss*: the window is marked full, the miss is counted, and
//! the pool's working limit is lowered for the windows that follow.
//!
//! The configured limits are a starting guess. What the provider states in its answers
//! ([`Stated`]: its limits, where its window ends, what is left) is learned per pool instance,
//! in the same hash, and wins from the next admit on unless the pool pins its limits.
//!
//! Once runs wait for a pool, its slots go to them through a queue that shares them fairly
//! between tenants by their weights, interactive runs first ([`Waiter`], `fair.rs`).
//!
//! [`RedisPacer`] is the fleet's (one Lua script on Redis `TIME`, keys hash-tagged by pool
//! instance); [`MemoryPacer`] keeps the same rules in one process. `tests/fleet/pace.rs` runs one
//! suite on both.

mod fair;
mod memory;
mod redis;
mod stated;

pub use self::redis::RedisPacer;
pub use fair::{Joined, Lane, Waiter};
pub use memory::MemoryPacer;
pub use stated::{Answer, InBody, LimitSource, MAX_STATED, Stated};

use crate::error::FleetError;
use async_trait::async_trait;
use serde::Serialize;

/// A pool's request limits, as its configuration (or what the provider said) gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Requests per window; `None`: the window is not limited.
    pub per_window: Option<u32>,
    pub window_ms: u64,
    /// GCRA instead of epoch-aligned windows.
    pub rolling: bool,
    /// Requests per day of the pool's day clock; `None`: not limited.
    pub per_day: Option<u32>,
    /// Tokens (prompt and answer) per window, counted the window's way; `None`: not limited.
    pub tokens_per_window: Option<u32>,
    /// Tokens per day of the pool's day clock; `None`: not limited.
    pub tokens_per_day: Option<u32>,
    /// The configured limits stand even where the provider states others (`pin = true`).
    pub pin: bool,
}

impl Limits {
    /// A pool that declares no limit: it is paced by what its provider states, once it has.
    pub fn unstated(window_ms: u64, rolling: bool) -> Limits {
        Limits {
            per_window: None,
            window_ms,
            rolling,
            per_day: None,
            tokens_per_window: None,
            tokens_per_day: None,
            pin: false,
        }
    }

    /// Whether calls' tokens are counted at all.
    pub fn counts_tokens(&self) -> bool {
        self.tokens_per_window.is_some() || self.tokens_per_day.is_some()
    }
}

/// What [`Pacer::dispatch`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dispatched {
    /// Runs granted a slot that nobody had told: to be woken now.
    pub granted: Vec<String>,
    /// Runs still waiting their turn.
    pub waiting: u64,
}

/// When a pool has room for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Now (and, from [`Pacer::admit`], the call is counted).
    Now,
    /// Not before this many ms from now; nothing was counted.
    In(u64),
}

/// A slot of a later window, counted already: the run that holds it calls at `wait_ms` from
/// now without asking again, until `valid_ms` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub wait_ms: u64,
    pub valid_ms: u64,
}

/// What a quota endpoint's count did to a pool's day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaySync {
    /// The day was full before, and is not now (the limit grew: credits were bought).
    pub reopened: bool,
    /// The day is full.
    pub full: bool,
}

/// What a pool has spent, for `GET /v1/pools` and the board.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolUse {
    /// Calls counted in the current window (rolling: in the last window's length).
    pub window_used: u32,
    /// Milliseconds until the current fixed window ends (rolling: until a slot frees).
    pub window_resets_in_ms: u64,
    /// Calls counted today, on the pool's day clock.
    pub day_used: u32,
    /// Slots of later windows held by waiting runs.
    pub reserved: u32,
    /// Refusals of calls the limiter had admitted.
    pub misses: u32,
    /// Tokens counted in the current window, when the pool limits tokens.
    pub window_tokens: u32,
    /// Tokens counted today.
    pub day_tokens: u64,
    /// What the provider stated, and the limit in force after pacing misses.
    pub learned: Learned,
    /// Runs waiting their turn for a slot (docs/design.md §4.7).
    pub waiting: u32,
    /// Tenants with runs waiting.
    pub tenants_waiting: u32,
    /// Each tenant's slots this window, granted through the queue.
    pub shares: Vec<Share>,
}

/// A tenant's slots of a pool's window, granted to its waiting runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Share {
    pub tenant: String,
    pub slots: u32,
}

/// What a pool instance learned from its provider (docs/design.md §4.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Learned {
    /// The requests per window the provider stated.
    pub per_window: Option<u32>,
    /// The requests per day it stated (or its quota endpoint gave, or a day refusal showed).
    pub per_day: Option<u32>,
    /// The tokens per window it stated.
    pub tokens_per_window: Option<u32>,
    /// Where the window's learned limit came from: `per_window`'s, or `counted` for the
    /// `working_per_window` a refusal counted when nobody states the limit.
    pub per_window_from: Option<LimitSource>,
    /// Where `per_day` came from.
    pub per_day_from: Option<LimitSource>,
    /// Where `tokens_per_window` came from.
    pub tokens_per_window_from: Option<LimitSource>,
    /// The requests per window in force while pacing misses keep it below the stated (or
    /// configured) limit, or as a refusal counted it when nobody states the limit; `None`
    /// otherwise.
    pub working_per_window: Option<u32>,
    /// When the provider last stated something (epoch ms).
    pub at_ms: Option<u64>,
    /// Whether the fixed window is aligned to where the provider said it ends, rather than to
    /// the epoch.
    pub phase_from_provider: bool,
    /// Whether a pool declared `rolling` is paced by fixed windows, because its provider said
    /// where its window ends (an epoch-ms reset, as OpenRouter's; a bucket states no moment).
    pub fixed_by_provider: bool,
    /// Whether the pool is paced call by call, as a rolling window whose next slot is where the
    /// provider's reset says, because its stated resets move on with its calls (a sliding
    /// window), whatever it declared.
    pub sliding_by_provider: bool,
}

/// What a provider last said about a pool: shown beside its use, whether or not it declares
/// limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolSeen {
    /// The requests a successful answer said were left (`X-RateLimit-Remaining`,
    /// `x-ratelimit-remaining-requests`).
    pub headroom: Option<Headroom>,
    /// The last 429 on one of the pool's routes.
    pub last_429: Option<Refusal>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Headroom {
    pub remaining: i64,
    /// When the answer came (epoch ms).
    pub t_ms: u64,
    /// When the provider said its count resets (epoch ms), if it said.
    pub resets_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Refusal {
    pub t_ms: u64,
    pub route: String,
    /// How the refusal was classified.
    pub verdict: String,
}

/// One thing a provider said about a pool, for [`Pacer::saw`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Headroom(Headroom),
    Refusal(Refusal),
}

/// The fleet's limiter. `day_end_ms` is the epoch ms at which the pool's current day ends (its
/// day clock's next midnight): the day counter starts again when it changes. `tokens` is what a
/// call is expected to spend (see [`estimate_tokens`]); it counts only in a pool whose limits
/// count tokens, and the call's answer corrects it ([`Pacer::spent`]).
///
/// A run asks as a [`Waiter`] (`who`): it takes the slot its pool's queue granted it, and while
/// other runs wait their turn it takes no other. Asking as nobody (`None`: a continuation, a
/// canary, an operator's view) ignores the queue.
#[async_trait]
pub trait Pacer: Send + Sync {
    /// Whether the pool has room for a call now, counting nothing.
    async fn peek(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> Result<Slot, FleetError> {
        self.peek_as(pool, limits, day_end_ms, tokens, None).await
    }
    /// Count a call now if the window and the day have room; else say when the next slot is.
    async fn admit(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> Result<Slot, FleetError> {
        self.admit_as(pool, limits, day_end_ms, tokens, None).await
    }
    /// [`Pacer::peek`] for `who`: open when its slot was granted, closed (until about its turn)
    /// while others wait.
    async fn peek_as(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Slot, FleetError>;
    /// [`Pacer::admit`] for `who`: it takes the slot granted to it (counted already), and no
    /// other while others wait.
    async fn admit_as(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: Option<&Waiter<'_>>,
    ) -> Result<Slot, FleetError>;
    /// `who` waits its turn in the pool's queue (a run already in it keeps its place): granted
    /// a slot now when it is next in line and there is room, else queued; the pool's room goes
    /// to the runs next in line.
    async fn join(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        who: &Waiter<'_>,
    ) -> Result<Joined, FleetError>;
    /// Grant the room there is now to the runs next in line (at most `max`), and say which runs
    /// were granted a slot since the last call (here or by a [`Pacer::join`]): they are to be
    /// woken. The replicas' housekeeping calls it for every pool in [`Pacer::waiting_pools`].
    async fn dispatch(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        max: u32,
    ) -> Result<Dispatched, FleetError>;
    /// `run_id` will not use its place in the pool's queue, nor the slot granted to it (given
    /// back, for a call of `tokens`).
    async fn leave(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        run_id: &str,
    ) -> Result<(), FleetError>;
    /// The pools whose queues may have runs waiting or granted runs to wake.
    async fn waiting_pools(&self) -> Result<Vec<String>, FleetError>;
    /// `pool` has nobody waiting (as its last [`Pacer::dispatch`] said): it leaves the list of
    /// waiting pools unless a run joined it in the last `quiet_ms`.
    async fn quiet(&self, pool: &str, quiet_ms: u64) -> Result<(), FleetError>;
    /// Count a call in the first window with room, for a run that will wait for it; `None` when
    /// the day is spent (its slots come back with the next day, which only the day rest knows),
    /// or when runs wait their turn (a reservation would pass them).
    async fn reserve(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
    ) -> Result<Option<Reservation>, FleetError>;
    /// An admitted call's answer counted `delta` more tokens than it was admitted with (fewer,
    /// when negative): the current window and the day are corrected.
    async fn spent(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        delta: i64,
    ) -> Result<(), FleetError>;
    /// The answer of a call admitted `elapsed_ms` ago (with `tokens`) is back. A call admitted
    /// at the very end of a fixed window was counted in the next window too, since it might
    /// reach the provider there; back before that window began, it did not, and the next
    /// window gets its slot back. Says whether it did.
    async fn landed(
        &self,
        pool: &str,
        limits: &Limits,
        elapsed_ms: u64,
        tokens: u32,
    ) -> Result<bool, FleetError>;
    /// A call the limiter admitted was refused for the pool's quota: this window is full (a
    /// rolling window: until `hint_ms` from now, when the refusal said). With `lower`, the
    /// working limit drops to 9/10 of what it was (at least 1) and recovers by one each window
    /// without a miss. Returns the misses counted so far.
    async fn missed(
        &self,
        pool: &str,
        limits: &Limits,
        hint_ms: Option<u64>,
        lower: bool,
    ) -> Result<u32, FleetError>;
    /// Learn what the provider stated in an answer on one of the pool's routes: its limits
    /// replace the configured ones (unless pinned), its window's end realigns a fixed window,
    /// what it says is left raises the counts, a day refusal closes the day.
    async fn learn(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        stated: &Stated,
    ) -> Result<(), FleetError>;
    /// Give back a slot a run held and will not use: the slot `slot_in_ms` from now (negative:
    /// past) is uncounted from its window and from the day.
    async fn release(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        tokens: u32,
        slot_in_ms: i64,
    ) -> Result<(), FleetError>;
    /// The provider's own count of the day from its quota endpoint: the day counter is raised
    /// to `used` (never lowered: the endpoint lags) and `limit` is learned as the day's limit
    /// when none is declared. Says whether that reopened a full day.
    async fn sync(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
        used: u64,
        limit: u64,
    ) -> Result<DaySync, FleetError>;
    /// Forget what the pool's day has counted (the operator cleared its rest, or its quota
    /// endpoint shows the day back). The windows keep their counts: the provider's window has
    /// not forgotten its calls, so the runs a clear wakes are still admitted slot by slot.
    async fn reopen_day(&self, pool: &str) -> Result<(), FleetError>;
    /// What the pool has spent.
    async fn usage(
        &self,
        pool: &str,
        limits: &Limits,
        day_end_ms: u64,
    ) -> Result<PoolUse, FleetError>;
    /// Keep what the provider just said about the pool (the newest of each kind is kept, for a
    /// day).
    async fn saw(&self, pool: &str, seen: Seen) -> Result<(), FleetError>;
    /// What the provider last said about the pool.
    async fn seen(&self, pool: &str) -> Result<PoolSeen, FleetError>;
}

/// The tokens a call is expected to spend before its answer says: its answer's cap (or
/// [`DEFAULT_ANSWER_TOKENS`] without one) and its input at four characters a token, the usual
/// rule of thumb for English text.
pub fn estimate_tokens(input_chars: usize, max_tokens: Option<u32>) -> u32 {
    let input = u32::try_from(input_chars / 4).unwrap_or(u32::MAX);
    input.saturating_add(max_tokens.unwrap_or(DEFAULT_ANSWER_TOKENS))
}

/// The answer a call without `max_tokens` is expected to take, until its usage says.
pub const DEFAULT_ANSWER_TOKENS: u32 = 1_024;

/// How long what a provider said about a pool is kept.
pub const SEEN_TTL_MS: u64 = 24 * 3600 * 1000;

/// A fixed window's edges, where a call may reach the provider in the window next to the one
/// it was admitted in (the time from admission to the provider, clocks a little apart):
/// reserved slots start this long into their window, and a call admitted this close to a
/// window's end is counted in the next window too.
pub const WINDOW_GUARD_MS: u64 = 500;

/// A rolling window's calls are spaced this much more than window / limit (a fiftieth of the
/// interval, at most 50 ms): the limiter's clock starts when it admits a call, the provider's
/// when the call arrives, and calls spaced exactly by the interval arrive with nothing to spare.
pub fn rolling_emission_ms(window_ms: u64, limit: u32) -> f64 {
    let interval = window_ms.max(1) as f64 / f64::from(limit.max(1));
    interval + (interval / 50.0).min(50.0)
}
