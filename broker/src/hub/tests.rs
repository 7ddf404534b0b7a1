use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;

type Received = Arc<Mutex<Vec<(u64, Bytes)>>>;

/// A stand-in socket that records what the hub hands it (at once: the hub
/// writes into a socket's queue directly).
struct Recorder {
    got: Received,
    keys: Mutex<Vec<Option<Arc<str>>>>,
    gauge: Arc<OutboundGauge>,
}

impl DirectSink for Recorder {
    fn message(
        &self,
        _: &Arc<str>,
        seq: u64,
        frame: &Bytes,
        key: Option<&Arc<str>>,
        _: &mut Renders,
    ) {
        self.gauge.release(frame.len());
        self.keys.lock().push(key.cloned());
        self.got.lock().push((seq, frame.clone()));
    }

    fn congested(&self) {}
}

fn hub(size: usize) -> Hub {
    Hub::new(
        HistoryLimits {
            size,
            ttl: Duration::from_secs(60),
            max_bytes: usize::MAX,
        },
        Arc::new(Metrics::new()),
    )
}

struct TestSub {
    sub: Subscriber,
    recorder: Arc<Recorder>,
}

impl std::ops::Deref for TestSub {
    type Target = Subscriber;
    fn deref(&self) -> &Subscriber {
        &self.sub
    }
}

fn sink(conn: u64, high_water: usize) -> (TestSub, Received) {
    let got = Received::default();
    let gauge = Arc::new(OutboundGauge::new(high_water));
    let recorder = Arc::new(Recorder {
        got: got.clone(),
        keys: Mutex::default(),
        gauge: gauge.clone(),
    });
    let sub = Subscriber {
        conn,
        sink: Sink::Socket(recorder.clone()),
        gauge,
    };
    (TestSub { sub, recorder }, got)
}

#[test]
fn seq_is_strictly_increasing_and_bytes_are_shared() {
    let hub = hub(10);
    let (a, got_a) = sink(1, 1 << 20);
    let (b, got_b) = sink(2, 1 << 20);
    hub.subscribe("doc:1", a.sub.clone(), None);
    hub.subscribe("doc:1", b.sub.clone(), None);
    let s1 = hub.publish("doc:1", "1");
    let s2 = hub.publish("doc:1", "2");
    assert!(s2 > s1);
    let a = got_a.lock();
    let b = got_b.lock();
    assert_eq!(a.iter().map(|x| x.0).collect::<Vec<_>>(), [s1, s2]);
    assert_eq!(
        a[0].1.as_ptr(),
        b[0].1.as_ptr(),
        "both subscribers hold the same encoded bytes"
    );
}

#[test]
fn since_recovers_held_messages_or_says_it_cannot() {
    let hub = hub(3);
    let first = hub.publish("doc:1", "1");
    for i in 2..=5 {
        hub.publish("doc:1", &i.to_string());
    }
    let last = first + 4;
    let (s, _) = sink(1, 1 << 20);
    let mut joined = hub.subscribe("doc:1", s.sub.clone(), Some(last - 2));
    assert_eq!(joined.recovered, Some(true));
    assert_eq!(joined.position(), last, "the ack's seq: the last recovered");
    assert_eq!(
        std::iter::from_fn(|| joined.backlog.pop())
            .map(|x| x.0)
            .collect::<Vec<_>>(),
        [last - 1, last]
    );
    let joined = hub.subscribe("doc:1", s.sub.clone(), Some(first));
    assert_eq!(
        joined.recovered,
        Some(false),
        "seq first+1 fell out of a 3-message history"
    );
    assert!(joined.backlog.is_done());
    let joined = hub.subscribe("doc:1", s.sub.clone(), Some(last));
    assert_eq!(
        joined.recovered,
        Some(true),
        "nothing missed counts as recovered"
    );
    let joined = hub.subscribe("doc:new", s.sub.clone(), Some(7));
    assert_eq!(
        joined.recovered,
        Some(false),
        "an unknown channel cannot vouch for the past"
    );
}

#[test]
fn a_channel_has_a_position_before_its_first_message() {
    let hub = hub(10);
    let (s, _) = sink(1, 1 << 20);
    let pos = hub.subscribe("doc:fresh", s.sub.clone(), None).position();
    assert!(pos > 0, "a position to resume from");
    assert_eq!(
        hub.publish("doc:fresh", "1"),
        pos + 1,
        "live starts above it"
    );
    let again = hub.subscribe("doc:fresh", s.sub.clone(), Some(pos));
    assert_eq!(
        again.recovered,
        Some(true),
        "since the ack's seq is covered"
    );
    assert_eq!(again.backlog.ready().0, 1);
    assert!(hub.is_subscribed("doc:fresh", 1));
    assert!(!hub.is_subscribed("doc:fresh", 2));
}

