//! (v3) What tenants spend (docs/design.md §4.8): `GET /v1/tenants/{id}/usage` (today's spend and
//! reservations from the fleet's ledger against the tier's cap, calls and cost by route today
//! and by day for 30 days from the attempt log) and `GET /v1/tenants` (the last day's tenants).

use crate::common::{Server, json_of};
use crate::{code, tokens};
use freeway::catalog::Catalog;
use freeway::day::{last_days, next_midnight_ms};
use freeway::run::AttemptRecord;
use freeway::spend::{Caps, Ledger, LedgerId, Reserve, Usd};
use freeway::store::Store;
use serde_json::{Value, json};

const PAID: &str = "platform:openrouter/vendor/paid";
const FREE: &str = "platform:openrouter/vendor/m:free";

/// `pro` days start at midnight in Los Angeles and cap at USD 5; `default` at USD 0.50, UTC;
/// `free` has no cap.
fn catalog() -> Catalog {
    Catalog::from_toml(
        r#"
[tiers.default]
spend_usd_per_day = 0.5

[tiers.free]
weight = 1

[tiers.pro]
weight = 4
spend_usd_per_day = 5.0
day_reset = "America/Los_Angeles"
"#,
    )
    .expect("a catalog")
}

/// The zone of a tier of [`catalog`] (`pro`: Los Angeles; `default`: UTC).
macro_rules! zone {
    ($tier:literal) => {
        catalog().tier($tier).expect("a tier").day_reset
    };
}

/// Enqueue a run of `user` for `tenant` in `tier`; its id.
async fn run_of(s: &Server, user: &str, tenant: Option<&str>, tier: &str) -> String {
    let mut body = json!({ "user_id": user, "input": "hello", "tier": tier,
        "routes": [{ "model": "vendor/m" }] });
    if let Some(t) = tenant {
        body["tenant"] = t.into();
    }
    let (status, body) = s.post_run(&body).await;
    assert_eq!(status, 202, "{body}");
    body["run_id"].as_str().expect("a run id").to_string()
}

async fn attempt(s: &Server, run_id: &str, n: u32, route: &str, t_ms: u64, cost_usd: f64) {
    let a = AttemptRecord {
        cost_usd,
        ..AttemptRecord::succeeded(run_id, n, 1, route.into(), t_ms)
    };
    s.store.record_attempt(&a).await.expect("an attempt");
}

