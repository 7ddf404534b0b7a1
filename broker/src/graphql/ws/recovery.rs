//! A `messages` subscription's recovered history (`since`), paid for and
//! then delivered like a `/v1/ws` socket's: recovery's one meaning
//! ([`crate::charge::recovery`]), `costs.recovery_per_kib` per started
//! KiB, owed by the caller's payer (the API key's bucket or the account's
//! budget) once the backlog is known and before any of it is queued, never
//! refused (issue 42: it was refused with `RATE_LIMITED` here, owed on a
//! socket); then queued in slices under the socket's mark by the socket's
//! own recovery ([`super::sink::OpSink::joined`], the dialect's
//! `Outlet::recover`), so a reader that stops holds the broker to its mark
//! and runs the slow-consumer grace.

use std::any::Any;

use super::{GraphqlWs, Op};
use crate::dialect::Link;
use crate::hub::Joined;

/// A subscription's recovered history was charged.
pub(super) struct Paid {
    id: String,
    conn: u64,
    joined: Joined,
}

impl GraphqlWs {
    /// Subscription `id` (hub subscriber `conn`) joined. Its recovered
    /// history is owed by the caller's payer before any of it is queued;
    /// then it is queued in slices under the mark
    /// ([`super::sink::OpSink::joined`]).
    pub(super) fn joined(&mut self, link: &mut dyn Link, id: String, conn: u64, joined: Joined) {
        let Some(Op::Live(sink)) = self.ops.get(&id) else {
            return;
        };
        if sink.conn != conn {
            return;
        }
        let bytes = joined.backlog.bytes();
        let caller = match &self.caller {
            Some(c) if bytes > 0 && c.limits.costs.recovery_per_kib > 0 => c.clone(),
            _ => return sink.clone().joined(joined),
        };
        let node = self.node.clone();
        link.spawn(Box::pin(async move {
            crate::graphql::charge::recovery(&node, &caller, bytes).await;
            Box::new(Paid { id, conn, joined }) as Box<dyn Any>
        }));
    }

    /// The recovery is paid for: deliver it, unless the subscription ended
    /// meanwhile.
    pub(super) fn paid(&mut self, _link: &mut dyn Link, p: Paid) {
        let Some(Op::Live(sink)) = self.ops.get(&p.id) else {
            return;
        };
        if sink.conn != p.conn {
            return;
        }
        sink.clone().joined(p.joined);
    }
}
