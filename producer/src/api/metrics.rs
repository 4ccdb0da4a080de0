//! `GET /metrics`: Prometheus text for the whole fleet, from one scrape target.
//!
//! | family | type | from |
//! |---|---|---|
//! | `freeway_runs{status,code}` | gauge | the store: runs it holds (`code=""` while a run has none) |
//! | `freeway_calls_total{route,outcome}` | counter | Redis, added by every worker: `outcome` is `ok` or the verdict |
//! | `freeway_rests_written_total{scope,verdict}` | counter | Redis, added by every worker |
//! | `freeway_canary_failures_total{provider,verdict}` | counter | Redis, added by the replica that sent the canary |
//! | `freeway_spend_usd_total{tier,provider}` | counter | Redis, added by the replica whose call cost it |
//! | `freeway_active_rests{scope}` | gauge | the rest index |
//! | `freeway_rests_dropped_total` | counter | Redis: rests of routes no configuration names dropped to keep their bounds |
//! | `freeway_delayed_jobs` | gauge | snoozed runs waiting for a rest to end |
//! | `freeway_queue_jobs{state}` | gauge | apalis's keys and ours (waiting, scheduled, delayed, running, done, dead) |
//! | `freeway_workers{state}` | gauge | apalis's workers set: `live` or `stale` |
//! | `freeway_calls_per_run` | histogram | Redis: each run's calls when it settles |
//! | `freeway_call_latency_seconds` | histogram | Redis: each call's latency |
//! | `freeway_delivery_seconds` | histogram | Redis: how long each delivery held a replica's slot |
//! | `freeway_pool_used{pool,period}` | gauge | the limiter: calls counted this `window` and `day` on the platform's instance |
//! | `freeway_pool_tokens{pool,period}` | gauge | the limiter: tokens counted this `window` and `day` |
//! | `freeway_pool_limit{pool,period}` | gauge | the pool's declared limits (`window`, `day`, `window_tokens`, `day_tokens`) |
//! | `freeway_pool_reserved{pool}` | gauge | slots of later windows held by waiting runs |
//! | `freeway_pacing_misses_total{pool}` | counter | refusals of calls the limiter admitted |
//! | `freeway_pool_headroom{pool}` | gauge | requests the provider's last answer said were left |
//!
//! Counters that the workers add to live in Redis ([`freeway::metrics`]) so that the producer
//! serves fleet-wide values and replicas need no port of their own. The route is outside `/v1`:
//! it needs a token only once the API token or `FREEWAY_METRICS_TOKEN` is set
//! ([`super::auth::require_metrics_token`]). It shows counts, route names and connection ids,
//! never a key.

use super::board::workers;
use super::error::ApiError;
use super::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use freeway::metrics::Metrics;
use freeway::metrics::{Histogram, Labelled};
use freeway::pace::Pacer;
use freeway::rest::Rests;
use freeway::store::Store;
use std::fmt::Write;
use std::sync::Arc;

