//! Operator actions (§10) on open gRPC streams: every open `Subscribe` and
//! `PublishStream` is registered in [`Node::grpc_streams`] with its account
//! and peer address, so a ban or an account disconnect ends it as it closes
//! sockets (`admin::close_local` tells the stream through its handle).

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Status;

use super::service::BrokerService;
use super::status;
use crate::node::{Node, StreamHandle};

/// The reason an operator's action ends a stream with (`banned` /
/// `disconnected`), as `admin::close_local` sends it.
pub(super) type Kicks = mpsc::UnboundedReceiver<&'static str>;

/// A stream's caller, for bans and counts.
pub(super) struct Whose {
    pub account: String,
    pub ip: Option<IpAddr>,
}

/// Registers stream `conn` of `whose` with the node; its kicks arrive on the
/// receiver. The caller removes the entry when the stream ends.
pub(super) fn register(node: &Node, conn: u64, whose: &Whose) -> Kicks {
    let (end, kicks) = mpsc::unbounded_channel();
    node.grpc_streams.insert(
        conn,
        StreamHandle {
            account: Arc::from(whose.account.as_str()),
            ip: whose.ip,
            end,
        },
    );
    kicks
}

/// A stream's registration, removed when dropped (for a stream whose end
/// is its task's end).
pub(super) struct Registration {
    node: Arc<Node>,
    conn: u64,
}

impl Registration {
    pub(super) fn new(node: Arc<Node>, whose: &Whose) -> (Registration, Kicks) {
        let conn = node.next_conn();
        let kicks = register(&node, conn, whose);
        (Registration { node, conn }, kicks)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.node.grpc_streams.remove(&self.conn);
    }
}

/// The status an operator's action ends a stream with (§10): a ban is
/// `PERMISSION_DENIED` `banned` with its remaining time, as a new call of
/// the account would get; anything else is a disconnect (`ABORTED`).
/// Counted under `layer="grpc"` with the reason.
pub(super) fn end_status(svc: &BrokerService, whose: &Whose, reason: &'static str) -> Status {
    svc.count(reason, &whose.account, None);
    let ban = (reason == crate::cluster::BANNED)
        .then(|| svc.node.admin.bans.check(Some(&whose.account), whose.ip))
        .flatten();
    match ban {
        Some(ban) => status::banned(&ban),
        None => status::disconnected(),
    }
}
