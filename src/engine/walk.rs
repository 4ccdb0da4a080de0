//! Step 1 walks the chain (docs/design.md §2.2); later steps stay on the route step 1 found
//! (docs/design.md §2.3).

use super::attempt::{Failure, Miss};
use super::{Engine, EngineError, RETRY_PAUSE_MS, Run, Stop, WhenResting};
use crate::chat::Message;
use crate::classify::{RestScope, Verdict};
use crate::events::Event;
use crate::preflight::Preflight;
use crate::provider::{CallError, Completion};
use crate::rest::Closure;
use crate::rest::RestKind;
use crate::run::Code;
use crate::store::Attached;
use std::time::Duration;

impl Engine {
    /// Step 1: call the first open route; on failure, fail over while attempts remain and nothing
    /// was emitted. A chain exhausted only by rate limits snoozes instead of failing.
    pub(crate) async fn walk(
        &self,
        run: &mut Run<'_>,
        messages: &[Message],
        when_resting: WhenResting,
    ) -> Result<Result<Completion, Stop>, EngineError> {
        if run.job.is_continuation() {
            return self.continuation_step(run, messages).await;
        }
        // Routes that failed in this delivery without a rest are not called twice, except by the
        // one-route retry.
        let mut tried = vec![false; run.routes.len()];
        let mut failures: Vec<Verdict> = Vec::new();
        // Routes skipped because they have no key this run may use: they never reopen by waiting.
        let mut keyless = false;
        let mut retry_next = false;
        // Pre-flight has just read the chain's closures; after a failure they are read again
        // once, for both the failover event and the next pick.
        let mut closures = match run.preflight_closures.take() {
            Some(c) => c,
            None => self.closures(run).await?,
        };
        loop {
            if run.rec.state.counters.step1_attempts >= run.budget.step1_attempts {
                return Ok(Err(Stop::End(exhausted_code(&failures))));
            }
            let open = |i: usize| closures[i].is_none() && !tried[i];
            let index = if retry_next {
                Some(0)
            } else {
                let first_open = (0..run.routes.len()).find(|&i| open(i));
                let before = first_open.unwrap_or(run.routes.len());
                match self.wait_in_place(run, &closures, &tried, before).await? {
                    Some(waited) => {
                        closures[waited] = None;
                        Some(waited)
                    }
                    None => first_open,
                }
            };
            retry_next = false;
            let Some(index) = index else {
                let only_rate_limits = failures.iter().all(|v| v.is_rate_limit());
                if only_rate_limits
                    && !run.rec.state.emitted
                    && !run.rec.state.ambiguous_stop_only(&closures)
                {
                    // A route tried in this delivery without a rest (one without a key) is
                    // closed to it for good: nothing to wait for there.
                    let closed: Vec<Option<Closure>> = closures
                        .iter()
                        .zip(&tried)
                        .map(|(c, &tried)| match c {
                            None if tried => Some(Closure::forever("tried in this delivery")),
                            c => c.clone(),
                        })
                        .collect();
                    let routes = run.routes;
                    let decided = self.decide(routes, &closed, run, when_resting);
                    return Ok(Err(
                        match self.hold_slot(run, routes, &closed, decided).await? {
                            Preflight::Closed if keyless && failures.is_empty() => {
                                Stop::End(Code::ConnectionMissing)
                            }
                            decided => Stop::of(decided),
                        },
                    ));
                }
                return Ok(Err(Stop::End(exhausted_code(&failures))));
            };
            let failure = match self.attempt(run, index, 1, messages, true).await? {
                Ok(c) => {
                    run.rec.state.route_index = Some(index);
                    return Ok(Ok(c));
                }
                Err(Miss::NoKey) => {
                    tried[index] = true;
                    keyless = true;
                    continue;
                }
                Err(Miss::Closed(full)) => {
                    // Another replica took the pool's last slot, or is probing the route, since
                    // the closures were read.
                    closures[index] = Some(full);
                    continue;
                }
                Err(Miss::Deadline) => return Ok(Err(Stop::End(Code::DeadlineExceeded))),
                Err(Miss::Failed(f)) => *f,
            };
            if let Some(stop) = self.stop_after_failure(run, &failure) {
                return Ok(Err(stop));
            }
            let verdict = failure.class.verdict;
            failures.push(verdict);
            tried[index] = true;
            if self.may_retry_one_route(run, verdict).await? {
                run.rec.state.counters.retried = true;
                self.save(run).await?;
                let pause = self.clock.jitter_ms(RETRY_PAUSE_MS.0, RETRY_PAUSE_MS.1);
                self.clock.sleep(Duration::from_millis(pause)).await;
                retry_next = true;
                continue;
            }
            closures = self.closures(run).await?;
            let next = (0..run.routes.len()).find(|&i| closures[i].is_none() && !tried[i]);
            let has_attempts = run.rec.state.counters.step1_attempts < run.budget.step1_attempts;
            let event = Event::Failover {
                from: run.routes[index].key(),
                to: next.filter(|_| has_attempts).map(|i| run.routes[i].key()),
                verdict,
            };
            self.publish(run, event).await?;
        }
    }

