//! SSE streaming, and the other bodies that are sent in pieces (stalled or cut short).
//!
//! A body is planned up front as steps: bytes, pauses, a cut. A plan without pauses or cut goes
//! out as one buffer, the common and cheapest case; otherwise a stream replays the steps and
//! sleeps between them, so pacing needs no extra task per request.

use std::io;
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures_util::stream;
use tokio::sync::watch;

use crate::faults::MidstreamLayout;
use crate::model::{CallStyle, Reply};
use crate::wire::{
    ChunkChoice, DONE, Envelope, ErrorObj, KEEPALIVE, Usage, bare_error_frame, error_event,
    sse_chunk,
};

fn cut() -> io::Error {
    io::Error::other("sim: connection cut")
}

enum Step {
    Data(Bytes),
    Pause(Duration),
    /// Ends the body with an error: hyper drops the connection without finishing the response,
    /// which is what a client sees when an upstream connection dies.
    Cut,
}

#[derive(Default)]
pub(crate) struct Plan {
    steps: Vec<Step>,
}

impl Plan {
    fn data(&mut self, bytes: impl Into<Bytes>) {
        self.steps.push(Step::Data(bytes.into()));
    }

    fn pause(&mut self, d: Duration) {
        if !d.is_zero() {
            self.steps.push(Step::Pause(d));
        }
    }

    /// The response body; pauses end early, cutting the connection, once `stop` turns true.
    pub(crate) fn into_body(self, stop: watch::Receiver<bool>) -> Body {
        if self.steps.iter().all(|s| matches!(s, Step::Data(_))) {
            let mut buf = Vec::with_capacity(
                self.steps
                    .iter()
                    .map(|s| match s {
                        Step::Data(b) => b.len(),
                        Step::Pause(_) | Step::Cut => 0,
                    })
                    .sum(),
            );
            for step in &self.steps {
                if let Step::Data(b) = step {
                    buf.extend_from_slice(b);
                }
            }
            return Body::from(buf);
        }
        let state = (self.steps.into_iter(), stop);
        Body::from_stream(stream::unfold(state, |(mut steps, mut stop)| async move {
            loop {
                match steps.next()? {
                    Step::Data(b) => return Some((Ok(b), (steps, stop))),
                    Step::Pause(d) => {
                        let stopping = stop.wait_for(|s| *s);
                        if tokio::time::timeout(d, stopping).await.is_ok() {
                            return Some((Err(cut()), (Vec::new().into_iter(), stop)));
                        }
                    }
                    Step::Cut => {
                        // Yield once first: hyper flushes what it has buffered while the body
                        // is pending, so the client really receives the chunks before the cut.
                        tokio::task::yield_now().await;
                        return Some((Err(cut()), (steps, stop)));
                    }
                }
            }
        }))
    }
}

/// How a stream ends.
pub(crate) enum End {
    /// Finish chunk, usage, `[DONE]`.
    Finish,
    /// An in-band error after `after` content chunks (docs/providers.md §2.8).
    Error {
        after: usize,
        layout: MidstreamLayout,
        error: Box<ErrorObj>,
        done: bool,
    },
    /// The connection drops after `after` content chunks.
    Cut { after: usize },
}

pub(crate) struct SseOptions {
    pub keepalive: u32,
    /// Pause before each content chunk (`token_rate`); zero sends everything at once.
    pub gap: Duration,
    /// Usage on a second finish chunk instead of a `"choices":[]` chunk (docs/providers.md §1.3,
    /// layout b).
    pub usage_layout_b: bool,
    /// Pause of the given length once that many content chunks are out.
    pub stall: Option<(usize, Duration)>,
    pub end: End,
    /// How tool calls are laid out, and the finish reason of a tool turn.
    pub style: CallStyle,
}

