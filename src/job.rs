//! The job payload: what a web app asks for (`POST /v1/runs`, docs/api.md §1) and what travels in
//! the queue. Validation lives here so the API, `worker run-one` and the worker's pre-flight reject
//! the same things with the same precise messages.

use crate::budget::Kind;
use crate::catalog::{Catalog, DEFAULT_TIER};
use crate::chat::{ToolCall, ToolSpec};
use crate::route::{Route, RouteError, RouteSpec};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The payload version a worker understands. A job with another version is dead-lettered.
/// The longest a run may wait in place for a slot (`wait_for_free_s`).
pub const MAX_WAIT_FOR_FREE_S: u32 = 60;
/// The largest `max_tokens` a job may ask for.
pub const MAX_TOKENS: u32 = 200_000;
pub const JOB_VERSION: u32 = 1;
/// The default deadline after enqueue, and the longest allowed.
pub const DEFAULT_DEADLINE_S: u64 = 600;
pub const MAX_DEADLINE_S: u64 = 24 * 3600;
const MAX_INPUT_BYTES: usize = 128 * 1024;
const MAX_TOOLS: usize = 32;
/// How deep a tool's `parameters` may nest. A job carries them a few levels below the request,
/// and a queue entry must stay well inside the decoder's 128 levels, or a request accepted at
/// enqueue would be a job no worker can read. Real schemas nest a handful of levels.
pub const MAX_SCHEMA_DEPTH: usize = 32;

/// What to do with a run whose routes are all closed at enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnRest {
    #[default]
    Refuse,
    Queue,
}

/// Who gets a shared pool's slots first (docs/design.md §4.7): interactive runs, fairly between
/// tenants, then batch runs. A batch run is one nobody watches: it waits for a free slot rather
/// than be refused, so its `on_rest` defaults to `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    #[default]
    Interactive,
    Batch,
}

impl Priority {
    /// The text the API, the store and the logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Batch => "batch",
        }
    }
}

/// The body of `POST /v1/runs` and of `worker run-one JOB.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    pub routes: Vec<RouteSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<u64>,
    /// Absent: [`RunRequest::on_rest`] decides by the priority. Kept absent in the job, so a
    /// retried or continued run decides the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_rest: Option<OnRest>,
    #[serde(default)]
    pub regenerate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The most tokens one answer may take (1–200,000), sent to the provider: without it
    /// OpenRouter reserves the model's whole output and answers "can only afford" 402s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Seconds (0–60) the run may wait in place for a full pool's next slot on a route before
    /// it, rather than move on to a later route (docs/design.md §2.2): for users who would
    /// rather wait a few seconds than pay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_free_s: Option<u32>,
    /// Whose share of a shared pool the run takes (docs/design.md §4.7), asserted by the web
    /// app's backend like `user_id`: an organisation. Absent: the user is the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// A configured tier (`[tiers.NAME]`): the tenant's weight and spend cap. Absent: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Absent: interactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// The most this run may spend on priced routes, in USD (docs/design.md §4.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd: Option<f64>,
    /// The W3C trace context of the web request that enqueues the run (docs/design.md §6):
    /// its spans join that trace. The `traceparent` header says the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Why a request or a job is not acceptable. The message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidRequest {
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidRequest {
    InvalidRequest {
        field: field.into(),
        message: message.into(),
    }
}

/// Whether `s` is an id the API takes: 1-128 characters of `[A-Za-z0-9_.:-]`.
pub fn is_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

impl RunRequest {
    /// A `chat` request of `user_id` saying `input` on `routes`, every other field at its
    /// default, as a body naming only those three reads. Set what else differs with the
    /// struct's update syntax: `RunRequest { deadline_s: Some(30), ..RunRequest::new(…) }`.
    pub fn new(
        user_id: impl Into<String>,
        input: impl Into<String>,
        routes: Vec<RouteSpec>,
    ) -> RunRequest {
        RunRequest {
            user_id: user_id.into(),
            conversation_id: None,
            kind: Kind::default(),
            input: Some(input.into()),
            routes,
            tools: Vec::new(),
            system: None,
            deadline_s: None,
            on_rest: None,
            regenerate: false,
            idempotency_key: None,
            max_tokens: None,
            wait_for_free_s: None,
            tenant: None,
            tier: None,
            priority: None,
            max_usd: None,
            traceparent: None,
        }
    }

