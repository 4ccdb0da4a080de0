//! One attempt: count it, make the call, relay its text, and on failure classify it, write the
//! rest it calls for and log it (docs/design.md §2.1, §3, §5).
//!
//! Each attempt runs in a tracing span `attempt` whose fields are the attempt log's (recorded
//! once the call is over), so a log line explains a failover as the stored record does; the
//! fleet's counters ([`crate::metrics`]) count the call and any rest it wrote.

use super::pace::Taken;
use super::spend::Held;
use super::{Engine, EngineError, Run};
use crate::classify::{self, Classification, RestScope, Verdict};
use crate::events::Event;
use crate::lease::LEASE_RENEWAL;
use crate::metrics;
use crate::pace::{Headroom, Refusal, Seen};
use crate::provider::{CallError, ChatRequest, Completion, Deltas, Target, TransportError};
use crate::rest::Probe;
use crate::route::Route;
use crate::run::{AttemptRecord, Code};
use crate::store::Attached;
use tracing::Instrument;
use tracing::field::Empty;

/// A failed attempt, classified, with its rest already written.
pub(crate) struct Failure {
    pub error: CallError,
    pub class: Classification,
}

impl Failure {
    /// A rate-limit error inside a 200 after something was emitted (text of this call, or
    /// output of the run's earlier steps): the run ends `interrupted` and nothing rests
    /// (docs/design.md §2.3). Before that it is read as the 429 it stands for.
    pub(crate) fn is_mid_stream_rate_limit(&self, emitted: bool) -> bool {
        matches!(&self.error, CallError::InBand { error, partial }
            if error.is_rate_limit() && (emitted || !partial.is_empty()))
    }
}

/// Why an attempt gave no completion.
pub(crate) enum Miss {
    /// The call was made and failed: classified, its rest written.
    Failed(Box<Failure>),
    /// No call was made: the route has no key this run may use (a deleted connection, another
    /// user's, a provider without its key). That is no provider's answer, so nothing is counted,
    /// classified or rested: the route is skipped for this run.
    NoKey,
    /// No call was made: the route closed since the closures were read (its pool has no slot,
    /// or another call is probing it) until this closure ends.
    Closed(crate::rest::Closure),
    /// The run's deadline passed: before the call (none was made), or during it (it was cut,
    /// and its attempt logged `deadline_exceeded`). No route is to blame; the run ends.
    Deadline,
}

/// A counted attempt, ready to be made.
struct Call<'m> {
    index: usize,
    step: u32,
    n: u32,
    target: Target,
    messages: &'m [crate::chat::Message],
    stream: bool,
    /// The probe this call claimed, if it is the fleet's probe of the route.
    probe: Option<String>,
    /// The tokens the call was admitted with.
    tokens: u32,
    /// When its slot was counted, if it was counted for this call.
    admitted_ms: Option<u64>,
    /// What is held of its tenant's and its run's spend for it.
    held: Held,
}

