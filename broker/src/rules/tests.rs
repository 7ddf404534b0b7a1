//! Rules: refunds, keys, filters, hold and dry run, skips; shared buckets
//! through sweeps and reloads.

use super::buckets::key;
use super::*;
use crate::config::TrackBy;

fn rule(id: &str, track_by: TrackBy, capacity: u32, window_ms: u64) -> Rule {
    Rule {
        id: id.into(),
        track_by,
        capacity,
        window_ms,
        namespace: None,
        ops: vec![Op::Publish],
        hold_max_delay_ms: 0,
        dry_run: false,
    }
}

fn limits(rules: Vec<Rule>) -> Limits {
    Limits {
        rules,
        ..Limits::default()
    }
}

#[test]
fn a_later_refusal_refunds_earlier_rules() {
    let l = limits(vec![
        rule("per-user", TrackBy::Account, 10, 1000),
        rule("per-doc", TrackBy::Channel, 1, 60_000),
    ]);
    let shared = RuleBuckets::default();
    let mut conn = ConnRules::default();
    let now = Instant::now();
    let mut sh = Vec::new();
    assert_eq!(
        check(
            &l,
            Op::Publish,
            "a",
            "doc:1",
            &shared,
            &mut conn,
            now,
            &mut sh
        ),
        RuleVerdict::Pass
    );
    for _ in 0..5 {
        let v = check(
            &l,
            Op::Publish,
            "a",
            "doc:1",
            &shared,
            &mut conn,
            now,
            &mut sh,
        );
        assert!(matches!(v, RuleVerdict::Refuse { rule, .. } if rule.id == "per-doc"));
    }
    // Only the one admitted publish was charged to per-user.
    let mut buf = String::new();
    key(&mut buf, &l.rules[0], "a", "doc:1");
    assert_eq!(shared.remaining(&buf, 10.0, now), 9.0);
}

#[test]
fn keys_separate_accounts_channels_and_pairs() {
    let l = limits(vec![rule("pair", TrackBy::AccountChannel, 1, 60_000)]);
    let shared = RuleBuckets::default();
    let mut conn = ConnRules::default();
    let now = Instant::now();
    let mut sh = Vec::new();
    let mut go = |a: &str, c: &str| {
        check(&l, Op::Publish, a, c, &shared, &mut conn, now, &mut sh) == RuleVerdict::Pass
    };
    assert!(go("a", "doc:1"));
    assert!(!go("a", "doc:1"));
    assert!(go("b", "doc:1"));
    assert!(go("a", "doc:2"));
}

#[test]
fn namespace_and_op_filters() {
    let mut r = rule("docs", TrackBy::Channel, 1, 60_000);
    r.namespace = Some("doc".into());
    let l = limits(vec![r]);
    let shared = RuleBuckets::default();
    let mut conn = ConnRules::default();
    let now = Instant::now();
    let mut sh = Vec::new();
    for _ in 0..3 {
        assert_eq!(
            check(
                &l,
                Op::Publish,
                "a",
                "chat:1",
                &shared,
                &mut conn,
                now,
                &mut sh
            ),
            RuleVerdict::Pass
        );
        assert_eq!(
            check(
                &l,
                Op::Subscribe,
                "a",
                "doc:1",
                &shared,
                &mut conn,
                now,
                &mut sh
            ),
            RuleVerdict::Pass
        );
    }
}

