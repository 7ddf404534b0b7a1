//! A `presence` subscription (§12, §13): an observer of the channel's
//! presence windows ([`crate::presence::Presence::watch`]) whose sink
//! renders each window into the subscription's `next` message
//! ([`PresenceShape`]) and queues it in the socket's outbox, counted in
//! the socket's gauge like everything the socket sends.
//!
//! - First `next`: the members as they stand, as `joins` (with the
//!   charge's `extensions.rateLimit`, as a `messages` subscription's first
//!   `next` has it).
//! - Then one `next` per window, coalesced per `diff_ms` exactly as the
//!   members' sockets get their `presence_diff`.
//! - Above `join_leave_max_members`, where a socket gets a
//!   `presence_stats` frame (at most once a second, and once settled),
//!   the subscription gets a `next` whose `joins` and `leaves` are empty
//!   and whose `extensions.presenceStats` holds `{users, connections}`:
//!   `PresenceDiff` has no field for counts, and GraphQL leaves
//!   `extensions` to the server. The member list is not kept meanwhile;
//!   a client re-reads `channel { presence }` once the diffs resume.
//! - A window the socket's mark refused breaks the subscription: nothing
//!   newer is queued, and once the socket drains it ends with
//!   `SLOW_CONSUMER` (`dropped`), so the client subscribes again and gets
//!   the members as they stand.

use std::any::Any;
use std::sync::Arc;

use async_graphql_value::Variables;
use bytes::Bytes;
use parking_lot::Mutex;

use super::shape::PresenceShape;
use super::{GraphqlWs, Op};
use crate::config::PresenceRule;
use crate::dialect::{Link, Outlet};
use crate::graphql::operation::Ran;
use crate::hub::Reserve;
use crate::presence::{Pending, PresenceSink, Update};
use crate::protocol::wire;

struct State {
    ended: bool,
    /// Windows lost to the socket's mark (0: none).
    dropped: u64,
    /// `extensions` for the first `next` (the charge).
    first: Option<String>,
}

pub struct PresenceOp {
    pub channel: Arc<str>,
    /// Its key among the channel's watchers (unique on the node).
    pub key: Arc<str>,
    shape: PresenceShape,
    outlet: Arc<dyn Outlet>,
    state: Mutex<State>,
}

impl PresenceOp {
    /// Whether a window was lost.
    pub fn broken(&self) -> bool {
        self.state.lock().dropped > 0
    }

    /// Ends it: nothing more is queued. The windows it lost.
    pub fn end(&self) -> u64 {
        let mut st = self.state.lock();
        st.ended = true;
        st.dropped
    }
}

impl PresenceSink for PresenceOp {
    fn send(&self, _frame: &Bytes, update: &Update<'_>) {
        let mut st = self.state.lock();
        if st.ended {
            return;
        }
        if st.dropped > 0 {
            st.dropped += 1;
            return;
        }
        let text = match update {
            Update::Diff { joins, leaves } => self.shape.render(st.first.as_deref(), joins, leaves),
            Update::Counts(c) => {
                let stats = format!(
                    r#""presenceStats":{{"users":{},"connections":{}}}"#,
                    c.users, c.connections
                );
                let x = match st.first.as_deref().and_then(|x| x.strip_suffix('}')) {
                    Some(rest) if rest.len() > 1 => format!("{rest},{stats}}}"),
                    _ => format!("{{{stats}}}"),
                };
                self.shape.render(Some(&x), &[], &[])
            }
        };
        let frame = wire::text(text.as_bytes());
        match self.outlet.gauge().try_reserve(frame.len()) {
            Reserve::Queued => {
                st.first = None;
                self.outlet.push_frame(frame);
            }
            Reserve::FirstDrop => {
                st.dropped += 1;
                self.outlet.congested();
            }
            Reserve::Dropped => st.dropped += 1,
        }
    }
}

/// A `presence` subscription's watch answered (in a cluster: the
/// channel's members read from Redis, the first `next` queued). Nothing
/// is left to do then.
pub(super) struct Watching;