impl Engine {
    /// Make one call on route `index` for `step`. The attempt is counted and saved before the
    /// call. Text deltas are published as they arrive when `stream` is set.
    pub(crate) async fn attempt(
        &self,
        run: &mut Run<'_>,
        index: usize,
        step: u32,
        messages: &[crate::chat::Message],
        stream: bool,
    ) -> Result<Result<Completion, Miss>, EngineError> {
        // docs/design.md §2.1: no call starts past the deadline (a failover, a retry's pause or
        // a later step may reach it).
        if self.clock.now_ms() >= run.job.deadline_ms {
            return Ok(Err(Miss::Deadline));
        }
        let route = &run.routes[index];
        let target = match self.targets.target(route, &run.job.request.user_id).await {
            Ok(target) => target,
            Err(missing) if missing.is_missing_key() => {
                tracing::warn!(route = %route.key(), reason = %missing, "skipping a route: no key this run may use");
                return Ok(Err(Miss::NoKey));
            }
            // Keys that cannot be read are the fleet's fault, not the route's: the run stops
            // before the attempt is counted, so its redelivery still has the call it never made.
            // What the run did before (an answer waiting for this call's save, before a summary)
            // is kept.
            Err(unavailable) => {
                if !run.unsaved.is_empty() {
                    self.save(run).await?;
                }
                return Err(unavailable.into());
            }
        };
        if let Some(by) = self.fleet.leases.cancelled_by(&run.rec.run_id).await? {
            return Err(EngineError::Cancelled { by });
        }
        // docs/design.md §6: an answer is paid for once. An executor whose lease another holds
        // now (it was thought gone) makes no more calls; one whose lease Redis forgot takes it
        // back, so the reconciler does not hand the run to another meanwhile. A lease confirmed
        // less than a renewal period ago cannot be another's (it lives three periods), so that
        // call asks Redis nothing: most runs make their one call right after taking it.
        let now_ms = self.clock.now_ms();
        if now_ms.saturating_sub(run.lease_confirmed_ms) >= LEASE_RENEWAL.as_millis() as u64 {
            if !self.fleet.leases.renew(&run.rec.run_id, run.owner).await? {
                return Err(EngineError::LeaseLost);
            }
            run.lease_confirmed_ms = now_ms;
        }
        // docs/design.md §4.8: a priced call is made only once what it may cost is held.
        let held = match self.hold_spend(run, route).await? {
            Ok(held) => held,
            Err(capped) => return Ok(Err(Miss::Closed(capped))),
        };
        // docs/design.md §3.3: after a guessed rest, one call fleet-wide goes first. A
        // continuation tries once whatever rests, so it neither waits for a probe nor is one.
        let owner = format!("{}:{}", run.rec.run_id, run.rec.state.counters.calls + 1);
        let probe = match run.job.is_continuation() {
            true => None,
            false => match self.fleet.rests.claim_probes(route, &owner).await? {
                Probe::Held(probing) => return Ok(Err(Miss::Closed(probing))),
                Probe::Claimed => Some(owner),
                Probe::NotDue => None,
            },
        };
        let taken = self.take_slot(run, route).await?;
        let admitted_ms = match taken {
            Taken::Admitted { at_ms } => Some(at_ms),
            Taken::Unpaced | Taken::Held => None,
            Taken::Full(full) => {
                if let Some(owner) = &probe {
                    self.fleet
                        .rests
                        .probes_answered(route, owner, false)
                        .await?;
                }
                return Ok(Err(Miss::Closed(full)));
            }
        };
        let counters = &mut run.rec.state.counters;
        counters.calls += 1;
        if step == 1 {
            counters.step1_attempts += 1;
        }
        let n = counters.calls;
        let span = tracing::info_span!(
            "attempt",
            n,
            step,
            route = %route.key(),
            status = Empty,
            verdict = Empty,
            latency_ms = Empty,
            retry_hint_ms = Empty,
            ratelimit_remaining = Empty,
            provider_name = Empty,
            error = Empty,
        );
        let call = Call {
            index,
            step,
            n,
            target,
            messages,
            stream,
            probe,
            tokens: run.tokens,
            admitted_ms,
            held,
        };
        self.attempt_numbered(run, call).instrument(span).await
    }

