//! The classification table of docs/design.md §3, on every 429/402 variant of docs/providers.md
//! §2 (#1–#18), in their 2025 and 2026 shapes, on shared and off-quota routes.
//!
//! Bodies are the notes' reconstructions, verbatim (placeholders included): the classifier must
//! read exactly what OpenRouter, Groq and OpenAI send.

use freeway::catalog::Catalog;
use freeway::classify::{
    CIRCUIT_MS, Classification, DEFAULT_REST_MS, MIN_REST_MS, RestLength, RestScope, Verdict,
    classify, classify_response, rest_ms,
};
use freeway::headers::Headers;
use freeway::provider::{CallError, InBandError, TransportError};
use freeway::route::Route;

const LLAMA_FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
const OPENROUTER_FREE: &str = "openrouter/free";
const PAID: &str = "openai/gpt-4o-mini";
const USER_FREE: &str = "x:free@conn_1";
const SHARED: [&str; 2] = [LLAMA_FREE, OPENROUTER_FREE];

/// 2026-07-26T09:04:30Z: 30 s before variant A's per-minute reset.
const NOW_A: u64 = 1_785_056_670_000;
const RESET_A: u64 = 1_785_056_700_000;

fn route(s: &str) -> Route {
    Route::parse(s, &Catalog::builtin()).expect("test routes are valid")
}

/// Groq's route, built by hand: the classifier must read any provider's answer, whichever
/// providers this build lets a job name.
fn groq_route() -> Route {
    Route {
        provider: "groq".into(),
        model: "llama-3.3-70b-versatile".into(),
        connection: freeway::route::Connection::Platform,
        pool: None,
        dialect: freeway::dialect::Dialect::Groq,
        day: freeway::dialect::DayClock::Rolling,
        pace: None,
    }
}

/// A header name and value.
type Pair<'a> = (&'a str, &'a str);

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().copied().collect()
}

fn run(status: u16, hs: &[(&str, &str)], body: &str, route_arg: &str, now: u64) -> Classification {
    classify_response(
        status,
        &headers(hs),
        body.as_bytes(),
        &route(route_arg),
        now,
    )
}

/// The scope a case expects, relative to its route.
#[derive(Debug, Clone, Copy)]
enum Scope {
    Pool,
    ThisRoute,
    Connection(&'static str),
    None,
}

impl Scope {
    fn of(self, route: &Route) -> RestScope {
        match self {
            Scope::Pool => RestScope::Pool("openrouter-free".into()),
            Scope::ThisRoute => RestScope::Route {
                pool: route.pool.clone(),
                route_key: route.key(),
            },
            Scope::Connection(id) => RestScope::Connection(id.into()),
            Scope::None => RestScope::None,
        }
    }
}

#[track_caller]
fn expect(c: &Classification, route_arg: &str, verdict: Verdict, scope: Scope, rule: &str) {
    assert_eq!(c.verdict, verdict, "verdict on {route_arg}: {c:?}");
    assert_eq!(
        c.scope,
        scope.of(&route(route_arg)),
        "scope on {route_arg}: {c:?}"
    );
    assert_eq!(c.rule, rule, "rule on {route_arg}: {c:?}");
    assert_eq!(
        c.evidence,
        verdict == Verdict::Ambiguous,
        "evidence on {route_arg}: {c:?}"
    );
    assert_eq!(
        c.length.is_some(),
        !matches!(scope, Scope::None),
        "length on {route_arg}: {c:?}"
    );
}

// ---- docs/providers.md §2.2 A: platform per-minute free-model limit (#1) ----

const A_HEADERS: [(&str, &str); 3] = [
    ("X-RateLimit-Limit", "20"),
    ("X-RateLimit-Remaining", "0"),
    ("X-RateLimit-Reset", "1785056700000"),
];

const A_2026: &str = r#"{
  "error": {
    "message": "Rate limit exceeded: free-models-per-min. ",
    "code": 429,
    "metadata": {
      "headers": {"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1785056700000"},
      "provider_name": null,
      "limit_source": "openrouter_free_tier_per_minute",
      "remedy_hint": "Slow down requests to free models, or retry after the per-minute window resets."
    }
  },
  "user_id": "user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"
}"#;

const A_2025: &str = r#"{
  "error": {
    "message": "Rate limit exceeded: free-models-per-min.",
    "code": 429,
    "metadata": {
      "headers": {"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1785056700000"},
      "provider_name": null
    }
  },
  "user_id": "user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"
}"#;

/// The 2025 body without its echo: the signal is in the real headers only.
const A_2025_NO_ECHO: &str = r#"{"error":{"message":"Rate limit exceeded: free-models-per-min.","code":429,"metadata":{"provider_name":null}},"user_id":"user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"}"#;

#[test]
fn a_per_minute_2026_rests_the_pool_until_the_reset() {
    for r in SHARED {
        let c = run(429, &A_HEADERS, A_2026, r, NOW_A);
        expect(&c, r, Verdict::Account, Scope::Pool, "0:limit_source");
        assert_eq!(c.length, Some(RestLength::Until(RESET_A)));
        assert_eq!(c.rest_ms(NOW_A), 30_000);
        assert_eq!(c.ratelimit_remaining, Some(0));
        assert_eq!(c.retry_hint_ms, None);
        assert_eq!(c.provider_name, None);
    }
}

