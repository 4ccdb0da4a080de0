//! `producer enqueue`: one run through the same [`Enqueuer`] as `POST /v1/runs` (validation,
//! pre-flight, record, push), without the HTTP server. With `--wait` it follows the run's event
//! stream: the answer goes to stdout as it streams, the progress (attempts, failovers, delays,
//! tools) to stderr.

use super::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_REFUSED, connect_fleet, fail, open_store};
use freeway::catalog::Catalog;
use freeway::config::Settings;
use freeway::events::Event;
use freeway::job::RunRequest;
use freeway::route::RouteSpec;
use freeway::run::RunStatus;
use freeway::store::Store;
use producer::stream::{Entry, Reader};
use queue::{Enqueuer, Outcome};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The user the run is for.
    #[arg(long)]
    user: String,
    /// The user's message.
    #[arg(long)]
    input: String,
    /// A route MODEL[@CONNECTION]; repeat for a chain (1 to 8), in order.
    #[arg(long = "route", value_name = "MODEL[@CONNECTION]", required = true)]
    routes: Vec<String>,
    /// The run's kind: its step budget (docs/design.md §2.1).
    #[arg(long, default_value = "chat", value_parser = ["chat", "research", "complete"])]
    kind: String,
    /// What to do when every route rests: refuse now, or queue and wait for a reopening.
    /// Default: refuse, or queue for a batch run.
    #[arg(long, value_parser = ["refuse", "queue"])]
    on_rest: Option<String>,
    /// The tenant (an organisation) whose share of shared pools the run takes; default: the
    /// user.
    #[arg(long)]
    tenant: Option<String>,
    /// A configured tier (`[tiers.NAME]`); default: `default`.
    #[arg(long)]
    tier: Option<String>,
    /// `interactive` (default) goes first; `batch` takes the slots interactive runs leave.
    #[arg(long, value_parser = ["interactive", "batch"])]
    priority: Option<String>,
    /// The most the run may spend on priced routes, in USD.
    #[arg(long, value_name = "USD")]
    max_usd: Option<f64>,
    /// Continue this conversation (a new one by default).
    #[arg(long)]
    conversation: Option<String>,
    /// Follow the run: the answer on stdout as it streams, progress on stderr; exit 0
    /// succeeded (or paused for an approval), 1 failed, 75 refused.
    #[arg(long)]
    wait: bool,
}

impl Args {
    /// The request, validated exactly as `POST /v1/runs` validates its body.
    fn request(&self, catalog: &Catalog) -> Result<RunRequest, String> {
        let routes: Vec<RouteSpec> = self
            .routes
            .iter()
            .map(|r| RouteSpec::parse_cli(r, catalog))
            .collect();
        let body = serde_json::json!({
            "user_id": self.user,
            "conversation_id": self.conversation,
            "kind": self.kind,
            "input": self.input,
            "routes": routes,
            "on_rest": self.on_rest,
            "tenant": self.tenant,
            "tier": self.tier,
            "priority": self.priority,
        });
        let mut request = RunRequest::from_json(body.to_string().as_bytes(), catalog)
            .map_err(|e| e.to_string())?;
        // Set apart and checked again: `--max-usd` reads `nan` and `inf`, which JSON would
        // have turned into null, an absent cap.
        request.max_usd = self.max_usd;
        request.validate(catalog).map_err(|e| e.to_string())?;
        Ok(request)
    }
}

