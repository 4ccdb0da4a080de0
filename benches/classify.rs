//! The cost of reading one refusal: `classify_response` on the variants a busy fleet sees most
//! (the account's per-minute 429 in its 2026 shape, an upstream provider's 429, an ambiguous
//! bare 429). Every failed attempt goes through it, so it must stay far below a network round trip.
//!
//! `cargo bench -p freeway --bench classify`

use criterion::{Criterion, criterion_group, criterion_main};
use freeway::catalog::Catalog;
use freeway::classify::classify_response;
use freeway::headers::Headers;
use freeway::route::Route;
use std::hint::black_box;

const NOW: u64 = 1_785_056_670_000;

const PER_MINUTE_2026: &str = r#"{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1785056700000"},"provider_name":null,"limit_source":"openrouter_free_tier_per_minute","remedy_hint":"Slow down requests to free models, or retry after the per-minute window resets."}},"user_id":"user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"}"#;

const UPSTREAM: &str = r#"{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"meta-llama/llama-3.3-70b-instruct:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations","provider_name":"Venice","is_byok":false,"retry_after_seconds":17,"retry_after_seconds_raw":16.007,"headers":{"Retry-After":"17"}}},"user_id":"user_XXXXXXXXXXXXXXXXXXXXXXXXXXX"}"#;

const AMBIGUOUS: &str = r#"{"error":{"code":429,"message":"Rate limit exceeded"}}"#;

fn bench(c: &mut Criterion) {
    let route = Route::parse(
        "meta-llama/llama-3.3-70b-instruct:free",
        &Catalog::builtin(),
    )
    .expect("a valid route");
    let per_minute_headers: Headers = [
        ("content-type", "application/json"),
        ("x-ratelimit-limit", "20"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1785056700000"),
    ]
    .into_iter()
    .collect();
    let upstream_headers: Headers = [("content-type", "application/json"), ("retry-after", "17")]
        .into_iter()
        .collect();
    let plain: Headers = [("content-type", "application/json")].into_iter().collect();

    let mut group = c.benchmark_group("classify_response");
    for (name, headers, body) in [
        ("per_minute_2026", &per_minute_headers, PER_MINUTE_2026),
        ("upstream_retry_after", &upstream_headers, UPSTREAM),
        ("ambiguous_bare", &plain, AMBIGUOUS),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                classify_response(
                    black_box(429),
                    black_box(headers),
                    black_box(body.as_bytes()),
                    black_box(&route),
                    black_box(NOW),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
