//! The broker a scenario talks to: its kind, address and credentials, the
//! bench config Tidegate runs with (`config.rs`), and the protocol each
//! one speaks.

mod config;
mod conn;
mod frames;
mod graphql;
pub mod pusher;
pub mod sockudo;
mod sse;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tidegate::auth::{Authenticator, Claims, unix_now};
use tidegate::config::Config;

pub use self::config::{PUBLISHER_PLAN, RAISED_ACCEPT_BUDGET, TIDEGATE_BASE, tidegate_config};
pub use self::conn::{Conn, Event};
use crate::nats;
pub use crate::payload::{MIN_PAYLOAD, parse_payload, payload};
use crate::ws::{self, OP_TEXT, Open, Opened, Refused};

/// A safety net for one protocol exchange, never a pacing device.
pub const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Tidegate,
    Nats,
    /// `tidegate-relay` (src/relay.rs): Tidegate's wire protocol, no limits.
    Relay,
    /// Tidegate with subscribers on `/v1/graphql` (`graphql-transport-ws`,
    /// §12) instead of `/v1/ws`; publishers stay on `/v1/ws`.
    Graphql,
    /// Tidegate with subscribers on `GET /v1/sse` streams (§14) instead
    /// of `/v1/ws`; publishers stay on `/v1/ws`.
    Sse,
    /// Tidegate with every client on the Pusher wire (`/app/{key}`, §16):
    /// subscribers on a private channel, publishers sending client events.
    Pusher,
    /// Sockudo (`sockudo.rs`) with the same Pusher clients as [`Kind::Pusher`].
    Sockudo,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tidegate => "tidegate",
            Kind::Nats => "nats",
            Kind::Relay => "relay",
            Kind::Graphql => "graphql",
            Kind::Sse => "sse",
            Kind::Pusher => "pusher",
            Kind::Sockudo => "sockudo",
        }
    }

    /// Whether clients speak the Pusher Channels wire (§16) to it.
    pub fn pusher_wire(self) -> bool {
        matches!(self, Kind::Pusher | Kind::Sockudo)
    }

    /// Whether clients send it text frames (every JSON wire; NATS's
    /// protocol goes in binary frames).
    fn text_frames(self) -> bool {
        self != Kind::Nats
    }
}

/// How clients authenticate.
pub enum Auth {
    /// HS256 tokens minted with the broker's secret, one account per
    /// `per_account` connections.
    Jwt(Box<Authenticator>),
    /// NATS token auth.
    Token(String),
    /// None (the relay accepts any token).
    None,
}

/// A running broker as clients see it.
#[derive(Clone)]
pub struct Target {
    pub kind: Kind,
    pub addr: SocketAddr,
    pub auth: Rc<Auth>,
    /// Where GraphQL subscriptions start (`since`; seqs are epoch-based,
    /// so the bench reads it from a publish's ack).
    pub since: u64,
}

/// Who a connection is.
#[derive(Debug, Clone)]
pub struct Who<'a> {
    pub account: &'a str,
    pub plan: Option<&'a str>,
    /// A token minted beforehand (keeps minting out of timed loops).
    pub token: Option<&'a str>,
}

impl Target {
    pub fn tidegate(addr: SocketAddr, config: &Config) -> Result<Target> {
        let auth = Authenticator::new(&config.auth.jwt_secret, 0)
            .map_err(|e| anyhow!("authenticator: {e}"))?;
        Ok(Target {
            kind: Kind::Tidegate,
            addr,
            auth: Rc::new(Auth::Jwt(Box::new(auth))),
            since: 0,
        })
    }

    /// The relay: Tidegate's protocol, an empty bearer token.
    pub fn relay(addr: SocketAddr) -> Target {
        Target {
            kind: Kind::Relay,
            addr,
            auth: Rc::new(Auth::None),
            since: 0,
        }
    }

    /// Sockudo: the Pusher wire, the bench app's secret signs channels.
    pub fn sockudo(addr: SocketAddr) -> Target {
        Target {
            kind: Kind::Sockudo,
            addr,
            auth: Rc::new(Auth::None),
            since: 0,
        }
    }

    pub fn nats(addr: SocketAddr, token: &str) -> Target {
        Target {
            kind: Kind::Nats,
            addr,
            auth: Rc::new(Auth::Token(token.to_string())),
            since: 0,
        }
    }

