//! The call log: one record per chat request, for tests and benchmarks to assert on.
//!
//! A ring buffer bounded by `log_cap`, so a long benchmark cannot grow the simulator without
//! limit; the oldest records go first.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::config::Provider;

/// One chat request as the simulator served it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Sim time of arrival, epoch milliseconds.
    pub t_ms: u64,
    /// The model as requested (empty for requests refused with 401 or 400).
    pub model: String,
    /// The bearer key as sent (empty when missing).
    pub key: String,
    /// The provider the request was addressed to (its path prefix).
    pub provider: Provider,
    pub status: u16,
    /// What was served: `ok`, `free_per_min`, `free_per_day`, `free_per_day_high_balance`,
    /// `groq_rpm`, `groq_rpd`, `gemini_per_minute`, `gemini_per_day`, a fault kind, `missing_auth` (401) or `invalid_request` (400).
    pub variant: String,
    pub stream: bool,
    /// The answer's token cap the request set (`max_tokens`, or `max_completion_tokens`).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// What OpenRouter charged for the answer, in USD (its `usage.cost`, whether or not the
    /// answer showed it): 0 for a free model. `None` when nothing was charged (a refusal, an
    /// error, an answer broken by a fault) or the provider states no cost (Groq, Gemini,
    /// generic). Sums of it are what a fleet really spent.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The request's W3C `traceparent` header, as sent: the trace its caller placed it in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

#[derive(Debug)]
struct Entry {
    t_ms: u64,
    model: String,
    key: String,
    provider: Provider,
    status: u16,
    variant: &'static str,
    stream: bool,
    max_tokens: Option<u64>,
    cost_usd: Option<f64>,
    traceparent: Option<String>,
}

/// One request as the server hands it to the log.
pub(crate) struct Logged<'a> {
    pub model: &'a str,
    pub key: &'a str,
    pub provider: Provider,
    pub status: u16,
    pub variant: &'static str,
    pub stream: bool,
    pub max_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub traceparent: Option<&'a str>,
}

#[derive(Debug)]
pub(crate) struct CallLog {
    entries: VecDeque<Entry>,
    cap: usize,
}

impl CallLog {
    pub(crate) fn new(cap: usize) -> CallLog {
        CallLog {
            entries: VecDeque::new(),
            cap,
        }
    }

    pub(crate) fn push(&mut self, t_ms: u64, call: Logged<'_>) {
        if self.cap == 0 {
            return;
        }
        if self.entries.len() == self.cap {
            self.entries.pop_front();
        }
        self.entries.push_back(Entry {
            t_ms,
            model: call.model.to_owned(),
            key: call.key.to_owned(),
            provider: call.provider,
            status: call.status,
            variant: call.variant,
            stream: call.stream,
            max_tokens: call.max_tokens,
            cost_usd: call.cost_usd,
            traceparent: call.traceparent.map(str::to_owned),
        });
    }

    /// Records at or after `since_ms`, oldest first.
    pub(crate) fn since(&self, since_ms: u64) -> Vec<CallRecord> {
        self.entries
            .iter()
            .filter(|e| e.t_ms >= since_ms)
            .map(|e| CallRecord {
                t_ms: e.t_ms,
                model: e.model.clone(),
                key: e.key.clone(),
                provider: e.provider,
                status: e.status,
                variant: e.variant.to_owned(),
                stream: e.stream,
                max_tokens: e.max_tokens,
                cost_usd: e.cost_usd,
                traceparent: e.traceparent.clone(),
            })
            .collect()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_records_are_dropped_at_capacity() {
        let mut log = CallLog::new(2);
        for t in 1..=3 {
            let call = Logged {
                model: "m",
                key: "k",
                provider: Provider::OpenRouter,
                status: 200,
                variant: "ok",
                stream: false,
                max_tokens: None,
                cost_usd: None,
                traceparent: None,
            };
            log.push(t, call);
        }
        let kept: Vec<u64> = log.since(0).iter().map(|r| r.t_ms).collect();
        assert_eq!(kept, [2, 3]);
        assert_eq!(log.since(3).len(), 1);
    }
}