/// The SSE body of a streamed reply (docs/providers.md §1.3).
pub(crate) fn sse(env: &Envelope<'_>, reply: &Reply, usage: &Usage, opts: SseOptions) -> Plan {
    let mut plan = Plan::default();
    for _ in 0..opts.keepalive {
        plan.data(Bytes::from_static(KEEPALIVE));
    }
    plan.data(sse_chunk(env, &[ChunkChoice::text("")], None, None));

    let events = content_events(env, reply, opts.style);
    let sent = match &opts.end {
        End::Finish => events.len(),
        End::Error { after, .. } | End::Cut { after } => (*after).min(events.len()),
    };
    for (i, event) in events.into_iter().take(sent).enumerate() {
        if let Some((at, d)) = opts.stall
            && at == i
        {
            plan.pause(d);
        }
        plan.pause(opts.gap);
        plan.data(event);
    }
    if let Some((at, d)) = opts.stall
        && at >= sent
    {
        plan.pause(d);
    }

    match opts.end {
        End::Finish => {
            let reason = match opts.style {
                CallStyle::Gemini => "stop",
                CallStyle::Deltas => reply.finish_reason(),
            };
            let finish = [ChunkChoice::finish(reason)];
            plan.data(sse_chunk(env, &finish, None, None));
            if opts.usage_layout_b {
                plan.data(sse_chunk(env, &finish, Some(usage), None));
            } else {
                plan.data(sse_chunk(env, &[], Some(usage), None));
            }
            plan.data(Bytes::from_static(DONE));
        }
        End::Error {
            layout,
            error,
            done,
            ..
        } => {
            plan.data(match layout {
                MidstreamLayout::FinishChoice => {
                    sse_chunk(env, &[ChunkChoice::finish("error")], None, Some(&error))
                }
                MidstreamLayout::EmptyChoices => sse_chunk(env, &[], None, Some(&error)),
                MidstreamLayout::EventError => error_event(&error),
                MidstreamLayout::TopLevelCode => bare_error_frame(&error, env.id),
            });
            if done {
                plan.data(Bytes::from_static(DONE));
            }
        }
        End::Cut { .. } => plan.steps.push(Step::Cut),
    }
    plan
}

/// One event per word of text (each keeps its trailing space, so the deltas concatenate to the
/// exact answer), or per tool-call delta: the opening delta, then two argument fragments; in
/// Gemini's style one event per whole call.
fn content_events(env: &Envelope<'_>, reply: &Reply, style: CallStyle) -> Vec<Bytes> {
    match reply {
        Reply::Tools(calls) if style == CallStyle::Gemini => calls
            .iter()
            .map(|call| sse_chunk(env, &[ChunkChoice::whole_call(call)], None, None))
            .collect(),
        Reply::Text(text) => text
            .split_inclusive(' ')
            .map(|word| sse_chunk(env, &[ChunkChoice::text(word)], None, None))
            .collect(),
        Reply::Tools(calls) => {
            let mut out = Vec::with_capacity(calls.len() * 3);
            for (i, call) in calls.iter().enumerate() {
                out.push(sse_chunk(
                    env,
                    &[ChunkChoice::tool_start(i, call)],
                    None,
                    None,
                ));
                let (a, b) = halves(&call.arguments);
                for fragment in [a, b] {
                    out.push(sse_chunk(
                        env,
                        &[ChunkChoice::tool_args(i, fragment)],
                        None,
                        None,
                    ));
                }
            }
            out
        }
    }
}

/// Splits at the char boundary nearest the middle.
fn halves(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    s.split_at(mid)
}

/// A stream that is only a broken event and `[DONE]` (`malformed_json`).
pub(crate) fn malformed_sse(keepalive: u32) -> Plan {
    let mut plan = Plan::default();
    for _ in 0..keepalive {
        plan.data(Bytes::from_static(KEEPALIVE));
    }
    plan.data(Bytes::from_static(crate::wire::MALFORMED_EVENT));
    plan.data(Bytes::from_static(DONE));
    plan
}

/// `body` sent in two halves with `pause` between them.
pub(crate) fn stalled(body: Vec<u8>, pause: Duration) -> Plan {
    let mut plan = Plan::default();
    let mut first = Bytes::from(body);
    let second = first.split_off(first.len() / 2);
    plan.data(first);
    plan.pause(pause);
    plan.data(second);
    plan
}

/// The first half of `body`, then a dropped connection.
pub(crate) fn cut_short(body: Vec<u8>) -> Plan {
    let mut plan = Plan::default();
    let mut first = Bytes::from(body);
    first.truncate(first.len() / 2);
    plan.data(first);
    plan.steps.push(Step::Cut);
    plan
}

/// A body sent as is.
pub(crate) fn whole(body: Vec<u8>) -> Plan {
    let mut plan = Plan::default();
    plan.data(body);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_respect_char_boundaries() {
        assert_eq!(halves(r#"{"step":1}"#), (r#"{"ste"#, r#"p":1}"#));
        assert_eq!(halves("aé"), ("a", "é"));
        assert_eq!(halves(""), ("", ""));
    }
}
