//! What the rest of the broker tells a live connection, whatever its
//! front: close (an account breach, an operator, a drain, shedding) or take
//! new limits (a reload). The supervisor and the node hold connections as
//! `Recipient`s of these, never as a front's actor type, so neither knows
//! which fronts exist.

use std::sync::Arc;

use actix::Message;

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