#[test]
fn a_per_minute_2025_is_read_from_the_headers_wherever_they_are() {
    let lowercase: Vec<(&str, &str)> = vec![
        ("x-ratelimit-limit", "20"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1785056700000"),
    ];
    let shouting: Vec<(&str, &str)> = vec![("X-RATELIMIT-RESET", "1785056700000")];
    let variants: [(&str, &[Pair<'_>], &str); 5] = [
        ("real and echo", &A_HEADERS, A_2025),
        ("echo only", &[], A_2025),
        ("real only", &A_HEADERS, A_2025_NO_ECHO),
        ("lowercase real only (HTTP/2)", &lowercase, A_2025_NO_ECHO),
        ("upper-case real only", &shouting, A_2025_NO_ECHO),
    ];
    for r in SHARED {
        for (name, hs, body) in variants {
            let c = run(429, hs, body, r, NOW_A);
            expect(&c, r, Verdict::Account, Scope::Pool, "1:x-ratelimit");
            assert_eq!(c.length, Some(RestLength::Until(RESET_A)), "{name}");
            assert_eq!(c.rest_ms(NOW_A), 30_000, "{name}");
        }
    }
    let c = run(429, &[], A_2025, LLAMA_FREE, NOW_A);
    assert_eq!(
        c.ratelimit_remaining,
        Some(0),
        "the echo feeds the attempt log too"
    );
}

#[test]
fn a_with_a_limit_of_16_is_the_same_account_limit() {
    let body = A_2025.replace(
        r#""X-RateLimit-Limit": "20""#,
        r#""X-RateLimit-Limit": "16""#,
    );
    let c = run(429, &[], &body, LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Account,
        Scope::Pool,
        "1:x-ratelimit",
    );
}

#[test]
fn a_on_a_user_connection_rests_that_route_alone() {
    for body in [A_2026, A_2025] {
        let c = run(429, &A_HEADERS, body, USER_FREE, NOW_A);
        expect(&c, USER_FREE, Verdict::Route, Scope::ThisRoute, "off_quota");
        assert_eq!(
            c.scope,
            RestScope::Route {
                pool: None,
                route_key: "conn:conn_1/x:free".into()
            }
        );
        assert_eq!(c.length, Some(RestLength::Until(RESET_A)));
    }
}

#[test]
fn a_pool_rest_takes_retry_after_over_the_reset() {
    let mut hs = A_HEADERS.to_vec();
    hs.push(("Retry-After", "7"));
    let c = run(429, &hs, A_2026, LLAMA_FREE, NOW_A);
    assert_eq!(c.length, Some(RestLength::For(7_000)));
    assert_eq!(c.retry_hint_ms, Some(7_000));
}

#[test]
fn a_reset_in_the_past_rests_one_second() {
    let c = run(429, &A_HEADERS, A_2026, LLAMA_FREE, RESET_A + 5_000);
    assert_eq!(c.length, Some(RestLength::Until(RESET_A)));
    assert_eq!(c.rest_ms(RESET_A + 5_000), MIN_REST_MS);
}

#[test]
fn a_reset_that_is_not_epoch_ms_is_ignored() {
    let hs = [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Reset", "1785056700"),
    ];
    let c = run(429, &hs, "", LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Account,
        Scope::Pool,
        "1:x-ratelimit",
    );
    assert_eq!(c.length, Some(RestLength::Guess(DEFAULT_REST_MS)));
}

// ---- docs/providers.md §2.2 B and C: platform daily limits (#2, #3) ----

const B_2026: &str = r#"{
  "error": {
    "message": "Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day",
    "code": 429,
    "metadata": {
      "headers": {"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1779321600000"},
      "provider_name": null,
      "limit_source": "openrouter_free_tier_daily",
      "remedy_hint": "Wait for the daily reset (see X-RateLimit-Reset), or purchase credits to raise your free-model daily limit."
    }
  },
  "user_id": "user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"
}"#;

const B_2025: &str = r#"{"error":{"message":"Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"50","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1779321600000"},"provider_name":null}},"user_id":"user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"}"#;

/// Six hours before B's reset (the next UTC midnight).
const NOW_B: u64 = 1_779_321_600_000 - 6 * 3_600_000;

const C_2026: &str = r#"{
  "error": {
    "message": "Rate limit exceeded: free-models-per-day-high-balance. ",
    "code": 429,
    "metadata": {
      "headers": {"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1790985600000"},
      "limit_source": "openrouter_free_tier_daily",
      "remedy_hint": "Wait for the daily reset (see X-RateLimit-Reset)"
    }
  }
}"#;

const NOW_C: u64 = 1_790_985_600_000 - 3 * 3_600_000;

/// OpenRouter's day is a fixed UTC clock: a spent day rests the pool until UTC midnight, not the
/// 300 s cap of a minute's rest (docs/design.md §3.2).
#[test]
fn b_and_c_daily_limits_rest_the_pool_until_utc_midnight() {
    for r in SHARED {
        for (body, now, rule) in [
            (B_2026, NOW_B, "0:limit_source"),
            (B_2025, NOW_B, "1:x-ratelimit"),
            (C_2026, NOW_C, "0:limit_source"),
        ] {
            let c = run(429, &[], body, r, now);
            expect(&c, r, Verdict::Account, Scope::Pool, rule);
            let midnight = freeway::day::next_midnight_ms(chrono_tz::UTC, now);
            assert_eq!(c.length, Some(RestLength::Long(midnight)));
            assert!(c.day);
            assert_eq!(c.rest_ms(now), midnight - now);
        }
    }
}

#[test]
fn a_daily_limit_on_a_user_connection_rests_that_route_until_utc_midnight() {
    let c = run(429, &[], B_2026, USER_FREE, NOW_B);
    expect(&c, USER_FREE, Verdict::Route, Scope::ThisRoute, "off_quota");
    assert_eq!(c.length, Some(RestLength::Long(1_779_321_600_000)));
    assert_eq!(c.rest_ms(NOW_B), 1_779_321_600_000 - NOW_B);
}

// ---- docs/providers.md §2.3 D: per-model "high demand" cap (#4, #5) ----

const D_JUL_2026: &str = r#"{
  "error": {
    "message": "Rate limit exceeded: limit_rpm/qwen/qwen3-coder-480b-a35b-07-25/a9bbd882-011f-4606-8f60-85f3cb642586. High demand for qwen/qwen3-coder:free on OpenRouter - limited to 8 requests per minute. Please retry shortly.",
    "code": 429,
    "metadata": {
      "headers": {"X-RateLimit-Limit": "8", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1783519380000"},
      "provider_name": null
    }
  }
}"#;

const D_SEP_2026: &str = r#"{"error":{"message":"Rate limit exceeded: cohere/north-mini-code-20260617/<uuid>. High demand for cohere/north-mini-code:free on OpenRouter - limited to 15 requests per minute. Please retry shortly.","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"15","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1783519380000"},"provider_name":null,"limit_source":"openrouter_shared_capacity","remedy_hint":"Retry shortly, or add your own provider key …"}}}"#;

/// #5: the April 2025 per-day variant, with the provider named.
const D_APR_2025_RPD: &str = r#"{"error":{"message":"Rate limit exceeded: limit_rpd/google/gemini-2.0-flash-thinking-exp-01-21/<uuid>","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"80","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1745107200000"},"provider_name":"Google AI Studio"}}}"#;

const RESET_D: u64 = 1_783_519_380_000;

#[test]
fn d_high_demand_rests_this_route_for_all_users() {
    for r in SHARED {
        let c = run(429, &[], D_JUL_2026, r, RESET_D - 20_000);
        expect(&c, r, Verdict::Route, Scope::ThisRoute, "0:capacity");
        assert_eq!(c.length, Some(RestLength::Until(RESET_D)));
        assert_eq!(c.rest_ms(RESET_D - 20_000), 20_000);

        let c = run(429, &[], D_SEP_2026, r, RESET_D - 20_000);
        expect(&c, r, Verdict::Route, Scope::ThisRoute, "0:limit_source");
        assert_eq!(c.length, Some(RestLength::Until(RESET_D)));
    }
    let c = run(429, &[], D_JUL_2026, LLAMA_FREE, 0);
    assert_eq!(
        c.scope,
        RestScope::Route {
            pool: Some("openrouter-free".into()),
            route_key: "platform:openrouter/meta-llama/llama-3.3-70b-instruct:free".into()
        }
    );
}

#[test]
fn d_per_day_model_cap_rests_the_route_not_the_pool() {
    let now = 1_745_107_200_000 - 10 * 3_600_000;
    let c = run(429, &[], D_APR_2025_RPD, LLAMA_FREE, now);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Route,
        Scope::ThisRoute,
        "0:capacity",
    );
    // A per-day cap is a spent day: it rests until OpenRouter's day ends (UTC midnight).
    assert!(c.day);
    assert_eq!(c.rest_ms(now), 10 * 3_600_000);
    assert_eq!(c.provider_name.as_deref(), Some("Google AI Studio"));
}

#[test]
fn d_on_off_quota_routes_is_a_route_rest() {
    for r in [PAID, USER_FREE] {
        let c = run(429, &[], D_SEP_2026, r, RESET_D - 20_000);
        expect(&c, r, Verdict::Route, Scope::ThisRoute, "off_quota");
    }
}

// ---- docs/providers.md §2.4 E and F: upstream provider (#6) ----

const E_2026: &str = r#"{
  "error": {
    "message": "Provider returned error",
    "code": 429,
    "metadata": {
      "raw": "deepseek/deepseek-v4-flash is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations",
      "provider_name": "DigitalOcean",
      "is_byok": false,
      "limit_source": "upstream_provider_shared_pool",
      "remedy_hint": "Retry shortly, add your own provider key (https://openrouter.ai/settings/integrations), or route to another provider with provider routing: https://openrouter.ai/docs/features/provider-routing"
    }
  },
  "user_id": "user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"
}"#;

const E_2025: &str = r#"{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"google/gemini-2.0-flash-exp:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations","provider_name":"Google AI Studio"}},"user_id":"user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"}"#;

const F: &str = r#"{
  "error": {
    "message": "Provider returned error",
    "code": 429,
    "metadata": {
      "raw": "meta-llama/llama-3.3-70b-instruct:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations",
      "provider_name": "Venice",
      "is_byok": false,
      "retry_after_seconds": 17,
      "retry_after_seconds_raw": 16.007,
      "headers": {"Retry-After": "17"}
    }
  },
  "user_id": "user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"
}"#;

#[test]
fn e_upstream_pool_rests_the_route() {
    for r in SHARED {
        let c = run(429, &[], E_2026, r, NOW_A);
        expect(&c, r, Verdict::Provider, Scope::ThisRoute, "0:limit_source");
        assert_eq!(c.length, Some(RestLength::Guess(DEFAULT_REST_MS)));
        assert_eq!(c.provider_name.as_deref(), Some("DigitalOcean"));

        let c = run(429, &[], E_2025, r, NOW_A);
        expect(
            &c,
            r,
            Verdict::Provider,
            Scope::ThisRoute,
            "2:provider_marker",
        );
        assert_eq!(c.provider_name.as_deref(), Some("Google AI Studio"));

        let c = run(429, &[("retry-after", "9")], E_2026, r, NOW_A);
        assert_eq!(c.length, Some(RestLength::For(9_000)));
    }
}

