//! The Pusher sink against a real hub: what is queued, in which order,
//! and what the gauge counts.

use std::time::Duration;

use super::*;
use crate::dialect::Backlog;
use crate::hub::{HistoryLimits, Hub, Sink, Subscriber};
use crate::metrics::Metrics;

/// A socket's outbox as far as this sink uses it: what was queued.
struct Queued(Mutex<Vec<Bytes>>, Arc<OutboundGauge>);

impl Outlet for Queued {
    fn push(&self, parts: &mut [Bytes]) {
        let mut q = self.0.lock();
        q.extend(parts.iter_mut().map(std::mem::take));
    }
    fn push_frame(&self, frame: Bytes) {
        self.0.lock().push(frame);
    }
    fn push_keyed(&self, _: &Arc<str>, _: Arc<str>, frame: Bytes) -> bool {
        self.push_frame(frame);
        true
    }
    fn gauge(&self) -> &OutboundGauge {
        &self.1
    }
    fn congested(&self) {}
    fn recover(&self, _: Arc<dyn Backlog>) {}
    fn forget(&self, _: &Arc<dyn Backlog>) {}
    fn page_room(&self, _: usize) -> Option<usize> {
        None
    }
    fn page_done(&self, _: usize) {}
    fn pump_backlogs(&self) {}
}

const CH: &str = "|1|private-x";

/// A hub keeping `size` messages of history a channel.
fn hub(size: usize) -> Hub {
    let ttl = Duration::from_secs(60);
    let limits = HistoryLimits {
        size,
        ttl,
        max_bytes: usize::MAX,
    };
    Hub::new(limits, Arc::new(Metrics::new()))
}

/// A subscriber of [`CH`] on `hub` as socket `id`, with its queue and the
/// hub's answer to its join (which a bridge in a cluster gives later: the
/// sink holds what arrives until it goes live with it).
fn subscriber(
    hub: &Hub,
    conn: u64,
    id: &str,
    mark: usize,
) -> (Arc<PusherSink>, Arc<Queued>, Joined) {
    let gauge = Arc::new(OutboundGauge::new(mark));
    let queued = Arc::new(Queued(Mutex::default(), gauge.clone()));
    let sink = PusherSink::with(conn, CH.into(), id.into(), queued.clone(), gauge.clone());
    let sub = Subscriber {
        conn,
        sink: Sink::Render(sink.clone()),
        gauge,
    };
    let joined = hub.subscribe(CH, sub, None);
    (sink, queued, joined)
}

fn frames(q: &Queued) -> Vec<Bytes> {
    q.0.lock().clone()
}

/// What the gauge counts: exactly the bytes queued (the rendered
/// frames), never the hub's frames, with nothing left over.
fn counted(q: &Queued) -> usize {
    frames(q).iter().map(Bytes::len).sum()
}

#[test]
fn the_gauge_counts_the_rendered_frames_queued_and_the_sender_reserves_nothing() {
    let hub = hub(0);
    let (a, qa, ja) = subscriber(&hub, 1, "1.1", 1 << 20);
    let (b, qb, jb) = subscriber(&hub, 2, "2.2", 1 << 20);
    let one = r#"{"event":"client-m","channel":"private-x","data":"1"}"#;
    let two = r#"{"event":"client-m","channel":"private-x","data":"2"}"#;
    // While joining: held, rendered and counted; the sender's not.
    hub.publish(CH, &publish_data("2.2", one));
    assert!(frames(&qa).is_empty() && frames(&qb).is_empty());
    assert_eq!(a.gauge.pending(), wire::text(one.as_bytes()).len());
    assert_eq!(b.gauge.pending(), 0, "the sender reserved nothing");
    a.go_live(ja);
    b.go_live(jb);
    hub.publish(CH, &publish_data("", two));
    let (r1, r2) = (wire::text(one.as_bytes()), wire::text(two.as_bytes()));
    assert_eq!(frames(&qa), vec![r1, r2.clone()]);
    assert_eq!(frames(&qb), vec![r2]);
    assert_eq!(a.gauge.pending(), counted(&qa));
    assert_eq!(b.gauge.pending(), counted(&qb));
    // Ended: nothing more queued or counted.
    a.end();
    hub.publish(CH, &publish_data("", two));
    assert_eq!(frames(&qa).len(), 2);
    assert_eq!(a.gauge.pending(), counted(&qa));
    assert_eq!(b.gauge.pending(), counted(&qb));
}

