//! The one decision taken wherever a run may meet a closed chain: the producer's refusal at
//! enqueue, the worker's pre-flight when it takes a job, the chain walk once every route has
//! failed, and a later step whose route closed. One pure function, so the four can never
//! disagree on when a run waits, when it is refused and with which code.
//!
//! A chain is closed when every route is: then the run waits for the earliest reopening (plus
//! jitter, added only after that moment) if it may wait and that moment comes before its
//! deadline; otherwise it is refused, `account_resting` when every route is shared and a pool
//! rest (or a full pool) is among the closures, else `routes_resting`, with the seconds to that
//! reopening; `spend_cap_reached` when a priced route is closed by a spend cap (docs/design.md
//! §4.8), which no run waits for.

use crate::rest::{Closure, RestKind};
use crate::route::Route;
use crate::run::Code;

/// Whether the caller can put a run aside until a moment (the queue can; an enqueue that
/// answers at once, or `worker run-one`, cannot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// The run may wait; `jitter_ms` is added after the reopening moment.
    Allowed {
        jitter_ms: u64,
    },
    NotAllowed,
}

/// What to do with a run on this chain now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    /// A route is open.
    Open,
    /// Every route is closed: wait until `until_ms`, for the closure `reason` names.
    Wait { until_ms: u64, reason: String },
    /// Every route is closed past what the run may wait.
    Refuse { code: Code, retry_after_s: u64 },
    /// Every route is closed for good (nothing it could wait for reopens).
    Closed,
}

/// Decide for `routes` with their `closures` (one per route, `None` when open).
pub fn decide(
    routes: &[Route],
    closures: &[Option<Closure>],
    deadline_ms: u64,
    now_ms: u64,
    waiting: Waiting,
) -> Preflight {
    if closures.is_empty() || closures.iter().any(Option::is_none) {
        return Preflight::Open;
    }
    // A spend cap is not waited for: a run that may wait waits for a route that reopens.
    let capped = closures
        .iter()
        .flatten()
        .any(|c| c.kind == RestKind::SpendCap);
    let Some(first) = closures
        .iter()
        .flatten()
        .filter(|c| c.remaining_ms != u64::MAX && c.kind != RestKind::SpendCap)
        .min_by_key(|c| c.remaining_ms)
    else {
        return match capped {
            true => Preflight::Refuse {
                code: Code::SpendCapReached,
                retry_after_s: spend_cap_retry_s(closures),
            },
            false => Preflight::Closed,
        };
    };
    if let Waiting::Allowed { jitter_ms } = waiting {
        let until_ms = now_ms
            .saturating_add(first.remaining_ms)
            .saturating_add(jitter_ms);
        if until_ms < deadline_ms {
            return Preflight::Wait {
                until_ms,
                reason: first.reason.clone(),
            };
        }
    }
    let all_pool = routes.iter().all(Route::is_shared)
        && closures
            .iter()
            .flatten()
            .any(|c| matches!(c.kind, RestKind::Pool | RestKind::Pace));
    let code = if capped {
        Code::SpendCapReached
    } else if all_pool {
        Code::AccountResting
    } else {
        Code::RoutesResting
    };
    Preflight::Refuse {
        code,
        retry_after_s: first.remaining_ms.div_ceil(1000).max(1),
    }
}

