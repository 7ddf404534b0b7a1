//! A client's connection as a socket: a WebSocket (`tidegate.v1`, or a
//! dialect's protocol over the same machinery) or an SSE stream (`sse/`).
//!
//! The handshake (`handshake.rs`, `handshake/`) admits the connection and
//! starts its actor, [`Socket`] (`actor/`), which owns everything the
//! connection holds, and whose lifecycle is the connection's. Beside the
//! actor are the parts it drives, each a module of its own: the bytes
//! read and the gate that can stop reading them (`inbound.rs`), the
//! outbound queue the hub writes into (`outbox/`), the transport that
//! writes it to the kernel (`transport.rs`), the SSE request and writer
//! (`sse/`), and the weak mailbox handle they wake the actor with
//! (`nudge.rs`). Each of them sees the others only through what is marked
//! `pub(in crate::socket)`.

mod actor;
pub mod handshake;
pub(crate) mod inbound;
mod nudge;
mod outbox;
pub mod sse;
mod transport;

use std::sync::Arc;

pub use crate::charge::{Admission, Shadow, Verdict};
pub use actor::{Socket, welcome_limits};
pub use nudge::Nudge;
pub use outbox::{Congested, Drained};
pub use transport::Transport;

use crate::account::AccountSlot;
pub use crate::account::{CloseWith, Reconfigure};
use crate::auth::Grants;
use crate::gate::IpSlot;
use crate::hooks::Client;

/// Who is on the other end, as established by the handshake.
#[derive(Debug, Clone)]
pub struct Identity {
    pub conn: u64,
    /// `node-hex`, as shown to the client.
    pub label: Arc<str>,
    pub account: Arc<str>,
    /// The client address the handshake saw (after trusted proxies).
    pub ip: std::net::IpAddr,
    pub role: Option<String>,
    pub plan: Option<String>,
    pub grants: Grants,
    /// The token's `exp`, unix ms (`welcome.tokenExpiresAt`).
    pub token_expires_at: u64,
    /// When the socket is closed with 4001 unless refreshed first: the
    /// token's `exp` plus `auth.leeway_secs`, unix seconds.
    pub deadline: u64,
    /// The token's `info` claim (compact JSON), shown by presence (§13).
    pub info: Option<Arc<str>>,
    /// A connect hook's server-side `channels` (§15), joined at the start
    /// and listed in `welcome`.
    pub server_channels: Vec<Arc<str>>,
    /// `Some`: the expiry is a hook's (§15), which gave this much life (ms)
    /// last; the refresh hook extends it.
    pub hook_life_ms: Option<u64>,
}

/// Places this socket holds in node-wide counts; dropping them (with the
/// actor) gives them back.
#[derive(Debug, Default)]
pub struct Slots {
    pub ip: Option<IpSlot>,
    pub account: Option<AccountSlot>,
}

impl Identity {
    /// What the hooks are told of a connection of this identity.
    pub(crate) fn hook_client(&self, transport: &'static str) -> Client {
        Client {
            conn_id: self.label.clone(),
            ip: self.ip,
            transport,
            sub: Some(self.account.clone()),
            plan: self.plan.clone(),
            info: self.info.clone(),
        }
    }
}
