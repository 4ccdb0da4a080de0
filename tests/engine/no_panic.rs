//! No bytes a provider sends can panic the classifier: arbitrary statuses, header names and
//! values (any character, any case), and bodies that are random bytes or JSON of the shapes the
//! rules read (`error`, `metadata.headers`, `details`, nested JSON in `message`) filled with
//! hostile values. The rule under test is only "answers, never panics"; 10,000 cases.

use freeway::catalog::Catalog;
use freeway::classify::{classify, classify_response};
use freeway::headers::Headers;
use freeway::provider::{CallError, InBandError};
use freeway::route::Route;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// New cases every run of the suite; 2,000 take a few seconds in a debug build.
const CASES: u32 = 2_000;

fn routes() -> Vec<Route> {
    [
        "meta-llama/llama-3.3-70b-instruct:free",
        "openai/gpt-4o-mini",
        "x:free@conn_1",
    ]
    .into_iter()
    .map(|r| Route::parse(r, &Catalog::builtin()).expect("a valid route"))
    .collect()
}

/// Keys the classifier looks for, and some it does not.
const KEYS: &[&str] = &[
    "error",
    "code",
    "message",
    "type",
    "status",
    "metadata",
    "headers",
    "raw",
    "provider_name",
    "provider_code",
    "limit_source",
    "details",
    "retryDelay",
    "@type",
    "retry_after_seconds",
    "error_type",
    "X-RateLimit-Reset",
    "Retry-After",
    "x-ratelimité",
    "x-ratelimit-é",
    "ü",
    "",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        Just("free-models-per-day".to_string()),
        Just("Please try again in 9m38.016s".to_string()),
        Just("High demand for x limited to 3 requests".to_string()),
        Just("99999999999999999999999999".to_string()),
        Just("-1".to_string()),
        Just("1e308".to_string()),
        Just("Wed, 21 Oct 2015 07:28:00 GMT".to_string()),
        Just(r#"{"error":{"code":429,"message":"{\"error\":1}"}}"#.to_string()),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        json().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        json().prop_map(|v| serde_json::to_vec(&Value::Array(vec![v])).unwrap_or_default()),
        json().prop_map(|v| {
            let body = serde_json::json!({"error": {"code": 429, "metadata": {"headers": v}}});
            serde_json::to_vec(&body).unwrap_or_default()
        }),
        prop::collection::vec((near_name(), text()), 0..4).prop_map(|pairs| {
            let headers: Map<String, Value> = pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let body =
                serde_json::json!({"error": {"code": 429, "metadata": {"headers": headers}}});
            serde_json::to_vec(&body).unwrap_or_default()
        }),
    ]
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        prop::sample::select(vec![
            200, 400, 401, 402, 403, 404, 408, 413, 422, 429, 500, 502, 503, 529
        ]),
        any::<u16>(),
    ]
}

/// Names the classifier looks up, cut after any byte and followed by any character: a name whose
/// character straddles the length of a prefix it is compared with.
fn near_name() -> impl Strategy<Value = String> {
    const NAMES: &[&str] = &[
        "x-ratelimit-remaining",
        "x-ratelimit-reset-requests",
        "retry-after-ms",
    ];
    (
        prop::sample::select(NAMES),
        0usize..28,
        any::<char>(),
        "\\PC{0,3}",
    )
        .prop_map(|(name, cut, c, tail)| format!("{}{c}{tail}", &name[..cut.min(name.len())]))
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,24}",
        near_name(),
        prop::sample::select(vec![
            "x-ratelimit-",
            "X-RateLimit-Reset",
            "retry-after",
            "retry-after-ms"
        ])
        .prop_flat_map(|p| "\\PC{0,4}".prop_map(move |tail| format!("{p}{tail}"))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn the_classifier_answers_any_response(
        status in status(),
        headers in prop::collection::vec((header_name(), text()), 0..6),
        body in body(),
        now_ms in any::<u64>(),
        which in 0usize..3,
    ) {
        let headers: Headers = headers.into_iter().collect();
        let route = &routes()[which];
        let class = classify_response(status, &headers, &body, route, now_ms);
        prop_assert!(!class.rule.is_empty());
        let error = InBandError {
            code: Some(status),
            code_text: None,
            message: String::from_utf8_lossy(&body).into_owned(),
            error: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        classify(&CallError::InBand { error, partial: String::new() }, route, now_ms);
    }
}