pub(crate) async fn run(settings: Settings, args: Args) -> ExitCode {
    let request = match args.request(&settings.catalog) {
        Ok(r) => r,
        Err(e) => return fail(EXIT_BAD_INPUT, &format!("invalid request: {e}")),
    };
    let store = match open_store(&settings).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let fleet = match connect_fleet(&settings).await {
        Ok(fleet) => fleet,
        Err(code) => return code,
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let enqueuer = Enqueuer::on(fleet, store.clone())
        .with_catalog(settings.catalog.clone())
        .with_lanes(settings.queues);
    let run_id = match enqueuer.enqueue(request).await {
        Ok(Outcome::Enqueued { run_id } | Outcome::Duplicate { run_id }) => run_id,
        Ok(Outcome::Refused {
            code,
            retry_after_s,
        }) => {
            return fail(
                EXIT_REFUSED,
                &format!(
                    "refused: {} (every route is resting); retry in {retry_after_s} s",
                    code.as_str()
                ),
            );
        }
        Err(e) => return fail(EXIT_FAILED, &e.to_string()),
    };
    println!("{run_id}");
    if !args.wait {
        return ExitCode::SUCCESS;
    }
    follow(
        &settings.redis_url,
        &settings.namespace,
        &run_id,
        store.as_ref(),
    )
    .await
}

/// How often a delayed run's countdown is shown while nothing else happens.
const COUNTDOWN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Print the run's events until its last one; the exit code follows how it ended. A failed
/// attempt is told with the status and message the store recorded for it.
async fn follow(redis_url: &str, ns: &str, run_id: &str, store: &dyn Store) -> ExitCode {
    let mut reader = match Reader::open(redis_url, ns, run_id).await {
        Ok(r) => r,
        Err(e) => return fail(EXIT_FAILED, &format!("cannot follow the run: {e}")),
    };
    let mut display = Display::default();
    loop {
        let batch = match tokio::time::timeout(COUNTDOWN_EVERY, reader.next_batch()).await {
            Err(_) => {
                display.countdown();
                continue;
            }
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return fail(EXIT_FAILED, &format!("cannot follow the run: {e}")),
        };
        for entry in batch {
            if matches!(entry.stored.event, Some(Event::Failover { .. })) {
                display.failed_attempt(store.attempts(run_id).await.ok().as_deref());
            }
            if let Some(code) = display.show(run_id, &entry) {
                return code;
            }
        }
    }
}

/// Turns events into output: deltas to stdout, the rest as a progress line on stderr.
#[derive(Default)]
struct Display {
    /// Text went to stdout without a final newline yet.
    open_line: bool,
    /// The run waits until then (epoch ms): the countdown shows what is left.
    delayed_until: Option<u64>,
    /// The countdown's line is open on stderr (a terminal rewrites it in place).
    counting: bool,
    /// The last countdown printed, in whole seconds (a pipe gets one line per 10 s).
    last_shown_s: Option<u64>,
}

impl Display {
    /// Show one event; `Some(exit code)` after the last one.
    fn show(&mut self, run_id: &str, entry: &Entry) -> Option<ExitCode> {
        let Some(event) = &entry.stored.event else {
            return self.progress(&format!("[{}]", entry.stored.kind));
        };
        match event {
            Event::Delta { text } => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
                self.open_line = true;
                None
            }
            Event::Queued => self.progress("[queued]"),
            Event::Started { worker } => self.progress(&format!("[started on {worker}]")),
            Event::Delayed { until_ms, reason } | Event::Waiting { until_ms, reason } => {
                let wait_ms = until_ms.saturating_sub(freeway::clock::epoch_ms());
                let how = match event {
                    Event::Waiting { .. } => "waiting in place",
                    _ => "delayed",
                };
                let line = format!("[{how} {} s: {reason}]", wait_ms.div_ceil(1000));
                self.progress(&line);
                self.delayed_until = Some(*until_ms);
                None
            }
            Event::Attempt { n, step, route } => {
                self.progress(&format!("[attempt {n} step {step} route {route}]"))
            }
            Event::Failover { from, to, verdict } => self.progress(&match to {
                Some(to) => format!("[{from} failed ({verdict}): trying {to}]"),
                None => format!("[{from} failed ({verdict}): no route is left to try]"),
            }),
            Event::ToolCall {
                name, arguments, ..
            } => self.progress(&format!("[tool call {name}({arguments})]")),
            Event::ToolResult { id, content } => self.progress(&format!(
                "[tool result {id}: {}]",
                content.chars().take(200).collect::<String>()
            )),
            Event::AwaitingApproval { tool_call } => {
                self.progress(&format!(
                    "[awaiting approval of {} ({}): POST /v1/runs/{run_id}/approvals]",
                    tool_call.name, tool_call.id
                ));
                Some(ExitCode::SUCCESS)
            }
            Event::Refused {
                code,
                retry_after_s,
            } => {
                self.end_line();
                Some(fail(
                    EXIT_REFUSED,
                    &format!("refused: {}; retry in {retry_after_s} s", code.as_str()),
                ))
            }
            Event::Finished { status, code, .. } => {
                let code = code
                    .map(|c| format!(" ({})", c.as_str()))
                    .unwrap_or_default();
                self.progress(&format!("[finished: {}{code}]", status.as_str()));
                Some(if *status == RunStatus::Succeeded {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_FAILED)
                })
            }
            Event::Cancelled { by } => {
                let by = by
                    .as_deref()
                    .map(|b| format!(" by {b}"))
                    .unwrap_or_default();
                self.progress(&format!("[cancelled{by}]"));
                Some(ExitCode::from(EXIT_FAILED))
            }
        }
    }

    fn progress(&mut self, line: &str) -> Option<ExitCode> {
        self.end_line();
        self.end_countdown();
        self.delayed_until = None;
        eprintln!("{line}");
        None
    }

    /// What the store recorded of the attempt that just failed: its HTTP status and message.
    fn failed_attempt(&mut self, attempts: Option<&[freeway::run::AttemptRecord]>) {
        let Some(a) = attempts.and_then(|a| a.iter().rev().find(|a| a.verdict.is_some())) else {
            return;
        };
        let status = a
            .http_status
            .map_or_else(|| "no answer".to_string(), |s| format!("HTTP {s}"));
        let message: String = a.error.as_deref().unwrap_or("").chars().take(300).collect();
        self.progress(&format!(
            "[attempt {} on {}: {status}: {message}]",
            a.n, a.route
        ));
    }

    /// While delayed: the time left, rewritten in place on a terminal, a line per 10 s on a pipe.
    fn countdown(&mut self) {
        use std::io::IsTerminal;
        let Some(until) = self.delayed_until else {
            return;
        };
        let left_s = until
            .saturating_sub(freeway::clock::epoch_ms())
            .div_ceil(1000);
        self.end_line();
        if std::io::stderr().is_terminal() {
            eprint!("\r[waiting: {left_s} s left]   ");
            self.counting = true;
        } else if self.last_shown_s.is_none_or(|shown| shown >= left_s + 10) {
            eprintln!("[waiting: {left_s} s left]");
            self.last_shown_s = Some(left_s);
        }
    }

    fn end_countdown(&mut self) {
        if self.counting {
            eprintln!();
            self.counting = false;
        }
        self.last_shown_s = None;
    }

    /// Close the answer's line on stdout before anything else is printed.
    fn end_line(&mut self) {
        if self.open_line {
            println!();
            self.open_line = false;
        }
    }
}