#[test]
fn f_upstream_retry_hint_sets_the_route_rest() {
    for r in SHARED {
        let c = run(429, &[("Retry-After", "17")], F, r, NOW_A);
        expect(
            &c,
            r,
            Verdict::Provider,
            Scope::ThisRoute,
            "2:provider_marker",
        );
        assert_eq!(c.length, Some(RestLength::For(17_000)));
        assert_eq!(c.retry_hint_ms, Some(17_000));
    }
    // The echo alone, or `retry_after_seconds` alone, carries the hint too.
    let c = run(429, &[], F, LLAMA_FREE, NOW_A);
    assert_eq!(c.length, Some(RestLength::For(17_000)));
    let no_echo = F.replace(r#""headers": {"Retry-After": "17"}"#, r#""headers": {}"#);
    let c = run(429, &[], &no_echo, LLAMA_FREE, NOW_A);
    assert_eq!(c.length, Some(RestLength::For(17_000)));
    // A real header comes before the echo and before `retry_after_seconds`.
    let c = run(429, &[("Retry-After", "5")], F, LLAMA_FREE, NOW_A);
    assert_eq!(c.length, Some(RestLength::For(5_000)));
}

#[test]
fn e_and_f_on_off_quota_routes_are_provider_route_rests() {
    for r in [PAID, USER_FREE] {
        for body in [E_2026, E_2025, F] {
            let c = run(429, &[], body, r, NOW_A);
            expect(&c, r, Verdict::Provider, Scope::ThisRoute, "off_quota");
        }
    }
    let c = run(429, &[], F, USER_FREE, NOW_A);
    assert_eq!(c.length, Some(RestLength::For(17_000)));
}

// ---- docs/providers.md §2.4 G and H, OpenAPI bare 429 (#7, #8, #9) ----

const G: &str = r#"{"error": {"code": 429, "message": "Rate limit exceeded",
           "metadata": {"error_type": "rate_limit_exceeded", "provider_code": "rate_limited"}}}"#;

const G_WITHOUT_PROVIDER: &str = r#"{"error": {"code": 429, "message": "Rate limit exceeded", "metadata": {"error_type": "rate_limit_exceeded"}}}"#;

const BARE_429: &str = r#"{"error":{"code":429,"message":"Rate limit exceeded"}}"#;

const H: &str = r#"{
  "error": {
    "message": "All providers for anthropic/claude-sonnet-4.5 are at capacity. Retry after 40 seconds.",
    "error_type": "rate_limit_exceeded",
    "http_status": 429,
    "availability": {
      "code": "capacity_exhausted", "retryable": true, "retry_after": 40,
      "requested_models": ["anthropic/claude-sonnet-4.5"],
      "affected_providers": ["anthropic", "amazon-bedrock", "google-vertex"],
      "fallback_models": ["anthropic/claude-haiku-4.5"],
      "docs_url": "https://openrouter.ai/docs/errors#capacity_exhausted"
    },
    "metadata": {"previous_errors": [
      {"provider": "anthropic", "code": "capacity_exhausted", "status": 429},
      {"provider": "amazon-bedrock", "code": "capacity_exhausted", "status": 429}
    ]}
  }
}"#;

#[test]
fn g_typed_with_provider_code_is_the_provider() {
    for r in SHARED {
        let c = run(429, &[], G, r, NOW_A);
        expect(
            &c,
            r,
            Verdict::Provider,
            Scope::ThisRoute,
            "2:provider_marker",
        );
        let c = run(429, &[("Retry-After", "3")], G, r, NOW_A);
        assert_eq!(c.length, Some(RestLength::For(3_000)));
    }
}

#[test]
fn typed_without_a_provider_marker_is_the_account() {
    for r in SHARED {
        let c = run(429, &[], G_WITHOUT_PROVIDER, r, NOW_A);
        expect(
            &c,
            r,
            Verdict::Account,
            Scope::Pool,
            "3:rate_limit_exceeded",
        );
        assert_eq!(c.length, Some(RestLength::Guess(DEFAULT_REST_MS)));
    }
}

/// #7 is one model at capacity (`availability.code` `capacity_exhausted`): rule 0 rests that
/// route, not the pool, although its `error_type` is `rate_limit_exceeded` (rule 3).
#[test]
fn h_capacity_exhausted_follows_the_table() {
    let c = run(429, &[("Retry-After", "40")], H, LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Route,
        Scope::ThisRoute,
        "0:capacity",
    );
    assert_eq!(c.length, Some(RestLength::For(40_000)));
    let c = run(429, &[("Retry-After", "40")], H, PAID, NOW_A);
    expect(&c, PAID, Verdict::Route, Scope::ThisRoute, "off_quota");
    assert_eq!(c.length, Some(RestLength::For(40_000)));
}

#[test]
fn bare_429_is_ambiguous_on_shared_routes() {
    for r in SHARED {
        let c = run(429, &[], BARE_429, r, NOW_A);
        expect(&c, r, Verdict::Ambiguous, Scope::ThisRoute, "4:ambiguous");
        assert_eq!(c.length, Some(RestLength::Guess(DEFAULT_REST_MS)));
    }
    for r in [PAID, USER_FREE] {
        let c = run(429, &[], BARE_429, r, NOW_A);
        expect(&c, r, Verdict::Route, Scope::ThisRoute, "off_quota");
    }
}

// ---- #10 Cloudflare, #11 mid-stream ----

const CLOUDFLARE: &str = "<!DOCTYPE html>\n<html><head><title>Attention Required! | Cloudflare</title></head>\n<body><h1>Sorry, you have been blocked</h1><p>Ray ID: 8a1b2c3d4e5f6789</p></body></html>";

#[test]
fn cloudflare_html_429_carries_no_signal() {
    let hs = [
        ("Content-Type", "text/html; charset=UTF-8"),
        ("Server", "cloudflare"),
        ("CF-RAY", "8a1b2c3d4e5f6789-FRA"),
    ];
    for r in SHARED {
        let c = run(429, &hs, CLOUDFLARE, r, NOW_A);
        expect(&c, r, Verdict::Ambiguous, Scope::ThisRoute, "4:ambiguous");
    }
    let c = run(429, &hs, CLOUDFLARE, PAID, NOW_A);
    expect(&c, PAID, Verdict::Route, Scope::ThisRoute, "off_quota");
}

#[test]
fn mid_stream_errors_take_the_in_band_path() {
    let chunk: serde_json::Value = serde_json::from_str(
        r#"{"id":"gen-abc123","object":"chat.completion.chunk","created":1234567890,"model":"openai/gpt-4o","provider":"OpenAI","error":{"code":429,"message":"Rate limit exceeded","metadata":{"error_type":"rate_limit_exceeded"}},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
    )
    .expect("valid chunk");
    let error = InBandError {
        code: Some(429),
        code_text: None,
        message: "Rate limit exceeded".into(),
        error: chunk["error"].clone(),
    };
    assert!(error.is_rate_limit());
    for r in [LLAMA_FREE, OPENROUTER_FREE, PAID, USER_FREE] {
        let c = classify(
            &CallError::InBand {
                error: error.clone(),
                partial: "Hel".into(),
            },
            &route(r),
            NOW_A,
        );
        expect(&c, r, Verdict::Server, Scope::None, "in_band");
    }
    let upstream: serde_json::Value = serde_json::from_str(
        r#"{"code":502,"message":"Provider returned error","metadata":{"raw":"upstream connect error","provider_name":"Together"}}"#,
    )
    .expect("valid error");
    let error = InBandError {
        code: Some(502),
        code_text: None,
        message: "Provider returned error".into(),
        error: upstream,
    };
    let c = classify(
        &CallError::InBand {
            error,
            partial: String::new(),
        },
        &route(LLAMA_FREE),
        NOW_A,
    );
    assert_eq!(c.provider_name.as_deref(), Some("Together"));
}

#[test]
fn transport_errors_are_server_failures() {
    for e in [
        TransportError::Connect("refused".into()),
        TransportError::FirstByteTimeout,
        TransportError::Truncated,
    ] {
        let c = classify(&CallError::Transport(e), &route(LLAMA_FREE), NOW_A);
        expect(&c, LLAMA_FREE, Verdict::Server, Scope::None, "transport");
    }
}

#[test]
fn classify_reads_http_errors_like_classify_response() {
    let error = CallError::Http {
        status: 429,
        headers: headers(&A_HEADERS),
        body: A_2026.as_bytes().to_vec().into(),
    };
    assert_eq!(
        classify(&error, &route(LLAMA_FREE), NOW_A),
        run(429, &A_HEADERS, A_2026, LLAMA_FREE, NOW_A)
    );
}

// ---- docs/providers.md §2.5 402s (#12–#17) ----

const P12_2026: &str = r#"{"error": {"message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits", "code": 402,
           "metadata": {"limit_source": "openrouter_credits",
                        "remedy_hint": "Add credits at https://openrouter.ai/settings/credits, or lower max_tokens / prompt size to fit your remaining balance."}}}"#;

const P12_2025: &str = r#"{"error": {"message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits", "code": 402}}"#;

const P13: &str = r#"{"error": {"message": "Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits", "code": 402, "metadata": {"limit_source": "openrouter_credits"}}}"#;

const P14: &str = r#"{"error": {"message": "This request requires more credits, or fewer max_tokens. You requested up to 65536 tokens, but can only afford 570. To increase, visit https://openrouter.ai/settings/credits and add more credits",
           "code": 402,
           "metadata": {"limit_source": "openrouter_credits", "remedy_hint": "Add credits at …", "provider_name": null,
                        "previous_errors": [{"code": 402, "message": "This request requires more credits, … can only afford 570. …"}]}},
 "user_id": "user_XXXX"}"#;

