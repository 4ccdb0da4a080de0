//! The call budget of docs/design.md §2.1, enforced by construction.
//!
//! A run's calls are bounded by the number of step-1 attempts, one call per later step and an
//! optional summary call; there is no other source of calls (no client retries anywhere). The
//! counters live in [`Counters`], are persisted before every call and travel with the run across
//! snoozes and crashes, so the bound holds for the run as a whole, not per delivery.

use serde::{Deserialize, Serialize};

/// What a run is for; it sets the number of steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Chat,
    Research,
    Complete,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Chat => "chat",
            Kind::Research => "research",
            Kind::Complete => "complete",
        }
    }
}

/// The budget of one run: derived from its kind, its chain length and `FREEWAY_SUMMARY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Model calls that succeed, at most (the tool loop's length).
    pub max_steps: u32,
    /// Attempts for step 1, over the chain (including the one-route retry).
    pub step1_attempts: u32,
    /// Whether a one-route chain gets its one retry on a 5xx or a network failure.
    pub one_route_retry: bool,
    /// Whether a succeeded run makes one summary call.
    pub summary: bool,
}

/// `MAX_ATTEMPTS` of docs/design.md §2.1: attempts for step 1 over a chain of several routes.
pub const MAX_ATTEMPTS: u32 = 3;

impl Budget {
    pub fn new(kind: Kind, chain_len: usize, summary_on: bool) -> Budget {
        let max_steps = match kind {
            Kind::Chat => 5,
            Kind::Research => 12,
            Kind::Complete => 1,
        };
        let one_route = chain_len <= 1;
        let one_route_retry = one_route && kind != Kind::Complete;
        let step1_attempts = if one_route {
            1 + u32::from(one_route_retry)
        } else {
            MAX_ATTEMPTS
        };
        Budget {
            max_steps,
            step1_attempts,
            one_route_retry,
            summary: summary_on && kind != Kind::Complete,
        }
    }

    /// The most calls the run can make: the table of docs/design.md §2.1.
    pub fn max_calls(&self) -> u32 {
        self.step1_attempts + (self.max_steps - 1) + u32::from(self.summary)
    }
}

/// A run's spent budget. Persisted before every call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Every provider call made, step 1, later steps and summary.
    pub calls: u32,
    /// Attempts made for step 1.
    pub step1_attempts: u32,
    /// Whether the one-route retry was used.
    pub retried: bool,
    /// Steps that succeeded.
    pub steps: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_spec_2_1() {
        let calls = |k, n, s| Budget::new(k, n, s).max_calls();
        assert_eq!(calls(Kind::Chat, 3, false), 7);
        assert_eq!(calls(Kind::Chat, 1, false), 6);
        assert_eq!(calls(Kind::Research, 2, false), 14);
        assert_eq!(calls(Kind::Research, 1, false), 13);
        assert_eq!(calls(Kind::Complete, 4, false), 3);
        assert_eq!(calls(Kind::Complete, 1, false), 1);
        assert_eq!(calls(Kind::Chat, 3, true), 8);
        assert_eq!(calls(Kind::Chat, 1, true), 7);
        assert_eq!(calls(Kind::Research, 8, true), 15);
        assert_eq!(calls(Kind::Complete, 2, true), 3);
    }
}
