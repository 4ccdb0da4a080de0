//! Injected faults: what a test asks the next matching chat requests to suffer.
//!
//! Real failures (upstream 429s, 402s, broken streams…) cannot be provoked on demand against the
//! real service; the control API queues them here. Faults are matched in insertion order and a
//! request consumes one count of the first matching fault. The account quota is checked before
//! faults (see `state`), exactly as OpenRouter refuses a request before routing it upstream.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::Shape;

/// Every fault the simulator can inject. The serialized name is also the call-log variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
    /// 429 `Provider returned error` from an upstream pool (docs/providers.md §2.4).
    #[serde(rename = "upstream_429")]
    Upstream429,
    /// 429 per-model shared-capacity cap (docs/providers.md §2.3).
    #[serde(rename = "high_demand")]
    HighDemand,
    /// 429 documented typed error with `provider_code` (docs/providers.md §2.4).
    #[serde(rename = "typed_429")]
    Typed429,
    /// The bare ambiguous 429 (docs/providers.md §2.4).
    #[serde(rename = "generic_429")]
    Generic429,
    /// 429 availability error, all providers at capacity (docs/providers.md §2.4).
    #[serde(rename = "capacity_429")]
    Capacity429,
    #[serde(rename = "credits_402")]
    Credits402,
    #[serde(rename = "never_purchased_402")]
    NeverPurchased402,
    #[serde(rename = "can_only_afford_402")]
    CanOnlyAfford402,
    #[serde(rename = "in_flight_402")]
    InFlight402,
    #[serde(rename = "unauthorized_401")]
    Unauthorized401,
    #[serde(rename = "moderation_403")]
    Moderation403,
    #[serde(rename = "not_found_404")]
    NotFound404,
    /// 404 for a model no provider serves any more (docs/providers.md §2.6): a dead route.
    #[serde(rename = "no_endpoints_404")]
    NoEndpoints404,
    #[serde(rename = "bad_request_400")]
    BadRequest400,
    #[serde(rename = "server_500")]
    Server500,
    #[serde(rename = "bad_gateway_502")]
    BadGateway502,
    #[serde(rename = "overloaded_529")]
    Overloaded529,
    /// Holds the response headers `delay_ms`, then answers normally.
    #[serde(rename = "timeout")]
    Timeout,
    /// Sends `after_chunks` chunks, pauses `delay_ms`, then finishes normally.
    #[serde(rename = "stall")]
    Stall,
    /// A 200 whose stream carries an error after `after_chunks` chunks (docs/providers.md §2.8).
    #[serde(rename = "midstream_error")]
    MidstreamError,
    /// The connection is cut after `after_chunks` chunks, without finish or `[DONE]`.
    #[serde(rename = "truncated")]
    Truncated,
    #[serde(rename = "malformed_json")]
    MalformedJson,
    #[serde(rename = "wrong_content_type")]
    WrongContentType,
    /// A success whose stream attaches usage to a second finish chunk (docs/providers.md §1.3,
    /// layout b).
    #[serde(rename = "usage_layout_b")]
    UsageLayoutB,
    #[serde(rename = "huge_body")]
    HugeBody,
}

