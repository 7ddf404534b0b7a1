//! The subscription machine without a front: messages and pages in,
//! decisions out.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;

use super::*;
use crate::hub::{Joined, OutboundGauge, Page, PageRead, Pages, Recovery, Reserve};

fn frame(seq: u64) -> Bytes {
    Bytes::from(format!("m{seq}"))
}

/// Frame `n` of the front's own (no `seq`).
fn own(n: u64) -> Bytes {
    Bytes::from(format!("own{n}"))
}

fn joined(backlog: Recovery, last_seq: u64) -> Joined {
    Joined {
        recovered: Some(true),
        backlog,
        last_seq,
    }
}

/// Pumps with unlimited room until done; what the front would queue.
fn pump_all(sub: &mut Subscription) -> Vec<(char, u64)> {
    let mut out = Vec::new();
    loop {
        match sub.pump(&mut |_| true) {
            Next::Recovered { seq, .. } => {
                sub.queued(seq);
                out.push(('r', seq));
            }
            Next::Live(h) => {
                sub.queued(h.seq);
                out.push(('l', h.seq));
            }
            Next::Release(h) => out.push(('x', h.seq)),
            Next::Own(f) => out.push(('o', std::str::from_utf8(&f[3..]).unwrap().parse().unwrap())),
            Next::Stalled | Next::Page => panic!("room is unlimited and nothing is paged"),
            Next::Done => return out,
        }
    }
}

#[test]
fn held_while_joining_then_each_seq_once_in_order() {
    let mut sub = Subscription::new(OnLoss::Continue);
    assert_eq!(sub.phase(), Phase::Joining);
    for seq in [5, 6] {
        assert_eq!(sub.offer(seq, &frame(seq), None), Offer::Held);
    }
    assert_eq!(sub.waiting(), 4);
    let backlog: Recovery = vec![(4, frame(4)), (5, frame(5))].into();
    assert_eq!(sub.joined(joined(backlog, 4)), Joining::Recovering);
    assert_eq!(sub.phase(), Phase::Recovering);
    // 5 is recovered and held: it goes out once, as history.
    assert_eq!(pump_all(&mut sub), [('r', 4), ('r', 5), ('x', 5), ('l', 6)]);
    assert_eq!(sub.phase(), Phase::Live);
    assert_eq!(sub.waiting(), 0, "every held byte was handed back");
    assert_eq!(sub.offer(6, &frame(6), None), Offer::Release);
    assert_eq!(sub.offer(7, &frame(7), None), Offer::Deliver);
    assert_eq!(sub.joined(Joined::default()), Joining::Ignored);
}

#[test]
fn a_backlog_moves_only_while_there_is_room_and_live_waits_behind_it() {
    let mut sub = Subscription::new(OnLoss::Continue);
    let backlog: Recovery = (1..=3).map(|s| (s, frame(s))).collect::<Vec<_>>().into();
    assert_eq!(sub.joined(joined(backlog, 3)), Joining::Recovering);
    assert_eq!(
        sub.offer(3, &frame(3), None),
        Offer::Release,
        "not above the position"
    );
    assert_eq!(sub.offer(4, &frame(4), None), Offer::Held);
    let mut asked = Vec::new();
    let mut room = |waiting: usize| {
        asked.push(waiting);
        false
    };
    assert!(matches!(sub.pump(&mut room), Next::Stalled));
    assert_eq!(asked, [2], "held bytes are left out of the room");
    assert!(matches!(
        sub.pump(&mut |_| true),
        Next::Recovered {
            seq: 1,
            paged: false,
            ..
        }
    ));
    assert_eq!(pump_all(&mut sub), [('r', 2), ('r', 3), ('l', 4)]);
    assert_eq!(sub.phase(), Phase::Live);
}

#[test]
fn no_backlog_goes_live_at_once_after_the_held_messages() {
    let mut sub = Subscription::new(OnLoss::Continue);
    assert_eq!(sub.offer(9, &frame(9), None), Offer::Held);
    assert_eq!(sub.offer(11, &frame(11), None), Offer::Held);
    assert_eq!(sub.joined(joined(Recovery::default(), 10)), Joining::Live);
    // A message arriving before the held ones are pumped waits behind them.
    assert_eq!(sub.offer(12, &frame(12), None), Offer::Held);
    assert_eq!(pump_all(&mut sub), [('x', 9), ('l', 11), ('l', 12)]);
    assert_eq!(sub.offer(13, &frame(13), None), Offer::Deliver);
    assert_eq!(sub.report().last_seq, 12);
}

