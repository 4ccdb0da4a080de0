//! The pools' limiter (docs/design.md §4.4) as one suite run on both implementations: the Redis
//! one (each test in its own namespace) and the in-process one the engine's tests use. Windows
//! are an hour long so a test never crosses one; the in-process clock shows what happens after.

use crate::support;

use freeway::clock::{Clock, InstantClock};
use freeway::pace::{
    Headroom, InBody, LimitSource, Limits, MemoryPacer, Pacer, PoolSeen, RedisPacer, Refusal,
    Reservation, Seen, Slot, Stated, WINDOW_GUARD_MS,
};
use std::sync::Arc;
use std::time::Duration;

const POOL: &str = "openrouter-free";
const HOUR: u64 = 3_600_000;
/// Expected waits are worked out on this process's clock just after the call, so they come out
/// a little shorter than the limiter's: this much is allowed for.
const SLACK: u64 = 1_000;

fn fixed(per_window: u32) -> Limits {
    Limits {
        per_window: Some(per_window),
        window_ms: HOUR,
        rolling: false,
        per_day: None,
        tokens_per_window: None,
        tokens_per_day: None,
        pin: false,
    }
}

fn rolling(per_window: u32) -> Limits {
    Limits {
        rolling: true,
        ..fixed(per_window)
    }
}

/// `per_window` calls a fixed minute.
fn minute(per_window: u32) -> Limits {
    Limits {
        window_ms: 60_000,
        ..fixed(per_window)
    }
}

/// A provider's word: its window ends at a moment `ends_ms` from now, `left` calls left in it.
fn moment(ends_ms: u64, left: u32) -> Stated {
    Stated {
        window_ends_in_ms: Some(ends_ms),
        window_remaining: Some(left),
        ends_at_moment: true,
        ..Stated::default()
    }
}

/// A day end far enough not to be crossed, and constant through a test.
fn day_end() -> u64 {
    freeway::clock::epoch_ms() + 30 * HOUR
}

/// Ms to the end of the current fixed window of an hour.
fn to_window_end() -> u64 {
    HOUR - freeway::clock::epoch_ms() % HOUR
}

struct Fixture {
    pace: Arc<dyn Pacer>,
    /// The in-process clock, when the pacer runs on one.
    clock: Option<Arc<InstantClock>>,
}

impl Fixture {
    fn memory() -> Fixture {
        let clock = Arc::new(InstantClock::default());
        Fixture {
            pace: Arc::new(MemoryPacer::new(clock.clone())),
            clock: Some(clock),
        }
    }

    /// The in-process one, with its clock.
    fn memory_clocked() -> (Fixture, Arc<InstantClock>) {
        let f = Fixture::memory();
        let clock = f.clock.clone().expect("an in-process clock");
        (f, clock)
    }

    /// The Redis implementation, or `None` (said) without a Redis to test it on.
    async fn redis() -> Option<Fixture> {
        let conn = support::skip::redis().await?;
        let ns = support::unique_ns("pace");
        Some(Fixture {
            pace: Arc::new(RedisPacer::new(conn, ns)),
            clock: None,
        })
    }

    async fn admits(&self, limits: &Limits, n: usize, day_end: u64) -> Vec<Slot> {
        self.admits_in(POOL, limits, n, day_end).await
    }

    async fn admits_in(&self, pool: &str, limits: &Limits, n: usize, day_end: u64) -> Vec<Slot> {
        let mut slots = Vec::new();
        for _ in 0..n {
            slots.push(self.pace.admit(pool, limits, day_end, 0).await.unwrap());
        }
        slots
    }
}

fn is_in(slot: Slot, low: u64, high: u64) -> bool {
    matches!(slot, Slot::In(ms) if (low..=high).contains(&ms))
}

async fn a_fixed_window_admits_its_limit_then_closes_until_the_next_one(f: Fixture) {
    let limits = fixed(3);
    let end = day_end();
    for _ in 0..5 {
        assert_eq!(
            f.pace.peek(POOL, &limits, end, 0).await.unwrap(),
            Slot::Now,
            "a peek counts nothing"
        );
    }
    assert_eq!(f.admits(&limits, 3, end).await, vec![Slot::Now; 3]);
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    let left = to_window_end();
    assert!(
        is_in(next, left, left + WINDOW_GUARD_MS + SLACK),
        "{next:?}, window ends in {left}"
    );
    let Slot::In(wait) = next else { unreachable!() };
    let peeked = f.pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(peeked, wait.saturating_sub(SLACK), wait),
        "{peeked:?}, {wait}"
    );
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(
        (usage.window_used, usage.day_used, usage.reserved),
        (3, 3, 0)
    );
}

async fn reservations_fill_later_windows_in_order(f: Fixture) {
    let limits = fixed(2);
    let end = day_end();
    // The first reservation of an open window is a slot now.
    let now_slot = f
        .pace
        .reserve(POOL, &limits, end, 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now_slot.wait_ms, 0);
    assert_eq!(f.admits(&limits, 1, end).await, vec![Slot::Now]);
    let mut waits = Vec::new();
    for _ in 0..5 {
        let Reservation { wait_ms, valid_ms } = f
            .pace
            .reserve(POOL, &limits, end, 0)
            .await
            .unwrap()
            .unwrap();
        assert!(
            valid_ms > wait_ms && valid_ms - wait_ms <= HOUR,
            "{wait_ms} {valid_ms}"
        );
        waits.push(wait_ms);
    }
    let next = to_window_end();
    let windows: Vec<u64> = waits
        .iter()
        .map(|w| (w.saturating_sub(next) + HOUR / 2) / HOUR)
        .collect();
    assert_eq!(
        windows,
        vec![0, 0, 1, 1, 2],
        "two a window, in order: {waits:?}"
    );
    assert!(
        waits[0] >= next && waits[0] <= next + WINDOW_GUARD_MS + SLACK,
        "{waits:?}, next window in {next}"
    );
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!((usage.window_used, usage.reserved), (2, 5));
    // An admission sees the reserved windows as full: its next slot is after them.
    let after = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(
            after,
            next + 2 * HOUR,
            next + 2 * HOUR + WINDOW_GUARD_MS + SLACK
        ),
        "{after:?}"
    );
}