    /// A Tidegate token for `who` allowed on `doc:*` (None for NATS).
    pub fn token(&self, who: &Who<'_>) -> Option<String> {
        match &*self.auth {
            Auth::Jwt(a) => Some(a.mint(&Claims {
                sub: who.account.to_string(),
                exp: unix_now() + 3600,
                plan: who.plan.map(str::to_string),
                role: None,
                sub_channels: vec!["doc:*".into()],
                pub_channels: vec!["doc:*".into()],
                info: None,
            })),
            Auth::Token(_) | Auth::None => None,
        }
    }

    /// Channel (Tidegate) or subject (NATS) name for a topic.
    pub fn topic(&self, name: &str) -> String {
        match self.kind {
            Kind::Tidegate | Kind::Relay | Kind::Graphql | Kind::Sse => {
                format!("doc:{name}")
            }
            Kind::Nats => format!("doc.{name}"),
            Kind::Pusher | Kind::Sockudo => format!("private-doc-{name}"),
        }
    }

    /// Opens a connection: the upgrade, then `welcome` (Tidegate) or
    /// `INFO` + `CONNECT` + `PONG` (NATS). A refusal is `Ok(Err(..))`.
    pub async fn connect(
        &self,
        who: &Who<'_>,
        seed: u64,
        read_chunk: usize,
        recv_buffer: u32,
    ) -> Result<std::result::Result<Conn, Refused>> {
        let proto;
        let pusher_path;
        let headers_owned: Vec<(&str, &str)>;
        let token = match who.token {
            Some(t) => t.to_string(),
            None => self.token(who).unwrap_or_default(),
        };
        let opts = match self.kind {
            Kind::Tidegate | Kind::Relay => {
                proto = format!("tidegate.v1, bearer.{token}");
                headers_owned = vec![("Sec-WebSocket-Protocol", proto.as_str())];
                Open {
                    path: "/v1/ws",
                    headers: &headers_owned,
                    read_chunk,
                    recv_buffer,
                }
            }
            Kind::Graphql => {
                headers_owned = vec![("Sec-WebSocket-Protocol", graphql::SUBPROTOCOL)];
                Open {
                    path: "/v1/graphql",
                    headers: &headers_owned,
                    read_chunk,
                    recv_buffer,
                }
            }
            Kind::Sse => bail!("an SSE stream names its channel as it opens (connect_sse)"),
            Kind::Pusher | Kind::Sockudo => {
                pusher_path = pusher::path();
                Open {
                    path: &pusher_path,
                    headers: &[],
                    read_chunk,
                    recv_buffer,
                }
            }
            Kind::Nats => Open {
                path: "/",
                headers: &[],
                read_chunk,
                recv_buffer,
            },
        };
        let mut ws = match ws::open(self.addr, &opts, seed).await? {
            Opened::Ok(ws) => ws,
            Opened::Refused(r) => return Ok(Err(r)),
        };
        match self.kind {
            Kind::Tidegate | Kind::Relay => {
                ws.wait_for(PATIENCE, |op, p| {
                    (op == OP_TEXT && p.starts_with(br#"{"type":"welcome""#)).then_some(())
                })
                .await
                .context("waiting for welcome")?;
                Ok(Ok(Conn::new(self.kind, ws)))
            }
            Kind::Graphql => {
                let mut conn = Conn::new(self.kind, ws);
                conn.since = self.since;
                conn.op_id = graphql::operation_id(seed);
                conn.send_raw_payload(graphql::connection_init(&token).as_bytes())
                    .await?;
                conn.wait_ack()
                    .await
                    .context("waiting for connection_ack")?;
                Ok(Ok(conn))
            }
            Kind::Sse => bail!("an SSE stream opens with connect_sse"),
            Kind::Pusher | Kind::Sockudo => {
                let socket_id = pusher::hello(&mut ws).await?;
                let mut conn = Conn::new(self.kind, ws);
                conn.socket_id = socket_id;
                Ok(Ok(conn))
            }
            Kind::Nats => {
                let mut conn = Conn::new(self.kind, ws);
                conn.wait_event(|e| matches!(e, Event::Info).then_some(()))
                    .await
                    .context("waiting for INFO")?;
                let token = match &*self.auth {
                    Auth::Token(t) => Some(t.as_str()),
                    Auth::Jwt(_) | Auth::None => None,
                };
                conn.send_raw_payload(&nats::connect(token)).await?;
                conn.wait_ack()
                    .await
                    .context("waiting for PONG to CONNECT")?;
                Ok(Ok(conn))
            }
        }
    }
}