impl FaultKind {
    /// The name used on the wire and in the call log.
    pub fn name(self) -> &'static str {
        use FaultKind::*;
        match self {
            Upstream429 => "upstream_429",
            HighDemand => "high_demand",
            Typed429 => "typed_429",
            Generic429 => "generic_429",
            Capacity429 => "capacity_429",
            Credits402 => "credits_402",
            NeverPurchased402 => "never_purchased_402",
            CanOnlyAfford402 => "can_only_afford_402",
            InFlight402 => "in_flight_402",
            Unauthorized401 => "unauthorized_401",
            Moderation403 => "moderation_403",
            NotFound404 => "not_found_404",
            NoEndpoints404 => "no_endpoints_404",
            BadRequest400 => "bad_request_400",
            Server500 => "server_500",
            BadGateway502 => "bad_gateway_502",
            Overloaded529 => "overloaded_529",
            Timeout => "timeout",
            Stall => "stall",
            MidstreamError => "midstream_error",
            Truncated => "truncated",
            MalformedJson => "malformed_json",
            WrongContentType => "wrong_content_type",
            UsageLayoutB => "usage_layout_b",
            HugeBody => "huge_body",
        }
    }

    /// HTTP status the fault is served with.
    pub fn status(self) -> u16 {
        use FaultKind::*;
        match self {
            Upstream429 | HighDemand | Typed429 | Generic429 | Capacity429 => 429,
            Credits402 | NeverPurchased402 | CanOnlyAfford402 | InFlight402 => 402,
            Unauthorized401 => 401,
            Moderation403 => 403,
            NotFound404 | NoEndpoints404 => 404,
            BadRequest400 => 400,
            Server500 => 500,
            BadGateway502 => 502,
            Overloaded529 => 529,
            Timeout | Stall | MidstreamError | Truncated | MalformedJson | WrongContentType
            | UsageLayoutB | HugeBody => 200,
        }
    }

    /// Whether a request that suffers this fault still gets its whole answer (late, or laid
    /// out differently): the answer is charged as if no fault had struck.
    pub fn answers_whole(self) -> bool {
        matches!(
            self,
            FaultKind::Timeout | FaultKind::Stall | FaultKind::UsageLayoutB
        )
    }

    /// The optional fields this kind reads; any other field in a spec is a mistake.
    fn fields(self) -> &'static [Field] {
        use FaultKind::*;
        use Field::*;
        match self {
            Upstream429 => &[ShapeF, ProviderName, RetryAfterS],
            HighDemand => &[ShapeF, Limit],
            Typed429 => &[ProviderCode],
            Capacity429 => &[RetryAfterS],
            Credits402 | NeverPurchased402 | CanOnlyAfford402 => &[ShapeF],
            InFlight402 => &[ShapeF, RetryAfterS],
            Moderation403 => &[ProviderName],
            BadGateway502 | Overloaded529 => &[ShapeF, ProviderName],
            Timeout => &[DelayMs],
            Stall => &[DelayMs, AfterChunks],
            MidstreamError => &[Layout, Code, AfterChunks, Done, ProviderName],
            Truncated => &[AfterChunks],
            HugeBody => &[SizeBytes],
            Generic429 | Unauthorized401 | NotFound404 | NoEndpoints404 | BadRequest400
            | Server500 | MalformedJson | WrongContentType | UsageLayoutB => &[],
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a mid-stream error goes (docs/providers.md §2.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MidstreamLayout {
    /// Documented: top-level `error` plus a choice with `finish_reason: "error"`.
    #[default]
    FinishChoice,
    /// Observed: `"choices": []` plus top-level `error`.
    EmptyChoices,
    /// An SSE frame `event: error` whose data is the error envelope (OpenAI-compatible gateways,
    /// Anthropic-style streams). Served without streaming, the envelope alone.
    EventError,
    /// A data frame holding a bare `{"code","message","request_id"}` object, no `error` and no
    /// `choices` (DashScope-compatible servers); the same object as a whole body.
    TopLevelCode,
}

/// An `error.code`: normally a number, sometimes a string such as `"server_error"`
/// (docs/providers.md §2.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorCode {
    Number(u16),
    Text(String),
}

/// A fault to inject: the JSON body of `POST /_sim/faults`.
///
/// Only `kind` is required. `model` and `key` restrict which requests match (exact strings).
/// Kind-specific fields are optional, with documented defaults, and rejected on kinds that do
/// not read them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    /// How many matching requests get the fault (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// How many matching requests pass untouched before the fault strikes (default 0): a fault
    /// for a run's later step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skip: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Overrides the configured error body generation for this fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    /// Upstream provider named in the error (default `"Chutes"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_name: Option<String>,
    /// `Retry-After` in seconds; fractional values appear as `retry_after_seconds_raw`.
    /// Defaults: capacity_429 40, in_flight_402 10, upstream_429 none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
    /// high_demand: the per-model requests-per-minute cap named in the message (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// typed_429: `metadata.provider_code` (default `"rate_limited"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_code: Option<String>,
    /// timeout / stall: how long to hold (default 30000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// midstream_error layout (default `finish_choice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<MidstreamLayout>,
    /// midstream_error `error.code` (default 502).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// Content chunks sent before the fault strikes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_chunks: Option<usize>,
    /// midstream_error: whether `data: [DONE]` follows the error chunk (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
    /// huge_body: total body size (default 16 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<usize>,
}

