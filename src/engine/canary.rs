//! The engine's side of canaries (docs/design.md §4.6): a provider's canary is one call like any
//! other (a slot of its pool's limiter, classified, the rests it calls for written, counted), of
//! no run: it is the smallest request there is (`max_tokens` 1), streams nothing, and goes into
//! the attempt log as kind `canary`.

use super::attempt::record_failure;
use super::{Engine, EngineError};
use crate::canary::{Canary, CanaryRecord};
use crate::chat::Message;
use crate::classify::{self, Verdict};
use crate::metrics;
use crate::pace::Slot;
use crate::provider::ChatRequest;
use crate::route::Route;
use crate::run::AttemptRecord;

/// The whole of a canary's request: one short user message, one token of answer.
const PROMPT: &str = "Reply with OK.";

/// What a canary is expected to spend of a pool that counts tokens.
fn canary_tokens() -> u32 {
    crate::pace::estimate_tokens(PROMPT.len(), Some(1))
}

impl Engine {
    /// One round of the fleet's canaries, safe on every replica at once: each canary whose
    /// period ended is sent by exactly one replica. A canary whose route is closed (a rest, a
    /// full pool) waits for a later round instead of spending its period unsent. Returns the
    /// canaries this replica sent.
    pub async fn canaries(&self, plan: &[Canary]) -> Result<Vec<CanaryRecord>, EngineError> {
        let mut sent = Vec::new();
        for canary in plan {
            if !self.is_open(&canary.route).await? {
                continue;
            }
            let turn = format!("canary:{}", canary.provider);
            if !self.fleet.leases.take_period(&turn, canary.every).await? {
                continue;
            }
            if let Some(record) = self.canary(canary).await? {
                sent.push(record);
            }
        }
        Ok(sent)
    }

    /// Whether a call on `route` would be made now: no rest closes it and its pool has a slot.
    async fn is_open(&self, route: &Route) -> Result<bool, EngineError> {
        let closures = self
            .fleet
            .rests
            .closures(std::slice::from_ref(route))
            .await?;
        if closures.iter().any(Option::is_some) {
            return Ok(false);
        }
        let (Some(pool), Some(limits)) = (&route.pool, &route.pace) else {
            return Ok(true);
        };
        let slot = self
            .fleet
            .pace
            .peek(pool, limits, self.day_end(route), canary_tokens())
            .await?;
        Ok(slot == Slot::Now)
    }

    /// Send `canary`'s call and record what it found; `None` when no call was made (no platform
    /// key for the provider, or its pool filled since the round looked).
    async fn canary(&self, canary: &Canary) -> Result<Option<CanaryRecord>, EngineError> {
        let route = &canary.route;
        let target = match self.targets.target(route, "").await {
            Ok(target) => target,
            Err(error) => {
                tracing::warn!(provider = %canary.provider, %error, "no canary this period: no platform key for the provider");
                return Ok(None);
            }
        };
        if let (Some(pool), Some(limits)) = (&route.pool, &route.pace)
            && self
                .fleet
                .pace
                .admit(pool, limits, self.day_end(route), canary_tokens())
                .await?
                != Slot::Now
        {
            tracing::info!(provider = %canary.provider, %pool, "no canary this period: its pool filled");
            return Ok(None);
        }
        let request = ChatRequest {
            model: route.model.clone(),
            messages: vec![Message::user(PROMPT)],
            tools: Vec::new(),
            stream: false,
            max_tokens: Some(1),
            ask_cost: false,
        };
        let started = self.clock.now_ms();
        let deltas = crate::provider::Deltas::default();
        let result = self.provider.call(&target, &request, &deltas).await;
        let finished = self.clock.now_ms();
        self.note_answer(route, canary_tokens(), &result, None)
            .await?;
        let run_id = CanaryRecord::run_id(&canary.provider, started);
        let mut attempt = AttemptRecord {
            latency_ms: finished.saturating_sub(started),
            ..AttemptRecord::succeeded(&run_id, 1, 0, route.key(), started)
        };
        match result {
            Ok(c) => {
                attempt.ratelimit_remaining = c.ratelimit_remaining;
                attempt.provider_name = c.provider_name.clone();
            }
            Err(error) => {
                let class = classify::classify(&error, route, finished);
                record_failure(&mut attempt, &error, &class, &target.api_key);
                self.write_rest(route, &attempt, &error, &class, None)
                    .await?;
            }
        }
        let outcome = attempt.verdict.map_or(metrics::OK, Verdict::as_str);
        let at_ms = attempt.t_ms + attempt.latency_ms;
        let call = metrics::call(
            &route.metrics_label(&self.catalog),
            outcome,
            attempt.latency_ms,
            at_ms,
        );
        self.fleet.metrics.add(call).await;
        let record = CanaryRecord {
            provider: canary.provider.clone(),
            attempt,
        };
        self.store.record_canary(&record).await?;
        let a = &record.attempt;
        if let Some(verdict) = a.verdict {
            let failure = metrics::canary_failure(&canary.provider, verdict.as_str());
            self.fleet.metrics.add(failure).await;
            tracing::warn!(
                provider = %canary.provider,
                route = %a.route,
                status = ?a.http_status,
                verdict = verdict.as_str(),
                latency_ms = a.latency_ms,
                error = a.error.as_deref().unwrap_or(""),
                "the canary failed"
            );
        } else {
            tracing::info!(provider = %canary.provider, route = %a.route, latency_ms = a.latency_ms, ratelimit_remaining = ?a.ratelimit_remaining, "the canary answered");
        }
        Ok(Some(record))
    }
}
