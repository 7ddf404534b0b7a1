//! A `messages` subscription's recovered history (`since`), paid for and
//! then delivered like a `/v1/ws` socket's: `costs.recovery_per_kib` per
//! started KiB, charged to the caller's payer (the API key's bucket or the
//! account's budget) once the backlog is known and before any of it is
//! queued, as gRPC `Subscribe` does; then queued in slices under the
//! socket's mark by the socket's own recovery ([`super::sink::OpSink::joined`], the
//! dialect's `Outlet::recover`), so a reader that stops holds the broker
//! to its mark and runs the slow-consumer grace.

use std::any::Any;

use super::{GraphqlWs, Op, error_payload};
use crate::graphql::admission::{retry_ms, retry_secs};
use crate::graphql::charge::Taken;
use crate::hub::Joined;
use crate::node::dialect::Link;

/// A subscription's recovered history was charged.
pub(super) struct Paid {
    id: String,
    conn: u64,
    joined: Joined,
    units: u64,
    taken: Taken,
}

impl GraphqlWs {
    /// Subscription `id` (hub subscriber `conn`) joined. Its recovered
    /// history is paid for before any of it is queued, as on gRPC:
    /// `costs.recovery_per_kib` per started KiB (as on `/v1/ws`), to the
    /// caller's payer; then it is queued in slices under the mark
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
        let units = u64::from(crate::pricing::recovery(&caller.limits.costs, bytes));
        let node = self.node.clone();
        link.spawn(Box::pin(async move {
            let taken = crate::graphql::charge::charge(&node, &caller, units).await;
            Box::new(Paid {
                id,
                conn,
                joined,
                units,
                taken,
            }) as Box<dyn Any>
        }));
    }

    /// The recovery's charge answered: deliver, or end the subscription
    /// with `RATE_LIMITED` (nothing of it was queued).
    pub(super) fn paid(&mut self, link: &mut dyn Link, p: Paid) {
        let Some(Op::Live(sink)) = self.ops.get(&p.id) else {
            return;
        };
        if sink.conn != p.conn {
            return;
        }
        if p.taken.allowed || p.taken.shadowed {
            return sink.clone().joined(p.joined);
        }
        let sink = sink.clone();
        sink.end();
        self.node.bridge.unsubscribe(&sink.channel, sink.conn);
        let wait = p.taken.retry_after;
        let e = error_payload(
            "RATE_LIMITED",
            "rate limit exceeded: the history this subscription recovers costs more than the budget holds",
            serde_json::json!({"cost": p.units, "remaining": p.taken.balance.remaining,
                "retryAfter": retry_secs(wait), "retryAfterMs": retry_ms(wait)}),
        );
        self.send_error(link, &p.id, &e);
    }
}