    /// The tenant whose share the run takes: its `tenant`, else its user.
    pub fn tenant_id(&self) -> &str {
        self.tenant.as_deref().unwrap_or(&self.user_id)
    }

    /// The tier the run is counted in: its `tier`, else [`DEFAULT_TIER`].
    pub fn tier_name(&self) -> &str {
        self.tier.as_deref().unwrap_or(DEFAULT_TIER)
    }

    pub fn priority(&self) -> Priority {
        self.priority.unwrap_or_default()
    }

    /// What to do while every route rests: the request's `on_rest`, else `queue` for a batch run
    /// (nobody waits on its answer, so waiting beats a refusal) and `refuse` for an
    /// interactive one (its user would rather hear at once).
    pub fn on_rest(&self) -> OnRest {
        self.on_rest.unwrap_or(match self.priority() {
            Priority::Batch => OnRest::Queue,
            Priority::Interactive => OnRest::Refuse,
        })
    }

    /// Parse and validate a JSON body.
    pub fn from_json(bytes: &[u8], catalog: &Catalog) -> Result<RunRequest, InvalidRequest> {
        let req: RunRequest =
            serde_json::from_slice(bytes).map_err(|e| invalid("body", e.to_string()))?;
        req.validate(catalog)?;
        Ok(req)
    }

    /// Check every field; returns the chain, resolved with `catalog`'s providers and pools.
    pub fn validate(&self, catalog: &Catalog) -> Result<Vec<Route>, InvalidRequest> {
        if !is_id(&self.user_id) {
            return Err(invalid("user_id", "must match [A-Za-z0-9_.:-]{1,128}"));
        }
        if let Some(c) = &self.conversation_id
            && !is_id(c)
        {
            return Err(invalid(
                "conversation_id",
                "must match [A-Za-z0-9_.:-]{1,128}",
            ));
        }
        match (&self.input, self.regenerate) {
            (None, false) => return Err(invalid("input", "is required unless regenerate is true")),
            (Some(i), _) if i.trim().is_empty() => {
                return Err(invalid("input", "must not be empty"));
            }
            (Some(i), _) if i.len() > MAX_INPUT_BYTES => {
                return Err(invalid(
                    "input",
                    format!("must be at most {MAX_INPUT_BYTES} bytes"),
                ));
            }
            _ => {}
        }
        if self.regenerate && self.conversation_id.is_none() {
            return Err(invalid(
                "conversation_id",
                "is required when regenerate is true",
            ));
        }
        if !(1..=8).contains(&self.routes.len()) {
            return Err(invalid(
                "routes",
                format!("must hold 1 to 8 routes, got {}", self.routes.len()),
            ));
        }
        let routes = self
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                Route::resolve(r, catalog)
                    .map_err(|e: RouteError| invalid(format!("routes[{i}]"), e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if self.tools.len() > MAX_TOOLS {
            return Err(invalid("tools", format!("at most {MAX_TOOLS} tools")));
        }
        let mut names = HashSet::new();
        for (i, t) in self.tools.iter().enumerate() {
            let ok = (1..=64).contains(&t.name.len())
                && t.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
            if !ok {
                return Err(invalid(
                    format!("tools[{i}].name"),
                    "must match [A-Za-z0-9_-]{1,64}",
                ));
            }
            if !names.insert(t.name.as_str()) {
                return Err(invalid(
                    format!("tools[{i}].name"),
                    format!("{:?} is declared twice", t.name),
                ));
            }
            if !t.parameters.is_object() {
                return Err(invalid(
                    format!("tools[{i}].parameters"),
                    "must be a JSON Schema object",
                ));
            }
            if depth(&t.parameters) > MAX_SCHEMA_DEPTH {
                return Err(invalid(
                    format!("tools[{i}].parameters"),
                    format!("must nest at most {MAX_SCHEMA_DEPTH} levels deep"),
                ));
            }
        }
        if let Some(d) = self.deadline_s
            && !(1..=MAX_DEADLINE_S).contains(&d)
        {
            return Err(invalid(
                "deadline_s",
                format!("must be between 1 and {MAX_DEADLINE_S}"),
            ));
        }
        if let Some(n) = self.max_tokens
            && !(1..=MAX_TOKENS).contains(&n)
        {
            return Err(invalid(
                "max_tokens",
                format!("must be between 1 and {MAX_TOKENS}"),
            ));
        }
        if let Some(s) = self.wait_for_free_s
            && s > MAX_WAIT_FOR_FREE_S
        {
            return Err(invalid(
                "wait_for_free_s",
                format!("must be between 0 and {MAX_WAIT_FOR_FREE_S}"),
            ));
        }
        if let Some(k) = &self.idempotency_key
            && !is_id(k)
        {
            return Err(invalid(
                "idempotency_key",
                "must match [A-Za-z0-9_.:-]{1,128}",
            ));
        }
        if let Some(t) = &self.tenant
            && !is_id(t)
        {
            return Err(invalid("tenant", "must match [A-Za-z0-9_.:-]{1,128}"));
        }
        if catalog.tier(self.tier_name()).is_none() {
            return Err(invalid(
                "tier",
                format!(
                    "unknown tier {:?}; configured: {}",
                    self.tier_name(),
                    catalog.tier_names()
                ),
            ));
        }
        if let Some(usd) = self.max_usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(invalid("max_usd", "must be a number above 0"));
        }
        if let Some(t) = &self.traceparent
            && !crate::telemetry::is_traceparent(t)
        {
            return Err(invalid(
                "traceparent",
                "must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>",
            ));
        }
        Ok(routes)
    }
}

/// The approved (or denied) tool call a continuation carries back to the model (docs/design.md
/// §2.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Continuation {
    pub parent_run_id: String,
    pub tool_call: ToolCall,
    /// The tool result the model sees: the result the web app sent, or "denied by the user".
    pub result: String,
}

