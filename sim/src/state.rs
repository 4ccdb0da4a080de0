//! The simulator's mutable state behind one mutex, and the admission of each chat request.
//!
//! One short critical section per request reads the clock, counts the request against the
//! account, takes a fault and appends to the call log, so the four always agree: a refused request
//! is logged as refused and consumes no fault, a fault is consumed by exactly one request.
//! Nothing awaits while the lock is held.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::account::{
    Accounts, GeminiRefusal, GroqRefusal, GroqVerdict, Refusal, WindowState, is_free_model,
};
use crate::calllog::{CallLog, CallRecord, Logged};
use crate::clock::Clock;
use crate::config::{ConfigPatch, Provider, SimConfig};
use crate::faults::{FaultQueue, FaultSpec, PendingFault};
use crate::model::{Request, Turn};
use crate::price::{Cost, Price, Prices};

struct State {
    config: SimConfig,
    prices: Prices,
    clock: Clock,
    accounts: Accounts,
    faults: FaultQueue,
    log: CallLog,
    /// Reads of `GET /key` (not chat calls, so not in the log).
    key_reads: u64,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// Flips to true on shutdown: ends graceful shutdown, held headers and stream pauses, so a
    /// 30-second `timeout` fault does not keep a stopping server alive.
    stopping: watch::Sender<bool>,
}

/// What to do with a chat request.
pub(crate) enum Verdict {
    /// The OpenRouter free-model account refused it.
    FreeTier(Refusal),
    /// Groq's per-model minute or day refused it.
    GroqLimited(GroqVerdict, GroqRefusal),
    /// Gemini's per-model minute or day refused it.
    GeminiLimited(GeminiRefusal),
    /// The generic provider's per-model window refused it.
    GenericLimited(WindowState),
    /// Serve it, suffering the fault if any.
    Serve(Option<FaultSpec>),
}

/// The limits a provider states on a served answer's headers.
pub(crate) enum Stated {
    /// Groq's six headers, on every answer.
    Groq(GroqVerdict),
    /// OpenRouter's three `X-RateLimit-*`, on free-model answers with `state_limits`.
    Window(WindowState),
    /// OpenAI's `x-ratelimit-*-requests`, on every answer of a generic provider with a limit.
    Requests(WindowState),
}

pub(crate) struct Admission {
    pub now_ms: u64,
    /// Settings in force when the request arrived.
    pub config: SimConfig,
    /// What the answer costs, when its provider states costs (OpenRouter's `usage.cost`).
    pub cost: Option<Cost>,
    /// What the answer's headers say of the limits, if the provider says anything.
    pub stated: Option<Stated>,
    pub verdict: Verdict,
}

impl Shared {
    pub(crate) fn new(config: SimConfig) -> Shared {
        Shared {
            state: Mutex::new(State {
                config,
                prices: Prices::default(),
                clock: Clock::default(),
                accounts: Accounts::default(),
                faults: FaultQueue::default(),
                log: CallLog::new(config.log_cap),
                key_reads: 0,
            }),
            stopping: watch::Sender::new(false),
        }
    }