/// When a capped run might ask again: when the earliest spend cap lifts (a tenant's day ends;
/// a run's own cap never does, so an hour).
fn spend_cap_retry_s(closures: &[Option<Closure>]) -> u64 {
    closures
        .iter()
        .flatten()
        .filter(|c| c.kind == RestKind::SpendCap && c.remaining_ms != u64::MAX)
        .map(|c| c.remaining_ms.div_ceil(1000))
        .min()
        .unwrap_or(3600)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn route(s: &str) -> Route {
        Route::parse(s, &Catalog::builtin()).expect("a valid route")
    }

    fn closed(kind: RestKind, remaining_ms: u64) -> Option<Closure> {
        Some(Closure {
            kind,
            remaining_ms,
            reason: format!("{kind:?} {remaining_ms}"),
        })
    }

    const NOW: u64 = 1_000_000;
    const DEADLINE: u64 = NOW + 600_000;
    const WAIT: Waiting = Waiting::Allowed { jitter_ms: 700 };

    #[test]
    fn an_open_route_means_open() {
        let routes = [route("a/b:free"), route("c/d")];
        let closures = [closed(RestKind::Pool, 5_000), None];
        for waiting in [WAIT, Waiting::NotAllowed] {
            assert_eq!(
                decide(&routes, &closures, DEADLINE, NOW, waiting),
                Preflight::Open
            );
        }
    }

    #[test]
    fn a_closed_chain_waits_for_its_earliest_reopening_plus_jitter() {
        let routes = [route("a/b:free"), route("c/d")];
        let closures = [
            closed(RestKind::Pool, 30_000),
            closed(RestKind::Route, 5_000),
        ];
        assert_eq!(
            decide(&routes, &closures, DEADLINE, NOW, WAIT),
            Preflight::Wait {
                until_ms: NOW + 5_000 + 700,
                reason: "Route 5000".into()
            }
        );
    }

    #[test]
    fn a_wait_that_would_pass_the_deadline_is_a_refusal() {
        let routes = [route("a/b:free")];
        let closures = [closed(RestKind::Pool, 60_000)];
        let deadline = NOW + 60_700;
        assert_eq!(
            decide(&routes, &closures, deadline, NOW, WAIT),
            Preflight::Refuse {
                code: Code::AccountResting,
                retry_after_s: 60
            },
            "until == deadline does not wait"
        );
        assert!(matches!(
            decide(&routes, &closures, deadline + 1, NOW, WAIT),
            Preflight::Wait { .. }
        ));
    }

    #[test]
    fn a_caller_that_cannot_wait_refuses_with_the_code_of_the_chain() {
        let shared = [route("a/b:free"), route("c/d:free")];
        let closures = [
            closed(RestKind::Pool, 4_001),
            closed(RestKind::Route, 9_000),
        ];
        assert_eq!(
            decide(&shared, &closures, DEADLINE, NOW, Waiting::NotAllowed),
            Preflight::Refuse {
                code: Code::AccountResting,
                retry_after_s: 5
            }
        );
        // An off-quota route in the chain makes it routes_resting, even with a pool rest.
        let mixed = [route("a/b:free"), route("c/d@conn_1")];
        let closures = [
            closed(RestKind::Pool, 60_000),
            closed(RestKind::Circuit, 200),
        ];
        assert_eq!(
            decide(&mixed, &closures, DEADLINE, NOW, Waiting::NotAllowed),
            Preflight::Refuse {
                code: Code::RoutesResting,
                retry_after_s: 1
            },
            "at least a second"
        );
        // Shared routes closed by route rests only are routes_resting too.
        let closures = [
            closed(RestKind::Route, 1_000),
            closed(RestKind::Route, 2_000),
        ];
        assert!(matches!(
            decide(&shared, &closures, DEADLINE, NOW, Waiting::NotAllowed),
            Preflight::Refuse {
                code: Code::RoutesResting,
                ..
            }
        ));
    }

    #[test]
    fn closures_that_never_reopen_are_closed_for_good() {
        let routes = [route("a/b:free"), route("c/d")];
        let forever = [
            closed(RestKind::Route, u64::MAX),
            closed(RestKind::Route, u64::MAX),
        ];
        for waiting in [WAIT, Waiting::NotAllowed] {
            assert_eq!(
                decide(&routes, &forever, DEADLINE, NOW, waiting),
                Preflight::Closed
            );
        }
        // One that reopens is what the run waits for.
        let one = [
            closed(RestKind::Route, u64::MAX),
            closed(RestKind::Route, 3_000),
        ];
        assert!(matches!(
            decide(&routes, &one, DEADLINE, NOW, WAIT),
            Preflight::Wait { until_ms, .. } if until_ms == NOW + 3_700
        ));
    }

    #[test]
    fn a_spend_cap_is_never_waited_for_and_names_the_refusal() {
        let routes = [route("a/b:free"), route("c/d")];
        let cap = Closure {
            kind: RestKind::SpendCap,
            remaining_ms: 7_200_000,
            reason: "spend cap".into(),
        };
        let closures = [closed(RestKind::Pace, 5_000), Some(cap.clone())];
        assert_eq!(
            decide(&routes, &closures, DEADLINE, NOW, WAIT),
            Preflight::Wait {
                until_ms: NOW + 5_000 + 700,
                reason: "Pace 5000".into()
            },
            "a queued run waits for the free route"
        );
        assert_eq!(
            decide(&routes, &closures, DEADLINE, NOW, Waiting::NotAllowed),
            Preflight::Refuse {
                code: Code::SpendCapReached,
                retry_after_s: 5
            }
        );
        let only_paid = [route("c/d")];
        assert_eq!(
            decide(&only_paid, &[Some(cap)], DEADLINE, NOW, WAIT),
            Preflight::Refuse {
                code: Code::SpendCapReached,
                retry_after_s: 7_200
            },
            "nothing to wait for: refused until the cap lifts"
        );
    }
}