#[test]
fn a_conflating_namespace_is_never_dropped_at_the_hub_and_carries_keys() {
    let hub = hub(0);
    let ns: std::collections::HashMap<String, crate::config::NamespaceSection> =
        toml::from_str("[cur]\ndelivery = \"conflate\"\nconflation_key = \"/u\"\n").unwrap();
    hub.set_delivery(DeliveryClasses::new(&ns));
    let (s, _) = sink(1, 16);
    let gauge = s.gauge.clone();
    gauge.add(1024); // far over its mark
    hub.subscribe("cur:1", s.sub.clone(), None);
    hub.subscribe("doc:1", s.sub.clone(), None);
    hub.publish("cur:1", r#"{"u":"ada"}"#);
    hub.publish("cur:1", r#"{"v":1}"#);
    hub.publish("doc:1", "1");
    let keys: Vec<Option<String>> = s
        .recorder
        .keys
        .lock()
        .iter()
        .map(|k| k.as_deref().map(Into::into))
        .collect();
    assert_eq!(keys, vec![Some(r#""ada""#.into()), Some(String::new())]);
    assert_eq!(
        gauge.clear_congestion(),
        1,
        "only the queueing channel dropped"
    );
}

#[test]
fn over_the_mark_messages_are_dropped_and_counted() {
    let hub = hub(0);
    let (slow, _) = sink(1, 1024);
    let gauge = slow.gauge.clone();
    gauge.add(2048); // the socket already has 2 KiB unsent
    hub.subscribe("c", slow.sub.clone(), None);
    hub.publish("c", "x");
    hub.publish("c", "y");
    assert!(gauge.is_congested());
    assert_eq!(gauge.clear_congestion(), 2);
    assert_eq!(gauge.pending(), 2048, "dropped messages reserve nothing");
}

#[test]
fn sweep_forgets_idle_channels_but_not_live_ones() {
    let hub = hub(0);
    let (s, _) = sink(1, 1 << 20);
    hub.subscribe("live", s.sub.clone(), None);
    hub.publish("idle", "1");
    hub.sweep();
    assert_eq!(hub.channel_count(), 1);
    hub.unsubscribe("live", 1);
    hub.sweep();
    assert_eq!(hub.channel_count(), 0);
}

#[test]
fn the_history_budget_evicts_oldest_first_across_channels_and_its_order_stays_bounded() {
    let frame_len = wire::message("a:1", seq_floor(), "1").len();
    let hub = Hub::new(
        HistoryLimits {
            size: 3,
            ttl: Duration::from_secs(60),
            max_bytes: 4 * frame_len + 8,
        },
        Arc::new(Metrics::new()),
    );
    let a1 = hub.publish("a:1", "1");
    let b1 = hub.publish("b:1", "1");
    hub.publish("a:1", "2");
    hub.publish("b:1", "2");
    // Four held: at the budget. A fifth evicts the oldest, a:1's first.
    hub.publish("a:1", "3");
    assert!(!hub.recover("a:1", a1 - 1).0, "a:1's oldest is gone");
    assert!(hub.recover("b:1", b1 - 1).0, "b:1 is whole");
    assert!(hub.budget.bytes() <= 4 * frame_len + 8);
    // One channel trimmed by size over and over leaves stale entries in
    // the order; compaction keeps it near twice what is held.
    for i in 0..5000 {
        hub.publish("c:1", &(i % 10).to_string());
    }
    let held = hub.budget.held.load(std::sync::atomic::Ordering::Relaxed);
    assert!(held <= 9);
    assert!(hub.budget.order.lock().len() <= 2 * held + 1024 + 1);
}

/// A channel's subscribers as the hub keeps them: scanned while few,
/// indexed past `INDEXED`; either way each socket once, found, replaced
/// and removed.
#[test]
fn subscribers_stay_exact_across_the_index_threshold() {
    let sub = |conn: u64| Subscriber {
        conn,
        sink: Sink::Socket(Arc::new(Recorder {
            got: Received::default(),
            keys: Mutex::new(Vec::new()),
            gauge: Arc::new(OutboundGauge::new(1 << 20)),
        })),
        gauge: Arc::new(OutboundGauge::new(1 << 20)),
    };
    let mut subs = channel::Subscribers::default();
    subs.insert(sub(1));
    subs.insert(sub(1));
    assert_eq!(
        subs.len(),
        1,
        "a socket's second subscribe replaces its first"
    );
    for conn in 2..=40 {
        subs.insert(sub(conn));
        assert_eq!(subs.len(), conn as usize);
        assert!((1..=conn).all(|c| subs.contains(c)));
    }
    subs.insert(sub(7));
    assert_eq!(subs.len(), 40);
    // Leave from the middle, the end and the start, down to empty.
    let order: Vec<u64> = (1..=40)
        .rev()
        .step_by(3)
        .chain((1..=40).step_by(3))
        .collect();
    let mut left: std::collections::BTreeSet<u64> = (1..=40).collect();
    for conn in order.into_iter().chain(1..=40) {
        subs.remove(conn);
        left.remove(&conn);
        assert!(!subs.contains(conn));
        assert_eq!(subs.len(), left.len());
        assert!(left.iter().all(|&c| subs.contains(c)));
        let listed: std::collections::BTreeSet<u64> = subs.iter().map(|s| s.conn).collect();
        assert_eq!(listed, left);
    }
    assert!(subs.is_empty());
    subs.insert(sub(9));
    assert!(subs.contains(9) && !subs.contains(1));
}