/// Spend `spent` (reserved as `estimate`) and hold `held` for `tenant` on its day ending at
/// `day_end`, as workers do around priced calls.
async fn spend(s: &Server, tenant: &str, day_end: u64, spent: f64, held: f64) {
    let ledger = s.enqueuer.ledger();
    let tenant = LedgerId::new(tenant).unwrap();
    let usd = |v: f64| Usd::from_usd(v).unwrap();
    for (n, amount) in [(1, spent), (2, held)]
        .into_iter()
        .filter(|(_, a)| *a > 0.0)
    {
        let run = LedgerId::new(&format!("run{n}")).unwrap();
        let granted = ledger
            .reserve(&tenant, &run, day_end, usd(amount), Caps::default())
            .await
            .expect("the ledger");
        let Reserve::Granted(reservation) = granted else {
            panic!("refused without caps: {granted:?}");
        };
        if n == 1 {
            ledger.settle(&reservation, usd(amount)).await.unwrap();
        }
    }
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

#[tokio::test]
async fn a_tenants_usage_is_todays_spend_against_its_tiers_cap_and_its_calls_by_route_and_day() {
    let Some(s) = Server::with_catalog(catalog()).await else {
        return;
    };
    let older = run_of(&s, "u1", Some("org_acme"), "default").await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newest = run_of(&s, "u2", Some("org_acme"), "pro").await;
    let other = run_of(&s, "u3", Some("org_other"), "pro").await;
    let now = freeway::clock::epoch_ms();
    let days = last_days(zone!("pro"), now, 31);
    let (today, yesterday, too_old) = (days[30].start_ms, days[29].start_ms, days[0].start_ms);
    attempt(&s, &newest, 1, PAID, today, 0.25).await;
    attempt(&s, &newest, 2, PAID, today + 1, 0.5).await;
    attempt(&s, &older, 1, FREE, today + 2, 0.0).await;
    attempt(&s, &older, 2, PAID, yesterday, 0.125).await;
    attempt(&s, &older, 3, PAID, too_old, 64.0).await;
    attempt(&s, &other, 1, PAID, today, 32.0).await;
    let day_end = next_midnight_ms(zone!("pro"), now);
    // The ledger has a call settled that the log does not have yet.
    spend(&s, "org_acme", day_end, 0.875, 0.0625).await;
    spend(&s, "org_other", day_end, 32.0, 0.0).await;

    let resp = s
        .http
        .get(s.url("/v1/tenants/org_acme/usage"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.expect("a body");
    let u: Value = serde_json::from_str(&text).expect("JSON");
    // The tier of its newest run, whose cap and clock apply.
    assert_eq!(u["tenant"], "org_acme");
    assert_eq!(u["tier"], "pro", "{u}");
    assert_eq!(u["tier_from"], "latest_run");
    assert_eq!(u["day_reset"], "America/Los_Angeles");
    assert_eq!(u["day_started_ms"], today);
    assert_eq!(u["day_ends_ms"], day_end);
    assert!(close(&u["spend_usd"], 0.875), "{u}");
    assert_eq!(u["spend_from"], "ledger");
    assert!(close(&u["reserved_usd"], 0.0625), "{u}");
    assert!(close(&u["cap_usd"], 5.0), "{u}");
    // Today from the attempt log: its own runs' calls, another tenant's never.
    assert_eq!(u["calls"], 3, "{u}");
    assert!(close(&u["cost_usd"], 0.75), "{u}");
    assert_eq!(
        u["routes"],
        json!([
            { "route": PAID, "calls": 2, "cost_usd": 0.75 },
            { "route": FREE, "calls": 1, "cost_usd": 0.0 },
        ]),
        "{u}"
    );
    let by_day = u["days"].as_array().expect("days");
    assert_eq!(by_day.len(), 30, "30 days, today included");
    assert_eq!(by_day[29]["start_ms"], today);
    assert_eq!(by_day[29]["day"], days[30].date);
    assert_eq!(
        (&by_day[29]["calls"], &by_day[28]["calls"]),
        (&json!(3), &json!(1))
    );
    assert!(close(&by_day[28]["cost_usd"], 0.125), "{u}");
    let calls: u64 = by_day.iter().filter_map(|d| d["calls"].as_u64()).sum();
    assert_eq!(calls, 4, "a call 30 days ago is outside: {u}");
    // Aggregates only: no user, run or output of the tenant's runs.
    for private in ["u1", "u2", "u3", older.as_str(), newest.as_str(), "hello"] {
        assert!(!text.contains(private), "{private} in {text}");
    }

    // Another tier's cap and clock when asked for.
    let (status, u) = s.get_json("/v1/tenants/org_acme/usage?tier=default").await;
    assert_eq!(status, 200, "{u}");
    assert_eq!(
        (&u["tier"], &u["tier_from"]),
        (&json!("default"), &json!("query"))
    );
    assert_eq!(u["day_reset"], "UTC");
    assert!(close(&u["cap_usd"], 0.5), "{u}");
    assert_eq!(
        u["day_ends_ms"],
        next_midnight_ms(zone!("default"), freeway::clock::epoch_ms())
    );
    assert!(
        close(&u["spend_usd"], 0.0),
        "the ledger keys days by their end: {u}"
    );

    // Without a cap the ledger holds nothing for the tier's runs: the spend is the log's.
    let (status, u) = s.get_json("/v1/tenants/org_acme/usage?tier=free").await;
    assert_eq!(status, 200, "{u}");
    assert_eq!(
        (&u["cap_usd"], &u["spend_from"]),
        (&Value::Null, &json!("attempt_log"))
    );
    assert_eq!(u["spend_usd"], u["cost_usd"], "{u}");
    assert!(close(&u["reserved_usd"], 0.0), "{u}");

    // A tenant without runs: `default`, nothing spent, 30 days of zeros.
    let (status, u) = s.get_json("/v1/tenants/org_new/usage").await;
    assert_eq!(status, 200, "{u}");
    assert_eq!(
        (&u["tier"], &u["tier_from"]),
        (&json!("default"), &json!("default"))
    );
    assert_eq!((&u["calls"], &u["routes"]), (&json!(0), &json!([])));
    assert_eq!(u["days"].as_array().map(Vec::len), Some(30));
    assert!(
        close(&u["spend_usd"], 0.0) && close(&u["reserved_usd"], 0.0),
        "{u}"
    );
}

#[tokio::test]
async fn a_bad_tenant_id_tier_or_query_is_400() {
    let Some(s) = Server::with_catalog(catalog()).await else {
        return;
    };
    let long = "x".repeat(129);
    for path in [
        "/v1/tenants/a%20b/usage".to_string(),
        "/v1/tenants/a%7Bb%7D/usage".to_string(),
        "/v1/tenants/caf%C3%A9/usage".to_string(),
        format!("/v1/tenants/{long}/usage"),
        "/v1/tenants/org_acme/usage?tier=gold".to_string(),
        "/v1/tenants/org_acme/usage?user_id=u1".to_string(),
        "/v1/tenants?limit=0".to_string(),
        "/v1/tenants?limit=101".to_string(),
        "/v1/tenants?tenant=x".to_string(),
    ] {
        let (status, err) = s.get_json(&path).await;
        assert_eq!(
            (status, code(&err)),
            (400, "invalid_request"),
            "{path}: {err}"
        );
    }
    let (_, err) = s.get_json("/v1/tenants/org_acme/usage?tier=gold").await;
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("default") && message.contains("pro"),
        "{message}"
    );
}

#[tokio::test]
async fn the_tenants_of_the_last_day_are_listed_newest_first_with_todays_spend() {
    let Some(s) = Server::with_catalog(catalog()).await else {
        return;
    };
    let acme = run_of(&s, "u1", Some("org_acme"), "pro").await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let own = run_of(&s, "u2", None, "free").await;
    let now = freeway::clock::epoch_ms();
    let la_today = last_days(zone!("pro"), now, 1)[0].start_ms;
    let utc_today = last_days(zone!("free"), now, 1)[0].start_ms;
    attempt(&s, &acme, 1, PAID, la_today, 0.25).await;
    attempt(&s, &acme, 2, PAID, la_today.saturating_sub(1), 8.0).await;
    attempt(&s, &own, 1, PAID, utc_today, 0.5).await;
    attempt(&s, &own, 2, FREE, utc_today + 1, 0.0).await;
    // The ledger has a call settled that the log does not have yet.
    spend(
        &s,
        "org_acme",
        next_midnight_ms(zone!("pro"), now),
        0.375,
        0.125,
    )
    .await;

    let (status, list) = s.get_json("/v1/tenants").await;
    assert_eq!(status, 200, "{list}");
    assert!(list["since_ms"].as_u64().is_some_and(|t| t < now));
    let tenants = list["tenants"].as_array().expect("tenants");
    assert_eq!(tenants.len(), 2, "{list}");
    // A run that named no tenant is its user's.
    let (first, second) = (&tenants[0], &tenants[1]);
    assert_eq!(
        (&first["tenant"], &first["tier"]),
        (&json!("u2"), &json!("free"))
    );
    assert_eq!((&first["runs"], &first["calls"]), (&json!(1), &json!(2)));
    assert!(close(&first["cost_usd"], 0.5), "{list}");
    assert_eq!(first["cap_usd"], Value::Null);
    // No cap: the ledger holds nothing for its runs, and its spend is the attempt log's.
    assert!(close(&first["spend_usd"], 0.5), "{list}");
    assert_eq!(first["spend_from"], "attempt_log");
    assert_eq!(
        (&second["tenant"], &second["tier"]),
        (&json!("org_acme"), &json!("pro"))
    );
    assert_eq!(
        second["calls"], 1,
        "yesterday in Los Angeles is not today: {list}"
    );
    assert!(
        close(&second["cost_usd"], 0.25) && close(&second["cap_usd"], 5.0),
        "{list}"
    );
    assert!(close(&second["spend_usd"], 0.375), "{list}");
    assert_eq!(second["spend_from"], "ledger");
    assert!(close(&second["reserved_usd"], 0.125), "{list}");
    assert_eq!(
        second["day_ends_ms"],
        next_midnight_ms(zone!("pro"), freeway::clock::epoch_ms())
    );
    assert!(second["last_run_ms"].as_u64() <= first["last_run_ms"].as_u64());

    let (status, list) = s.get_json("/v1/tenants?limit=1").await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<&Value> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["tenant"])
        .collect();
    assert_eq!(names, [&json!("u2")]);
}

#[tokio::test]
async fn tenants_need_the_api_token_and_not_the_admin_token() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    for path in ["/v1/tenants", "/v1/tenants/org_acme/usage"] {
        let resp = s.http.get(s.url(path)).send().await.expect("GET");
        assert_eq!(resp.status().as_u16(), 401, "{path}");
        let resp = s
            .http
            .get(s.url(path))
            .bearer_auth("api-token-1")
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let body: Value = json_of(resp).await;
        assert!(body.is_object(), "{body}");
    }
}