async fn a_rolling_window_spaces_calls_by_window_over_limit(f: Fixture) {
    let limits = rolling(2);
    let end = day_end();
    assert_eq!(
        f.admits(&limits, 2, end).await,
        vec![Slot::Now; 2],
        "a burst of the limit"
    );
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    // Calls are spaced a guard more than window / limit (50 ms at this interval): the
    // provider's clock starts when a call arrives, and no margin earned refusals. The burst
    // took a few ms of that guard at most.
    assert!(
        is_in(next, HOUR / 2 + 25, HOUR / 2 + 50),
        "one emission interval and its guard: {next:?}"
    );
    let first = f
        .pace
        .reserve(POOL, &limits, end, 0)
        .await
        .unwrap()
        .unwrap();
    let second = f
        .pace
        .reserve(POOL, &limits, end, 0)
        .await
        .unwrap()
        .unwrap();
    assert!(first.wait_ms.abs_diff(HOUR / 2) < 1_000, "{first:?}");
    assert!(second.wait_ms.abs_diff(HOUR) < 1_000, "{second:?}");
}

async fn a_stated_limit_replaces_the_configured_one_unless_pinned(f: Fixture) {
    let end = day_end();
    let stated = Stated {
        per_window: Some(3),
        ..Stated::default()
    };
    let limits = fixed(20);
    f.pace.learn(POOL, &limits, end, &stated).await.unwrap();
    assert_eq!(f.admits(&limits, 3, end).await, vec![Slot::Now; 3]);
    let fourth = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(
        matches!(fourth, Slot::In(_)),
        "the stated 3 hold: {fourth:?}"
    );
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(usage.learned.per_window, Some(3));
    assert!(usage.learned.at_ms.is_some());

    let pinned = Limits {
        pin: true,
        ..fixed(20)
    };
    let other = "pinned-pool";
    f.pace.learn(other, &pinned, end, &stated).await.unwrap();
    for n in 0..5 {
        let slot = f.pace.admit(other, &pinned, end, 0).await.unwrap();
        assert_eq!(slot, Slot::Now, "call {n}: a pinned pool keeps its 20");
    }
    // A higher stated limit replaces a lower configured one as well.
    let higher = "higher-pool";
    let stated_higher = Stated {
        per_window: Some(5),
        ..Stated::default()
    };
    f.pace
        .learn(higher, &fixed(2), end, &stated_higher)
        .await
        .unwrap();
    for n in 0..5 {
        let slot = f.pace.admit(higher, &fixed(2), end, 0).await.unwrap();
        assert_eq!(
            slot,
            Slot::Now,
            "call {n}: the stated 5 replace the configured 2"
        );
    }
}

async fn a_pool_without_limits_is_paced_from_the_first_statement(f: Fixture) {
    let end = day_end();
    let limits = Limits::unstated(HOUR, false);
    assert_eq!(
        f.admits(&limits, 50, end).await,
        vec![Slot::Now; 50],
        "nothing is known yet"
    );
    let stated = Stated {
        per_window: Some(60),
        window_remaining: Some(0),
        ..Stated::default()
    };
    f.pace.learn(POOL, &limits, end, &stated).await.unwrap();
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(next, 1, to_window_end() + WINDOW_GUARD_MS + SLACK),
        "the provider said none is left: {next:?}"
    );
}

async fn a_stated_remaining_raises_the_windows_count(f: Fixture) {
    let end = day_end();
    let limits = fixed(10);
    assert_eq!(f.admits(&limits, 1, end).await, vec![Slot::Now]);
    let stated = Stated {
        window_remaining: Some(2),
        day_remaining: Some(7),
        ..Stated::default()
    };
    let with_day = Limits {
        per_day: Some(100),
        ..limits
    };
    f.pace.learn(POOL, &with_day, end, &stated).await.unwrap();
    let usage = f.pace.usage(POOL, &with_day, end).await.unwrap();
    assert_eq!(
        (usage.window_used, usage.day_used),
        (8, 93),
        "other clients spent the key"
    );
    // A stated remaining never lowers the count: the provider lags calls in flight.
    let more = Stated {
        window_remaining: Some(9),
        ..Stated::default()
    };
    f.pace.learn(POOL, &with_day, end, &more).await.unwrap();
    assert_eq!(f.admits(&with_day, 2, end).await, vec![Slot::Now; 2]);
    let full = f.pace.admit(POOL, &with_day, end, 0).await.unwrap();
    assert!(matches!(full, Slot::In(_)), "{full:?}");
}

async fn a_stated_window_end_realigns_the_fixed_window(f: Fixture) {
    let end = day_end();
    let limits = fixed(2);
    assert_eq!(f.admits(&limits, 2, end).await, vec![Slot::Now; 2]);
    // The provider's window ends in 8 s, wherever the epoch's hour ends.
    let stated = Stated {
        window_ends_in_ms: Some(8_000),
        window_remaining: Some(0),
        ..Stated::default()
    };
    f.pace.learn(POOL, &limits, end, &stated).await.unwrap();
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(
            next,
            8_000 + WINDOW_GUARD_MS - SLACK,
            8_000 + WINDOW_GUARD_MS
        ),
        "the next slot is at the provider's reset: {next:?} (the epoch's window ends in {} ms)",
        to_window_end()
    );
    let held = f
        .pace
        .reserve(POOL, &limits, end, 0)
        .await
        .unwrap()
        .unwrap();
    assert!(
        held.wait_ms.abs_diff(8_000 + WINDOW_GUARD_MS) <= SLACK,
        "{held:?}"
    );
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert!(usage.learned.phase_from_provider);
    assert!(usage.window_resets_in_ms <= 8_000, "{usage:?}");
}