#[test]
fn hold_when_the_wait_is_short_dry_run_never_refuses() {
    let mut r = rule("conn", TrackBy::Connection, 2, 100);
    r.hold_max_delay_ms = 60;
    let mut dry = rule("shadow", TrackBy::Account, 1, 60_000);
    dry.dry_run = true;
    let l = limits(vec![dry, r]);
    let shared = RuleBuckets::default();
    let mut conn = ConnRules::default();
    let now = Instant::now();
    let mut sh = Vec::new();
    assert_eq!(
        check(&l, Op::Publish, "a", "c", &shared, &mut conn, now, &mut sh),
        RuleVerdict::Pass
    );
    assert_eq!(
        check(&l, Op::Publish, "a", "c", &shared, &mut conn, now, &mut sh),
        RuleVerdict::Pass
    );
    assert_eq!(
        sh.len(),
        1,
        "the dry-run rule would have refused the second"
    );
    match check(&l, Op::Publish, "a", "c", &shared, &mut conn, now, &mut sh) {
        RuleVerdict::Refuse { rule, wait, hold } => {
            assert_eq!(
                (rule.id.as_str(), wait, hold),
                ("conn", Duration::from_millis(50), true)
            );
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn skip_for_service_accounts_and_roles() {
    let mut l = limits(vec![]);
    l.skip_rules_for_roles = vec!["service".into()];
    assert!(skipped(&l, Some("service")));
    assert!(!skipped(&l, Some("user")));
    l.skip_rules = true;
    assert!(skipped(&l, None));
}

/// One publish on `channel` by account "a" through `conn`.
fn publish(
    l: &Limits,
    shared: &RuleBuckets,
    conn: &mut ConnRules,
    channel: &str,
    now: Instant,
) -> bool {
    let mut sh = Vec::new();
    check(l, Op::Publish, "a", channel, shared, conn, now, &mut sh) == RuleVerdict::Pass
}

/// The rule that refuses the next publish on `channel`, and its wait.
fn refusal(
    l: &Limits,
    shared: &RuleBuckets,
    conn: &mut ConnRules,
    channel: &str,
    now: Instant,
) -> (String, Duration) {
    let mut sh = Vec::new();
    match check(l, Op::Publish, "a", channel, shared, conn, now, &mut sh) {
        RuleVerdict::Refuse { rule, wait, .. } => (rule.id.clone(), wait),
        v => panic!("{v:?}"),
    }
}

#[test]
fn a_swept_bucket_is_fetched_again_and_still_shared_by_every_socket() {
    let l = limits(vec![rule("doc", TrackBy::Channel, 2, 1000)]);
    let shared = RuleBuckets::default();
    let (mut a, mut b) = (ConnRules::default(), ConnRules::default());
    let t0 = Instant::now();
    assert!(publish(&l, &shared, &mut a, "doc:1", t0));
    assert!(publish(&l, &shared, &mut b, "doc:1", t0));
    assert!(
        !publish(&l, &shared, &mut a, "doc:1", t0),
        "one bucket for both"
    );
    shared.sweep(t0);
    assert_eq!(shared.len(), 1, "an empty bucket is kept");
    let t1 = t0 + Duration::from_secs(1);
    shared.sweep(t1);
    assert!(shared.is_empty(), "a full bucket is forgotten");
    // Both sockets still hold a handle to the swept bucket: each must
    // count in the key's new bucket, not in the old one or its own.
    assert!(publish(&l, &shared, &mut a, "doc:1", t1));
    assert!(publish(&l, &shared, &mut b, "doc:1", t1));
    assert!(!publish(&l, &shared, &mut a, "doc:1", t1));
    assert!(!publish(&l, &shared, &mut b, "doc:1", t1));
    assert_eq!(shared.len(), 1);
}

#[test]
fn a_socket_holds_few_handles_and_an_evicted_key_keeps_its_count() {
    let l = limits(vec![rule("doc", TrackBy::Channel, 1, 60_000)]);
    let shared = RuleBuckets::default();
    let mut conn = ConnRules::default();
    let now = Instant::now();
    for n in 0..100 {
        assert!(publish(&l, &shared, &mut conn, &format!("doc:{n}"), now));
    }
    assert_eq!(shared.len(), 100);
    assert_eq!(
        conn.handles(),
        buckets::CACHED,
        "bounded, not one per channel"
    );
    for n in [0, 50, 99] {
        assert!(
            !publish(&l, &shared, &mut conn, &format!("doc:{n}"), now),
            "doc:{n} was charged"
        );
    }
}

#[test]
fn a_reload_applies_on_the_next_take() {
    let shared = RuleBuckets::default();
    let mut conn = ConnRules::default();
    let now = Instant::now();
    let before = limits(vec![
        rule("doc", TrackBy::Channel, 10, 60_000),
        rule("conn", TrackBy::Connection, 10, 60_000),
    ]);
    assert!(publish(&before, &shared, &mut conn, "doc:1", now));
    // Capacity 2: the balance (9) is capped at the new capacity; the
    // shorter window refills faster.
    let smaller = limits(vec![
        rule("doc", TrackBy::Channel, 2, 2000),
        rule("conn", TrackBy::Connection, 10, 60_000),
    ]);
    assert!(publish(&smaller, &shared, &mut conn, "doc:1", now));
    assert!(publish(&smaller, &shared, &mut conn, "doc:1", now));
    assert_eq!(
        refusal(&smaller, &shared, &mut conn, "doc:1", now),
        ("doc".into(), Duration::from_secs(1))
    );
    // A connection rule follows a reload too (3 taken: 7 left, capped at
    // the new capacity).
    let conn_smaller = limits(vec![rule("conn", TrackBy::Connection, 3, 3000)]);
    for _ in 0..3 {
        assert!(publish(&conn_smaller, &shared, &mut conn, "doc:1", now));
    }
    assert_eq!(
        refusal(&conn_smaller, &shared, &mut conn, "doc:1", now),
        ("conn".into(), Duration::from_secs(1))
    );
}

#[test]
fn in_namespace_agrees_with_namespace() {
    use crate::protocol::channel::namespace;
    let channels = [
        "doc:1", "doc", "doc:1:x", "docs:1", "do:c", ":doc", "", "doc:",
    ];
    for ns in ["doc", "do", "", "doc:1", "docs"] {
        for c in channels {
            assert_eq!(in_namespace(c, ns), namespace(c) == ns, "{c:?} in {ns:?}");
        }
    }
}