#[utoipa::path(
    get, operation_id = "metrics", path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text", content_type = "text/plain", body = String))
)]
pub async fn metrics(State(state): State<Arc<AppState>>) -> Result<impl IntoResponse, ApiError> {
    let (depths, replicas) = state.enqueuer.queue().snapshot().await?;
    let rests = state.fleet.rests().list().await?;
    let dropped = state.fleet.rests().dropped().await?;
    let counters = state.fleet.metrics().read().await?;
    let runs = state.store.count_by_status().await?;
    let workers = workers(replicas, freeway::clock::epoch_ms());

    let mut out = Text::default();
    out.family(
        "freeway_runs",
        "gauge",
        "Runs in the store, by status and code.",
    );
    for c in &runs {
        out.sample(
            "freeway_runs",
            &[
                ("status", c.status.as_str()),
                ("code", c.code.map_or("", |c| c.as_str())),
            ],
            c.runs,
        );
    }
    out.family(
        "freeway_calls_total",
        "counter",
        "Provider calls by route and outcome (ok, or the failure's verdict), fleet-wide.",
    );
    labelled(
        &mut out,
        "freeway_calls_total",
        ["route", "outcome"],
        &counters.calls,
    );
    out.family(
        "freeway_rests_written_total",
        "counter",
        "Rests and circuits written or extended, by scope and the verdict that called for them.",
    );
    labelled(
        &mut out,
        "freeway_rests_written_total",
        ["scope", "verdict"],
        &counters.rests,
    );
    out.family(
        "freeway_canary_failures_total",
        "counter",
        "Canaries the provider refused or failed, by the failure's verdict.",
    );
    labelled(
        &mut out,
        "freeway_canary_failures_total",
        ["provider", "verdict"],
        &counters.canary_failures,
    );
    out.family(
        "freeway_spend_usd_total",
        "counter",
        "USD spent on priced routes, by the runs' tier and the provider (no tenant label: tenants are unbounded; GET /v1/tenants/{id}/usage has them).",
    );
    for v in &counters.spend_nanos {
        let usd = v.value as f64 / 1e9;
        let labels = [
            ("tier", v.labels[0].as_str()),
            ("provider", v.labels[1].as_str()),
        ];
        out.sample("freeway_spend_usd_total", &labels, usd);
    }
    out.family(
        "freeway_active_rests",
        "gauge",
        "Active rests and circuits, by scope.",
    );
    for scope in ["pool", "route", "connection"] {
        let n = rests.iter().filter(|r| r.scope == scope).count();
        out.sample("freeway_active_rests", &[("scope", scope)], n as u64);
    }
    out.family(
        "freeway_rests_dropped_total",
        "counter",
        "Rests of routes no configuration names (made-up models, users' connections) dropped to keep them within their bounds, a user's and all users'.",
    );
    out.sample("freeway_rests_dropped_total", &[], dropped);
    out.family(
        "freeway_delayed_jobs",
        "gauge",
        "Runs snoozed until a rest ends.",
    );
    out.sample("freeway_delayed_jobs", &[], depths.delayed);
    out.family(
        "freeway_queue_jobs",
        "gauge",
        "Jobs in the run queue, by state.",
    );
    for (name, n) in [
        ("waiting", depths.waiting),
        ("scheduled", depths.scheduled),
        ("delayed", depths.delayed),
        ("running", depths.running),
        ("done", depths.done),
        ("dead", depths.dead),
    ] {
        out.sample("freeway_queue_jobs", &[("state", name)], n);
    }
    out.family(
        "freeway_workers",
        "gauge",
        "Registered worker replicas: live, or stale (no recent heartbeat).",
    );
    let stale = workers.iter().filter(|w| w.stale).count() as u64;
    out.sample(
        "freeway_workers",
        &[("state", "live")],
        workers.len() as u64 - stale,
    );
    out.sample("freeway_workers", &[("state", "stale")], stale);
    pools(&mut out, &state).await?;
    out.family(
        "freeway_calls_per_run",
        "histogram",
        "Provider calls a run made in all, observed when it settles.",
    );
    histogram(
        &mut out,
        "freeway_calls_per_run",
        &counters.calls_per_run,
        1,
    );
    out.family(
        "freeway_delivery_seconds",
        "histogram",
        "How long each delivery held a replica's slot, from its handler's start to its retirement: \
         rate(sum) over the replicas' slots is how busy they are.",
    );
    histogram(
        &mut out,
        "freeway_delivery_seconds",
        &counters.delivery_ms,
        1000,
    );
    out.family(
        "freeway_call_latency_seconds",
        "histogram",
        "Latency of a provider call, from the request to the end of its answer.",
    );
    histogram(
        &mut out,
        "freeway_call_latency_seconds",
        &counters.latency_ms,
        1000,
    );
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out.0,
    ))
}