async fn a_rolling_pool_whose_provider_states_a_fixed_window_is_paced_by_it(f: Fixture) {
    let end = day_end();
    let limits = rolling(2);
    assert_eq!(f.admits(&limits, 2, end).await, vec![Slot::Now; 2]);
    let stated = moment(8_000, 0);
    f.pace.learn(POOL, &limits, end, &stated).await.unwrap();
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(
            next,
            8_000 + WINDOW_GUARD_MS - SLACK,
            8_000 + WINDOW_GUARD_MS
        ),
        "the provider's fixed window, not a bucket refilled in {} ms: {next:?}",
        HOUR / 2
    );
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert!(usage.learned.fixed_by_provider, "{usage:?}");
    // A pinned pool keeps its kind; full until the stated moment, it has its next slot there.
    let pinned = Limits {
        pin: true,
        ..rolling(2)
    };
    let other = "pinned-rolling";
    assert_eq!(
        f.admits_in(other, &pinned, 2, end).await,
        vec![Slot::Now; 2]
    );
    f.pace.learn(other, &pinned, end, &stated).await.unwrap();
    let usage = f.pace.usage(other, &pinned, end).await.unwrap();
    assert!(!usage.learned.fixed_by_provider, "{usage:?}");
    let next = f.pace.admit(other, &pinned, end, 0).await.unwrap();
    assert!(
        is_in(next, 8_000 - SLACK, 8_000),
        "not a bucket refilled in {} ms: {next:?}",
        HOUR / 2
    );
}

async fn a_held_slot_given_back_goes_to_another_run(f: Fixture) {
    let end = day_end();
    for limits in [fixed(2), rolling(2)] {
        let pool = if limits.rolling { "rolling-pool" } else { POOL };
        for _ in 0..2 {
            f.pace.admit(pool, &limits, end, 0).await.unwrap();
        }
        let held = f
            .pace
            .reserve(pool, &limits, end, 0)
            .await
            .unwrap()
            .unwrap();
        let before = f.pace.usage(pool, &limits, end).await.unwrap();
        assert_eq!(before.day_used, 3);
        let wait = i64::try_from(held.wait_ms).unwrap();
        f.pace.release(pool, &limits, end, 0, wait).await.unwrap();
        let after = f.pace.usage(pool, &limits, end).await.unwrap();
        assert_eq!(after.day_used, 2, "{pool}: the day no longer counts it");
        let again = f
            .pace
            .reserve(pool, &limits, end, 0)
            .await
            .unwrap()
            .unwrap();
        assert!(
            again.wait_ms <= held.wait_ms,
            "{pool}: the slot went to the next run: {again:?} {held:?}"
        );
        if !limits.rolling {
            assert_eq!(after.reserved, 0);
        }
    }
}

async fn a_day_refusal_without_a_day_limit_teaches_it(f: Fixture) {
    let end = day_end();
    let limits = fixed(100);
    assert_eq!(f.admits(&limits, 3, end).await, vec![Slot::Now; 3]);
    let spent = Stated {
        day_spent: true,
        ..Stated::default()
    };
    f.pace.learn(POOL, &limits, end, &spent).await.unwrap();
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(next, 30 * HOUR - 2 * SLACK, 30 * HOUR),
        "closed until the day ends: {next:?}"
    );
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(
        usage.learned.per_day,
        Some(3),
        "what was counted is the day"
    );
    assert_eq!(usage.misses, 0, "a day learned is no pacing miss");
}

async fn a_rolling_miss_waits_for_the_refusals_hint_not_an_empty_bucket(f: Fixture) {
    let end = day_end();
    let limits = rolling(2);
    f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    // The provider refused with half a bucket left by the limiter's count; it says 5 s.
    f.pace
        .missed(POOL, &limits, Some(5_000), false)
        .await
        .unwrap();
    let next = f.pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(next, 5_000 - SLACK, 5_000),
        "the hint, not a whole interval ({} ms): {next:?}",
        HOUR / 2
    );
}

async fn a_day_limit_closes_until_the_day_ends_and_a_new_day_counts_again(f: Fixture) {
    let limits = Limits {
        per_window: None,
        window_ms: 60_000,
        rolling: false,
        per_day: Some(2),
        tokens_per_window: None,
        tokens_per_day: None,
        pin: false,
    };
    let end = day_end();
    assert_eq!(f.admits(&limits, 2, end).await, vec![Slot::Now; 2]);
    let closed = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    let to_end = end - freeway::clock::epoch_ms();
    assert!(is_in(closed, to_end, to_end + SLACK), "{closed:?}");
    assert_eq!(
        f.pace.reserve(POOL, &limits, end, 0).await.unwrap(),
        None,
        "no slot today"
    );
    assert_eq!(
        f.admits(&limits, 1, end + 24 * HOUR).await,
        vec![Slot::Now],
        "a new day"
    );
}

async fn a_miss_marks_the_window_full_and_is_counted(f: Fixture) {
    for limits in [fixed(5), rolling(5)] {
        let pool = if limits.rolling { "rolling" } else { "fixed" };
        let end = day_end();
        assert_eq!(
            f.pace.admit(pool, &limits, end, 0).await.unwrap(),
            Slot::Now
        );
        assert_eq!(f.pace.missed(pool, &limits, None, false).await.unwrap(), 1);
        let after = f.pace.admit(pool, &limits, end, 0).await.unwrap();
        assert!(matches!(after, Slot::In(_)), "{pool}: {after:?}");
        assert_eq!(f.pace.usage(pool, &limits, end).await.unwrap().misses, 1);
    }
}

async fn replicas_asking_at_once_get_exactly_the_windows_room(f: Fixture) {
    let limits = fixed(20);
    let end = day_end();
    let asks = (0..10).map(|_| {
        let pace = f.pace.clone();
        tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..5 {
                if pace.admit(POOL, &limits, end, 0).await.unwrap() == Slot::Now {
                    admitted += 1;
                }
            }
            admitted
        })
    });
    let admitted: u32 = futures_util::future::join_all(asks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    assert_eq!(admitted, 20);
}