/// A Pusher presence member event: the client must get it after the
/// join's answer and in order with the channel's messages.
#[test]
fn own_frames_keep_their_place_among_the_held_messages() {
    let mut sub = Subscription::new(OnLoss::Continue);
    assert_eq!(sub.offer(11, &frame(11), None), Offer::Held);
    assert_eq!(sub.hold_own(&own(1)), Offer::Held);
    assert_eq!(sub.offer(12, &frame(12), None), Offer::Held);
    assert_eq!(sub.waiting(), 3 + 4 + 3, "own frames count as held");
    assert_eq!(sub.joined(joined(Recovery::default(), 11)), Joining::Live);
    // Not pumped yet: one more waits behind what is being handed over.
    assert_eq!(sub.hold_own(&own(2)), Offer::Held);
    assert_eq!(
        pump_all(&mut sub),
        [('x', 11), ('o', 1), ('l', 12), ('o', 2)],
        "never deduplicated by the position, in arrival order"
    );
    assert_eq!(sub.waiting(), 0);
    assert!(!sub.is_boxed(), "live with nothing held");
    assert_eq!(sub.hold_own(&own(3)), Offer::Deliver);
    assert!(!sub.is_boxed(), "an own frame boxes nothing");
    assert_eq!(sub.offer(13, &frame(13), None), Offer::Deliver);
}

#[test]
fn own_frames_wait_behind_a_backlog_and_an_end_hands_them_back() {
    let mut sub = Subscription::new(OnLoss::Continue);
    assert_eq!(sub.offer(11, &frame(11), None), Offer::Held);
    assert_eq!(sub.hold_own(&own(1)), Offer::Held);
    let backlog: Recovery = vec![(10, frame(10))].into();
    assert_eq!(sub.joined(joined(backlog, 10)), Joining::Recovering);
    assert_eq!(sub.hold_own(&own(2)), Offer::Held);
    assert_eq!(
        pump_all(&mut sub),
        [('r', 10), ('l', 11), ('o', 1), ('o', 2)]
    );

    let mut ends = Subscription::new(OnLoss::Continue);
    ends.offer(11, &frame(11), None);
    ends.hold_own(&own(1));
    let left = ends.end();
    assert_eq!((left.was, left.held), (Phase::Joining, 3 + 4));
    assert_eq!(ends.hold_own(&own(2)), Offer::Release);
    assert_eq!(ends.waiting(), 0);
}

#[test]
fn a_breaking_front_holds_no_own_frame_past_its_loss() {
    let mut sub = Subscription::new(OnLoss::Break);
    sub.offer(11, &frame(11), None);
    assert_eq!(sub.hold_own(&own(1)), Offer::Held);
    sub.lost(12);
    assert_eq!(sub.hold_own(&own(2)), Offer::Release, "after the loss");
    sub.joined(joined(Recovery::default(), 10));
    assert_eq!(pump_all(&mut sub), [('l', 11), ('o', 1)]);
    assert_eq!(sub.phase(), Phase::Broken);
    assert_eq!(sub.hold_own(&own(3)), Offer::Release);
    assert_eq!(sub.waiting(), 0);
}

#[test]
fn a_loss_goes_on_or_breaks_as_the_front_says() {
    let mut goes_on = Subscription::new(OnLoss::Continue);
    goes_on.joined(joined(Recovery::default(), 10));
    goes_on.lost(11);
    goes_on.refused(12);
    assert_eq!(goes_on.offer(13, &frame(13), None), Offer::Deliver);
    assert!(!goes_on.is_broken());

    let mut breaks = Subscription::new(OnLoss::Break);
    breaks.joined(joined(Recovery::default(), 10));
    assert_eq!(breaks.offer(11, &frame(11), None), Offer::Deliver);
    breaks.queued(11);
    breaks.lost(11); // handled already: no loss
    assert_eq!(breaks.phase(), Phase::Live);
    breaks.lost(12);
    assert_eq!(breaks.phase(), Phase::Broken);
    assert_eq!(breaks.offer(13, &frame(13), None), Offer::Release);
    breaks.lost(14);
    assert_eq!(breaks.offer(14, &frame(14), None), Offer::Release);
    assert_eq!(
        breaks.report(),
        Report {
            dropped: 3,
            last_seq: 11
        }
    );
}

#[test]
fn a_loss_while_joining_keeps_what_came_before_it() {
    let mut sub = Subscription::new(OnLoss::Break);
    sub.offer(11, &frame(11), None);
    sub.lost(12);
    sub.offer(13, &frame(13), None);
    assert!(sub.is_broken());
    assert_eq!(sub.joined(joined(Recovery::default(), 10)), Joining::Live);
    assert_eq!(pump_all(&mut sub), [('l', 11), ('x', 13)]);
    assert_eq!(sub.phase(), Phase::Broken);
    assert_eq!(
        sub.report(),
        Report {
            dropped: 2,
            last_seq: 11
        }
    );
}