const P15: &str = r#"{"error": {"message": "This request would exceed your available credits given your current in-flight requests. Retry after in-flight requests settle, or add credits.",
           "code": 402,
           "metadata": {"reason": "in_flight_budget_exhausted", "limit_source": "openrouter_in_flight_budget",
                        "remedy_hint": "Retry after your in-flight requests settle (see the Retry-After header). Adding credits at https://openrouter.ai/settings/credits raises your in-flight budget, up to a capped ceiling."}}}"#;

const P16: &str = r#"{"error": {"message": "This request requires more credits, or fewer max_tokens.", "code": 402, "metadata": {"reason": "weight_exceeds_budget", "limit_source": "openrouter_credits"}}}"#;

/// #17: the text of a negative-balance 402 is undocumented; a body with no signal stands for it.
const P17: &str = r#"{"error": {"message": "Payment required", "code": 402}}"#;

#[test]
fn credits_402s_open_the_platform_circuit() {
    for r in SHARED {
        for body in [P12_2026, P13, P14, P16] {
            let c = run(402, &[], body, r, NOW_A);
            expect(
                &c,
                r,
                Verdict::Billing,
                Scope::Connection("platform:openrouter"),
                "3.1:billing",
            );
            assert_eq!(c.length, Some(RestLength::Guess(CIRCUIT_MS)));
            assert_eq!(c.rest_ms(NOW_A), 3_600_000);
        }
    }
}

/// A transient spend window is `billing_wait`: the connection rests for the hint, not an hour.
#[test]
fn in_flight_402_is_a_short_connection_rest_for_retry_after() {
    for r in [LLAMA_FREE, OPENROUTER_FREE, PAID] {
        let c = run(402, &[("Retry-After", "4")], P15, r, NOW_A);
        expect(
            &c,
            r,
            Verdict::BillingWait,
            Scope::Connection("platform:openrouter"),
            "3.1:billing_wait",
        );
        assert_eq!(c.length, Some(RestLength::For(4_000)));
        // Without the header the in-flight budget still says "wait", for the default.
        let c = run(402, &[], P15, r, NOW_A);
        assert_eq!(
            (c.verdict, c.rest_ms(NOW_A)),
            (Verdict::BillingWait, 60_000)
        );
    }
}

/// A 402 from OpenRouter on any platform route without a retry hint is billing: a negative
/// balance blocks free models too (docs/design.md §3.1), whatever the body says.
#[test]
fn a_402_without_a_signal_on_an_openrouter_platform_route_is_billing() {
    for r in [LLAMA_FREE, OPENROUTER_FREE, PAID] {
        for body in [P17, "", "<html>402</html>"] {
            let c = run(402, &[], body, r, NOW_A);
            expect(
                &c,
                r,
                Verdict::Billing,
                Scope::Connection("platform:openrouter"),
                "3.1:402",
            );
        }
        // With a hint and no sign of missing credits, it is a spend window.
        let c = run(402, &[("Retry-After", "4")], P17, r, NOW_A);
        assert_eq!(c.verdict, Verdict::BillingWait);
    }
}

/// Whatever the route, a body that says credits are missing opens its connection's circuit, with
/// or without a hint; a user's own key keeps its own circuit.
#[test]
fn a_402_that_says_credits_are_missing_opens_the_connection_circuit() {
    for body in [P12_2026, P12_2025, P13, P14, P16] {
        for (r, connection) in [
            (PAID, "platform:openrouter"),
            (LLAMA_FREE, "platform:openrouter"),
            (USER_FREE, "conn:conn_1"),
        ] {
            for hs in [&[("Retry-After", "4")][..], &[]] {
                let c = run(402, hs, body, r, NOW_A);
                expect(
                    &c,
                    r,
                    Verdict::Billing,
                    Scope::Connection(connection),
                    "3.1:billing",
                );
                assert_eq!(c.length, Some(RestLength::Guess(CIRCUIT_MS)));
            }
        }
    }
    // A user's key with a bare 402 is still that connection's billing problem.
    for body in [P17, ""] {
        let c = run(402, &[], body, USER_FREE, NOW_A);
        expect(
            &c,
            USER_FREE,
            Verdict::Billing,
            Scope::Connection("conn:conn_1"),
            "off_quota",
        );
    }
}

// ---- 401 / 403 (#18, moderation, guardrail) ----

const KEY_LIMIT_403: &str = r#"{"error":{"message":"Key limit exceeded (monthly limit). Manage it using https://openrouter.ai/workspaces/default/keys/<hash>","code":403}}"#;
const KEY_LIMIT_TOTAL_403: &str =
    r#"{"error":{"message":"Key limit exceeded (total limit)","code":403}}"#;
const MODERATION_403: &str = r#"{"error": {"message": "meta-llama/llama-3.3-8b-instruct:free requires moderation on Meta. Your input was flagged for \"misc\". No credits were charged.",
           "code": 403,
           "metadata": {"reasons": ["misc"], "flagged_input": "You are a helpful AI assistant for a food delivery...nderstand you need help with: i want to order eba."}}}"#;
const GUARDRAIL_403: &str = r#"{"error":{"message":"Request blocked by guardrail","code":403,"metadata":{"patterns":["credit card number"]}}}"#;
const UNAUTHORIZED_401: &str = r#"{"error":{"code":401,"message":"No auth credentials found"}}"#;

#[test]
fn auth_failures_open_the_connection_circuit() {
    for (status, body) in [
        (403, KEY_LIMIT_403),
        (403, KEY_LIMIT_TOTAL_403),
        (401, UNAUTHORIZED_401),
        (401, ""),
    ] {
        for r in [LLAMA_FREE, OPENROUTER_FREE, PAID] {
            let c = run(status, &[], body, r, NOW_A);
            expect(
                &c,
                r,
                Verdict::Auth,
                Scope::Connection("platform:openrouter"),
                "auth",
            );
            assert_eq!(c.rest_ms(NOW_A), 3_600_000);
        }
        let c = run(status, &[], body, USER_FREE, NOW_A);
        expect(
            &c,
            USER_FREE,
            Verdict::Auth,
            Scope::Connection("conn:conn_1"),
            "auth",
        );
    }
}

#[test]
fn moderation_and_guardrails_are_client_errors() {
    let message_only =
        r#"{"error":{"message":"x/y:free requires moderation on Meta.","code":403}}"#;
    for body in [MODERATION_403, GUARDRAIL_403, message_only] {
        for r in [LLAMA_FREE, PAID, USER_FREE] {
            let c = run(403, &[], body, r, NOW_A);
            expect(&c, r, Verdict::Client, Scope::None, "moderation");
        }
    }
}

// ---- other statuses ----

#[test]
fn client_and_server_statuses() {
    let privacy_404 = r#"{"error":{"message":"No endpoints found matching your data policy (Free model publication). Configure: https://openrouter.ai/settings/privacy","code":404}}"#;
    let models_400 =
        r#"{"error":{"message":"'models' array must have 3 items or fewer.","code":400}}"#;
    let masked_500 = r#"{"error":{"message":"Internal Server Error","code":500}}"#;
    let provider_502 = r#"{"error":{"message":"Provider returned error","code":502,"metadata":{"raw":"upstream connect error","provider_name":"Together"}}}"#;
    for r in [LLAMA_FREE, PAID, USER_FREE] {
        for (status, body) in [
            (400, models_400),
            (404, privacy_404),
            (413, ""),
            (422, "{}"),
            (409, ""),
        ] {
            let c = run(status, &[], body, r, NOW_A);
            expect(&c, r, Verdict::Client, Scope::None, "client");
        }
        for (status, body) in [
            (408, ""),
            (500, masked_500),
            (502, provider_502),
            (503, ""),
            (524, ""),
            (529, ""),
        ] {
            let c = run(status, &[], body, r, NOW_A);
            expect(&c, r, Verdict::Server, Scope::None, "server");
        }
    }
    let c = run(502, &[], provider_502, LLAMA_FREE, NOW_A);
    assert_eq!(c.provider_name.as_deref(), Some("Together"));
}

// ---- Groq and OpenAI (docs/providers.md §4, §5) ----

const GROQ_429: &str = r#"{
  "error": {
    "message": "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01kes94v04f9ramd2n1vj4gjnc` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 2542, Requested 9855. Please try again in 1.984999999s. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing",
    "type": "tokens",
    "code": "rate_limit_exceeded"
  }
}"#;

const GROQ_413: &str = r#"{"error":{"message":"Request too large for model `llama-3.1-8b-instant` in organization `org_…` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 12328, please reduce your message size and try again. …","type":"tokens","code":"rate_limit_exceeded"}}"#;

