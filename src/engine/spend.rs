//! The engine's side of spend caps (docs/design.md §4.8): a priced route spends the operator's
//! money (the platform's key, off every free pool; a user's own key is the user's business).
//! Before its call a run reserves what the call may cost in the fleet's ledger, against its
//! tier's daily cap for its tenant and its own `max_usd`; a refused reservation closes the
//! route for the run (no call is made, nothing is spent), and the answer's cost (the
//! provider's own figure, else the configured price of the tokens it reports) replaces the
//! estimate and is recorded on the attempt and the run.

use super::{Engine, EngineError, Run};
use crate::catalog::{Catalog, Price};
use crate::dialect::Dialect;
use crate::error::FleetError;
use crate::job::RunRequest;
use crate::metrics;
use crate::pace::DEFAULT_ANSWER_TOKENS;
use crate::provider::{CallError, Completion};
use crate::rest::{Closure, RestKind};
use crate::route::{Connection, Route};
use crate::spend::{Cap, Caps, Ledger, LedgerId, Reservation, Reserve, Usd};

/// How a priced route's calls are priced.
struct Pricing {
    /// The configured price (`[prices]`), if any.
    price: Option<Price>,
    /// The provider says what a call cost (OpenRouter's usage accounting).
    reported: bool,
}

/// A run's reservation for one call, to be settled by the call's cost.
pub(crate) struct Held(Option<Reservation>);

impl Engine {
    /// Whether the call on `route` asks the provider to say what it cost.
    pub(crate) fn asks_cost(&self, route: &Route) -> bool {
        pricing(&self.catalog, route).is_some_and(|p| p.reported)
    }

    /// Close each open priced route of `routes` whose next call would pass the run's cap or its
    /// tenant's (see [`close_capped_routes`]).
    pub(crate) async fn spend_closures(
        &self,
        run: &Run<'_>,
        routes: &[Route],
        closures: &mut [Option<Closure>],
    ) -> Result<(), EngineError> {
        let spender = Spender {
            request: &run.job.request,
            run_id: &run.job.run_id,
            spent_usd: run.rec.cost_usd,
            tokens: run.tokens,
        };
        let (ledger, now) = (&*self.fleet.spend, self.clock.now_ms());
        close_capped_routes(ledger, &self.catalog, &spender, routes, closures, now).await?;
        Ok(())
    }

    /// Before a call on `route`: hold what it may cost, fleet-wide; `Err` with the closure that
    /// keeps the run off the route when a cap would be passed (no call is made).
    pub(crate) async fn hold_spend(
        &self,
        run: &Run<'_>,
        route: &Route,
    ) -> Result<Result<Held, Closure>, EngineError> {
        let request = &run.job.request;
        let (Some(pricing), Some((tenant, run_id))) = (
            pricing(&self.catalog, route),
            ledger_ids(request, &run.job.run_id),
        ) else {
            return Ok(Ok(Held(None)));
        };
        let caps = caps(&self.catalog, request);
        if caps.tenant.is_none() && caps.run.is_none() {
            // Nothing to hold it against: the call's cost is recorded with its attempt.
            return Ok(Ok(Held(None)));
        }
        let estimate = estimate(&pricing, request, run.tokens);
        let day_end = spend_day_end(&self.catalog, request, self.clock.now_ms());
        match self
            .fleet
            .spend
            .reserve(&tenant, &run_id, day_end, estimate, caps)
            .await?
        {
            Reserve::Granted(reservation) => Ok(Ok(Held(Some(reservation)))),
            Reserve::Refused { which } => {
                tracing::info!(run_id = %run.job.run_id, route = %route.key(), ?which, estimate_usd = estimate.usd(), "spend cap: the priced route is closed to this run");
                let until = match which {
                    Cap::Tenant => day_end.saturating_sub(self.clock.now_ms()),
                    Cap::Run => u64::MAX,
                };
                Ok(Err(capped(which, until)))
            }
        }
    }

    /// After the call on `route`: its cost (the provider's figure, else the configured price of
    /// the tokens it reports; a refusal costs nothing, a broken answer what was held for it)
    /// replaces what was held, and is returned to be recorded.
    pub(crate) async fn settle_spend(
        &self,
        run: &mut Run<'_>,
        route: &Route,
        held: Held,
        result: &Result<Completion, CallError>,
    ) -> Result<f64, EngineError> {
        let Some(pricing) = pricing(&self.catalog, route) else {
            return Ok(0.0);
        };
        let cost = match result {
            Ok(c) => match (c.cost_usd, pricing.price, c.usage) {
                (Some(cost), _, _) => cost,
                (None, Some(price), Some(usage)) => {
                    price.cost_usd(usage.prompt_tokens, usage.completion_tokens)
                }
                _ => held.0.as_ref().map_or(0.0, |r| r.estimate().usd()),
            },
            Err(CallError::Http { .. }) => 0.0,
            Err(_) => held.0.as_ref().map_or(0.0, |r| r.estimate().usd()),
        };
        let usd = Usd::from_usd(cost).unwrap_or(Usd::MAX);
        if let Some(reservation) = &held.0 {
            self.fleet.spend.settle(reservation, usd).await?;
        }
        run.rec.cost_usd += usd.usd();
        if usd > Usd::ZERO {
            let tier = run.job.request.tier_name().to_string();
            let spent = metrics::spend(&tier, &route.provider, usd.nanos());
            self.fleet.metrics.add(spent).await;
        }
        Ok(usd.usd())
    }
}