#[test]
fn a_refused_delivery_breaks_and_what_is_held_after_it_is_lost() {
    let mut sub = Subscription::new(OnLoss::Break);
    sub.offer(11, &frame(11), None);
    sub.offer(12, &frame(12), None);
    sub.joined(joined(Recovery::default(), 10));
    let Next::Live(h) = sub.pump(&mut |_| true) else {
        panic!("11 is handed over");
    };
    sub.refused(h.seq);
    assert_eq!(pump_all(&mut sub), [('x', 12)]);
    assert_eq!(sub.phase(), Phase::Broken);
    assert_eq!(sub.report().dropped, 2);
}

#[test]
fn ending_hands_back_what_it_held() {
    let mut sub = Subscription::new(OnLoss::Break);
    sub.offer(11, &frame(11), None);
    let left = sub.end();
    assert_eq!((left.was, left.held, left.paged), (Phase::Joining, 3, 0));
    assert_eq!(sub.phase(), Phase::Ended);
    assert_eq!(sub.offer(12, &frame(12), None), Offer::Release);
    sub.lost(13);
    assert_eq!(sub.report().dropped, 0);
    assert!(matches!(sub.pump(&mut |_| true), Next::Done));
}

/// A history in memory read as a cluster's is, of which `trim` messages
/// are gone before the next page is read.
struct List(Mutex<Vec<(u64, Bytes)>>);

impl Pages for List {
    fn page(&self, after: u64, until: u64, _budget: usize) -> PageRead {
        let held: Vec<(u64, Bytes)> = self
            .0
            .lock()
            .iter()
            .filter(|(seq, _)| *seq > after && *seq <= until)
            .cloned()
            .collect();
        let page = Page {
            held: held.len() as u64,
            frames: held.into_iter().take(2).collect(),
        };
        Box::pin(async move { Some(page) })
    }
}

fn read_page(sub: &mut Subscription, source: &Arc<dyn Pages>) -> Filled {
    assert!(sub.wants_page());
    let mut read = sub.next_page(100).expect("a page to read");
    let Poll::Ready(page) = read.as_mut().poll(&mut Context::from_waker(Waker::noop())) else {
        panic!("the list answers at once");
    };
    sub.filled(source, page)
}

fn paged(on_loss: OnLoss) -> (Subscription, Arc<List>, Arc<dyn Pages>) {
    let list = Arc::new(List(Mutex::new((11..=16).map(|s| (s, frame(s))).collect())));
    let source: Arc<dyn Pages> = list.clone();
    let mut sub = Subscription::new(on_loss);
    let backlog = Recovery::paged(source.clone(), 10, 16, 6, 18);
    assert_eq!(sub.joined(joined(backlog, 16)), Joining::Recovering);
    (sub, list, source)
}

#[test]
fn pages_wait_in_the_subscription_and_a_trimmed_one_is_reported_and_goes_on() {
    let (mut sub, list, source) = paged(OnLoss::Continue);
    assert_eq!(sub.report().last_seq, 10, "the client holds up to since");
    assert!(matches!(sub.pump(&mut |_| true), Next::Page));
    assert_eq!(read_page(&mut sub, &source).bytes, 6);
    assert_eq!(sub.waiting(), 6);
    assert!(matches!(
        sub.pump(&mut |_| true),
        Next::Recovered {
            seq: 11,
            paged: true,
            ..
        }
    ));
    assert!(matches!(
        sub.pump(&mut |_| true),
        Next::Recovered { seq: 12, .. }
    ));
    assert_eq!(sub.waiting(), 0);
    list.0.lock().retain(|(seq, _)| *seq > 14);
    assert!(matches!(sub.pump(&mut |_| true), Next::Page));
    let filled = read_page(&mut sub, &source);
    assert_eq!((filled.lost, filled.released), (2, 0));
    assert_eq!(pump_all(&mut sub), [('r', 15), ('r', 16)]);
    assert_eq!(sub.phase(), Phase::Live);
    assert_eq!(sub.report().dropped, 0, "the gauge counts a going-on loss");
}