impl GraphqlWs {
    /// A `presence` subscription that passed its charge and resolver:
    /// watching the channel's windows.
    pub(super) fn watch(
        &mut self,
        link: &mut dyn Link,
        id: String,
        (channel, rule): (&str, PresenceRule),
        ran: &Ran,
        (query, name, variables): (String, Option<String>, Variables),
    ) {
        let Ok(doc) = crate::graphql::documents::parse(&query) else {
            return self.send_error(link, &id, &ran.reply.errors_json());
        };
        let Some(op) = crate::graphql::pricing::operation(&doc, name.as_deref()) else {
            return self.send_error(link, &id, &ran.reply.errors_json());
        };
        let shape = PresenceShape::compile(&doc, &op.node, &variables, &id, channel);
        let key: Arc<str> = format!("\u{0}graphql-{}", self.node.next_conn()).into();
        let sink = Arc::new(PresenceOp {
            channel: channel.into(),
            key: key.clone(),
            shape,
            outlet: link.outlet(),
            state: Mutex::new(State {
                ended: false,
                dropped: 0,
                first: ran.reply.extensions_json(),
            }),
        });
        self.ops.insert(id, Op::Presence(sink.clone()));
        let watcher: Arc<dyn PresenceSink> = sink.clone();
        match self.node.presence.watch(channel, rule, key, watcher) {
            Pending::Ready(()) => {}
            Pending::Later(f) => {
                let presence = self.node.presence.clone();
                link.spawn(Box::pin(async move {
                    f.await;
                    // Completed or closed while Redis answered: its
                    // unwatch came before the watch.
                    if sink.state.lock().ended {
                        presence.unwatch(&sink.channel, &sink.key);
                    }
                    Box::new(Watching) as Box<dyn Any>
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;
    use serde_json::{Value, json};

    use super::*;
    use crate::hub::OutboundGauge;
    use crate::protocol::presence::{Counts, Member};

    /// An outbox that keeps what is pushed, with a gauge of `mark` bytes.
    struct Kept {
        gauge: OutboundGauge,
        frames: Mutex<Vec<Bytes>>,
        congested: Mutex<u32>,
    }

    impl Outlet for Kept {
        fn push(&self, parts: &mut [Bytes]) {
            self.frames
                .lock()
                .extend(parts.iter_mut().map(std::mem::take));
        }
        fn push_frame(&self, frame: Bytes) {
            self.frames.lock().push(frame);
        }
        fn push_keyed(&self, _: &Arc<str>, _: Arc<str>, frame: Bytes) -> bool {
            self.frames.lock().push(frame);
            true
        }
        fn gauge(&self) -> &OutboundGauge {
            &self.gauge
        }
        fn congested(&self) {
            *self.congested.lock() += 1;
        }
        fn recover(&self, backlog: Arc<dyn crate::dialect::Backlog>) {
            backlog.pump(&|_| true);
        }
        fn forget(&self, _: &Arc<dyn crate::dialect::Backlog>) {}
        fn page_room(&self, _: usize) -> Option<usize> {
            None
        }
        fn page_done(&self, _: usize) {}
        fn pump_backlogs(&self) {}
    }

    fn op(outlet: Arc<Kept>) -> PresenceOp {
        let q = r#"subscription { presence(channel: "note:1") { joins { connId } leaves { connId } } }"#;
        let doc = parse_query(q).unwrap();
        let (_, o) = doc.operations.iter().next().unwrap();
        PresenceOp {
            channel: "note:1".into(),
            key: "k".into(),
            shape: PresenceShape::compile(&doc, &o.node, &Variables::default(), "p", "note:1"),
            outlet,
            state: Mutex::new(State {
                ended: false,
                dropped: 0,
                first: Some(r#"{"rateLimit":{"cost":103}}"#.to_owned()),
            }),
        }
    }

    fn payload(frame: &Bytes) -> Value {
        serde_json::from_slice(wire::payload(frame)).unwrap()
    }

    #[test]
    fn the_first_next_carries_the_charge_and_counts_ride_in_extensions() {
        let out = Arc::new(Kept {
            gauge: OutboundGauge::new(1 << 20),
            frames: Mutex::new(Vec::new()),
            congested: Mutex::new(0),
        });
        let op = op(out.clone());
        let m = Member {
            user: "ann".into(),
            conn_id: "n1-1".into(),
            info: None,
        };
        let joins = [m];
        op.send(
            &Bytes::new(),
            &Update::Diff {
                joins: &joins,
                leaves: &[],
            },
        );
        let counts = Counts {
            users: 3,
            connections: 4,
        };
        op.send(&Bytes::new(), &Update::Counts(counts));
        let frames = out.frames.lock();
        let (a, b) = (payload(&frames[0]), payload(&frames[1]));
        assert_eq!(
            a["payload"]["extensions"],
            json!({"rateLimit":{"cost":103}})
        );
        assert_eq!(
            a["payload"]["data"]["presence"]["joins"],
            json!([{"connId":"n1-1"}])
        );
        assert_eq!(
            b["payload"],
            json!({"extensions":{"presenceStats":{"users":3,"connections":4}},
                   "data":{"presence":{"joins":[],"leaves":[]}}})
        );
    }

    #[test]
    fn a_window_past_the_mark_breaks_it_and_nothing_newer_is_queued() {
        let out = Arc::new(Kept {
            gauge: OutboundGauge::new(100),
            frames: Mutex::new(Vec::new()),
            congested: Mutex::new(0),
        });
        out.gauge.add(100);
        let op = op(out.clone());
        let diff = Update::Diff {
            joins: &[],
            leaves: &[],
        };
        op.send(&Bytes::new(), &diff);
        assert!(op.broken());
        assert_eq!(*out.congested.lock(), 1, "the first drop wakes the socket");
        // Back under the mark: still nothing, the client would miss a diff.
        out.gauge.release(100);
        op.send(&Bytes::new(), &diff);
        assert!(out.frames.lock().is_empty());
        assert_eq!(op.end(), 2);
        op.send(&Bytes::new(), &diff);
        assert!(out.frames.lock().is_empty(), "ended: nothing more");
    }
}