    /// A continuation tries once: the first route whose connection has no open circuit, rests
    /// ignored; no failover, no retry (docs/design.md §2.4).
    async fn continuation_step(
        &self,
        run: &mut Run<'_>,
        messages: &[Message],
    ) -> Result<Result<Completion, Stop>, EngineError> {
        if run.rec.state.counters.step1_attempts >= 1 {
            return Ok(Err(Stop::End(Code::RoutesExhausted)));
        }
        let closures = self.fleet.rests.closures(run.routes).await?;
        let usable = |i: usize| !matches!(&closures[i], Some(c) if c.kind == RestKind::Circuit);
        let Some(index) = (0..run.routes.len()).find(|&i| usable(i)) else {
            return Ok(Err(Stop::End(Code::AuthFailed)));
        };
        match self.attempt(run, index, 1, messages, true).await? {
            Ok(c) => {
                run.rec.state.route_index = Some(index);
                Ok(Ok(c))
            }
            Err(Miss::NoKey) => Ok(Err(Stop::End(Code::ConnectionMissing))),
            // A continuation is never paced out.
            Err(Miss::Closed(_)) => Ok(Err(Stop::End(Code::RoutesExhausted))),
            Err(Miss::Deadline) => Ok(Err(Stop::End(Code::DeadlineExceeded))),
            Err(Miss::Failed(failure)) => Ok(Err(self
                .stop_after_failure(run, &failure)
                .unwrap_or_else(|| Stop::End(Code::for_verdict(failure.class.verdict))))),
        }
    }

    /// A later step: never call into a closed route (snooze until it reopens); any failure ends
    /// the run.
    pub(crate) async fn later_step(
        &self,
        run: &mut Run<'_>,
        messages: &[Message],
        when_resting: WhenResting,
    ) -> Result<Result<Completion, Stop>, EngineError> {
        let Some(index) = run.rec.state.route_index else {
            return Ok(Err(Stop::End(Code::RoutesExhausted)));
        };
        let route = &run.routes[index..=index];
        let mut closures = self.fleet.rests.closures(route).await?;
        self.pace_closures(run, route, &mut closures).await?;
        if let Some(stop) = self.wait_on(run, route, &closures, when_resting).await? {
            return Ok(Err(stop));
        }
        let step = run.rec.state.counters.steps + 1;
        match self.attempt(run, index, step, messages, true).await? {
            Ok(c) => Ok(Ok(c)),
            Err(Miss::NoKey) => Ok(Err(Stop::End(Code::ConnectionMissing))),
            Err(Miss::Closed(full)) => {
                let closures = [Some(full)];
                let stop = self.wait_on(run, route, &closures, when_resting).await?;
                Ok(Err(stop.unwrap_or(Stop::End(Code::RoutesExhausted))))
            }
            Err(Miss::Deadline) => Ok(Err(Stop::End(Code::DeadlineExceeded))),
            Err(Miss::Failed(failure)) => Ok(Err(self
                .stop_after_failure(run, &failure)
                .unwrap_or_else(|| Stop::End(Code::for_verdict(failure.class.verdict))))),
        }
    }