async fn a_window_whose_stated_reset_moves_on_with_its_calls_is_paced_as_sliding(f: Fixture) {
    let end = day_end();
    let limits = fixed(3);
    assert_eq!(f.admits(&limits, 2, end).await, vec![Slot::Now; 2]);
    // The first call's window ends in 8 s; once it has aged out the next one's is 2 s later:
    // no fixed window moves its end by less than a window.
    f.pace
        .learn(POOL, &limits, end, &moment(8_000, 1))
        .await
        .unwrap();
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert!(!usage.learned.sliding_by_provider, "{usage:?}");
    f.pace
        .learn(POOL, &limits, end, &moment(10_000, 1))
        .await
        .unwrap();
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert!(usage.learned.sliding_by_provider, "{usage:?}");
    // The slot it says is left goes now; the one after waits for the oldest call to age out,
    // neither for the fixed window's end an hour away nor for a bucket's next drop.
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 0).await.unwrap(),
        Slot::Now
    );
    f.pace
        .learn(POOL, &limits, end, &moment(10_000, 0))
        .await
        .unwrap();
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(is_in(next, 10_000 - SLACK, 10_000), "{next:?}");

    // A fixed window's stated end steps by a whole window: it stays fixed.
    let other = "fixed-steps";
    f.pace
        .learn(other, &limits, end, &moment(8_000, 2))
        .await
        .unwrap();
    f.pace
        .learn(other, &limits, end, &moment(8_000 + HOUR, 2))
        .await
        .unwrap();
    let usage = f.pace.usage(other, &limits, end).await.unwrap();
    assert!(!usage.learned.sliding_by_provider, "{usage:?}");
    // Pinned, the declared kind stands.
    let pinned = Limits {
        pin: true,
        ..fixed(3)
    };
    let third = "pinned-fixed";
    f.pace
        .learn(third, &pinned, end, &moment(8_000, 1))
        .await
        .unwrap();
    f.pace
        .learn(third, &pinned, end, &moment(10_000, 1))
        .await
        .unwrap();
    let usage = f.pace.usage(third, &pinned, end).await.unwrap();
    assert!(!usage.learned.sliding_by_provider, "{usage:?}");
}

/// docs/design.md §4.4, limits nobody states: a fixed window's refusal on a pool that has no
/// limit stated, configured or counted teaches the calls it counted in that window but the
/// refused one as the working limit; the window is full; a limit stated later wins. Without
/// learning (`lower` false) nothing is taught.
async fn a_refusal_with_no_limit_known_teaches_the_calls_counted(f: Fixture) {
    let open = Limits::unstated(HOUR, false);
    let end = day_end();
    for pool in ["taught", "not-taught"] {
        for n in 0..5 {
            let slot = f.pace.admit(pool, &open, end, 0).await.unwrap();
            assert_eq!(slot, Slot::Now, "{pool}: call {n}, nothing limits it yet");
        }
    }
    f.pace.missed("taught", &open, None, true).await.unwrap();
    f.pace
        .missed("not-taught", &open, None, false)
        .await
        .unwrap();
    let learned = f.pace.usage("taught", &open, end).await.unwrap().learned;
    assert_eq!(
        (learned.per_window, learned.working_per_window),
        (None, Some(4)),
        "four served before the refusal"
    );
    assert_eq!(learned.per_window_from, Some(LimitSource::Counted));
    assert_ne!(
        f.pace.admit("taught", &open, end, 0).await.unwrap(),
        Slot::Now,
        "the window is full"
    );
    let learned = f
        .pace
        .usage("not-taught", &open, end)
        .await
        .unwrap()
        .learned;
    assert_eq!(learned.working_per_window, None);
    assert_eq!(
        f.pace.admit("not-taught", &open, end, 0).await.unwrap(),
        Slot::Now
    );
    let stated = Stated {
        per_window: Some(9),
        ..Stated::default()
    };
    f.pace.learn("taught", &open, end, &stated).await.unwrap();
    let learned = f.pace.usage("taught", &open, end).await.unwrap().learned;
    assert_eq!(
        (learned.per_window, learned.working_per_window),
        (Some(9), None),
        "a stated limit replaces the counted one"
    );
    assert_eq!(learned.per_window_from, Some(LimitSource::Headers));
    for n in 5..9 {
        let slot = f.pace.admit("taught", &open, end, 0).await.unwrap();
        assert_eq!(slot, Slot::Now, "call {n} of the stated 9");
    }
    assert_ne!(
        f.pace.admit("taught", &open, end, 0).await.unwrap(),
        Slot::Now
    );
    // A pool declared rolling counts its calls by the epoch's windows until it has a limit.
    let rolling = Limits::unstated(HOUR, true);
    for _ in 0..5 {
        f.pace.admit("rolling", &rolling, end, 0).await.unwrap();
    }
    f.pace
        .missed("rolling", &rolling, None, true)
        .await
        .unwrap();
    let learned = f
        .pace
        .usage("rolling", &rolling, end)
        .await
        .unwrap()
        .learned;
    assert_eq!(
        (learned.working_per_window, learned.per_window_from),
        (Some(4), Some(LimitSource::Counted)),
        "rolling: {learned:?}"
    );
    assert_ne!(
        f.pace.admit("rolling", &rolling, end, 0).await.unwrap(),
        Slot::Now,
        "rolling: no slot until the refusal's window has moved on"
    );
}

/// A refusal's window reaches back into the window before ours: its calls there count in
/// proportion (a minute refused half-way through ours takes half of the one before).
#[tokio::test]
async fn a_refusal_counts_the_window_before_in_proportion_to_its_overlap() {
    let f = Fixture::memory();
    let clock = f.clock.clone().unwrap();
    let open = Limits::unstated(60_000, false);
    let end = day_end();
    let to_mid = || 60_000 - clock.now_ms() % 60_000 + 30_000;
    clock.advance(Duration::from_millis(to_mid()));
    for _ in 0..4 {
        f.pace.admit(POOL, &open, end, 0).await.unwrap();
    }
    clock.advance(Duration::from_millis(60_000));
    for _ in 0..3 {
        f.pace.admit(POOL, &open, end, 0).await.unwrap();
    }
    f.pace.missed(POOL, &open, None, true).await.unwrap();
    let learned = f.pace.usage(POOL, &open, end).await.unwrap().learned;
    assert_eq!(
        learned.working_per_window,
        Some(4),
        "3 in ours and half of the 4 before, but the refused one: {learned:?}"
    );
}

