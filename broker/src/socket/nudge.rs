//! A weak handle on the socket actor's mailbox, for the rare control
//! messages its outbox and transport send it.

use actix::{Message, WeakRecipient};

/// The socket actor's mailbox as its outbox and transport hold it: weak,
/// upgraded only to send one of the rare control messages (a drop
/// episode's start, a drain). A strong `Recipient` is an actix sender of
/// its own, with a parked-task cell and a flag allocated per sender (about
/// 100 bytes a socket each, kept for the connection's life); a weak one is
/// a pointer. The actor's life does not hang on these: its inbound stream
/// and heartbeat keep it running, and a message to an actor that stopped
/// is dropped either way.
pub struct Nudge<M>(WeakRecipient<M>)
where
    M: Message + Send,
    M::Result: Send;

impl<M> Nudge<M>
where
    M: Message + Send,
    M::Result: Send,
{
    pub fn new(to: impl Into<WeakRecipient<M>>) -> Nudge<M> {
        Nudge(to.into())
    }

    /// Sends `msg` if the actor is still there.
    pub fn do_send(&self, msg: M) {
        if let Some(to) = self.0.upgrade() {
            to.do_send(msg);
        }
    }
}

impl<M> Clone for Nudge<M>
where
    M: Message + Send,
    M::Result: Send,
{
    fn clone(&self) -> Self {
        Nudge(self.0.clone())
    }
}