fn one() -> u32 {
    1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    ShapeF,
    ProviderName,
    RetryAfterS,
    Limit,
    ProviderCode,
    DelayMs,
    Layout,
    Code,
    AfterChunks,
    Done,
    SizeBytes,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::ShapeF => "shape",
            Field::ProviderName => "provider_name",
            Field::RetryAfterS => "retry_after_s",
            Field::Limit => "limit",
            Field::ProviderCode => "provider_code",
            Field::DelayMs => "delay_ms",
            Field::Layout => "layout",
            Field::Code => "code",
            Field::AfterChunks => "after_chunks",
            Field::Done => "done",
            Field::SizeBytes => "size_bytes",
        }
    }
}

/// Largest `huge_body`: big enough to trip any sane client limit, small enough not to exhaust
/// the memory of the machine running the tests.
pub const MAX_HUGE_BODY: usize = 512 * 1024 * 1024;
/// Longest hold for `timeout` and `stall`.
pub const MAX_DELAY_MS: u64 = 3_600_000;

pub(crate) const DEFAULT_PROVIDER: &str = "Chutes";
pub(crate) const DEFAULT_DELAY_MS: u64 = 30_000;
pub(crate) const DEFAULT_HUGE_BODY: usize = 16 * 1024 * 1024;

impl FaultSpec {
    /// A spec of `kind` with every optional field at its default.
    pub fn new(kind: FaultKind) -> FaultSpec {
        FaultSpec {
            kind,
            count: 1,
            skip: 0,
            model: None,
            key: None,
            shape: None,
            provider_name: None,
            retry_after_s: None,
            limit: None,
            provider_code: None,
            delay_ms: None,
            layout: None,
            code: None,
            after_chunks: None,
            done: None,
            size_bytes: None,
        }
    }

    /// Checks the spec the way `POST /_sim/faults` does; the error names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if self.count == 0 {
            return Err("count must be at least 1".to_owned());
        }
        let allowed = self.kind.fields();
        for field in self.present_fields() {
            if !allowed.contains(&field) {
                let takes: Vec<_> = allowed.iter().map(|f| f.name()).collect();
                let takes = if takes.is_empty() {
                    "no kind-specific fields".to_owned()
                } else {
                    takes.join(", ")
                };
                return Err(format!(
                    "field `{}` does not apply to kind `{}` (it takes: {takes})",
                    field.name(),
                    self.kind
                ));
            }
        }
        if let Some(r) = self.retry_after_s
            && !(r.is_finite() && r > 0.0 && r <= 86_400.0)
        {
            return Err(format!(
                "retry_after_s must be a number of seconds in (0, 86400], got {r}"
            ));
        }
        if self.limit == Some(0) {
            return Err("limit must be at least 1".to_owned());
        }
        if let Some(d) = self.delay_ms
            && d > MAX_DELAY_MS
        {
            return Err(format!("delay_ms must be at most {MAX_DELAY_MS}, got {d}"));
        }
        if let Some(s) = self.size_bytes
            && s > MAX_HUGE_BODY
        {
            return Err(format!(
                "size_bytes must be at most {MAX_HUGE_BODY}, got {s}"
            ));
        }
        match &self.code {
            Some(ErrorCode::Number(n)) if !(100..=999).contains(n) => {
                Err(format!("code must be an HTTP status (100-999), got {n}"))
            }
            Some(ErrorCode::Text(t)) if t.is_empty() => {
                Err("code must not be an empty string".to_owned())
            }
            _ => Ok(()),
        }
    }

    fn present_fields(&self) -> Vec<Field> {
        let mut present = Vec::new();
        let mut note = |set: bool, f: Field| {
            if set {
                present.push(f);
            }
        };
        note(self.shape.is_some(), Field::ShapeF);
        note(self.provider_name.is_some(), Field::ProviderName);
        note(self.retry_after_s.is_some(), Field::RetryAfterS);
        note(self.limit.is_some(), Field::Limit);
        note(self.provider_code.is_some(), Field::ProviderCode);
        note(self.delay_ms.is_some(), Field::DelayMs);
        note(self.layout.is_some(), Field::Layout);
        note(self.code.is_some(), Field::Code);
        note(self.after_chunks.is_some(), Field::AfterChunks);
        note(self.done.is_some(), Field::Done);
        note(self.size_bytes.is_some(), Field::SizeBytes);
        present
    }

    fn matches(&self, model: &str, key: &str) -> bool {
        self.model.as_deref().is_none_or(|m| m == model)
            && self.key.as_deref().is_none_or(|k| k == key)
    }

    pub(crate) fn provider(&self) -> &str {
        self.provider_name.as_deref().unwrap_or(DEFAULT_PROVIDER)
    }

    pub(crate) fn delay_ms(&self) -> u64 {
        self.delay_ms.unwrap_or(DEFAULT_DELAY_MS)
    }

    pub(crate) fn after_chunks(&self) -> usize {
        self.after_chunks.unwrap_or(1)
    }
}