/// `GET /v1/pools` says where each learned limit came from (docs/design.md §4.4): a header, a
/// refusal's body, the quota endpoint, or the calls counted before a day refusal.
async fn each_learned_limit_keeps_where_it_came_from(f: Fixture) {
    let open = Limits::unstated(HOUR, false);
    let end = day_end();
    let stated = Stated {
        per_window: Some(10),
        tokens_per_window: Some(6_000),
        per_day: Some(1_000),
        in_body: InBody {
            per_window: true,
            per_day: true,
            tokens_per_window: false,
        },
        ..Stated::default()
    };
    f.pace.learn(POOL, &open, end, &stated).await.unwrap();
    let learned = f.pace.usage(POOL, &open, end).await.unwrap().learned;
    assert_eq!(
        (
            learned.per_window_from,
            learned.tokens_per_window_from,
            learned.per_day_from
        ),
        (
            Some(LimitSource::Refusal),
            Some(LimitSource::Headers),
            Some(LimitSource::Refusal)
        )
    );
    f.pace.sync(POOL, &open, end, 3, 50).await.unwrap();
    let learned = f.pace.usage(POOL, &open, end).await.unwrap().learned;
    assert_eq!(
        (learned.per_day, learned.per_day_from),
        (Some(50), Some(LimitSource::QuotaEndpoint))
    );
    let other = "counted-day";
    for _ in 0..3 {
        f.pace.admit(other, &open, end, 0).await.unwrap();
    }
    let day_refusal = Stated {
        day_spent: true,
        ..Stated::default()
    };
    f.pace.learn(other, &open, end, &day_refusal).await.unwrap();
    let learned = f.pace.usage(other, &open, end).await.unwrap().learned;
    assert_eq!(
        (
            learned.per_day,
            learned.per_day_from,
            learned.per_window_from
        ),
        (Some(3), Some(LimitSource::Counted), None)
    );
}

on_both!(
    a_fixed_window_admits_its_limit_then_closes_until_the_next_one,
    each_learned_limit_keeps_where_it_came_from,
    a_refusal_with_no_limit_known_teaches_the_calls_counted,
    reservations_fill_later_windows_in_order,
    a_rolling_window_spaces_calls_by_window_over_limit,
    a_day_limit_closes_until_the_day_ends_and_a_new_day_counts_again,
    a_miss_marks_the_window_full_and_is_counted,
    replicas_asking_at_once_get_exactly_the_windows_room,
    what_the_provider_said_last_is_kept_per_pool,
    a_fixed_window_counts_tokens_and_closes_to_a_call_that_would_not_fit,
    a_rolling_window_refills_tokens_and_an_answers_usage_corrects_the_estimate,
    a_day_of_tokens_closes_until_the_day_ends,
    a_stated_limit_replaces_the_configured_one_unless_pinned,
    a_pool_without_limits_is_paced_from_the_first_statement,
    a_stated_remaining_raises_the_windows_count,
    a_stated_window_end_realigns_the_fixed_window,
    a_held_slot_given_back_goes_to_another_run,
    a_rolling_pool_whose_provider_states_a_fixed_window_is_paced_by_it,
    a_day_refusal_without_a_day_limit_teaches_it,
    a_rolling_miss_waits_for_the_refusals_hint_not_an_empty_bucket,
    a_window_whose_stated_reset_moves_on_with_its_calls_is_paced_as_sliding,
);

/// Learned to slide, a window admits a call whenever fewer than its limit were made in the last
/// window (and the guard): each slot comes back as the call that took it ages out.
#[tokio::test]
async fn a_sliding_window_admits_as_its_oldest_calls_age_out() {
    let (f, clock) = Fixture::memory_clocked();
    let limits = minute(3);
    let end = day_end();
    let s = |ms| Duration::from_millis(ms);
    f.pace
        .learn(POOL, &limits, end, &moment(60_000, 3))
        .await
        .unwrap();
    clock.advance(s(10_000));
    f.pace
        .learn(POOL, &limits, end, &moment(55_000, 3))
        .await
        .unwrap();
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert!(usage.learned.sliding_by_provider, "{usage:?}");
    for _ in 0..3 {
        assert_eq!(
            f.pace.admit(POOL, &limits, end, 0).await.unwrap(),
            Slot::Now
        );
        clock.advance(s(10_000));
    }
    // Calls 10 s apart: the fourth waits for the first to age out, 60.5 s after it.
    let span = 60_000 + WINDOW_GUARD_MS;
    // (The in-process clock runs in real time too: a few ms pass between calls.)
    let about = |slot, ms| is_in(slot, ms - 50, ms);
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(about(next, span - 30_000), "{next:?}");
    clock.advance(s(span - 30_000));
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 0).await.unwrap(),
        Slot::Now
    );
    // The next slot is the second call's: 10 s later, not a fixed window's or a bucket's.
    let next = f.pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(about(next, 10_000), "{next:?}");
    // A held slot is logged at its moment, and given back, goes to another run.
    let held = f
        .pace
        .reserve(POOL, &limits, end, 0)
        .await
        .unwrap()
        .unwrap();
    assert!(about(Slot::In(held.wait_ms), 10_000), "{held:?}");
    let next = f.pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(about(next, 20_000), "the slot after the held one: {next:?}");
    f.pace
        .release(POOL, &limits, end, 0, held.wait_ms as i64)
        .await
        .unwrap();
    let next = f.pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(about(next, 10_000), "{next:?}");
}