/// A run as it travels in the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunJob {
    pub v: u32,
    pub run_id: String,
    /// The conversation, assigned at enqueue when the request named none.
    pub conversation_id: String,
    pub request: RunRequest,
    pub enqueued_ms: u64,
    pub deadline_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Continuation>,
    /// How many times this run was snoozed: part of the re-push's idempotency key.
    #[serde(default)]
    pub snooze_n: u32,
    /// A pool's slot counted for this run while it waited (docs/design.md §4.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<HeldSlot>,
    /// The run this one retries, when an operator or the web app asked for a retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// The trace context the worker's spans continue: the enqueuing span's, else the request's
    /// own `traceparent` (checked like it: a queue entry is no proof).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A slot of a pool's later window, counted for a waiting run: it calls in it without asking
/// the limiter again. A slot from the queue grants nothing but that: it opens only its own pool,
/// only within its times, once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldSlot {
    /// The pool instance.
    pub pool: String,
    /// Epoch ms from which, and until which, the slot may be used.
    pub from_ms: u64,
    pub until_ms: u64,
    /// A place in the pool's queue of waiting runs (docs/design.md §4.7) rather than a slot:
    /// the slot is granted to the run in Redis when its turn comes (from `from_ms`, roughly),
    /// and the run asks for it by its id. Given back, the place is left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

impl HeldSlot {
    /// Whether the slot is `pool`'s, counted, and may be used at `now_ms`.
    pub fn usable(&self, pool: &str, now_ms: u64) -> bool {
        !self.queued && self.pool == pool && (self.from_ms..self.until_ms).contains(&now_ms)
    }

    /// Whether this is a place in `pool`'s queue.
    pub fn queued_in(&self, pool: &str) -> bool {
        self.queued && self.pool == pool
    }
}

impl RunJob {
    /// The tokens the run's first call is expected to spend, for pools that count them: its
    /// input and system prompt, and its answer's cap ([`crate::pace::estimate_tokens`]).
    pub fn first_call_tokens(&self) -> u32 {
        let request = &self.request;
        crate::pace::estimate_tokens(
            request.input.as_ref().map_or(0, String::len)
                + request.system.as_ref().map_or(0, String::len),
            request.max_tokens,
        )
    }