    /// [`Engine::attempt`] once the attempt is counted, inside its span.
    async fn attempt_numbered(
        &self,
        run: &mut Run<'_>,
        call: Call<'_>,
    ) -> Result<Result<Completion, Miss>, EngineError> {
        let Call {
            index,
            step,
            n,
            target,
            messages,
            stream,
            probe,
            tokens,
            admitted_ms,
            held,
        } = call;
        let route = &run.routes[index];
        // Counted and logged `lost` before the call: if this executor dies during it, the log
        // still has the attempt; how the call ended replaces the record.
        let lost = AttemptRecord::lost(&run.rec.run_id, n, step, route.key(), self.clock.now_ms());
        run.unsaved.push(Attached::Attempt(lost));
        self.save(run).await?;
        self.publish(
            run,
            Event::Attempt {
                n,
                step,
                route: route.key(),
            },
        )
        .await?;

        let started = self.clock.now_ms();
        let request = ChatRequest {
            model: route.model.clone(),
            messages: messages.to_vec(),
            tools: run.job.request.tools.clone(),
            stream,
            max_tokens: run.job.request.max_tokens,
            ask_cost: self.asks_cost(route),
        };
        let result = self.call_relaying(run, &target, &request).await;
        let finished = self.clock.now_ms();
        if let Some(at_ms) = admitted_ms {
            self.slot_used(route, at_ms, tokens).await?;
        }
        let user = Some(run.job.request.user_id.as_str());
        self.note_answer(route, tokens, &result, user).await?;
        let cost_usd = self.settle_spend(run, route, held, &result).await?;
        let mut record = AttemptRecord {
            latency_ms: finished.saturating_sub(started),
            cost_usd,
            ..AttemptRecord::succeeded(&run.rec.run_id, n, step, route.key(), started)
        };
        let outcome = match result {
            Ok(c) => {
                record.ratelimit_remaining = c.ratelimit_remaining;
                record.provider_name = c.provider_name.clone();
                Ok(c)
            }
            Err(CallError::Transport(TransportError::Deadline)) => {
                record.error = Some(Code::DeadlineExceeded.as_str().to_string());
                Err(Miss::Deadline)
            }
            Err(error) => {
                let class = classify::classify(&error, route, finished);
                record_failure(&mut record, &error, &class, &target.api_key);
                let failure = Failure { error, class };
                self.write_rests(run, index, &record, &failure).await?;
                Err(Miss::Failed(Box::new(failure)))
            }
        };
        // A failure's flags (an ambiguous stop, the route's state) are saved at once; a success's
        // attempt rides on the next save, which follows within the step.
        let failed = outcome.is_err();
        if let Some(owner) = &probe {
            self.fleet
                .rests
                .probes_answered(route, owner, !failed)
                .await?;
        }
        run.unsaved.push(Attached::Attempt(record.clone()));
        if failed {
            self.save(run).await?;
        }
        log_attempt(&record);
        let outcome_label = record.verdict.map_or(metrics::OK, Verdict::as_str);
        let at_ms = record.t_ms + record.latency_ms;
        let call = metrics::call(
            &route.metrics_label(&self.catalog),
            outcome_label,
            record.latency_ms,
            at_ms,
        );
        self.fleet.metrics.add(call).await;
        Ok(outcome)
    }

    /// Call the provider while publishing its text deltas as `delta` events. Publishing is
    /// best-effort here: a Redis error must not abandon a call that is being paid for. The answer
    /// is stored with the run, where a reader that missed the deltas finds it.
    async fn call_relaying(
        &self,
        run: &mut Run<'_>,
        target: &crate::provider::Target,
        request: &ChatRequest,
    ) -> Result<Completion, CallError> {
        let deltas = Deltas::default();
        let call = self.provider.call(target, request, &deltas);
        tokio::pin!(call);
        // The deadline bounds the call itself: a provider that trickles a byte a second would
        // otherwise hold the run for the call's own timeouts (minutes), then fail over.
        let left_ms = run.job.deadline_ms.saturating_sub(self.clock.now_ms());
        let deadline = tokio::time::sleep(std::time::Duration::from_millis(left_ms));
        tokio::pin!(deadline);
        let result = loop {
            tokio::select! {
                biased;
                text = deltas.next() => self.relay_delta(run, text).await,
                result = &mut call => break result,
                () = &mut deadline => break Err(CallError::Transport(TransportError::Deadline)),
            }
        };
        if let Some(text) = deltas.take() {
            self.relay_delta(run, text).await;
        }
        result
    }

