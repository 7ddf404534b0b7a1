use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

fn table(window_ms: u64, max_keys: u64) -> (Arc<Idempotency>, Arc<IdempotencyMetrics>) {
    let m = Arc::new(IdempotencyMetrics::default());
    (Idempotency::new(window_ms, max_keys, m.clone()), m)
}

fn scope(key: &str) -> Scope<'_> {
    Keyed::new("acct", key).unwrap().on("doc:1")
}

fn first(c: Claim) -> First {
    match c {
        Claim::First(f) => f,
        other => panic!("expected a first claim, got {other:?}"),
    }
}

fn waiter(c: Claim) -> Waiter {
    match c {
        Claim::Wait(w) => w,
        other => panic!("expected to wait for a claim in flight, got {other:?}"),
    }
}

#[test]
fn a_published_key_is_known_for_the_window_from_its_publish() {
    let (t, _) = table(1000, 10);
    let now = Instant::now();
    let f = first(t.claim(scope("a"), now));
    assert_eq!(t.seen(scope("a"), now), Seen::Held);
    f.done(7, now);
    let later = now + Duration::from_millis(999);
    assert!(matches!(t.claim(scope("a"), later), Claim::Known(7)));
    // Duplicates do not extend the window.
    let past = now + Duration::from_millis(1000);
    assert_eq!(t.seen(scope("a"), past), Seen::New);
    assert!(matches!(t.claim(scope("a"), past), Claim::First(_)));
}

#[tokio::test]
async fn a_duplicate_in_flight_waits_for_the_first_answer() {
    let (t, _) = table(1000, 10);
    let now = Instant::now();
    let f = first(t.claim(scope("a"), now));
    let w = waiter(t.claim(scope("a"), now));
    let waiting = tokio::spawn(w.wait());
    f.done(42, now);
    assert_eq!(waiting.await.unwrap(), Some(42));
}

#[tokio::test]
async fn a_dropped_claim_uses_up_nothing() {
    let (t, m) = table(1000, 10);
    let now = Instant::now();
    let f = first(t.claim(scope("a"), now));
    let w = waiter(t.claim(scope("a"), now));
    drop(f);
    assert_eq!(w.wait().await, None, "the waiter learns it was given up");
    assert!(t.is_empty());
    assert_eq!(m.keys.get(), 0);
    assert!(matches!(t.claim(scope("a"), now), Claim::First(_)));
}

#[test]
fn the_oldest_key_is_evicted_past_the_cap_and_counted() {
    let (t, m) = table(60_000, 2);
    let now = Instant::now();
    for k in ["a", "b", "c"] {
        first(t.claim(scope(k), now)).done(1, now);
    }
    assert_eq!(t.len(), 2);
    assert_eq!(m.evictions.get(), 1);
    assert_eq!(m.keys.get(), 2);
    assert_eq!(t.seen(scope("a"), now), Seen::New, "the oldest went");
    assert_eq!(t.seen(scope("c"), now), Seen::Held);
}

#[test]
fn expired_keys_make_room_without_counting_an_eviction() {
    let (t, m) = table(10, 2);
    let now = Instant::now();
    for k in ["a", "b"] {
        first(t.claim(scope(k), now)).done(1, now);
    }
    let later = now + Duration::from_millis(20);
    first(t.claim(scope("c"), later)).done(2, later);
    assert_eq!(m.evictions.get(), 0, "a had expired: not an eviction");
    assert_eq!(t.len(), 2);
    assert_eq!(t.seen(scope("a"), later), Seen::New);
    t.sweep(later + Duration::from_millis(20));
    assert!(t.is_empty());
}

#[test]
fn dropped_claims_leave_the_age_queue_bounded() {
    let (t, _) = table(60_000, 4);
    let now = Instant::now();
    for i in 0..1000 {
        drop(t.claim(scope(&format!("k{i}")), now));
    }
    assert!(t.table.lock().order.len() <= 64 + 1);
}

#[test]
fn a_smaller_cap_applies_on_the_next_claim() {
    let (t, m) = table(60_000, 10);
    let now = Instant::now();
    for k in ["a", "b", "c", "d"] {
        first(t.claim(scope(k), now)).done(1, now);
    }
    t.reconfigure(60_000, 2);
    first(t.claim(scope("e"), now)).done(1, now);
    assert_eq!(t.len(), 2);
    assert_eq!(m.evictions.get(), 3);
}

#[tokio::test]
async fn a_key_in_flight_is_never_evicted_and_its_waiters_get_its_answer() {
    let (t, m) = table(60_000, 1);
    let now = Instant::now();
    let f = first(t.claim(scope("a"), now));
    let w = waiter(t.claim(scope("a"), now));
    // The cap is 1 and "a" is in flight: "b" goes in beside it.
    first(t.claim(scope("b"), now)).done(2, now);
    assert_eq!(t.len(), 2);
    assert_eq!(m.evictions.get(), 0);
    f.done(1, now);
    assert_eq!(w.wait().await, Some(1));
    // Now published, "a" is the oldest: the next key evicts it.
    first(t.claim(scope("c"), now)).done(3, now);
    assert_eq!(t.seen(scope("a"), now), Seen::New);
    assert_eq!(m.evictions.get(), 2, "a and b");
}

#[test]
fn past_the_cap_the_oldest_keys_go_in_a_batch_and_the_cap_holds() {
    let (t, m) = table(60_000, 128);
    let now = Instant::now();
    for i in 0..128 {
        first(t.claim(scope(&format!("k{i}")), now)).done(i, now);
    }
    assert_eq!(t.len(), 128, "at the cap nothing goes");
    first(t.claim(scope("k128"), now)).done(128, now);
    // 1/64 of the cap below it: the three oldest went at once.
    assert_eq!(t.len(), 126);
    assert_eq!(m.evictions.get(), 3);
    for i in 0..3 {
        assert_eq!(t.seen(scope(&format!("k{i}")), now), Seen::New);
    }
    assert_eq!(t.seen(scope("k3"), now), Seen::Held);
    assert_eq!(t.seen(scope("k128"), now), Seen::Held);
}

#[test]
fn two_tables_on_one_thread_never_share_a_name() {
    // The thread's memo of the last digest is per table: a scope named by
    // one table is not answered with that name by another.
    let (a, _) = table(60_000, 10);
    let (b, _) = table(60_000, 10);
    let now = Instant::now();
    first(a.claim(scope("x"), now)).done(1, now);
    assert_eq!(a.seen(scope("x"), now), Seen::Held);
    assert_eq!(b.seen(scope("x"), now), Seen::New);
    assert!(matches!(b.claim(scope("x"), now), Claim::First(_)));
    assert!(matches!(a.claim(scope("x"), now), Claim::Known(1)));
}