#[test]
fn at_the_mark_messages_are_dropped_and_what_waited_is_released_at_the_end() {
    let hub = hub(0);
    let (live, ql, jl) = subscriber(&hub, 1, "1.1", 1);
    let (joining, qj, _) = subscriber(&hub, 2, "2.2", 1 << 20);
    live.go_live(jl);
    let event = r#"{"event":"client-m","channel":"private-x","data":"1"}"#;
    hub.publish(CH, &publish_data("", event));
    hub.publish(CH, &publish_data("", event));
    assert_eq!(frames(&ql).len(), 1, "the second is past the mark");
    assert_eq!(live.gauge.pending(), counted(&ql));
    assert!(live.gauge.is_congested());
    assert!(joining.gauge.pending() > 0);
    joining.end();
    assert_eq!(joining.gauge.pending(), 0);
    assert!(frames(&qj).is_empty());
}

fn event(data: &str) -> String {
    format!(r#"{{"event":"client-m","channel":"private-x","data":"{data}"}}"#)
}

fn member(user: &str) -> String {
    format!(r#"{{"event":"pusher_internal:member_added","channel":"private-x","data":"{user}"}}"#)
}

fn text(frame: &str) -> Bytes {
    wire::text(frame.as_bytes())
}

#[test]
fn own_frames_wait_with_the_channels_messages_and_keep_their_order() {
    let hub = hub(0);
    let (sink, q, joined) = subscriber(&hub, 1, "1.1", 1 << 20);
    // While joining: a member event between two channel events.
    hub.publish(CH, &publish_data("", &event("1")));
    sink.push_own(&member("u1"));
    hub.publish(CH, &publish_data("", &event("2")));
    sink.push_own(&member("u2"));
    assert!(
        frames(&q).is_empty(),
        "nothing before subscription_succeeded"
    );
    let waiting = [event("1"), member("u1"), event("2"), member("u2")];
    let held: usize = waiting.iter().map(|f| text(f).len()).sum();
    assert_eq!(
        sink.gauge.pending(),
        held,
        "rendered and counted while held"
    );
    sink.go_live(joined);
    assert_eq!(
        frames(&q),
        waiting.iter().map(|f| text(f)).collect::<Vec<_>>()
    );
    // Live: each goes out as it comes, the machine left unboxed.
    sink.push_own(&member("u3"));
    hub.publish(CH, &publish_data("", &event("3")));
    let last = frames(&q)[4..].to_vec();
    assert_eq!(last, [text(&member("u3")), text(&event("3"))]);
    assert!(sink.live.load(Ordering::Acquire));
    assert_eq!(sink.sub.lock().phase(), Phase::Live);
    assert_eq!(sink.gauge.pending(), counted(&q));
    // Ended: neither kind is queued or counted.
    sink.end();
    sink.push_own(&member("u4"));
    hub.publish(CH, &publish_data("", &event("4")));
    assert_eq!(frames(&q).len(), 6);
    assert_eq!(sink.gauge.pending(), counted(&q));
}

#[test]
fn an_end_while_joining_releases_what_waited_and_a_late_answer_changes_nothing() {
    let hub = hub(0);
    let (sink, q, joined) = subscriber(&hub, 1, "1.1", 1 << 20);
    hub.publish(CH, &publish_data("", &event("1")));
    sink.push_own(&member("u1"));
    assert!(sink.gauge.pending() > 0);
    sink.end();
    assert_eq!(
        sink.gauge.pending(),
        0,
        "held messages and own frames released"
    );
    sink.go_live(joined);
    hub.publish(CH, &publish_data("", &event("2")));
    assert!(frames(&q).is_empty());
    assert!(!sink.live.load(Ordering::Acquire));
    assert_eq!(sink.gauge.pending(), 0);
}

#[test]
fn a_held_message_at_or_below_the_joins_position_is_released() {
    let hub = hub(0);
    let (sink, q, joined) = subscriber(&hub, 1, "1.1", 1 << 20);
    let seq = hub.publish(CH, &publish_data("", &event("1")));
    sink.push_own(&member("u1"));
    // A bridge whose position covers it (published before the join).
    let joined = Joined {
        last_seq: seq,
        ..joined
    };
    sink.go_live(joined);
    assert_eq!(frames(&q), [text(&member("u1"))]);
    assert_eq!(sink.gauge.pending(), counted(&q));
}

#[test]
fn a_cache_channel_replays_its_last_event_unless_a_newer_one_comes_next() {
    let hub = hub(1);
    hub.publish(CH, &publish_data("", &event("0")));
    let newest = |hub: &Hub| hub.held(CH).1.pop();
    // Sent: nothing newer waited; the own frame does not supersede it.
    let (sink, q, joined) = subscriber(&hub, 1, "1.1", 1 << 20);
    sink.push_own(&member("u1"));
    assert_eq!(sink.go_live_cached(joined, newest(&hub)), Replay::Sent);
    assert_eq!(frames(&q), [text(&event("0")), text(&member("u1"))]);
    assert_eq!(sink.gauge.pending(), counted(&q));
    // Superseded: the newest arrived during the join and comes next.
    let (sink, q, joined) = subscriber(&hub, 2, "2.2", 1 << 20);
    hub.publish(CH, &publish_data("", &event("1")));
    assert_eq!(
        sink.go_live_cached(joined, newest(&hub)),
        Replay::Superseded
    );
    assert_eq!(frames(&q), [text(&event("1"))], "once");
    // Sent: what waited is not handed over (at the join's position), so
    // it supersedes nothing.
    let (sink, q, joined) = subscriber(&hub, 3, "3.3", 1 << 20);
    let seq = hub.publish(CH, &publish_data("", &event("2")));
    let joined = Joined {
        last_seq: seq,
        ..joined
    };
    assert_eq!(sink.go_live_cached(joined, newest(&hub)), Replay::Sent);
    assert_eq!(frames(&q), [text(&event("2"))], "once");
    assert_eq!(sink.gauge.pending(), counted(&q));
    // Gone: ended meanwhile; nothing queued.
    let (sink, q, joined) = subscriber(&hub, 4, "4.4", 1 << 20);
    sink.end();
    assert_eq!(sink.go_live_cached(joined, newest(&hub)), Replay::Gone);
    assert!(frames(&q).is_empty());
}

#[test]
fn a_cache_channel_without_an_event_is_a_miss_even_with_own_frames_waiting() {
    let hub = hub(1);
    let (sink, q, joined) = subscriber(&hub, 1, "1.1", 1 << 20);
    sink.push_own(&member("u1"));
    assert_eq!(sink.go_live_cached(joined, None), Replay::Miss);
    assert_eq!(frames(&q), [text(&member("u1"))]);
}

#[test]
fn a_socket_is_left_out_by_its_own_id_only() {
    let longest = format!("{}.{}", u32::MAX, u64::MAX);
    let long = "9".repeat(40);
    let ids = ["", "1.2", "1.20", "12.0", &longest, &long[..32], &long];
    for me in ids {
        let own = OwnId::new(me.into());
        for ex in ids {
            assert_eq!(own.is(&kept_exclude(ex.as_bytes())), me == ex, "{me} {ex}");
        }
    }
    assert!(matches!(
        OwnId::new(longest.as_str().into()),
        OwnId::Packed(_)
    ));
    assert!(matches!(OwnId::new(long[..32].into()), OwnId::Long(_)));
}

#[test]
fn split_reads_what_publish_data_wrote() {
    let d = publish_data("1.2", r#"{"event":"e","channel":"c","data":"\"x\""}"#);
    let (ex, frame) = split(d.as_bytes()).unwrap();
    assert_eq!(ex, b"1.2");
    assert_eq!(frame, br#"{"event":"e","channel":"c","data":"\"x\""}"#);
    let d = publish_data("", "{}");
    assert_eq!(split(d.as_bytes()), Some((&b""[..], &b"{}"[..])));
    assert_eq!(split(b"{\"type\":1}"), None);
}