const OPENAI_429: &str = r#"{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-… on tokens per min (TPM): Limit 200000, Used 130491, Requested 75418. Please try again in 1.772s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;

const OPENAI_QUOTA_2023: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":null}}"#;

const OPENAI_QUOTA_2026: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"credit_balance_exhausted"}}"#;

const GROQ_HEADERS: [(&str, &str); 7] = [
    ("retry-after", "2"),
    ("x-ratelimit-limit-requests", "14400"),
    ("x-ratelimit-limit-tokens", "18000"),
    ("x-ratelimit-remaining-requests", "14370"),
    ("x-ratelimit-remaining-tokens", "17997"),
    ("x-ratelimit-reset-requests", "2m59.56s"),
    ("x-ratelimit-reset-tokens", "7.66s"),
];

#[test]
fn groq_429_rests_its_route_for_retry_after() {
    let groq = groq_route();
    assert_eq!(groq.pool, None);
    let c = classify_response(
        429,
        &headers(&GROQ_HEADERS),
        GROQ_429.as_bytes(),
        &groq,
        NOW_A,
    );
    assert_eq!(c.verdict, Verdict::Route);
    assert_eq!(c.rule, "off_quota");
    assert_eq!(
        c.scope,
        RestScope::Route {
            pool: None,
            route_key: "platform:groq/llama-3.3-70b-versatile".into()
        }
    );
    assert_eq!(c.length, Some(RestLength::For(2_000)));
    assert_eq!(c.ratelimit_remaining, Some(14_370));
    assert!(!c.evidence);

    let c = classify_response(
        413,
        &headers(&GROQ_HEADERS),
        GROQ_413.as_bytes(),
        &groq,
        NOW_A,
    );
    assert_eq!(
        (c.verdict, c.scope, c.rule),
        (Verdict::Client, RestScope::None, "3.3:too_large")
    );
}

#[test]
fn openai_bodies_on_off_quota_routes() {
    let hs = [("x-ratelimit-remaining-requests", "0")];
    for r in [PAID, USER_FREE] {
        // "Please try again in 1.772s" is the hint.
        let c = run(429, &hs, OPENAI_429, r, NOW_A);
        expect(&c, r, Verdict::Route, Scope::ThisRoute, "off_quota");
        assert_eq!(c.length, Some(RestLength::For(1_772)));
        assert_eq!(c.ratelimit_remaining, Some(0));
    }
    // An exhausted quota is billing, not something to wait out (docs/design.md §3.1).
    for body in [OPENAI_QUOTA_2023, OPENAI_QUOTA_2026] {
        for (r, connection) in [(PAID, "platform:openrouter"), (USER_FREE, "conn:conn_1")] {
            let c = run(429, &hs, body, r, NOW_A);
            expect(
                &c,
                r,
                Verdict::Billing,
                Scope::Connection(connection),
                "3.1:billing",
            );
        }
    }
}

// ---- codes of every type, wrapped bodies, malformed bodies ----

#[test]
fn a_string_code_rate_limit_exceeded_is_typed() {
    let c = run(429, &[], OPENAI_429, LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Account,
        Scope::Pool,
        "3:rate_limit_exceeded",
    );
    let c = run(429, &[], GROQ_429, OPENROUTER_FREE, NOW_A);
    expect(
        &c,
        OPENROUTER_FREE,
        Verdict::Account,
        Scope::Pool,
        "3:rate_limit_exceeded",
    );
    let typed =
        r#"{"error":{"message":"Rate limit exceeded","code":429,"type":"rate_limit_exceeded"}}"#;
    let c = run(429, &[], typed, LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Account,
        Scope::Pool,
        "3:rate_limit_exceeded",
    );
}

#[test]
fn numeric_string_null_and_other_codes_carry_no_signal() {
    for body in [
        r#"{"error":{"code":"429","message":"Rate limit exceeded"}}"#,
        r#"{"error":{"code":null,"message":"Rate limit exceeded"}}"#,
        r#"{"error":{"code":"server_error","message":"Rate limit exceeded"}}"#,
        r#"{"error":{"code":429.0,"message":"Rate limit exceeded"}}"#,
    ] {
        let c = run(429, &[], body, LLAMA_FREE, NOW_A);
        expect(
            &c,
            LLAMA_FREE,
            Verdict::Ambiguous,
            Scope::ThisRoute,
            "4:ambiguous",
        );
    }
}

#[test]
fn array_wrapped_bodies_read_like_the_plain_ones() {
    for body in [A_2026, D_JUL_2026, E_2026, F, G, P15] {
        let wrapped = format!("[{body}]");
        for r in [LLAMA_FREE, PAID] {
            let plain = run(429, &[], body, r, RESET_D - 20_000);
            assert_eq!(
                run(429, &[], &wrapped, r, RESET_D - 20_000),
                plain,
                "{wrapped}"
            );
        }
    }
    let gemini = r#"[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]"#;
    let c = run(429, &[], gemini, LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Ambiguous,
        Scope::ThisRoute,
        "4:ambiguous",
    );
}

#[test]
fn malformed_bodies_never_panic_and_carry_no_signal() {
    let bodies: [&[u8]; 12] = [
        b"",
        b"not json",
        b"{",
        b"[]",
        b"[1, 2]",
        b"null",
        b"42",
        br#"{"error":null}"#,
        br#"{"error":"Rate limit exceeded"}"#,
        br#"{"error":{"metadata":"nope","message":7}}"#,
        br#"{"error":{"metadata":{"headers":["X-RateLimit-Limit"],"retry_after_seconds":"soon"}}}"#,
        b"\xff\xfe\x00garbage",
    ];
    for body in bodies {
        for r in SHARED {
            let c = classify_response(429, &Headers::new(), body, &route(r), NOW_A);
            expect(&c, r, Verdict::Ambiguous, Scope::ThisRoute, "4:ambiguous");
            assert_eq!(c.length, Some(RestLength::Guess(DEFAULT_REST_MS)));
        }
        let c = classify_response(500, &Headers::new(), body, &route(PAID), NOW_A);
        assert_eq!(c.verdict, Verdict::Server);
    }
}

#[test]
fn echoed_headers_with_numeric_values_count() {
    let body = r#"{"error":{"code":429,"message":"Rate limit exceeded","metadata":{"headers":{"X-RateLimit-Remaining":0,"X-RateLimit-Reset":1785056700000}}}}"#;
    let c = run(429, &[], body, LLAMA_FREE, NOW_A);
    expect(
        &c,
        LLAMA_FREE,
        Verdict::Account,
        Scope::Pool,
        "1:x-ratelimit",
    );
    assert_eq!(c.length, Some(RestLength::Until(RESET_A)));
    assert_eq!(c.ratelimit_remaining, Some(0));
}

// ---- rest lengths ----

#[test]
fn rest_lengths_clamp_to_their_caps() {
    assert_eq!(
        rest_ms(
            RestLength::For(600_000),
            &RestScope::Pool("p".into()),
            NOW_A
        ),
        300_000
    );
    assert_eq!(
        rest_ms(RestLength::For(0), &RestScope::Pool("p".into()), NOW_A),
        1_000
    );
    assert_eq!(
        rest_ms(
            RestLength::Until(NOW_A - 1),
            &RestScope::Pool("p".into()),
            NOW_A
        ),
        1_000
    );
    assert_eq!(
        rest_ms(
            RestLength::Until(NOW_A + 12_345),
            &RestScope::Pool("p".into()),
            NOW_A
        ),
        12_345
    );
    assert_eq!(
        rest_ms(
            RestLength::For(7_200_000),
            &RestScope::Connection("c".into()),
            NOW_A
        ),
        3_600_000
    );
    // A reset just over the cap away is a far reset, a spent day: the pool rests until the day
    // clock's (UTC) midnight.
    let hs = [("X-RateLimit-Reset", "1785057000001")];
    let c = run(429, &hs, "", LLAMA_FREE, NOW_A);
    let midnight = freeway::day::next_midnight_ms(chrono_tz::UTC, NOW_A);
    assert_eq!(c.length, Some(RestLength::Long(midnight)));
    // A route rest of a far reset is a spent day too.
    let c = run(429, &hs, "", PAID, NOW_A);
    assert_eq!(c.length, Some(RestLength::Long(midnight)));
    // A Retry-After over the cap is a day refusal as well.
    let c = run(429, &[("Retry-After", "900")], A_2026, LLAMA_FREE, NOW_A);
    assert_eq!(c.length, Some(RestLength::Long(midnight)));
    assert_eq!(c.rest_ms(NOW_A), midnight - NOW_A);
}

// ---- dialects ----