    /// A new run for a validated request, enqueued at `now_ms`.
    pub fn new(request: RunRequest, now_ms: u64) -> RunJob {
        let run_id = format!("run_{}", ulid::Ulid::generate());
        let conversation_id = request
            .conversation_id
            .clone()
            .unwrap_or_else(|| format!("conv_{}", ulid::Ulid::generate()));
        let deadline_ms = now_ms + request.deadline_s.unwrap_or(DEFAULT_DEADLINE_S) * 1000;
        // The span that makes the job (the producer's `enqueue`) parents the run's spans; where
        // nothing is traced, the request's own context is passed on.
        let traceparent = crate::telemetry::traceparent(&tracing::Span::current())
            .or_else(|| request.traceparent.clone());
        RunJob {
            v: JOB_VERSION,
            run_id,
            conversation_id,
            request,
            enqueued_ms: now_ms,
            deadline_ms,
            continuation: None,
            snooze_n: 0,
            slot: None,
            retry_of: None,
            traceparent,
        }
    }

    /// Parse a job from the queue; anything wrong makes it a poison job (`invalid_job`).
    pub fn from_json(
        bytes: &[u8],
        catalog: &Catalog,
    ) -> Result<(RunJob, Vec<Route>), InvalidRequest> {
        RunJob::checked(serde_json::from_slice(bytes), catalog)
    }

    /// [`RunJob::from_json`] for a payload the queue's codec has already decoded.
    pub fn from_value(
        value: serde_json::Value,
        catalog: &Catalog,
    ) -> Result<(RunJob, Vec<Route>), InvalidRequest> {
        RunJob::checked(serde_json::from_value(value), catalog)
    }

    fn checked(
        parsed: Result<RunJob, serde_json::Error>,
        catalog: &Catalog,
    ) -> Result<(RunJob, Vec<Route>), InvalidRequest> {
        let job = parsed.map_err(|e| invalid("job", e.to_string()))?;
        let routes = job.check(catalog)?;
        Ok((job, routes))
    }

    /// Validate a job (its version, its request, its ids); returns the chain, resolved with
    /// `catalog`'s providers and pools.
    pub fn check(&self, catalog: &Catalog) -> Result<Vec<Route>, InvalidRequest> {
        if self.v != JOB_VERSION {
            return Err(invalid(
                "v",
                format!(
                    "unknown job version {} (this worker reads {JOB_VERSION})",
                    self.v
                ),
            ));
        }
        if !is_id(&self.run_id) {
            return Err(invalid("run_id", "must match [A-Za-z0-9_.:-]{1,128}"));
        }
        if !is_id(&self.conversation_id) {
            return Err(invalid(
                "conversation_id",
                "must match [A-Za-z0-9_.:-]{1,128}",
            ));
        }
        self.request.validate(catalog)
    }

    pub fn is_continuation(&self) -> bool {
        self.continuation.is_some()
    }
}

