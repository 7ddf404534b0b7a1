//! `PublishStream`: each request is priced and charged as it arrives and
//! gets exactly one reply, in order. A refusal of one message is its reply
//! (`PublishReply.error`) and the stream goes on; an empty budget ends the
//! stream with `RESOURCE_EXHAUSTED` after every earlier reply.
//!
//! Memory stays bounded for a client that sends faster than it reads its
//! replies: replies wait in a queue of `grpc.reply_buffer`, and while it is
//! full the next request is not read, so HTTP/2 flow control stops the
//! sender instead of the broker buffering its stream.
//!
//! An operator's ban of the key's account or of the peer's address ends
//! the stream with `PERMISSION_DENIED` `banned`, a disconnect of the
//! account with `ABORTED` `disconnected` (§10), after every earlier reply:
//! the stream is registered with the node like a `Subscribe`.

use std::net::IpAddr;
use std::pin::pin;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::drain::drained;
use super::operator::{Registration, Whose};
use super::proto::{PublishReply, PublishRequest, Refusal as WireRefusal};
use super::service::{BrokerService, Caller};
use super::status;
use crate::charge::Balance;

/// The replies of one `PublishStream`, as tonic sends them.
pub type Replies = ReceiverStream<Result<PublishReply, Status>>;

/// Starts serving one stream on the gRPC runtime.
pub fn start(
    svc: BrokerService,
    caller: Caller,
    ip: Option<IpAddr>,
    inbound: Streaming<PublishRequest>,
) -> Replies {
    let (tx, rx) = mpsc::channel(svc.node.config.load().grpc.reply_buffer);
    let whose = Whose {
        account: caller.key.account.clone(),
        ip,
    };
    // Registered before the call returns, so an operator's action taken
    // from now on ends it.
    let (registration, kicks) = Registration::new(svc.node.clone(), &whose);
    tokio::spawn(run(svc, caller, (whose, registration, kicks), inbound, tx));
    ReceiverStream::new(rx)
}

/// What the stream has spent: the units and the last balance seen.
#[derive(Default)]
struct Spent {
    units: u64,
    last: Option<Balance>,
}

async fn run(
    svc: BrokerService,
    caller: Caller,
    (whose, registration, mut kicks): (Whose, Registration, super::operator::Kicks),
    mut inbound: Streaming<PublishRequest>,
    tx: mpsc::Sender<Result<PublishReply, Status>>,
) {
    let _open = svc.open_stream();
    let mut spent = Spent::default();
    let mut drain = pin!(drained(svc.drain.clone()));
    let end = loop {
        let next = tokio::select! {
            biased;
            () = &mut drain => break draining(&svc, &caller, &spent).await,
            Some(reason) = kicks.recv() => {
                let mut s = super::operator::end_status(&svc, &whose, reason);
                let balance = balance(&svc, &caller, &spent).await;
                status::balance(s.metadata_mut(), &balance, spent.units);
                break s;
            }
            next = inbound.message() => next,
        };
        let msg = match next {
            Ok(Some(msg)) => msg,
            Ok(None) => break finished(&svc, &caller, &spent).await,
            // The client cancelled or sent what tonic could not decode
            // (e.g. past grpc.max_message_bytes): its status ends the call.
            Err(s) => {
                svc.count("bad_request", &caller.key.account, None);
                // Past grpc.max_message_bytes tonic says OUT_OF_RANGE; §8
                // says INVALID_ARGUMENT for anything too large.
                let mut s = if s.code() == tonic::Code::OutOfRange {
                    Status::invalid_argument(s.message().to_owned())
                } else {
                    s
                };
                let balance = balance(&svc, &caller, &spent).await;
                status::balance(s.metadata_mut(), &balance, spent.units);
                break s;
            }
        };
        let reply = match svc.price(&caller, &msg) {
            Err(r) => {
                svc.count(r.code.as_str(), &caller.key.account, Some(&msg.channel));
                match svc.charge_refused(&caller, r.code).await {
                    Ok(units) => spent.units += u64::from(units),
                    Err(refused) => break status::rate_limited(&refused, spent.units),
                }
                PublishReply {
                    id: msg.id,
                    seq: 0,
                    error: Some(WireRefusal {
                        code: r.code.as_str().into(),
                        message: r.message,
                        retry_after_ms: 0,
                    }),
                    duplicate: false,
                }
            }
            Ok(cost) => {
                let admitted = match svc.charge_publish(&caller, cost, &msg.channel).await {
                    Ok(a) => a,
                    Err(refused) => break status::rate_limited(&refused, spent.units),
                };
                let (published, cost, balance) = svc
                    .publish_message(&caller, &msg, cost, admitted.balance)
                    .await;
                spent.units += u64::from(cost);
                spent.last = balance;
                PublishReply {
                    id: msg.id,
                    seq: published.seq,
                    error: None,
                    duplicate: published.duplicate,
                }
            }
        };
        if tx.send(Ok(reply)).await.is_err() {
            // The client is gone: nobody to tell.
            return;
        }
    };
    // Unregistered before the end goes out: a client that sees it finds
    // the node no longer counting its stream.
    drop(registration);
    let _ = tx.send(Err(end)).await;
}

/// The key's balance for the trailers: the last charge, or a read of the
/// bucket (a charge of 0) when nothing was charged.
async fn balance(svc: &BrokerService, caller: &Caller, spent: &Spent) -> Balance {
    match spent.last {
        Some(c) => c,
        None => svc.balance(caller).await,
    }
}

async fn finished(svc: &BrokerService, caller: &Caller, spent: &Spent) -> Status {
    let balance = balance(svc, caller, spent).await;
    status::finished(Some(&balance), spent.units)
}

async fn draining(svc: &BrokerService, caller: &Caller, spent: &Spent) -> Status {
    let balance = balance(svc, caller, spent).await;
    let mut s = status::draining();
    status::balance(s.metadata_mut(), &balance, spent.units);
    s
}
