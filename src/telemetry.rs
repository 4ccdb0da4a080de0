//! Traces (docs/design.md §6): a run is part of the trace of the web request that enqueued it.
//!
//! The request's W3C `traceparent` (its header, or the run body's field) parents the producer's
//! `enqueue` span; the job carries that span's context to the worker, whose `run` span continues
//! it, with `queue_wait`, `preflight`, each `attempt` (route, verdict, status) and the store's
//! writes as children; each provider request carries the attempt's `traceparent`. The binaries
//! export the spans over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
//! ([`crate::logging`]).
//!
//! Without the `otel` feature (a web app linking `queue` that traces nothing) every function
//! here but [`is_traceparent`] does nothing; with it but without an exporter, the spans have
//! no trace to join and the calls cost a lookup.

use tracing::Span;

/// Whether `value` is a traceparent freeway passes on: version `00`, a 32-hex trace id and a
/// 16-hex parent id (lowercase, neither all zeros) and 2-hex flags, as W3C Trace Context
/// defines it. Anything else is dropped, never forwarded: it is a request's field.
pub fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [version, trace, parent, flags]
        if *version == "00"
            && hex(trace, 32) && nonzero(trace)
            && hex(parent, 16) && nonzero(parent)
            && hex(flags, 2))
}

/// Continue the trace of `traceparent` in `span`, which must not have been entered yet. A
/// value that is not a traceparent ([`is_traceparent`]) is ignored: the span starts a trace.
pub fn continue_trace(span: &Span, traceparent: Option<&str>) {
    #[cfg(feature = "otel")]
    otel::continue_trace(span, traceparent);
    #[cfg(not(feature = "otel"))]
    let _ = (span, traceparent);
}

/// `span`'s context as a traceparent, for a job or an outgoing request; `None` when it is in
/// no trace (no exporter, or the feature off).
pub fn traceparent(span: &Span) -> Option<String> {
    #[cfg(feature = "otel")]
    return otel::traceparent(span);
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

/// A child of `parent` that began and ended in the past, between two epoch-ms times: the time
/// a run waited in the queue, which no span of this process saw begin.
pub fn past_span(parent: &Span, name: &'static str, start_ms: u64, end_ms: u64) {
    #[cfg(feature = "otel")]
    otel::past_span(parent, name, start_ms, end_ms);
    #[cfg(not(feature = "otel"))]
    let _ = (parent, name, start_ms, end_ms);
}

#[cfg(feature = "otel")]
mod otel {
    use super::is_traceparent;
    use opentelemetry::trace::{
        Span as _, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
    };
    use std::time::{Duration, SystemTime};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    /// The remote context a traceparent names (checked by [`is_traceparent`] first).
    fn remote(traceparent: &str) -> Option<opentelemetry::Context> {
        let mut parts = traceparent.split('-').skip(1);
        let trace = TraceId::from_hex(parts.next()?).ok()?;
        let parent = SpanId::from_hex(parts.next()?).ok()?;
        let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
        let context = SpanContext::new(
            trace,
            parent,
            TraceFlags::new(flags),
            true,
            TraceState::default(),
        );
        Some(opentelemetry::Context::new().with_remote_span_context(context))
    }

    pub(super) fn continue_trace(span: &Span, traceparent: Option<&str>) {
        let Some(parent) = traceparent.filter(|t| is_traceparent(t)).and_then(remote) else {
            return;
        };
        // Fails only when no exporter listens (no layer) or the span is off: nothing to join.
        let _ = span.set_parent(parent);
    }

    pub(super) fn traceparent(span: &Span) -> Option<String> {
        let context = span.context();
        let span = context.span();
        let context = span.span_context();
        context.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                context.trace_id(),
                context.span_id(),
                context.trace_flags().to_u8()
            )
        })
    }

    pub(super) fn past_span(parent: &Span, name: &'static str, start_ms: u64, end_ms: u64) {
        let context = parent.context();
        if !context.span().span_context().is_valid() {
            return;
        }
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let tracer = opentelemetry::global::tracer("freeway");
        let mut span = tracer
            .span_builder(name)
            .with_start_time(at(start_ms))
            .start_with_context(&tracer, &context);
        span.end_with_timestamp(at(end_ms.max(start_ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::is_traceparent;
    use proptest::prelude::*;

    proptest! {
        /// A request's header or field is any text: it never panics the check, and what passes
        /// has the one shape.
        #[test]
        fn any_text_is_checked_without_panic(value in "\\PC{0,80}|00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}") {
            if is_traceparent(&value) {
                prop_assert_eq!(value.len(), 55);
                prop_assert!(value.starts_with("00-"));
            }
        }
    }

    #[test]
    fn a_traceparent_is_the_w3c_form_and_nothing_else() {
        assert!(is_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333\n-01",
        ] {
            assert!(!is_traceparent(bad), "{bad:?}");
        }
    }
}