/// How many levels of arrays and objects `value` nests (a scalar is 0), without recursion.
fn depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Array(a) => Box::new(a.iter()),
            serde_json::Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        deepest = deepest.max(d + 1);
        stack.extend(children.map(|c| (c, d + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A tool whose `parameters` nest `levels` deep, each level an object or an array.
    fn nested_tool(levels: &[bool]) -> String {
        let mut schema = String::from("1");
        for &object in levels.iter().rev() {
            schema = match object {
                true => format!(r#"{{"p":{schema}}}"#),
                false => format!("[{schema}]"),
            };
        }
        format!(
            r#","tools":[{{"name":"t","parameters":{{"type":"object","properties":{schema}}}}}]"#
        )
    }

    proptest! {
        /// What enqueue accepts, a worker reads: the job a valid request becomes decodes the way
        /// the worker decodes a queue entry (bytes to a JSON value, then a job), whatever the
        /// nesting of its tools' parameters; deeper ones are refused at enqueue, naming the field.
        #[test]
        fn a_request_enqueue_accepts_is_a_job_a_worker_reads(
            levels in prop::collection::vec(any::<bool>(), 0..140)
        ) {
            let catalog = Catalog::builtin();
            match RunRequest::from_json(&body(&nested_tool(&levels)), &catalog) {
                Ok(request) => {
                    let job = RunJob::new(request, 1_000);
                    let bytes = serde_json::to_vec(&job).unwrap();
                    let entry: serde_json::Value = serde_json::from_slice(&bytes)
                        .map_err(|e| TestCaseError::fail(format!("undecodable entry: {e}")))?;
                    prop_assert!(RunJob::from_value(entry, &catalog).is_ok());
                }
                Err(refused) => {
                    prop_assert!(levels.len() + 2 > MAX_SCHEMA_DEPTH, "{refused}");
                    prop_assert!(
                        refused.field == "tools[0].parameters" || refused.field == "body",
                        "{refused}"
                    );
                }
            }
        }
    }

    fn body(extra: &str) -> Vec<u8> {
        format!(r#"{{"user_id":"u1","input":"hi","routes":[{{"model":"a/b:free"}}]{extra}}}"#)
            .into_bytes()
    }

    #[test]
    fn a_minimal_request_is_valid() {
        let r = RunRequest::from_json(&body(""), &Catalog::builtin()).unwrap();
        assert_eq!(r.kind, Kind::Chat);
        assert_eq!(r.on_rest(), OnRest::Refuse);
        assert_eq!(
            (r.tenant_id(), r.tier_name(), r.priority()),
            ("u1", "default", Priority::Interactive)
        );
    }

    fn tiered() -> Catalog {
        Catalog::from_toml("[tiers.pro]\nweight = 4\n").unwrap()
    }

    #[test]
    fn tenant_tier_priority_and_max_usd_are_checked() {
        let r = RunRequest::from_json(
            &body(r#","tenant":"org_7","tier":"pro","priority":"batch","max_usd":0.25"#),
            &tiered(),
        )
        .unwrap();
        assert_eq!(
            (r.tenant_id(), r.tier_name(), r.priority(), r.max_usd),
            ("org_7", "pro", Priority::Batch, Some(0.25))
        );
        let field = |extra: &str| {
            RunRequest::from_json(&body(extra), &tiered())
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(field(r#","tenant":"org 7""#).field, "tenant");
        assert_eq!(field(r#","tenant":"""#).field, "tenant");
        let e = field(r#","tier":"gold""#);
        assert_eq!(e.field, "tier");
        assert_eq!(
            e.message,
            r#"unknown tier "gold"; configured: default, pro"#
        );
        // A tier of another configuration is unknown here (a worker without it dead-letters).
        let e = RunRequest::from_json(&body(r#","tier":"pro""#), &Catalog::builtin()).unwrap_err();
        assert_eq!(e.message, r#"unknown tier "pro"; configured: default"#);
        for bad in ["0", "-1", "0.0"] {
            let e = field(&format!(r#","max_usd":{bad}"#));
            assert_eq!(
                (e.field.as_str(), e.message.as_str()),
                ("max_usd", "must be a number above 0"),
                "{bad}"
            );
        }
        assert_eq!(field(r#","max_usd":"5""#).field, "body");
        assert_eq!(field(r#","priority":"urgent""#).field, "body");
        // JSON has no NaN or infinity; a Rust caller can still pass them.
        let mut r = RunRequest::from_json(&body(""), &tiered()).unwrap();
        for bad in [f64::NAN, f64::INFINITY] {
            r.max_usd = Some(bad);
            assert_eq!(r.validate(&tiered()).unwrap_err().field, "max_usd");
        }
    }

    #[test]
    fn a_batch_run_queues_while_routes_rest_unless_it_says_otherwise() {
        let on_rest = |extra: &str| {
            RunRequest::from_json(&body(extra), &Catalog::builtin())
                .unwrap()
                .on_rest()
        };
        assert_eq!(on_rest(r#","priority":"batch""#), OnRest::Queue);
        assert_eq!(
            on_rest(r#","priority":"batch","on_rest":"refuse""#),
            OnRest::Refuse
        );
        assert_eq!(on_rest(r#","priority":"interactive""#), OnRest::Refuse);
        assert_eq!(on_rest(r#","on_rest":"queue""#), OnRest::Queue);
    }

    #[test]
    fn jobs_keep_reading_and_new_fields_stay_out_when_unset() {
        // A job pushed before v3 always spelled on_rest out.
        let old = br#"{"v":1,"run_id":"run_1","conversation_id":"conv_1","request":{"user_id":"u1","input":"hi","routes":[{"model":"a/b:free"}],"kind":"chat","on_rest":"refuse","regenerate":false},"enqueued_ms":1,"deadline_ms":2}"#;
        let (job, _) = RunJob::from_json(old, &Catalog::builtin()).unwrap();
        assert_eq!(job.request.on_rest(), OnRest::Refuse);
        let request = RunRequest::from_json(&body(""), &Catalog::builtin()).unwrap();
        let text = serde_json::to_string(&request).unwrap();
        for absent in ["on_rest", "tenant", "tier", "priority", "max_usd"] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        let full = RunRequest::from_json(
            &body(r#","tenant":"org","tier":"pro","priority":"batch","max_usd":2.5"#),
            &tiered(),
        )
        .unwrap();
        let back: RunRequest =
            serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
        assert_eq!(back, full);
    }

    #[test]
    fn errors_name_the_field() {
        let e = RunRequest::from_json(
            br#"{"user_id":"bad id","input":"x","routes":[{"model":"m"}]}"#,
            &Catalog::builtin(),
        )
        .unwrap_err();
        assert_eq!(e.field, "user_id");
        let e = RunRequest::from_json(
            br#"{"user_id":"u","routes":[{"model":"m"}]}"#,
            &Catalog::builtin(),
        )
        .unwrap_err();
        assert_eq!(e.field, "input");
        let e = RunRequest::from_json(
            br#"{"user_id":"u","input":"x","routes":[]}"#,
            &Catalog::builtin(),
        )
        .unwrap_err();
        assert_eq!(e.field, "routes");
        let e =
            RunRequest::from_json(&body(r#","deadline_s":0"#), &Catalog::builtin()).unwrap_err();
        assert_eq!(e.field, "deadline_s");
        for bad in ["0", "200001"] {
            let e = RunRequest::from_json(
                &body(&format!(r#","max_tokens":{bad}"#)),
                &Catalog::builtin(),
            )
            .unwrap_err();
            assert_eq!(e.field, "max_tokens");
        }
        let ok =
            RunRequest::from_json(&body(r#","max_tokens":1024"#), &Catalog::builtin()).unwrap();
        assert_eq!(ok.max_tokens, Some(1024));
        for bad in ["61", "-1", "1.5", "\"5\""] {
            let e = RunRequest::from_json(
                &body(&format!(r#","wait_for_free_s":{bad}"#)),
                &Catalog::builtin(),
            )
            .unwrap_err();
            assert!(
                e.field == "wait_for_free_s" || e.field == "body",
                "{bad}: {e}"
            );
        }
        let ok = RunRequest::from_json(&body(r#","wait_for_free_s":60"#), &Catalog::builtin());
        assert_eq!(ok.unwrap().wait_for_free_s, Some(60));
        let e =
            RunRequest::from_json(&body(r#","colour":"red""#), &Catalog::builtin()).unwrap_err();
        assert_eq!(e.field, "body");
    }

    #[test]
    fn a_job_of_another_version_is_rejected() {
        let mut job = RunJob::new(
            RunRequest::from_json(&body(""), &Catalog::builtin()).unwrap(),
            1_000,
        );
        assert_eq!(job.deadline_ms, 1_000 + DEFAULT_DEADLINE_S * 1000);
        job.v = 2;
        let bytes = serde_json::to_vec(&job).unwrap();
        assert_eq!(
            RunJob::from_json(&bytes, &Catalog::builtin())
                .unwrap_err()
                .field,
            "v"
        );
        assert_eq!(
            RunJob::from_json(b"{not json", &Catalog::builtin())
                .unwrap_err()
                .field,
            "job"
        );
        let wrong_shape = serde_json::json!({"v": 1, "run_id": 7});
        assert_eq!(
            RunJob::from_value(wrong_shape, &Catalog::builtin())
                .unwrap_err()
                .field,
            "job"
        );
    }
}