/// Groq's `x-ratelimit-*` describe one model on one key; OpenRouter's describe the account.
/// The same 429 with no other signal is `account` on OpenRouter's pool (rule 1) and only
/// `ambiguous` on a Groq pool, whatever headers of Groq's shape it carries.
#[test]
fn rate_limit_headers_close_a_pool_only_where_the_dialect_makes_them_pool_wide() {
    let catalog = Catalog::from_toml(
        r#"
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
dialect = "groq"
[pools.groq-llama]
provider = "groq"
models = ["llama-*"]
connection = "each"
"#,
    )
    .expect("config");
    let groq = Route::parse("groq:llama-3.3-70b-versatile", &catalog).expect("route");
    assert_eq!(groq.pool.as_deref(), Some("groq-llama@platform"));
    let openrouter = route(LLAMA_FREE);
    let bare = r#"{"error":{"code":429,"message":"Too many requests"}}"#;
    for hs in [
        &[
            ("x-ratelimit-limit-requests", "30"),
            ("x-ratelimit-remaining-requests", "0"),
        ][..],
        &[("X-RateLimit-Limit", "20"), ("X-RateLimit-Remaining", "0")][..],
    ] {
        let on_groq = classify_response(429, &headers(hs), bare.as_bytes(), &groq, NOW_A);
        assert_eq!(
            (on_groq.verdict, on_groq.rule),
            (Verdict::Ambiguous, "4:ambiguous"),
            "{hs:?}"
        );
        let on_or = classify_response(429, &headers(hs), bare.as_bytes(), &openrouter, NOW_A);
        assert_eq!(
            (on_or.verdict, on_or.rule, on_or.scope),
            (
                Verdict::Account,
                "1:x-ratelimit",
                RestScope::Pool("openrouter-free".into())
            ),
            "{hs:?}"
        );
    }
    // Groq's own refusal names itself: its pool instance rests, for the Retry-After.
    let typed = r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on requests per minute (RPM): Limit 30, Used 30, Requested 1. Please try again in 2s.","type":"requests","code":"rate_limit_exceeded"}}"#;
    let c = classify_response(
        429,
        &headers(&[("retry-after", "2")]),
        typed.as_bytes(),
        &groq,
        NOW_A,
    );
    assert_eq!(c.scope, RestScope::Pool("groq-llama@platform".into()));
    assert_eq!(c.rest_ms(NOW_A), 2_000);
}

/// A catalog with a Groq and a Gemini model pool, each per key.
fn groq_and_gemini() -> Catalog {
    Catalog::from_toml(
        r#"
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
dialect = "groq"
[pools.groq-llama]
provider = "groq"
models = ["llama-*"]
[providers.gemini]
base_url = "https://generativelanguage.googleapis.com/v1beta/openai"
dialect = "gemini"
[pools.gemini-flash]
provider = "gemini"
models = ["gemini-*"]
"#,
    )
    .expect("config")
}

/// A day refusal on a fixed day clock rests until that zone's next midnight, whatever shorter
/// hint came with it; on a rolling day (Groq's) its hint wins, past the 300 s cap.
#[test]
fn day_refusals_rest_by_the_routes_day_clock() {
    let catalog = groq_and_gemini();
    let gemini = Route::parse("gemini:gemini-2.5-flash", &catalog).expect("route");
    let day = r#"[{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"36s"}]}}]"#;
    let c = classify_response(429, &Headers::new(), day.as_bytes(), &gemini, NOW_A);
    assert_eq!(c.scope, RestScope::Pool("gemini-flash".into()));
    let midnight = freeway::day::next_midnight_ms(chrono_tz::America::Los_Angeles, NOW_A);
    assert_eq!(c.rest_ms(NOW_A), midnight - NOW_A);
    // The same body naming the minute is an ordinary pool rest.
    let minute = day.replace("PerDay", "PerMinute");
    let c = classify_response(429, &Headers::new(), minute.as_bytes(), &gemini, NOW_A);
    assert!(c.rest_ms(NOW_A) <= 300_000, "{c:?}");

    let groq = Route::parse("groq:llama-3.3-70b-versatile", &catalog).expect("route");
    let tpd = r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on tokens per day (TPD): Limit 100000, Used 99800, Requested 950. Please try again in 9m38.016s.","type":"tokens","code":"rate_limit_exceeded"}}"#;
    let c = classify_response(
        429,
        &headers(&[("retry-after", "578")]),
        tpd.as_bytes(),
        &groq,
        NOW_A,
    );
    assert_eq!(c.rest_ms(NOW_A), 578_000, "{c:?}");
}