    pub(crate) fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// A receiver that sees `true` once the simulator is stopping.
    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Resolves once the simulator is stopping.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stopping.subscribe();
        async move {
            // An error means the sender is gone, which also means the simulator is gone.
            let _ = rx.wait_for(|stopping| *stopping).await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; if one ever did, the counters are still
        // consistent enough to keep serving a test.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a valid chat request to `provider` (`None`: the unprefixed paths, which play the
    /// configured mode) and decides how to answer it with `turn`.
    pub(crate) fn admit(
        &self,
        provider: Option<Provider>,
        key: &str,
        req: &Request,
        turn: &Turn,
        traceparent: Option<&str>,
    ) -> Admission {
        let model = req.model.as_str();
        let tokens = turn.prompt_tokens + turn.completion_tokens;
        let mut guard = self.lock();
        let st = &mut *guard;
        let now_ms = st.clock.now_ms();
        let config = st.config;
        let mut stated = None;
        // The unprefixed Groq mode keeps its original limit (`rpm`); the Groq prefix has its own.
        let groq_rpm = if provider.is_some() {
            config.groq_rpm
        } else {
            config.rpm
        };
        let provider = provider.unwrap_or(config.mode.provider());
        let verdict = match provider {
            Provider::OpenRouter if is_free_model(model) => {
                match st.accounts.count_free(key, now_ms, &config) {
                    Err(refusal) => Verdict::FreeTier(refusal),
                    Ok(window) => {
                        stated = config.state_limits.then_some(Stated::Window(window));
                        Verdict::Serve(st.faults.take(model, key))
                    }
                }
            }
            Provider::Groq => {
                let g = st
                    .accounts
                    .count_groq(key, model, tokens, now_ms, &config, groq_rpm);
                stated = Some(Stated::Groq(g));
                match g.refusal {
                    Some(refusal) => Verdict::GroqLimited(g, refusal),
                    None => Verdict::Serve(st.faults.take(model, key)),
                }
            }
            Provider::Gemini => match st.accounts.count_gemini(key, model, now_ms, &config) {
                Some(refusal) => Verdict::GeminiLimited(refusal),
                None => Verdict::Serve(st.faults.take(model, key)),
            },
            Provider::Generic => {
                let window = st.accounts.count_generic(key, model, now_ms, &config);
                stated = window.map(|w| Stated::Requests(w.unwrap_or_else(|refused| refused)));
                match window {
                    Some(Err(refused)) => Verdict::GenericLimited(refused),
                    _ => Verdict::Serve(st.faults.take(model, key)),
                }
            }
            Provider::OpenRouter => Verdict::Serve(st.faults.take(model, key)),
        };
        let (status, variant) = match &verdict {
            Verdict::FreeTier(Refusal::PerMinute { .. }) => (429, "free_per_min"),
            Verdict::FreeTier(Refusal::PerDay {
                high_balance: false,
                ..
            }) => (429, "free_per_day"),
            Verdict::FreeTier(Refusal::PerDay {
                high_balance: true, ..
            }) => (429, "free_per_day_high_balance"),
            Verdict::GroqLimited(_, GroqRefusal::PerDay { .. }) => (429, "groq_rpd"),
            Verdict::GroqLimited(_, GroqRefusal::PerMinute { .. }) => (429, "groq_rpm"),
            Verdict::GeminiLimited(r) if r.per_day => (429, "gemini_per_day"),
            Verdict::GeminiLimited(_) => (429, "gemini_per_minute"),
            Verdict::GenericLimited(_) => (429, "generic_rpm"),
            Verdict::Serve(None) => (200, "ok"),
            Verdict::Serve(Some(f)) => (f.kind.status(), f.kind.name()),
        };
        // Only OpenRouter states what an answer cost; the others are priced by their clients.
        let cost = (provider == Provider::OpenRouter).then(|| {
            st.prices
                .cost(model, turn.prompt_tokens, turn.completion_tokens)
        });
        let charged = match &verdict {
            Verdict::Serve(None) => cost,
            Verdict::Serve(Some(f)) if f.kind.answers_whole() => cost,
            _ => None,
        };
        let call = Logged {
            model,
            key,
            provider,
            status,
            variant,
            stream: req.stream,
            max_tokens: req.max_tokens,
            cost_usd: charged.map(Cost::total),
            traceparent,
        };
        st.log.push(now_ms, call);
        Admission {
            now_ms,
            config,
            cost,
            stated,
            verdict,
        }
    }

    /// Logs a request refused before admission (no key, unreadable body).
    pub(crate) fn log_rejected(
        &self,
        provider: Option<Provider>,
        key: &str,
        status: u16,
        variant: &'static str,
    ) {
        let mut st = self.lock();
        let now_ms = st.clock.now_ms();
        let provider = provider.unwrap_or(st.config.mode.provider());
        let call = Logged {
            model: "",
            key,
            provider,
            status,
            variant,
            stream: false,
            max_tokens: None,
            cost_usd: None,
            traceparent: None,
        };
        st.log.push(now_ms, call);
    }

    /// `(used, limit, high_balance)` of the key's free-model day, for `GET /key`; the read is
    /// counted so tests can see how often clients poll it.
    pub(crate) fn read_key(&self, key: &str) -> (u32, u32, bool) {
        let mut st = self.lock();
        st.key_reads += 1;
        let used = st.accounts.free_used_today(key, st.clock.now_ms());
        (used, st.config.free_daily_limit(), st.config.high_balance)
    }

    pub(crate) fn add_fault(&self, spec: FaultSpec) -> u64 {
        self.lock().faults.push(spec)
    }

    pub(crate) fn faults(&self) -> Vec<PendingFault> {
        self.lock().faults.list()
    }

    pub(crate) fn clear_faults(&self) -> usize {
        self.lock().faults.clear()
    }

    pub(crate) fn calls(&self, since_ms: u64) -> Vec<CallRecord> {
        self.lock().log.since(since_ms)
    }

    /// Forgets counters, faults, the log and the clock offset; the settings stay.
    pub(crate) fn reset(&self) {
        let mut st = self.lock();
        st.accounts.clear();
        st.faults.clear();
        st.log.clear();
        st.key_reads = 0;
        st.clock.reset();
    }

    pub(crate) fn key_reads(&self) -> u64 {
        self.lock().key_reads
    }

    pub(crate) fn advance_clock(&self, ms: u64) -> u64 {
        self.lock().clock.advance(ms)
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.lock().clock.now_ms()
    }

    pub(crate) fn config(&self) -> SimConfig {
        self.lock().config
    }

    /// Every price in force, the default under `*`.
    pub(crate) fn prices(&self) -> BTreeMap<String, Price> {
        self.lock().prices.list()
    }

    /// Sets the prices of `models` (all or none: the first invalid one leaves every price as
    /// it was); returns the prices now in force.
    pub(crate) fn set_prices<'a>(
        &self,
        models: impl IntoIterator<Item = (&'a str, Price)>,
    ) -> Result<BTreeMap<String, Price>, String> {
        let mut st = self.lock();
        let mut next = st.prices.clone();
        for (model, price) in models {
            next.set(model, price)?;
        }
        st.prices = next;
        Ok(st.prices.list())
    }

    pub(crate) fn patch_config(&self, patch: &ConfigPatch) -> Result<SimConfig, String> {
        let mut st = self.lock();
        let next = patch.applied_to(&st.config)?;
        st.config = next;
        Ok(next)
    }
}