/// The Lua script's sliding log, on Redis time: windows of 2 s, learned to slide from two
/// stated ends 800 ms apart; slots are handed out as calls age out, held ones included.
#[tokio::test]
async fn in_redis_a_sliding_window_hands_out_the_slots_its_calls_free() {
    let Some(conn) = support::skip::redis().await else {
        return;
    };
    let pace = RedisPacer::new(conn, support::unique_ns("pace"));
    let limits = Limits {
        window_ms: 2_000,
        ..fixed(2)
    };
    let end = day_end();
    for ms in [2_000, 2_800] {
        pace.learn(POOL, &limits, end, &moment(ms, 2))
            .await
            .unwrap();
    }
    let usage = pace.usage(POOL, &limits, end).await.unwrap();
    assert!(usage.learned.sliding_by_provider, "{usage:?}");
    for _ in 0..2 {
        assert_eq!(pace.admit(POOL, &limits, end, 0).await.unwrap(), Slot::Now);
    }
    let span = 2_000 + WINDOW_GUARD_MS;
    let near_span = |slot| is_in(slot, span - 200, span);
    let next = pace.admit(POOL, &limits, end, 0).await.unwrap();
    assert!(near_span(next), "{next:?}");
    // Both calls age out together: two slots then, the second still free after one is held.
    let held = pace.reserve(POOL, &limits, end, 0).await.unwrap().unwrap();
    assert!(near_span(Slot::In(held.wait_ms)), "{held:?}");
    let next = pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(near_span(next), "{next:?}");
    pace.reserve(POOL, &limits, end, 0).await.unwrap().unwrap();
    let next = pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(
        is_in(next, 2 * span - 200, 2 * span),
        "after both held: {next:?}"
    );
    pace.release(POOL, &limits, end, 0, held.wait_ms as i64)
        .await
        .unwrap();
    let next = pace.peek(POOL, &limits, end, 0).await.unwrap();
    assert!(near_span(next), "a slot given back: {next:?}");
    let usage = pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!((usage.window_used, usage.reserved), (2, 1), "{usage:?}");
}

/// A full window the provider says ends just after this window began (its phase within the
/// guard of ours) is the one before: neither what it says is left nor its refusal closes this
/// one, whose calls the provider counts afresh.
#[tokio::test]
async fn a_full_window_ending_just_after_this_one_began_does_not_close_it() {
    let (f, clock) = Fixture::memory_clocked();
    let limits = minute(3);
    let end = day_end();
    clock.advance(Duration::from_millis(
        60_000 - clock.now_ms() % 60_000 + 100,
    ));
    let stated = moment(150, 0);
    f.pace.learn(POOL, &limits, end, &stated).await.unwrap();
    f.pace
        .missed(POOL, &limits, Some(150), false)
        .await
        .unwrap();
    assert_eq!(f.admits(&limits, 3, end).await, vec![Slot::Now; 3]);
    // The same said of the current window closes it.
    let other = "current-window";
    let stated = moment(59_000, 0);
    f.pace.learn(other, &limits, end, &stated).await.unwrap();
    let next = f.pace.admit(other, &limits, end, 0).await.unwrap();
    assert!(matches!(next, Slot::In(ms) if ms > 50_000), "{next:?}");
}

/// A miss lowers the working limit to 9/10 for the window after it; each window after that
/// without a miss gives one back, up to the limit.
#[tokio::test]
async fn a_miss_lowers_the_working_limit_and_windows_without_one_raise_it() {
    let f = Fixture::memory();
    let clock = f.clock.clone().unwrap();
    let limits = Limits {
        window_ms: 60_000,
        ..fixed(20)
    };
    let end = day_end();
    let to_next = || 60_000 - clock.now_ms() % 60_000 + 1;
    // The miss is said early in a window: a call admitted near a window's end takes a slot of
    // the next, which would count against the first lowered window.
    clock.advance(std::time::Duration::from_millis(
        to_next() + WINDOW_GUARD_MS,
    ));
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 0).await.unwrap(),
        Slot::Now
    );
    f.pace.missed(POOL, &limits, None, true).await.unwrap();
    let mut admitted = Vec::new();
    for _ in 0..4 {
        clock.advance(std::time::Duration::from_millis(
            to_next() + WINDOW_GUARD_MS,
        ));
        let mut n = 0;
        while f.pace.admit(POOL, &limits, end, 0).await.unwrap() == Slot::Now {
            n += 1;
        }
        admitted.push(n);
        let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
        assert_eq!(
            usage.learned.working_per_window.is_some(),
            n < 20,
            "{usage:?}"
        );
    }
    assert_eq!(admitted, [18, 19, 20, 20]);
}

fn tokens(per_window: u32, rolling: bool) -> Limits {
    Limits {
        per_window: None,
        tokens_per_window: Some(per_window),
        rolling,
        ..fixed(1)
    }
}

async fn a_fixed_window_counts_tokens_and_closes_to_a_call_that_would_not_fit(f: Fixture) {
    let limits = tokens(1_000, false);
    let end = day_end();
    let admit = |cost| f.pace.admit(POOL, &limits, end, cost);
    assert_eq!(admit(600).await.unwrap(), Slot::Now);
    let next = to_window_end();
    let refused = admit(500).await.unwrap();
    assert!(
        is_in(refused, next - SLACK, next + WINDOW_GUARD_MS),
        "600 + 500 > 1,000: {refused:?}"
    );
    assert_eq!(
        f.pace.peek(POOL, &limits, end, 400).await.unwrap(),
        Slot::Now,
        "400 fits"
    );
    assert_eq!(admit(400).await.unwrap(), Slot::Now);
    let spent = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(
        (spent.window_tokens, spent.day_tokens, spent.window_used),
        (1_000, 1_000, 2)
    );
    // The first call's answer used 100 tokens, not 600: the window has room again.
    f.pace.spent(POOL, &limits, end, -500).await.unwrap();
    assert_eq!(admit(500).await.unwrap(), Slot::Now);
    assert_eq!(
        f.pace
            .usage(POOL, &limits, end)
            .await
            .unwrap()
            .window_tokens,
        1_000
    );
    // A window that counted nothing admits one call larger than the limit, alone.
    let small = tokens(100, false);
    assert_eq!(
        f.pace.admit("other", &small, end, 500).await.unwrap(),
        Slot::Now
    );
    assert!(matches!(
        f.pace.admit("other", &small, end, 1).await.unwrap(),
        Slot::In(_)
    ));
    // A pool that counts no tokens ignores them.
    for _ in 0..2 {
        let admitted = f
            .pace
            .admit("calls", &fixed(2), end, 1_000_000)
            .await
            .unwrap();
        assert_eq!(admitted, Slot::Now);
    }
    assert_eq!(
        f.pace
            .usage("calls", &fixed(2), end)
            .await
            .unwrap()
            .day_tokens,
        0
    );
}