/// Prometheus text exposition, written as it goes.
/// The limiter's view of each pool's platform instance (docs/design.md §4.4).
async fn pools(out: &mut Text, state: &AppState) -> Result<(), ApiError> {
    let spent = super::pools::platform_use(state).await?;
    let catalog = state.enqueuer.catalog();
    let limits =
        |u: &super::pools::InstanceUse| catalog.pools().find(|p| p.name == u.pool).cloned();
    out.family(
        "freeway_pool_used",
        "gauge",
        "Calls the limiter counted on the pool's platform instance, this window and today.",
    );
    for u in &spent {
        let labels = |period| [("pool", u.instance.as_str()), ("period", period)];
        out.sample("freeway_pool_used", &labels("window"), u.spent.window_used);
        out.sample("freeway_pool_used", &labels("day"), u.spent.day_used);
    }
    out.family(
        "freeway_pool_tokens",
        "gauge",
        "Tokens the limiter counted on the pool's platform instance, this window and today.",
    );
    for u in &spent {
        let labels = |period| [("pool", u.instance.as_str()), ("period", period)];
        out.sample(
            "freeway_pool_tokens",
            &labels("window"),
            u.spent.window_tokens,
        );
        out.sample("freeway_pool_tokens", &labels("day"), u.spent.day_tokens);
    }
    out.family("freeway_pool_limit", "gauge", "The pool's declared limits.");
    for u in &spent {
        let Some(pool) = limits(u) else {
            continue;
        };
        let declared = [
            ("window", pool.rpm),
            ("day", pool.rpd),
            ("window_tokens", pool.tpm),
            ("day_tokens", pool.tpd),
        ];
        for (period, limit) in declared {
            if let Some(limit) = limit {
                let labels = [("pool", u.instance.as_str()), ("period", period)];
                out.sample("freeway_pool_limit", &labels, limit);
            }
        }
    }
    out.family(
        "freeway_pool_reserved",
        "gauge",
        "Slots of later windows held by waiting runs.",
    );
    for u in &spent {
        let labels = [("pool", u.instance.as_str())];
        out.sample("freeway_pool_reserved", &labels, u.spent.reserved);
    }
    out.family(
        "freeway_pacing_misses_total",
        "counter",
        "Refusals for the pool's quota of calls the limiter admitted: a sign its limit is wrong.",
    );
    for u in &spent {
        let labels = [("pool", u.instance.as_str())];
        out.sample("freeway_pacing_misses_total", &labels, u.spent.misses);
    }
    out.family(
        "freeway_pool_headroom",
        "gauge",
        "Requests the provider's last answer said were left on the pool's platform instance.",
    );
    for pool in catalog.pools() {
        let instance = pool.platform_instance();
        if let Some(h) = state.fleet.pacer().seen(&instance).await?.headroom {
            out.sample(
                "freeway_pool_headroom",
                &[("pool", instance.as_str())],
                h.remaining,
            );
        }
    }
    Ok(())
}

#[derive(Default)]
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            let pairs: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.0, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.0, " {value}");
    }
}

fn labelled(out: &mut Text, name: &str, keys: [&str; 2], values: &[Labelled]) {
    for v in values {
        out.sample(
            name,
            &[(keys[0], &v.labels[0]), (keys[1], &v.labels[1])],
            v.value,
        );
    }
}

/// A histogram whose observations were integers in `1/scale` of the exported unit (ms for
/// seconds: 1000).
fn histogram(out: &mut Text, name: &str, h: &Histogram, scale: u64) {
    let bucket = format!("{name}_bucket");
    for (bound, n) in h.bounds.iter().zip(&h.cumulative) {
        out.sample(&bucket, &[("le", &unit(*bound, scale))], n);
    }
    out.sample(&bucket, &[("le", "+Inf")], h.count);
    out.sample(&format!("{name}_sum"), &[], unit(h.sum, scale));
    out.sample(&format!("{name}_count"), &[], h.count);
}

/// `value / scale` as an exact decimal.
fn unit(value: u64, scale: u64) -> String {
    if scale == 1 {
        return value.to_string();
    }
    let (whole, part) = (value / scale, value % scale);
    if part == 0 {
        return whole.to_string();
    }
    let digits = scale.to_string().len() - 1;
    let frac = format!("{part:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// A label value as the text format needs it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_labels_are_written_as_prometheus_reads_them() {
        assert_eq!(unit(50, 1000), "0.05");
        assert_eq!(unit(2_500, 1000), "2.5");
        assert_eq!(unit(120_000, 1000), "120");
        assert_eq!(unit(7, 1), "7");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut t = Text::default();
        t.sample("x", &[("a", "1"), ("b", "q\"")], 3);
        t.sample("y", &[], 0);
        assert_eq!(t.0, "x{a=\"1\",b=\"q\\\"\"} 3\ny 0\n");
    }
}
