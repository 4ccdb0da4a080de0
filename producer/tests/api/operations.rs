//! What an operator reads and does: the health probe, the metrics, and the rests, listed and
//! cleared with the admin token.

use crate::common::{Server, json_of, run_body};
use crate::{POOL, code, rest_pool, rests, tokens};
use freeway::classify::{RestLength, RestScope};
use freeway::rest::Rests;
use serde_json::{Value, json};

#[tokio::test]
async fn rests_are_listed_and_cleared_only_with_the_admin_token() {
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    rest_pool(&s, 30_000).await;
    rests(&s)
        .write(
            &RestScope::Route {
                pool: Some(POOL.into()),
                route_key: "platform:openrouter/vendor/m:free".into(),
            },
            RestLength::For(20_000),
            "high demand",
        )
        .await
        .expect("rest written");
    let resp = s
        .http
        .get(s.url("/v1/rests"))
        .bearer_auth("api-token-1")
        .send()
        .await
        .expect("GET");
    let list: Value = json_of(resp).await;
    let rests = list["rests"].as_array().expect("a list");
    assert_eq!(rests.len(), 2, "{list}");
    assert_eq!(rests[0]["scope"], "pool");
    assert_eq!(rests[0]["key"], POOL);
    assert_eq!(rests[0]["reason"], "test rest");
    assert!(
        rests[0]["remaining_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0 && ms <= 30_000)
    );
    assert_eq!(rests[1]["key"], "platform:openrouter/vendor/m:free");

    let clear = |path: &str, token: Option<&str>| {
        let mut req = s.http.delete(s.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let pool_path = format!("/v1/rests/pool/{POOL}");
    let resp = clear(&pool_path, None).await.expect("DELETE");
    assert_eq!(resp.status().as_u16(), 401);
    let resp = clear(&pool_path, Some("api-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 403);
    let err: Value = json_of(resp).await;
    assert_eq!(code(&err), "unauthorized");
    assert_eq!(
        s.keys(&format!("{{{POOL}}}:rest")).await.len(),
        1,
        "the rest stays"
    );

    let resp = clear(&pool_path, Some("admin-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 204);
    let resp = clear(
        "/v1/rests/route/platform:openrouter/vendor/m:free",
        Some("admin-token-1"),
    )
    .await
    .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 204);
    let resp = clear(&pool_path, Some("admin-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 404);
    let resp = clear("/v1/rests/planet/x", Some("admin-token-1"))
        .await
        .expect("DELETE");
    assert_eq!(resp.status().as_u16(), 400);
    let resp = s
        .http
        .get(s.url("/v1/rests"))
        .bearer_auth("admin-token-1")
        .send()
        .await
        .expect("GET");
    let list: Value = json_of(resp).await;
    assert_eq!(list, json!({ "rests": [], "total": 0, "next": null }));
}

#[tokio::test]
async fn healthz_names_what_fails() {
    let Some(s) = Server::open().await else {
        return;
    };
    let (status, body) = s.get_json("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "redis": "ok", "store": "ok" }));
    s.store.close().await;
    let (status, body) = s.get_json("/healthz").await;
    assert_eq!(status, 503);
    assert_eq!(
        (&body["redis"], &body["store"]),
        (&json!("ok"), &json!("failed"))
    );
    assert!(
        body["writers"]["producer"]
            .as_str()
            .is_some_and(|e| e.contains("closed")),
        "the failing writer is named with its error: {body}"
    );
}

#[tokio::test]
async fn metrics_show_queue_depths_and_rests() {
    let Some(s) = Server::open().await else {
        return;
    };
    s.post_run(&run_body("u1", "vendor/m")).await;
    rest_pool(&s, 30_000).await;
    let resp = s.http.get(s.url("/metrics")).send().await.expect("GET");
    assert_eq!(resp.status().as_u16(), 200);
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    assert!(kind.is_some_and(|k| k.starts_with("text/plain")));
    let text = resp.text().await.expect("text");
    for line in [
        "# TYPE freeway_queue_jobs gauge",
        "freeway_queue_jobs{state=\"waiting\"} 1",
        "freeway_queue_jobs{state=\"dead\"} 0",
        "# TYPE freeway_active_rests gauge",
        "freeway_active_rests{scope=\"pool\"} 1",
        "freeway_active_rests{scope=\"route\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
}

/// A labelled series no replica has counted for a day is gone from the next scrape, and from
/// Redis; one counted since stays. (Series never expired: 3,000 runs naming unique models left
/// 9,000 series and 40 MB in Redis for good.)
#[tokio::test]
async fn a_series_idle_for_a_day_is_dropped_at_the_next_scrape() {
    use freeway::metrics::Metrics;
    let Some(s) = Server::open().await else {
        return;
    };
    let metrics = s.enqueuer.metrics();
    let now = freeway::clock::epoch_ms();
    for route in ["platform:openrouter/gone", "platform:openrouter/kept"] {
        metrics
            .add(freeway::metrics::call(route, "ok", 40, now))
            .await;
    }
    metrics.flush().await;
    let seen = format!("{{{}:metrics}}:calls:seen", s.ns);
    let mut conn = s.conn.clone();
    let stamps: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(&seen)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        stamps.len(),
        2,
        "each series is stamped when written: {stamps:?}"
    );
    assert!(
        stamps.iter().all(|(_, t)| now.abs_diff(*t) < 60_000),
        "{stamps:?}"
    );
    // The first series' last count, a day and a second ago.
    let gone = r#"["platform:openrouter/gone","ok"]"#;
    let idle_since = now - freeway::metrics::SERIES_KEPT_MS - 1_000;
    let _: () = redis::cmd("ZADD")
        .arg(&seen)
        .arg(idle_since)
        .arg(gone)
        .query_async(&mut conn)
        .await
        .unwrap();
    let text = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    let series = |route: &str| {
        format!("freeway_calls_total{{route=\"platform:openrouter/{route}\",outcome=\"ok\"}} 1")
    };
    assert!(text.lines().any(|l| l == series("kept")), "{text}");
    assert!(!text.contains("openrouter/gone"), "{text}");
    let left: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("{{{}:metrics}}:calls", s.ns))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        left,
        [r#"["platform:openrouter/kept","ok"]"#],
        "gone from Redis too"
    );
}

#[tokio::test]
async fn the_routes_history_counts_each_routes_minutes_by_kind() {
    use freeway::metrics::Metrics;
    let Some(s) = Server::open().await else {
        return;
    };
    let metrics = s.enqueuer.metrics();
    let now = freeway::clock::epoch_ms();
    for (outcome, latency) in [("ok", 40), ("account", 70), ("server", 900)] {
        metrics
            .add(freeway::metrics::call(
                "platform:openrouter/m:free",
                outcome,
                latency,
                now,
            ))
            .await;
    }
    let earlier = now - 2 * 60_000;
    metrics
        .add(freeway::metrics::call(
            "platform:openrouter/m:free",
            "ok",
            20,
            earlier,
        ))
        .await;
    // What a replica's housekeeping does within a tick.
    metrics.flush().await;
    let (status, h) = s.get_json("/v1/routes?minutes=10").await;
    assert_eq!(status, 200, "{h}");
    let route = &h["routes"][0];
    assert_eq!(route["route"], "platform:openrouter/m:free");
    let total = &route["total"];
    assert_eq!(
        (&total["calls"], &total["rate_limited"], &total["failed"]),
        (&json!(4), &json!(1), &json!(1)),
        "{h}"
    );
    assert_eq!(
        route["minutes"].as_array().map(Vec::len),
        Some(2),
        "two minutes with calls"
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("{{{}:metrics}}:minute:{}", s.ns, now / 60_000))
        .query_async(&mut s.conn.clone())
        .await
        .unwrap();
    assert!(
        (7_000..=7_200).contains(&ttl),
        "a minute is kept two hours: {ttl} s"
    );
    for bad in ["minutes=0", "minutes=121", "minutes=x", "since=1"] {
        let (status, err) = s.get_json(&format!("/v1/routes?{bad}")).await;
        assert_eq!((status, code(&err)), (400, "invalid_request"), "{bad}");
    }
}

/// 3,000 rests of made-up models (each a request can name) from 150 users leave what their
/// bounds allow: `GET /v1/rests` and the board's overview answer a page (well under 64 KB) with
/// the total and where the next starts, the pages together list every rest once, the
/// configured pool's rest is among them, and `/metrics` counts what was dropped. (They left
/// 9,000 hour-long rests, and a 4.8 MB list on every refresh.)
#[tokio::test]
async fn rests_of_made_up_models_are_bounded_and_listed_a_page_at_a_time() {
    use freeway::rest::{UNNAMED_RESTS, UNNAMED_RESTS_PER_USER};
    let Some(s) = Server::start(tokens(), None).await else {
        return;
    };
    rest_pool(&s, 300_000).await;
    let made_up = 3_000;
    for n in 0..made_up {
        let scope = RestScope::Route {
            pool: None,
            route_key: format!("platform:openrouter/made-up/model-{n:04}"),
        };
        let user = format!("u{}", n % 150);
        rests(&s)
            .write_unnamed(
                &scope,
                RestLength::For(3_600_000),
                "gone (no endpoints)",
                &user,
            )
            .await
            .expect("rest written");
    }
    assert!(
        made_up / 150 <= UNNAMED_RESTS_PER_USER,
        "the total bound is what drops"
    );
    let get = |path: String| {
        let req = s.http.get(s.url(&path)).bearer_auth("api-token-1");
        async move {
            let text = req.send().await.expect("GET").text().await.expect("text");
            (
                text.len(),
                serde_json::from_str::<Value>(&text).expect("JSON"),
            )
        }
    };
    let (size, overview) = get("/v1/board/overview".into()).await;
    assert!(size < 64 * 1024, "the overview is {size} bytes");
    assert_eq!(overview["rests"]["total"], UNNAMED_RESTS + 1);
    let mut listed = Vec::new();
    let mut path = "/v1/rests".to_string();
    loop {
        let (size, page) = get(path).await;
        assert!(size < 64 * 1024, "a page is {size} bytes");
        assert_eq!(page["total"], UNNAMED_RESTS + 1, "{page}");
        for r in page["rests"].as_array().expect("rests") {
            listed.push(format!("{}/{}", r["scope"], r["key"]));
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/rests?after={next}&limit=300"),
            None => break,
        }
    }
    let unique: std::collections::BTreeSet<&String> = listed.iter().collect();
    assert_eq!(
        (listed.len(), unique.len()),
        (UNNAMED_RESTS + 1, UNNAMED_RESTS + 1)
    );
    assert!(
        listed.contains(&format!("\"pool\"/\"{POOL}\"")),
        "the pool rest is kept"
    );
    let (_, bad) = get("/v1/rests?limit=501".into()).await;
    assert_eq!(code(&bad), "invalid_request");
    let metrics = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth("api-token-1")
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    let dropped = format!("freeway_rests_dropped_total {}", made_up - UNNAMED_RESTS);
    assert!(metrics.contains(&dropped), "{metrics}");
}