/// The closure of a priced route a cap closes (`until_ms` from now: the tenant's day's end,
/// or never for the run's own cap).
fn capped(which: Cap, until_ms: u64) -> Closure {
    let reason = match which {
        Cap::Tenant => "spend cap: the tenant's spend for the day is reached",
        Cap::Run => "spend cap: the run's max_usd is reached",
    };
    Closure {
        kind: RestKind::SpendCap,
        remaining_ms: until_ms,
        reason: reason.to_string(),
    }
}

/// Who would spend: a run's request, its id, what it spent so far and the tokens its next call
/// is expected to take.
pub struct Spender<'a> {
    pub request: &'a RunRequest,
    pub run_id: &'a str,
    pub spent_usd: f64,
    pub tokens: u32,
}

/// Close each open priced route of `routes` whose next call would pass the run's cap or its
/// tenant's, as `ledger` stands at `now_ms`: what pre-flight and an enqueue see (a tenant's cap
/// until its day ends, a run's for good). One question to the ledger at most, whatever the
/// number of routes.
pub async fn close_capped_routes(
    ledger: &dyn Ledger,
    catalog: &Catalog,
    spender: &Spender<'_>,
    routes: &[Route],
    closures: &mut [Option<Closure>],
    now_ms: u64,
) -> Result<(), FleetError> {
    let caps = caps(catalog, spender.request);
    if caps.tenant.is_none() && caps.run.is_none() {
        return Ok(());
    }
    let spent = Usd::from_usd(spender.spent_usd).unwrap_or(Usd::MAX);
    let day_end = spend_day_end(catalog, spender.request, now_ms);
    let mut tenant_used = None;
    for (route, closure) in routes.iter().zip(closures.iter_mut()) {
        let (None, Some(pricing)) = (&closure, pricing(catalog, route)) else {
            continue;
        };
        let estimate = estimate(&pricing, spender.request, spender.tokens).nanos();
        if caps
            .run
            .is_some_and(|cap| spent.nanos() + estimate > cap.nanos())
        {
            *closure = Some(capped(Cap::Run, u64::MAX));
            continue;
        }
        let (Some(cap), Some((tenant, _))) =
            (caps.tenant, ledger_ids(spender.request, spender.run_id))
        else {
            continue;
        };
        let used = match tenant_used {
            Some(used) => used,
            None => {
                let today = ledger.usage(&tenant, day_end).await?;
                *tenant_used.insert(today.spent.nanos().saturating_add(today.reserved.nanos()))
            }
        };
        if used.saturating_add(estimate) > cap.nanos() {
            *closure = Some(capped(Cap::Tenant, day_end.saturating_sub(now_ms)));
        }
    }
    Ok(())
}

/// How `route` is priced; `None` when its calls cost the operator nothing freeway knows of (a
/// free pool's route, a user's own key, a provider with no price and no figures).
fn pricing(catalog: &Catalog, route: &Route) -> Option<Pricing> {
    if route.pool.is_some() || route.connection != Connection::Platform {
        return None;
    }
    let price = catalog.price(&route.provider, &route.model);
    let reported = route.dialect == Dialect::Openrouter;
    (price.is_some() || reported).then_some(Pricing { price, reported })
}

/// What a call of `tokens` (input and answer) may cost on a route priced so: its answer's whole
/// cap and the rest as input, at the configured price. Without a configured price it is not
/// known before the answer: nothing is held for it, and only the cost it reports counts.
fn estimate(pricing: &Pricing, request: &RunRequest, tokens: u32) -> Usd {
    let Some(price) = pricing.price else {
        return Usd::ZERO;
    };
    let answer = request.max_tokens.unwrap_or(DEFAULT_ANSWER_TOKENS);
    let input = tokens.saturating_sub(answer);
    let usd = price.cost_usd(u64::from(input), u64::from(answer));
    Usd::from_usd(usd).unwrap_or(Usd::MAX)
}

/// A request's caps: its tier's day cap for its tenant, and its own `max_usd`.
fn caps(catalog: &Catalog, request: &RunRequest) -> Caps {
    let usd = |v: f64| Usd::from_usd(v).unwrap_or(Usd::MAX);
    Caps {
        tenant: catalog
            .tier(request.tier_name())
            .and_then(|t| t.spend_usd_per_day)
            .map(usd),
        run: request.max_usd.map(usd),
    }
}

/// When the request's tenant's spending day ends (its tier's `day_reset` zone).
fn spend_day_end(catalog: &Catalog, request: &RunRequest, now_ms: u64) -> u64 {
    let zone = catalog
        .tier(request.tier_name())
        .map_or(chrono_tz::UTC, |t| t.day_reset);
    crate::day::next_midnight_ms(zone, now_ms)
}

/// The ledger's names of the request's tenant and of its run (ids checked at enqueue).
fn ledger_ids(request: &RunRequest, run_id: &str) -> Option<(LedgerId, LedgerId)> {
    let tenant = LedgerId::new(request.tenant_id()).ok()?;
    let run = LedgerId::new(run_id).ok()?;
    Some((tenant, run))
}