    async fn relay_delta(&self, run: &mut Run<'_>, text: String) {
        if let Err(error) = self.publish(run, Event::Delta { text }).await {
            tracing::warn!(run_id = %run.rec.run_id, %error, "a delta could not be published; the call goes on");
        }
    }

    /// What an answer tells the route's pool: the tokens it spent in place of the estimate
    /// (`tokens`) it was admitted with (a refusal spent none), and its headroom. `user` is whose
    /// run made the call (none for a canary).
    pub(super) async fn note_answer(
        &self,
        route: &Route,
        tokens: u32,
        result: &Result<Completion, CallError>,
        user: Option<&str>,
    ) -> Result<(), EngineError> {
        let spent = match result {
            Ok(c) => c.usage.map(|u| u.total_tokens),
            Err(CallError::Http { .. }) => Some(0),
            Err(_) => None,
        };
        self.tokens_spent(route, tokens, spent).await?;
        match result {
            Ok(c) => {
                self.learn_served(route, c).await?;
                self.spend_headroom(route, c, user).await
            }
            Err(_) => Ok(()),
        }
    }

    /// docs/design.md §4.5: an answer that says no request is left until a known reset closes
    /// the route until then (its pool, when it spends one), so the next call is not a 429.
    async fn spend_headroom(
        &self,
        route: &Route,
        c: &Completion,
        user: Option<&str>,
    ) -> Result<(), EngineError> {
        if let (Some(pool), Some(remaining)) = (&route.pool, c.ratelimit_remaining) {
            let now = self.clock.now_ms();
            let seen = Seen::Headroom(Headroom {
                remaining,
                t_ms: now,
                resets_at_ms: c.ratelimit_reset_ms.map(|ms| now + ms),
            });
            self.fleet.pace.saw(pool, seen).await?;
        }
        let (Some(0), Some(reset_ms)) = (c.ratelimit_remaining, c.ratelimit_reset_ms) else {
            return Ok(());
        };
        let scope = match &route.pool {
            Some(pool) => RestScope::Pool(pool.clone()),
            None => RestScope::Route {
                pool: None,
                route_key: route.key(),
            },
        };
        let reason = format!(
            "headroom: no request left on {} until its reset",
            route.key()
        );
        let length = classify::RestLength::For(reset_ms);
        self.rest_route(route, &scope, length, &reason, user)
            .await?;
        let rest = metrics::rest(scope_name(&scope), "headroom");
        self.fleet.metrics.add(rest).await;
        Ok(())
    }

    /// Write what the classification calls for. A mid-stream rate limit rests nothing and records
    /// no evidence (docs/design.md §2.3).
    async fn write_rests(
        &self,
        run: &mut Run<'_>,
        index: usize,
        record: &AttemptRecord,
        failure: &Failure,
    ) -> Result<(), EngineError> {
        if failure.is_mid_stream_rate_limit(run.rec.state.emitted) {
            return Ok(());
        }
        let class = &failure.class;
        let route = &run.routes[index];
        let user = Some(run.job.request.user_id.as_str());
        self.write_rest(route, record, &failure.error, class, user)
            .await?;
        if class.evidence
            && let Some(pool) = &route.pool
        {
            let unique = format!("{}-{}", run.rec.run_id, run.rec.state.counters.calls);
            let corroborated = self
                .fleet
                .rests
                .record_evidence(pool, &run.job.request.user_id, &unique)
                .await?;
            if corroborated.is_some() {
                let rest = metrics::rest("pool", Verdict::Ambiguous.as_str());
                self.fleet.metrics.add(rest).await;
            }
        }
        if class.verdict == Verdict::Ambiguous && route.is_shared() {
            run.rec.state.ambiguous_stop = true;
        }
        Ok(())
    }
}