async fn a_rolling_window_refills_tokens_and_an_answers_usage_corrects_the_estimate(f: Fixture) {
    // 3,600 tokens an hour: one a second.
    let limits = tokens(3_600, true);
    let end = day_end();
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 3_600).await.unwrap(),
        Slot::Now
    );
    let refused = f.pace.admit(POOL, &limits, end, 60).await.unwrap();
    assert!(
        is_in(refused, 60_000 - SLACK, 60_000 + SLACK),
        "60 tokens come back in 60 s: {refused:?}"
    );
    // The answer used 3,000 tokens: 600 were counted too many.
    f.pace.spent(POOL, &limits, end, -600).await.unwrap();
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 600).await.unwrap(),
        Slot::Now
    );
    assert!(matches!(
        f.pace.admit(POOL, &limits, end, 60).await.unwrap(),
        Slot::In(_)
    ));
    let spent = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(spent.day_tokens, 3_600);
    assert!(spent.window_tokens >= 3_590, "{spent:?}");
}

async fn a_day_of_tokens_closes_until_the_day_ends(f: Fixture) {
    let limits = Limits {
        tokens_per_day: Some(1_000),
        ..fixed(100)
    };
    let end = day_end();
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 800).await.unwrap(),
        Slot::Now
    );
    let closed = f.pace.admit(POOL, &limits, end, 300).await.unwrap();
    let to_end = end - freeway::clock::epoch_ms();
    assert!(is_in(closed, to_end - SLACK, to_end + SLACK), "{closed:?}");
    assert!(
        f.pace
            .reserve(POOL, &limits, end, 300)
            .await
            .unwrap()
            .is_none()
    );
    f.pace.spent(POOL, &limits, end, -200).await.unwrap();
    assert_eq!(
        f.pace.admit(POOL, &limits, end, 300).await.unwrap(),
        Slot::Now
    );
    let next_day = end + 24 * HOUR;
    assert_eq!(
        f.pace
            .usage(POOL, &limits, next_day)
            .await
            .unwrap()
            .day_tokens,
        0
    );
}

async fn what_the_provider_said_last_is_kept_per_pool(f: Fixture) {
    assert_eq!(f.pace.seen(POOL).await.unwrap(), PoolSeen::default());
    let headroom = |remaining, t_ms| {
        Seen::Headroom(Headroom {
            remaining,
            t_ms,
            resets_at_ms: Some(t_ms + 60_000),
        })
    };
    f.pace.saw(POOL, headroom(12, 1_000)).await.unwrap();
    f.pace.saw(POOL, headroom(11, 2_000)).await.unwrap();
    let refusal = Refusal {
        t_ms: 3_000,
        route: "platform:openrouter/a:free".into(),
        verdict: "account".into(),
    };
    f.pace
        .saw(POOL, Seen::Refusal(refusal.clone()))
        .await
        .unwrap();
    let seen = f.pace.seen(POOL).await.unwrap();
    assert_eq!(
        seen.headroom,
        Some(Headroom {
            remaining: 11,
            t_ms: 2_000,
            resets_at_ms: Some(62_000)
        }),
        "the newest answer's"
    );
    assert_eq!(
        seen.last_429,
        Some(refusal),
        "a refusal leaves the headroom as it was"
    );
    assert_eq!(
        f.pace.seen("groq-llama-70b@platform").await.unwrap(),
        PoolSeen::default()
    );
}

#[tokio::test]
async fn the_next_window_admits_again_and_a_held_slot_comes_due() {
    let f = Fixture::memory();
    let clock = f.clock.clone().unwrap();
    let limits = fixed(1);
    let end = day_end();
    assert_eq!(f.admits(&limits, 1, end).await, vec![Slot::Now]);
    let held = f
        .pace
        .reserve(POOL, &limits, end, 0)
        .await
        .unwrap()
        .unwrap();
    clock.advance(Duration::from_millis(held.wait_ms));
    // The window the reservation took is full: only the holder calls in it.
    assert!(matches!(
        f.pace.admit(POOL, &limits, end, 0).await.unwrap(),
        Slot::In(_)
    ));
    clock.advance(Duration::from_millis(HOUR));
    assert_eq!(f.admits(&limits, 1, end).await, vec![Slot::Now]);
}

/// An in-process limiter of two calls a window that admitted one call just before its window
/// ended, when the call may reach the provider in the next one.
async fn admitted_at_a_windows_end() -> (Fixture, Arc<InstantClock>, Limits, u64) {
    let f = Fixture::memory();
    let clock = f.clock.clone().unwrap();
    let (limits, end) = (fixed(2), day_end());
    clock.advance(Duration::from_millis(to_window_end() - WINDOW_GUARD_MS / 2));
    assert_eq!(f.admits(&limits, 1, end).await, vec![Slot::Now]);
    (f, clock, limits, end)
}

#[tokio::test]
async fn a_call_admitted_at_a_windows_end_is_counted_in_the_next_window_too() {
    let (f, clock, limits, end) = admitted_at_a_windows_end().await;
    clock.advance(Duration::from_millis(WINDOW_GUARD_MS));
    let usage = f.pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(usage.window_used, 1, "the next window counts it too");
    let slots = f.admits(&limits, 2, end).await;
    assert_eq!(slots[0], Slot::Now);
    assert!(
        matches!(slots[1], Slot::In(_)),
        "one slot was left: {slots:?}"
    );
    assert!(
        !f.pace
            .landed(POOL, &limits, WINDOW_GUARD_MS, 0)
            .await
            .unwrap(),
        "its answer came after the window it was admitted in: it may have landed in this one"
    );
}