#[test]
fn a_trimmed_page_breaks_where_the_client_history_stops() {
    let (mut sub, list, source) = paged(OnLoss::Break);
    sub.offer(17, &frame(17), None);
    assert!(matches!(sub.pump(&mut |_| true), Next::Page));
    read_page(&mut sub, &source);
    assert_eq!(pump_all_until_page(&mut sub), [11, 12]);
    list.0.lock().retain(|(seq, _)| *seq > 13);
    let filled = read_page(&mut sub, &source);
    assert_eq!((filled.lost, filled.bytes, filled.released), (1, 6, 6));
    assert_eq!(pump_all(&mut sub), [('x', 17)]);
    assert_eq!(sub.phase(), Phase::Broken);
    assert_eq!(
        sub.report(),
        Report {
            dropped: 2,
            last_seq: 12
        }
    );
}

fn pump_all_until_page(sub: &mut Subscription) -> Vec<u64> {
    let mut out = Vec::new();
    while let Next::Recovered { seq, .. } = sub.pump(&mut |_| true) {
        sub.queued(seq);
        out.push(seq);
    }
    out
}

#[test]
fn an_episode_begins_at_the_first_drop_and_ends_under_the_mark_with_its_count() {
    let gauge = OutboundGauge::new(10);
    assert_eq!(Episode::end(&gauge), None);
    assert_eq!(gauge.try_reserve(10), Reserve::Queued);
    assert!(Episode::begins(gauge.try_reserve(1)));
    assert!(!Episode::begins(gauge.try_reserve(1)));
    assert_eq!(Episode::end(&gauge), None, "still at the mark");
    gauge.release(1);
    assert_eq!(Episode::end(&gauge), Some(2));
    assert_eq!(Episode::end(&gauge), None, "reported once");
}

#[test]
fn a_loss_while_held_messages_are_handed_over_keeps_those_before_it() {
    let mut sub = Subscription::new(OnLoss::Break);
    sub.offer(11, &frame(11), None);
    sub.offer(12, &frame(12), None);
    assert_eq!(sub.joined(joined(Recovery::default(), 10)), Joining::Live);
    // The front pumps later, not under the same lock as the join: a
    // message held meanwhile and a loss arrive first.
    assert_eq!(sub.offer(13, &frame(13), None), Offer::Held);
    sub.lost(14);
    assert_eq!(sub.offer(15, &frame(15), None), Offer::Held);
    assert_eq!(
        pump_all(&mut sub),
        [('l', 11), ('l', 12), ('l', 13), ('x', 15)]
    );
    assert_eq!(sub.phase(), Phase::Broken);
    assert_eq!(sub.waiting(), 0);
    assert_eq!(
        sub.report(),
        Report {
            dropped: 2,
            last_seq: 13
        }
    );
}

/// A socket keeps one subscription per channel in its map, whose every
/// entry is as large as the type: a live one is its position and its last
/// `seq` queued, and its machine is boxed only while it has something
/// rare to keep (issue 42: idle memory per subscribed socket).
#[test]
fn a_live_subscription_is_small_and_boxes_only_what_is_rare() {
    assert!(std::mem::size_of::<Subscription>() <= 24);
    let mut sub = Subscription::new(OnLoss::Continue);
    assert!(sub.is_boxed(), "joining");
    assert_eq!(sub.offer(11, &frame(11), None), Offer::Held);
    let backlog: Recovery = vec![(10, frame(10))].into();
    assert_eq!(sub.joined(joined(backlog, 10)), Joining::Recovering);
    assert_eq!(sub.live_at(), None, "recovering");
    assert_eq!(pump_all(&mut sub), [('r', 10), ('l', 11)]);
    assert!(!sub.is_boxed(), "live with nothing held");
    assert_eq!(sub.live_at(), Some(11));
    assert_eq!(sub.offer(11, &frame(11), None), Offer::Release);
    assert_eq!(sub.offer(12, &frame(12), None), Offer::Deliver);
    sub.queued(12);
    sub.lost(13);
    assert!(!sub.is_boxed(), "a loss that goes on keeps nothing");
    assert_eq!(
        sub.report(),
        Report {
            dropped: 0,
            last_seq: 12
        }
    );

    // One that breaks is boxed again at its loss, and reports it.
    let mut breaks = Subscription::new(OnLoss::Break);
    breaks.joined(joined(Recovery::default(), 10));
    assert!(!breaks.is_boxed());
    breaks.lost(10);
    assert!(!breaks.is_boxed(), "handled already: no loss");
    breaks.lost(11);
    assert!(breaks.is_boxed());
    assert_eq!(breaks.phase(), Phase::Broken);
    assert_eq!(
        breaks.report(),
        Report {
            dropped: 1,
            last_seq: 10
        }
    );
    assert_eq!(breaks.end().was, Phase::Broken);
    assert_eq!(breaks.offer(12, &frame(12), None), Offer::Release);
}