impl Engine {
    /// Write the rest a failed call on `route` calls for, and count it; the pool's own limit
    /// refusing a call is learned from, and one its limiter admitted is a pacing miss. A 429 on
    /// a pool's route is kept as the pool's last. `user` is whose run made the call (none for
    /// a canary).
    pub(super) async fn write_rest(
        &self,
        route: &Route,
        record: &AttemptRecord,
        error: &CallError,
        class: &Classification,
        user: Option<&str>,
    ) -> Result<(), EngineError> {
        if let (Some(pool), Some(429)) = (&route.pool, record.http_status) {
            let seen = Seen::Refusal(Refusal {
                t_ms: record.t_ms + record.latency_ms,
                route: route.key(),
                verdict: class.verdict.as_str().to_string(),
            });
            self.fleet.pace.saw(pool, seen).await?;
        }
        let (Some(length), false) = (class.length, class.scope == RestScope::None) else {
            return Ok(());
        };
        let reason = format!(
            "{} on {} ({})",
            class.verdict.as_str(),
            route.key(),
            class.rule
        );
        self.rest_route(route, &class.scope, length, &reason, user)
            .await?;
        let rest = metrics::rest(scope_name(&class.scope), class.verdict.as_str());
        self.fleet.metrics.add(rest).await;
        self.pool_refused(route, error, class).await
    }

    /// Rest `scope` for a call on `route`: a route rest of a route the configuration does not
    /// name counts against `user`, whose run earned it, and is bounded
    /// ([`crate::rest::Rests::write_unnamed`]).
    async fn rest_route(
        &self,
        route: &Route,
        scope: &RestScope,
        length: classify::RestLength,
        reason: &str,
        user: Option<&str>,
    ) -> Result<(), EngineError> {
        let rests = &self.fleet.rests;
        match user {
            Some(user)
                if matches!(scope, RestScope::Route { .. })
                    && !route.is_configured(&self.catalog) =>
            {
                rests.write_unnamed(scope, length, reason, user).await?
            }
            _ => rests.write(scope, length, reason).await?,
        };
        Ok(())
    }
}

/// Fill in how a failed call ended: its status (an in-band error came in a 200), the error,
/// and what the classification read from it.
pub(super) fn record_failure(
    record: &mut AttemptRecord,
    error: &CallError,
    class: &Classification,
    key: &crate::provider::ApiKey,
) {
    record.http_status = match error {
        CallError::Http { status, .. } => Some(*status),
        CallError::InBand { .. } => Some(200),
        CallError::Transport(_) => None,
    };
    record.error = Some(crate::text::cut(
        &error.detail(key),
        crate::text::MAX_ERROR_BYTES,
    ));
    record.verdict = Some(class.verdict);
    record.retry_hint_ms = class.retry_hint_ms;
    record.ratelimit_remaining = class.ratelimit_remaining;
    record.provider_name = class.provider_name.clone();
}

/// The scope label of a rest, as `/v1/rests` and the metrics name it.
fn scope_name(scope: &RestScope) -> &'static str {
    match scope {
        RestScope::Pool(_) => "pool",
        RestScope::Route { .. } => "route",
        RestScope::Connection(_) => "connection",
        RestScope::None => "none",
    }
}

/// Put the attempt log's fields on the current (attempt) span and log the attempt once inside
/// it. Nothing here can hold a key: the record carries statuses, names and numbers, and the
/// error text is the provider's message, never a request header.
fn log_attempt(record: &AttemptRecord) {
    let span = tracing::Span::current();
    if let Some(status) = record.http_status {
        span.record("status", status);
    }
    if let Some(verdict) = record.verdict {
        span.record("verdict", verdict.as_str());
    }
    span.record("latency_ms", record.latency_ms);
    if let Some(ms) = record.retry_hint_ms {
        span.record("retry_hint_ms", ms);
    }
    if let Some(remaining) = record.ratelimit_remaining {
        span.record("ratelimit_remaining", remaining);
    }
    if let Some(name) = &record.provider_name {
        span.record("provider_name", name.as_str());
    }
    if let Some(error) = &record.error {
        span.record("error", error.as_str());
        tracing::info!("attempt failed");
    } else {
        tracing::info!("attempt succeeded");
    }
}