#[tokio::test]
async fn a_window_end_call_whose_answer_is_back_before_the_next_window_gives_its_slot_back() {
    let (f, clock, limits, end) = admitted_at_a_windows_end().await;
    clock.advance(Duration::from_millis(100));
    assert!(f.pace.landed(POOL, &limits, 100, 0).await.unwrap());
    assert!(
        !f.pace.landed(POOL, &limits, 100, 0).await.unwrap(),
        "once: the window counted it once more, no more"
    );
    clock.advance(Duration::from_millis(WINDOW_GUARD_MS));
    assert_eq!(
        f.pace.usage(POOL, &limits, end).await.unwrap().window_used,
        0
    );
    assert_eq!(
        f.admits(&limits, 2, end).await,
        vec![Slot::Now; 2],
        "the whole window"
    );
}

/// The Lua script's reading of a call back before the next window: windows of 2 s, so the
/// test can wait (by Redis time) for a window's last 500 ms.
#[tokio::test]
async fn in_redis_a_window_end_call_back_in_time_gives_its_slot_back() {
    let Some(conn) = support::skip::redis().await else {
        return;
    };
    let pace = RedisPacer::new(conn.clone(), support::unique_ns("pace"));
    let limits = Limits {
        window_ms: 2_000,
        ..fixed(2)
    };
    let end = day_end();
    loop {
        let mut c = conn.clone();
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
        let into = (s * 1000 + us / 1000) % 2_000;
        if (1_600..1_700).contains(&into) {
            break;
        }
        tokio::time::sleep(Duration::from_millis((3_600 - into) % 2_000 / 2 + 1)).await;
    }
    assert_eq!(pace.admit(POOL, &limits, end, 0).await.unwrap(), Slot::Now);
    assert!(pace.landed(POOL, &limits, 5, 0).await.unwrap());
    assert!(!pace.landed(POOL, &limits, 5, 0).await.unwrap(), "once");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let next = pace.usage(POOL, &limits, end).await.unwrap();
    assert_eq!(
        next.window_used, 0,
        "the next window has its slot back: {next:?}"
    );
}

/// docs/design.md §4.4, limits stated in a refusal: whatever a refusal's body says its limit is —
/// a negative number, 10^12, 20 digits, a word, nothing — and in whichever shape (Groq's message,
/// Gemini's `QuotaFailure`), nothing panics, a pool that declares nothing learns no limit of 0
/// (which would close it for good), and a pinned pool keeps its own limit.
mod refusal_numbers {
    use super::*;
    use freeway::catalog::Catalog;
    use freeway::classify::{MAX_STATED, classify_response};
    use freeway::headers::Headers;
    use freeway::route::Route;
    use proptest::prelude::*;

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just("1000000000000".to_string()),
            Just("0".to_string()),
            "[0-9]{0,24}",
            "[^,\"\\\\]{0,10}",
        ]
    }

    /// A refusal stating `limit`, in Gemini's shape or Groq's.
    fn refusal(gemini: bool, limit: &str) -> String {
        match gemini {
            true => serde_json::json!([{"error": {
                "code": 429,
                "message": format!("Quota exceeded for metric: x, limit: {limit}"),
                "status": "RESOURCE_EXHAUSTED",
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                        "quotaValue": limit,
                    }],
                }],
            }}])
            .to_string(),
            false => serde_json::json!({"error": {
                "message": format!("Rate limit reached for model `m` in organization `o` service tier `on_demand` on requests per minute (RPM): Limit {limit}, Used {limit}, Requested 1. Please try again in 2s."),
                "type": "requests",
                "code": "rate_limit_exceeded",
            }})
            .to_string(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_number_in_a_refusal_closes_a_pool_or_moves_a_pinned_limit(
            limit in number(),
            gemini in any::<bool>(),
            pinned in 1u32..50,
        ) {
            let route = match gemini {
                true => "gemini:gemini-2.5-flash",
                false => "groq:llama-3.3-70b-versatile",
            };
            let route = Route::parse(route, &Catalog::builtin()).expect("a builtin route");
            let now = freeway::clock::epoch_ms();
            let body = refusal(gemini, &limit);
            let class = classify_response(429, &Headers::new(), body.as_bytes(), &route, now);
            let stated = Stated::default().with_refusal(&class.stated, 60_000);
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            runtime.block_on(async {
                let pace = MemoryPacer::new(Arc::new(InstantClock::frozen()));
                let end = day_end();
                let open = Limits::unstated(60_000, false);
                pace.learn("open", &open, end, &stated).await.unwrap();
                let learned = pace.usage("open", &open, end).await.unwrap().learned;
                for l in [learned.per_window, learned.per_day, learned.tokens_per_window].into_iter().flatten() {
                    prop_assert!((1..=MAX_STATED).contains(&u64::from(l)), "{limit:?} taught {learned:?}");
                }
                prop_assert_eq!(pace.admit("open", &open, end, 0).await.unwrap(), Slot::Now);
                let pin = Limits { pin: true, ..minute(pinned) };
                pace.learn("pinned", &pin, end, &stated).await.unwrap();
                for n in 0..pinned {
                    prop_assert_eq!(pace.admit("pinned", &pin, end, 0).await.unwrap(), Slot::Now, "call {}", n);
                }
                prop_assert_ne!(pace.admit("pinned", &pin, end, 0).await.unwrap(), Slot::Now);
                Ok(())
            })?;
        }
    }

    /// The same test's shapes do teach a believable number: the property is not vacuous.
    #[test]
    fn a_believable_number_is_learned_in_both_shapes() {
        for (gemini, route) in [
            (true, "gemini:gemini-2.5-flash"),
            (false, "groq:llama-3.3-70b-versatile"),
        ] {
            let route = Route::parse(route, &Catalog::builtin()).expect("a builtin route");
            let body = refusal(gemini, "30");
            let class = classify_response(429, &Headers::new(), body.as_bytes(), &route, 0);
            let stated = Stated::default().with_refusal(&class.stated, 60_000);
            assert_eq!(stated.per_window, Some(30), "{route:?}");
        }
    }
}
