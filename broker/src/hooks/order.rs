//! Hook answers applied in frame order per channel (§15): the calls of one
//! connection run concurrently, but a subscribe and the publishes after it on
//! the same channel take effect in the order the client sent them, however
//! the backend's answers arrive. Bounded by the frames in flight, each
//! already paid for and answered within its hook's `timeout_ms`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug)]
struct Lane<T> {
    issued: u64,
    applied: u64,
    /// Tickets up to this one were issued before an unsubscribe.
    cancelled_upto: u64,
    ready: BTreeMap<u64, T>,
}

#[derive(Debug)]
pub struct HookOrder<T> {
    lanes: HashMap<Arc<str>, Lane<T>>,
}

impl<T> Default for HookOrder<T> {
    fn default() -> Self {
        HookOrder {
            lanes: HashMap::new(),
        }
    }
}

impl<T> HookOrder<T> {
    /// A ticket for the next call on `channel`.
    pub fn issue(&mut self, channel: &str) -> u64 {
        let lane = self.lanes.entry(channel.into()).or_insert(Lane {
            issued: 0,
            applied: 0,
            cancelled_upto: 0,
            ready: BTreeMap::new(),
        });
        lane.issued += 1;
        lane.issued
    }

    /// The client unsubscribed `channel`: calls issued so far come back
    /// marked, so a subscribe asked before it does not happen after it.
    pub fn cancel(&mut self, channel: &str) {
        if let Some(lane) = self.lanes.get_mut(channel) {
            lane.cancelled_upto = lane.issued;
        }
    }

    /// The answer of `ticket` came: what can be applied now, in order,
    /// each with whether an unsubscribe came after it was asked.
    pub fn complete(&mut self, channel: &str, ticket: u64, item: T) -> Vec<(T, bool)> {
        let Some(lane) = self.lanes.get_mut(channel) else {
            return vec![(item, false)];
        };
        lane.ready.insert(ticket, item);
        let mut out = Vec::new();
        while let Some(item) = lane.ready.remove(&(lane.applied + 1)) {
            lane.applied += 1;
            out.push((item, lane.applied <= lane.cancelled_upto));
        }
        if lane.applied == lane.issued {
            self.lanes.remove(channel);
        }
        out
    }

    /// Calls still waiting for their turn or their answer.
    pub fn pending(&self) -> usize {
        self.lanes
            .values()
            .map(|l| (l.issued - l.applied) as usize)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_apply_in_ticket_order_per_channel() {
        let mut o = HookOrder::default();
        let a1 = o.issue("a");
        let a2 = o.issue("a");
        let b1 = o.issue("b");
        assert_eq!(o.pending(), 3);
        assert_eq!(o.complete("a", a2, "a2"), vec![], "waits for a1");
        assert_eq!(
            o.complete("b", b1, "b1"),
            vec![("b1", false)],
            "another channel is free"
        );
        o.cancel("a");
        let a3 = o.issue("a");
        assert_eq!(
            o.complete("a", a1, "a1"),
            vec![("a1", true), ("a2", true)],
            "asked before the unsubscribe"
        );
        assert_eq!(o.complete("a", a3, "a3"), vec![("a3", false)]);
        assert_eq!(o.pending(), 0);
    }
}