    /// A later step's route closed: wait for it (holding a slot when it is its pool's), or end
    /// the run when the wait would pass the deadline. `None` when it is open.
    async fn wait_on(
        &self,
        run: &mut Run<'_>,
        route: &[crate::route::Route],
        closures: &[Option<Closure>],
        when_resting: WhenResting,
    ) -> Result<Option<Stop>, EngineError> {
        let decided = self.decide(route, closures, run, when_resting);
        Ok(match self.hold_slot(run, route, closures, decided).await? {
            Preflight::Open => None,
            Preflight::Wait { until_ms, reason } => Some(Stop::Snooze { until_ms, reason }),
            Preflight::Refuse {
                code: Code::SpendCapReached,
                ..
            } => Some(Stop::End(Code::SpendCapReached)),
            Preflight::Refuse { .. } | Preflight::Closed => Some(Stop::End(Code::DeadlineExceeded)),
        })
    }

    /// Failures that end the run whatever remains of the chain: a mid-stream rate limit, and any
    /// failure after output was emitted (partial output stays, marked incomplete).
    fn stop_after_failure(&self, run: &mut Run<'_>, failure: &Failure) -> Option<Stop> {
        if failure.is_mid_stream_rate_limit(run.rec.state.emitted) {
            keep_partial(run, &failure.error);
            return Some(Stop::End(Code::Interrupted));
        }
        if run.rec.state.emitted {
            keep_partial(run, &failure.error);
            return Some(Stop::End(Code::for_verdict(failure.class.verdict)));
        }
        None
    }

    /// docs/design.md §2.2, rule 5: one retry for a one-route chain, on a 5xx or network
    /// failure, when the pool (for a shared route) is not resting. Never for `complete` (its
    /// budget has no retry).
    async fn may_retry_one_route(
        &self,
        run: &Run<'_>,
        verdict: Verdict,
    ) -> Result<bool, EngineError> {
        let state = &run.rec.state;
        if !run.budget.one_route_retry
            || state.counters.retried
            || verdict != Verdict::Server
            || state.emitted
        {
            return Ok(false);
        }
        if let Some(pool) = &run.routes[0].pool
            && self
                .fleet
                .rests
                .remaining(&RestScope::Pool(pool.clone()))
                .await?
                .is_some()
        {
            return Ok(false);
        }
        Ok(true)
    }
}

/// Keep the text a failed stream produced before it broke off: in the output, and in the
/// transcript as an incomplete assistant turn saved when the run ends (docs/design.md §2.3).
fn keep_partial(run: &mut Run<'_>, error: &CallError) {
    if let CallError::InBand { partial, .. } = error
        && !partial.is_empty()
    {
        run.rec.output.push_str(partial);
        run.unsaved.push(Attached::Message {
            key: "partial".into(),
            message: Message::assistant(Some(partial.clone()), vec![]),
        });
    }
}

impl crate::run::RunState {
    /// Whether the only thing keeping the chain closed is this run's own ambiguous stop: such a
    /// closure never reopens, so waiting would not help.
    fn ambiguous_stop_only(&self, closures: &[Option<crate::rest::Closure>]) -> bool {
        self.ambiguous_stop
            && closures
                .iter()
                .flatten()
                .all(|c| c.remaining_ms == u64::MAX)
    }
}

/// Failures that end a run with a verdict-specific code when they are all a step saw.
fn exhausted_code(failures: &[Verdict]) -> Code {
    let all = |v: Verdict| !failures.is_empty() && failures.iter().all(|f| *f == v);
    if all(Verdict::Client) {
        Code::UpstreamRejected
    } else if all(Verdict::Auth) {
        Code::AuthFailed
    } else if all(Verdict::Billing) {
        Code::PaymentRequired
    } else {
        Code::RoutesExhausted
    }
}