/// A queued fault as `GET /_sim/faults` lists it; `count` is what remains.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PendingFault {
    pub id: u64,
    #[serde(flatten)]
    pub spec: FaultSpec,
}

#[derive(Debug, Default)]
pub(crate) struct FaultQueue {
    pending: Vec<PendingFault>,
    next_id: u64,
}

impl FaultQueue {
    pub(crate) fn push(&mut self, spec: FaultSpec) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        // A zero count could never fire; keeping it would only clutter the listing.
        if spec.count > 0 {
            self.pending.push(PendingFault { id, spec });
        }
        id
    }

    /// Consumes one count of the first fault matching the request, if any. While that fault
    /// still has requests to skip, the request passes untouched and only the skip counts down.
    pub(crate) fn take(&mut self, model: &str, key: &str) -> Option<FaultSpec> {
        let pos = self
            .pending
            .iter()
            .position(|p| p.spec.matches(model, key))?;
        let entry = &mut self.pending[pos];
        if entry.spec.skip > 0 {
            entry.spec.skip -= 1;
            return None;
        }
        entry.spec.count -= 1;
        if entry.spec.count == 0 {
            Some(self.pending.remove(pos).spec)
        } else {
            Some(entry.spec.clone())
        }
    }

    pub(crate) fn list(&self) -> Vec<PendingFault> {
        self.pending.clone()
    }

    pub(crate) fn clear(&mut self) -> usize {
        let n = self.pending.len();
        self.pending.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_match_in_insertion_order_consumes_one_count() {
        let mut q = FaultQueue::default();
        let mut only_b = FaultSpec::new(FaultKind::Server500);
        only_b.model = Some("b".into());
        q.push(only_b);
        let mut any = FaultSpec::new(FaultKind::Credits402);
        any.count = 2;
        q.push(any);

        assert_eq!(
            q.take("a", "k").map(|s| s.kind),
            Some(FaultKind::Credits402)
        );
        assert_eq!(q.take("b", "k").map(|s| s.kind), Some(FaultKind::Server500));
        assert_eq!(
            q.take("b", "k").map(|s| s.kind),
            Some(FaultKind::Credits402)
        );
        assert_eq!(q.take("b", "k"), None);
    }

    #[test]
    fn skipped_requests_pass_before_the_fault_strikes() {
        let mut q = FaultQueue::default();
        let mut later = FaultSpec::new(FaultKind::BadGateway502);
        later.skip = 2;
        q.push(later);
        assert_eq!(q.take("a", "k"), None);
        assert_eq!(q.take("a", "k"), None);
        assert_eq!(
            q.take("a", "k").map(|s| s.kind),
            Some(FaultKind::BadGateway502)
        );
        assert_eq!(q.take("a", "k"), None);
    }

    #[test]
    fn fields_foreign_to_the_kind_are_rejected() {
        let mut spec = FaultSpec::new(FaultKind::Upstream429);
        spec.limit = Some(3);
        let err = spec.validate().err().unwrap_or_default();
        assert!(
            err.contains("`limit` does not apply to kind `upstream_429`"),
            "{err}"
        );
        spec.limit = None;
        spec.retry_after_s = Some(16.007);
        assert_eq!(spec.validate(), Ok(()));
    }
}
