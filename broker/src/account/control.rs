//! What the rest of the broker tells a live connection, whatever its
//! front: close (an account breach, an operator, a drain, shedding) or take
//! new limits (a reload). The supervisor and the node hold connections as
//! a [`Control`] of these, never as a front's actor type, so neither knows
//! which fronts exist.

use std::sync::Arc;

use actix::dev::ToEnvelope;
use actix::{Actor, Handler, Message, WeakAddr};

use crate::config::Limits;
use crate::protocol::{CloseCode, ErrorCode};

/// Close a connection from outside (account breach, drain, shedding).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CloseWith {
    pub code: CloseCode,
    /// An error frame to send just before the close frame.
    pub notice: Option<ErrorCode>,
    /// The close frame's reason when not the code's own.
    pub reason: Option<&'static str>,
}

/// New limits for a connection (a config reload), applied without dropping
/// it: balances are kept, capacities and rates change.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Reconfigure {
    pub limits: Arc<Limits>,
}

/// A live connection as the node's socket map and its account's supervisor
/// hold it: one shared, weak handle to the connection's actor, upgraded for
/// the rare message. Each strong actix `Recipient` is a sender of its own
/// (a parked-task cell and a flag allocated per sender, about 110 bytes);
/// a socket paid three for the life of the connection, where this is one
/// allocation of 32 bytes shared by both holders (issue 42). The actor's
/// life does not hang on it: its inbound stream and heartbeat keep it
/// running, it leaves the map and the supervisor as it stops, and a
/// message to an actor that is gone is dropped either way.
#[derive(Clone)]
pub struct Control(Arc<dyn Controlled>);

impl Control {
    pub fn new<A>(to: WeakAddr<A>) -> Control
    where
        A: Actor + Handler<CloseWith> + Handler<Reconfigure>,
        A::Context: ToEnvelope<A, CloseWith> + ToEnvelope<A, Reconfigure>,
    {
        Control(Arc::new(to))
    }

    /// Sends `msg` if the connection is still there.
    pub fn close(&self, msg: CloseWith) {
        self.0.close(msg);
    }

    /// Sends `msg` if the connection is still there.
    pub fn reconfigure(&self, msg: Reconfigure) {
        self.0.reconfigure(msg);
    }
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

/// What [`Control`] reaches: an actor of any front that takes both.
trait Controlled: Send + Sync {
    fn close(&self, msg: CloseWith);
    fn reconfigure(&self, msg: Reconfigure);
}

impl<A> Controlled for WeakAddr<A>
where
    A: Actor + Handler<CloseWith> + Handler<Reconfigure>,
    A::Context: ToEnvelope<A, CloseWith> + ToEnvelope<A, Reconfigure>,
{
    fn close(&self, msg: CloseWith) {
        if let Some(to) = self.upgrade() {
            to.do_send(msg);
        }
    }

    fn reconfigure(&self, msg: Reconfigure) {
        if let Some(to) = self.upgrade() {
            to.do_send(msg);
        }
    }
}
