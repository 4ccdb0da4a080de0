//! Log and trace set-up for every freeway binary (the producer's commands and the worker's: one
//! set-up to keep right): `RUST_LOG` filters, `FREEWAY_LOG_FORMAT=json` gives one JSON object per
//! line with the current span's fields (a run's `run_id`, an attempt's attempt-log fields), and
//! everything goes to stderr so stdout stays for output. With `OTEL_EXPORTER_OTLP_ENDPOINT` set,
//! freeway's spans are also exported over OTLP/HTTP (protobuf) to `…/v1/traces`
//! ([`crate::telemetry`] says which spans); `OTEL_SERVICE_NAME` and the SDK's other `OTEL_*`
//! variables apply.
//!
//! No secret reaches a log or a span: tokens and keys are `ApiKey`s whose `Debug` is redacted,
//! the handlers never log bodies, and the tests grep a whole end-to-end run's logs for the keys.

use crate::config::LogFormat;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::io::IsTerminal;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// What the exporter needs at exit: the spans it still holds are sent when this is dropped.
#[must_use = "dropping it at once stops the export of spans"]
pub struct Telemetry(Option<SdkTracerProvider>);

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "could not send the last spans");
        }
    }
}

/// Set up logging with `info` when `RUST_LOG` is unset, as `service` in traces.
pub fn init(format: LogFormat, service: &str) -> Result<Telemetry, String> {
    init_with_default(format, "info", service)
}

/// `default` is the filter when `RUST_LOG` is unset: `info` for servers, `warn` for commands
/// whose stderr is a progress display. The error is a bad OTLP setting, in one line.
pub fn init_with_default(
    format: LogFormat,
    default: &str,
    service: &str,
) -> Result<Telemetry, String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only for a person at a terminal: a log file or collector gets plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        // A log line that cannot be written (the log's disk is full) is lost, not reported with
        // `eprintln!`, which panics on the same failed write and would end the task that logged.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        LogFormat::Pretty => fmt.with_filter(filter).boxed(),
    };
    let provider = exporter(service)?;
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("freeway"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            // freeway's own spans: the HTTP stacks' (the exporter's among them) would feed back.
            .with_filter(EnvFilter::new(
                "info,h2=off,hyper=off,hyper_util=off,reqwest=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off",
            ))
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(traces)
        .try_init();
    Ok(Telemetry(provider))
}

/// The OTLP exporter, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its traces-only variable) is set.
/// Its HTTP client runs on a thread of its own, so it is built before any runtime starts.
fn exporter(service: &str) -> Result<Option<SdkTracerProvider>, String> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    crate::provider::install_crypto();
    // The endpoint and protocol come from the environment: set here, they would override it.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(service.to_string());
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    // The queue-wait span is made through the global tracer (`telemetry::past_span`).
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok(Some(provider))
}