/// A rolling day's hint wins, but no rest is longer than a day (docs/design.md §3.2): a hint
/// of 114 h rests 24 h.
#[test]
fn a_rolling_days_hint_rests_a_day_at_most() {
    let catalog = groq_and_gemini();
    let groq = Route::parse("groq:llama-3.3-70b-versatile", &catalog).expect("route");
    let tpd = r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` on tokens per day (TPD): Limit 100000, Used 99800, Requested 950.","type":"tokens","code":"rate_limit_exceeded"}}"#;
    for (hint_s, rest_ms) in [
        ("410400", freeway::classify::ROLLING_DAY_CAP_MS),
        ("86400", 86_400_000),
        ("3600", 3_600_000),
    ] {
        let hs = headers(&[("retry-after", hint_s)]);
        let c = classify_response(429, &hs, tpd.as_bytes(), &groq, NOW_A);
        assert!(c.day, "{c:?}");
        assert_eq!(c.rest_ms(NOW_A), rest_ms, "a hint of {hint_s} s: {c:?}");
    }
}

/// A model dead whatever the status says it in: its name between "model" and "not found",
/// "is no longer available", or HTTP's 410 Gone. A "not found" that is not the model's is no
/// dead route.
#[test]
fn a_dead_model_in_any_wording_is_gone() {
    let openai =
        |msg: &str| format!(r#"{{"error":{{"message":{msg:?},"type":"invalid_request_error"}}}}"#);
    for (status, body) in [
        (
            404,
            openai(r#"model "llama3" not found, try pulling it first"#),
        ),
        (400, openai("The model `gpt-x-2026` was not found.")),
        (
            404,
            openai("models/gemma-4-31b is not found for API version v1beta"),
        ),
        (
            400,
            openai("The model 'x/y' has reached its end of life and is no longer available."),
        ),
        (
            410,
            r#"{"type":"about:blank","title":"Gone","status":410}"#.to_string(),
        ),
        (410, String::new()),
    ] {
        let c = run(status, &[], &body, PAID, NOW_A);
        assert_eq!(c.verdict, Verdict::Gone, "{status} {body}: {c:?}");
    }
    for (status, body) in [
        (
            404,
            openai("Tool `search` not found. Check the model's tools."),
        ),
        (400, openai("The model answered. The file was not found.")),
    ] {
        let c = run(status, &[], &body, PAID, NOW_A);
        assert_ne!(c.verdict, Verdict::Gone, "{status} {body}: {c:?}");
    }
}

/// A spend limit the account set, in the wording of usage limits with the moment access comes
/// back: billing on the connection, resting until that moment, a circuit's length at most.
#[test]
fn a_usage_limit_with_a_regain_date_rests_the_connection_until_then() {
    let body = |date: &str| {
        format!(
            r#"{{"type":"error","error":{{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on {date}."}}}}"#
        )
    };
    // NOW_A is 2026-07-26T09:04:30Z.
    let soon = run(400, &[], &body("2026-07-26 at 09:30 UTC"), PAID, NOW_A);
    assert_eq!(soon.verdict, Verdict::Billing, "{soon:?}");
    assert!(matches!(soon.scope, RestScope::Connection(_)), "{soon:?}");
    assert_eq!(soon.rest_ms(NOW_A), 25 * 60_000 + 30_000);
    let later = run(400, &[], &body("2026-08-01 at 00:00 UTC"), PAID, NOW_A);
    assert_eq!(later.verdict, Verdict::Billing);
    assert_eq!(later.rest_ms(NOW_A), CIRCUIT_MS, "capped at a circuit");
    assert!(
        matches!(later.length, Some(RestLength::Guess(_))),
        "then one probe"
    );
    // Without the date it is a client's 400 as before; a date it cannot read is no moment.
    let plain = r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits."}}"#;
    assert_eq!(run(400, &[], plain, PAID, NOW_A).verdict, Verdict::Client);
    let garbled = run(400, &[], &body("2026-13-45 at 99:99 UTC"), PAID, NOW_A);
    assert_eq!(garbled.verdict, Verdict::Client, "{garbled:?}");
}

/// `Retry-After` may be an HTTP-date (RFC 9110 §10.2.3): it is the wait until that moment.
#[test]
fn an_http_date_retry_after_is_the_time_until_that_moment() {
    let body = r#"{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"busy","provider_name":"Venice"}}}"#;
    // NOW_A is 2026-07-26T09:04:30Z; the header names 09:05:00 of that day.
    let hs = [("Retry-After", "Sun, 26 Jul 2026 09:05:00 GMT")];
    let c = run(429, &hs, body, LLAMA_FREE, NOW_A);
    assert_eq!(
        (c.verdict, c.retry_hint_ms),
        (Verdict::Provider, Some(30_000))
    );
    assert_eq!(c.rest_ms(NOW_A), 30_000);
    // A date in the past is a hint of nothing left to wait: the shortest rest.
    let hs = [("Retry-After", "Sun, 26 Jul 2026 09:00:00 GMT")];
    assert_eq!(run(429, &hs, body, LLAMA_FREE, NOW_A).rest_ms(NOW_A), 1_000);
}

/// An error inside a 200 before any text is read as the HTTP answer its status stands for: a
/// numeric `code`, else a string code mapped (rate limit 429, credits 402, moderation 403), else
/// 502 (docs/design.md §2.3).
#[test]
fn in_band_errors_before_output_are_read_as_the_status_they_carry() {
    let in_band = |code: Option<u16>, code_text: Option<&str>, error: &str| CallError::InBand {
        error: InBandError {
            code,
            code_text: code_text.map(str::to_string),
            message: String::new(),
            error: serde_json::from_str(error).expect("JSON"),
        },
        partial: String::new(),
    };
    let cases = [
        (
            in_band(
                Some(429),
                None,
                r#"{"code":429,"message":"Rate limit exceeded","metadata":{"error_type":"rate_limit_exceeded"}}"#,
            ),
            Verdict::Account,
        ),
        (
            in_band(
                None,
                Some("rate_limit_exceeded"),
                r#"{"code":"rate_limit_exceeded","message":"Rate limit reached"}"#,
            ),
            Verdict::Account,
        ),
        (
            in_band(
                None,
                Some("insufficient_quota"),
                r#"{"code":"insufficient_quota","message":"You exceeded your current quota"}"#,
            ),
            Verdict::Billing,
        ),
        (
            in_band(
                None,
                Some("content_filter"),
                r#"{"code":"content_filter","message":"The response was filtered"}"#,
            ),
            Verdict::Client,
        ),
        (
            in_band(
                Some(403),
                None,
                r#"{"code":403,"message":"Input flagged","metadata":{"reasons":["violence"],"flagged_input":"…"}}"#,
            ),
            Verdict::Client,
        ),
        (
            in_band(
                None,
                Some("server_error"),
                r#"{"code":"server_error","message":"Internal error"}"#,
            ),
            Verdict::Server,
        ),
    ];
    for (error, verdict) in cases {
        let c = classify(&error, &route(LLAMA_FREE), NOW_A);
        assert_eq!(c.verdict, verdict, "{error:?}: {c:?}");
    }
}

// ---- docs/design.md §3.2.1: the code and the message count, not only the status ----

/// Routes of every kind a v3 answer can come back on: OpenRouter's shared pool, OpenRouter
/// off-quota, a user's connection, and a Groq and a Gemini model pool.
fn v3_routes() -> Vec<Route> {
    let catalog = groq_and_gemini();
    [
        LLAMA_FREE,
        PAID,
        USER_FREE,
        "groq:llama-3.3-70b-versatile",
        "gemini:gemini-2.5-flash",
    ]
    .into_iter()
    .map(|r| Route::parse(r, &catalog).expect("route"))
    .collect()
}

/// Every (status, body) of `answers`, on every v3 route, gets `verdict` by `rule`; `check` sees
/// each classification with its route.
#[track_caller]
fn each_v3(
    answers: &[(u16, &str)],
    verdict: Verdict,
    rule: &str,
    check: impl Fn(&Classification, &Route),
) {
    for route in v3_routes() {
        for (status, body) in answers {
            let c = classify_response(*status, &Headers::new(), body.as_bytes(), &route, NOW_A);
            assert_eq!(
                (c.verdict, c.rule),
                (verdict, rule),
                "{status} {body} on {}: {c:?}",
                route.key()
            );
            check(&c, &route);
        }
    }
}

fn this_route(route: &Route) -> RestScope {
    RestScope::Route {
        pool: route.pool.clone(),
        route_key: route.key(),
    }
}

/// A dead model rests its route an hour, whatever status says so: a 400 `model_decommissioned`
/// is no client error a retry on the next run could fix.
#[test]
fn a_dead_model_is_gone_whatever_the_status() {
    let answers = [
        (
            400,
            r#"{"error":{"message":"The model `gemma2-9b-it` has been decommissioned and is no longer supported. Please refer to https://console.groq.com/docs/deprecations for a recommendation on which model to use instead.","type":"invalid_request_error","code":"model_decommissioned"}}"#,
        ),
        // The code alone, and the wording alone.
        (
            400,
            r#"{"error":{"message":"Bad model","type":"invalid_request_error","code":"model_decommissioned"}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"The model `llama3-70b-8192` has been decommissioned and is no longer supported.","type":"invalid_request_error"}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"The model qwen-2.5-32b is no longer supported","code":400}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"openai/gpt-5-turbo is not a valid model ID","code":400}}"#,
        ),
        (
            403,
            r#"{"error":{"message":"The model `gpt-4o` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
        ),
        (
            404,
            r#"{"error":{"message":"The model `computer-use-preview-2025-03-11` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
        ),
        (
            429,
            r#"{"error":{"message":"Nope","code":"model_not_found"}}"#,
        ),
        (
            413,
            r#"{"error":{"code":413,"message":"Model not found: x/y"}}"#,
        ),
    ];
    each_v3(&answers, Verdict::Gone, "gone", |c, route| {
        assert_eq!(c.scope, this_route(route));
        assert_eq!(c.rest_ms(NOW_A), 3_600_000, "{c:?}");
    });
}

/// The wordings count only when they speak of a model: a parameter or a tool that "is no longer
/// supported" or "does not exist" is the request's fault, not a dead route.
#[test]
fn the_same_words_about_something_else_are_a_client_error() {
    for body in [
        r#"{"error":{"message":"The parameter `functions` is no longer supported for this model","type":"invalid_request_error"}}"#,
        r#"{"error":{"message":"Tool 'search' does not exist","type":"invalid_request_error"}}"#,
    ] {
        let c = run(400, &[], body, PAID, NOW_A);
        assert_eq!((c.verdict, c.rule), (Verdict::Client, "client"), "{body}");
    }
}

/// A blocked key or organisation opens the connection circuit: every route on it would burn an
/// attempt. Groq says it with a 400.
#[test]
fn a_blocked_key_or_organisation_is_auth_whatever_the_status() {
    let answers = [
        (
            400,
            r#"{"error":{"message":"Organization has been restricted. Please reach out to support if you believe this was in error.","type":"invalid_request_error","code":"organization_restricted"}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"Forbidden","code":"organization_restricted"}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"Your organization has been restricted.","type":"invalid_request_error"}}"#,
        ),
        (
            429,
            r#"{"error":{"message":"This key is associated with a deactivated account. If you feel this is an error, contact us through our help center at help.openai.com.","type":"invalid_request_error","param":null,"code":"account_deactivated"}}"#,
        ),
        (
            403,
            r#"{"error":{"message":"The OpenAI account associated with this API key has been deactivated.","type":"invalid_request_error","param":null,"code":null}}"#,
        ),
        (
            404,
            r#"{"error":{"message":"Account deactivated","code":404}}"#,
        ),
        (
            403,
            r#"{"error":{"message":"Access terminated due to violation of our policies","code":"access_terminated"}}"#,
        ),
    ];
    each_v3(&answers, Verdict::Auth, "3.3:blocked", |c, route| {
        assert_eq!(c.scope, RestScope::Connection(route.connection_scope()));
        assert_eq!(c.rest_ms(NOW_A), CIRCUIT_MS);
    });
}

/// A request that alone exceeds a limit rests nothing: a smaller request on the same route would
/// pass, and a rest would block it. OpenAI says so with a 429, Groq with a 413.
#[test]
fn a_request_too_large_for_its_limit_is_a_client_error_without_rest() {
    let answers = [
        (
            429,
            r#"{"error":{"message":"Request too large for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 9000, please reduce your message size and try again.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        ),
        (
            413,
            r#"{"error":{"message":"Request too large for model `llama-3.1-8b-instant` in organization `org_x` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 12328, please reduce your message size and try again.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        ),
        (
            429,
            r#"{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 342389. The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
        ),
        // The numbers alone: the request's own tokens are above the limit.
        (
            429,
            r#"{"error":{"message":"Rate limit reached on tokens per minute (TPM): Limit 8000, Used 10, Requested 32979.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        ),
        // The words alone.
        (
            429,
            r#"{"error":{"message":"The input must be reduced to fit this model.","code":429}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"Your prompt exceeds the maximum of 8192 tokens per request.","code":400}}"#,
        ),
    ];
    each_v3(&answers, Verdict::Client, "3.3:too_large", |c, _| {
        assert_eq!((&c.scope, c.length), (&RestScope::None, None));
        assert!(!c.evidence);
    });
}

/// A rate limit whose request fits the limit is still a rate limit: only the used part overflows.
#[test]
fn a_rate_limit_whose_request_fits_is_not_too_large() {
    let body = r#"{"error":{"message":"Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 2542, Requested 9855. Please try again in 1.984999999s.","type":"tokens","code":"rate_limit_exceeded"}}"#;
    let c = run(429, &[], body, LLAMA_FREE, NOW_A);
    assert_eq!(c.verdict, Verdict::Account, "{c:?}");
    assert_eq!(c.length, Some(RestLength::For(1_985)));
    // A limit of 0 is a quota with nothing left, not a request too large for it.
    let spent = body.replace(
        "Limit 12000, Used 2542, Requested 9855",
        "Limit 0, Used 0, Requested 1",
    );
    let c = run(429, &[], &spent, LLAMA_FREE, NOW_A);
    assert_eq!(c.verdict, Verdict::Account, "{c:?}");
}

/// A provider out of capacity for a model rests that route for everyone, never the key's pool:
/// no quota was spent, so no pacing miss either.
#[test]
fn a_model_out_of_capacity_rests_the_route_never_the_pool() {
    let answers = [
        (
            429,
            r#"[{"error":{"code":429,"message":"No capacity available for model gemini-3.1-pro-preview on the server","errors":[{"message":"No capacity available for model gemini-3.1-pro-preview on the server","domain":"global","reason":"rateLimitExceeded"}],"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"MODEL_CAPACITY_EXHAUSTED","domain":"cloudcode-pa.googleapis.com","metadata":{"model":"gemini-3.1-pro-preview"}}]}}]"#,
        ),
        // The reason alone, and the wording alone.
        (
            429,
            r#"{"error":{"code":429,"message":"Try later","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"MODEL_CAPACITY_EXHAUSTED"}]}}"#,
        ),
        (
            429,
            r#"{"error":{"code":429,"message":"No capacity available for model on the server","status":"RESOURCE_EXHAUSTED"}}"#,
        ),
        // Mistral's body is the error itself, without an `error` member.
        (
            429,
            r#"{"object":"error","message":"Service tier capacity exceeded for this model.","type":"invalid_request_error","param":null,"code":null}"#,
        ),
        (
            400,
            r#"{"object":"error","message":"Service tier capacity exceeded for this model.","type":"invalid_request_error","param":null,"code":null}"#,
        ),
        (
            429,
            r#"{"error":{"message":"Mistral Small capacity exceeded. This model is currently overloaded.","code":"1300"}}"#,
        ),
    ];
    each_v3(&answers, Verdict::Route, "3.3:capacity", |c, route| {
        assert_eq!(c.scope, this_route(route));
        assert_eq!(c.rest_ms(NOW_A), DEFAULT_REST_MS);
    });
}

/// Gemini's `RESOURCE_EXHAUSTED` is the key's quota only when a quota is named: a
/// `QuotaFailure` detail or quota wording. Without one it says nothing of whose quota it was.
#[test]
fn gemini_resource_exhausted_is_the_pool_only_with_a_quota() {
    let gemini = v3_routes().pop().expect("the gemini route");
    let pool = RestScope::Pool("gemini-flash".into());
    let quota_failure = r#"{"error":{"code":429,"message":"Slow down","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]}]}}"#;
    let wording = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
    let neither = r#"{"error":{"code":429,"message":"Resource has been exhausted.","status":"RESOURCE_EXHAUSTED"}}"#;
    for body in [quota_failure, wording] {
        let c = classify_response(429, &Headers::new(), body.as_bytes(), &gemini, NOW_A);
        assert_eq!((c.verdict, &c.scope), (Verdict::Account, &pool), "{body}");
    }
    let c = classify_response(429, &Headers::new(), neither.as_bytes(), &gemini, NOW_A);
    assert_eq!((c.verdict, c.rule), (Verdict::Ambiguous, "4:ambiguous"));
}

/// Billing still comes first: a body that says credits are missing is billing, whatever else it
/// says.
#[test]
fn billing_still_comes_first() {
    let body = r#"{"error":{"message":"Insufficient credits. Request too large for your balance; the model is overloaded.","code":402,"metadata":{"limit_source":"openrouter_credits"}}}"#;
    let c = run(402, &[], body, LLAMA_FREE, NOW_A);
    assert_eq!((c.verdict, c.rule), (Verdict::Billing, "3.1:billing"));
}

/// A 5xx stays a server failure whatever it says: 503 "No capacity available" and 529
/// "Overloaded" are the provider's failure of this call, read by the 5xx rule.
#[test]
fn server_statuses_stay_server_failures() {
    for (status, body) in [
        (
            503,
            r#"{"error":{"code":503,"message":"No capacity available for model gemini-3-pro-high on the server","status":"UNAVAILABLE"}}"#,
        ),
        (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
    ] {
        let c = run(status, &[], body, PAID, NOW_A);
        assert_eq!(c.verdict, Verdict::Server, "{body}");
    }
}

/// A wait in the message, in any common wording, is the rest's length; a day's worth makes a
/// day refusal. Hints before it in docs/design.md §3.2 still win, and the reset headers after it
/// lose.
#[test]
fn a_wait_in_any_wording_sets_the_rest() {
    let body = |message: &str| format!(r#"{{"error":{{"message":"{message}","code":429}}}}"#);
    for (message, ms) in [
        ("Please try again in 399ms.", 1_000),
        ("Too many requests, retry after 20 seconds", 20_000),
        ("Please wait 30s", 30_000),
        ("Busy: try again in 2 minutes", 120_000),
        ("Slow down and retry in 5.5 seconds.", 5_500),
    ] {
        let c = run(429, &[], &body(message), USER_FREE, NOW_A);
        assert_eq!(c.rest_ms(NOW_A), ms, "{message}: {c:?}");
    }
    let c = run(
        429,
        &[],
        &body("Please try again in 9m38.4s."),
        USER_FREE,
        NOW_A,
    );
    assert_eq!((c.retry_hint_ms, c.day), (Some(578_400), true), "{c:?}");
    let azure = body(
        "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-05-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds.",
    );
    let c = run(429, &[], &azure, USER_FREE, NOW_A);
    assert_eq!(c.retry_hint_ms, Some(86_400_000));
    assert!(c.day, "a hint past 300 s is a day refusal: {c:?}");

    let message = body("Please retry after 20 seconds");
    let c = run(429, &[("Retry-After", "7")], &message, USER_FREE, NOW_A);
    assert_eq!(c.retry_hint_ms, Some(7_000), "Retry-After comes first");
    let c = run(
        429,
        &[("x-ratelimit-reset-requests", "2m")],
        &message,
        USER_FREE,
        NOW_A,
    );
    assert_eq!(
        c.retry_hint_ms,
        Some(20_000),
        "the message before the reset"
    );
}

/// The in-band shapes of docs/design.md §2.3 (v3) before any output: a top-level `code` object
/// (DashScope's throttle) and the data of an `event: error` frame are classified as the status
/// they carry, a throttling or quota code as 429.
#[test]
fn bare_in_band_errors_are_read_as_the_status_they_carry() {
    let in_band = |error: serde_json::Value| CallError::InBand {
        error: InBandError {
            code: None,
            code_text: error["code"].as_str().map(str::to_string),
            message: error["message"].as_str().unwrap_or_default().to_string(),
            error,
        },
        partial: String::new(),
    };
    for (error, status) in [
        (
            serde_json::json!({"code":"Throttling.AllocationQuota","message":"Free allocated quota exceeded.","request_id":"a734"}),
            429,
        ),
        (
            serde_json::json!({"code":"Throttling.RateQuota","message":"Requests rate limit exceeded, please try again later."}),
            429,
        ),
        (
            serde_json::json!({"code":"InternalError","message":"An internal error has occured."}),
            502,
        ),
        (serde_json::json!("upstream went away"), 502),
    ] {
        let CallError::InBand { error: e, .. } = in_band(error.clone()) else {
            unreachable!()
        };
        assert_eq!(e.carried_status(), status, "{error}");
        let c = classify(&in_band(error.clone()), &route(PAID), NOW_A);
        let rested = status == 429;
        assert_eq!(c.length.is_some(), rested, "{error}: {c:?}");
    }
}
