//! The broker a scenario talks to: its kind, address and credentials, the
//! bench config Tidegate runs with (`config.rs`), and the protocol each
//! one speaks.

mod config;
mod frames;
mod graphql;
pub mod pusher;
mod sse;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tidegate::auth::{Authenticator, Claims, unix_now};
use tidegate::config::Config;

pub use self::config::{PUBLISHER_PLAN, RAISED_ACCEPT_BUDGET, TIDEGATE_BASE, tidegate_config};
use self::frames::classify_tidegate;
use crate::nats;
pub use crate::payload::{MIN_PAYLOAD, parse_payload, payload};
use crate::ws::{self, Flow, OP_BINARY, OP_CLOSE, OP_TEXT, Open, Opened, Refused, Ws};

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
        }
    }

    /// Whether clients speak Tidegate's wire protocol to it.
    fn tidegate_wire(self) -> bool {
        matches!(
            self,
            Kind::Tidegate | Kind::Relay | Kind::Graphql | Kind::Sse | Kind::Pusher
        )
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
            Kind::Pusher => format!("private-doc-{name}"),
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
            Kind::Pusher => {
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
            Kind::Pusher => {
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

/// Something a broker sent, reduced to what scenarios count.
#[derive(Debug)]
pub enum Event<'a> {
    /// A published message; `data` is the publisher's payload.
    Message {
        data: &'a [u8],
    },
    /// Tidegate `ack` / NATS `PONG`.
    Ack,
    /// Tidegate `error` frame / NATS `-ERR`: the code and, for
    /// `rate_limited`, the frames it reports dropped.
    Error {
        code: String,
        dropped: u64,
    },
    Info,
    /// Close frame from the server.
    Closed {
        code: Option<u16>,
    },
    Other,
}

/// One client connection to either broker.
pub struct Conn {
    pub kind: Kind,
    pub ws: Ws,
    parser: nats::Parser,
    scratch: Vec<u8>,
    /// GraphQL: the `since` its subscriptions name.
    since: u64,
    /// GraphQL: the id of its (one) operation, distinct per connection.
    op_id: String,
    /// SSE: the body's decoder (`ws` is then a plain HTTP stream).
    sse: crate::sse::Decoder,
    /// Pusher: the connection's `socket_id` (what a subscription signs).
    socket_id: String,
}

impl Conn {
    pub fn new(kind: Kind, ws: Ws) -> Conn {
        Conn {
            kind,
            ws,
            parser: nats::Parser::default(),
            scratch: Vec::new(),
            since: 0,
            op_id: String::new(),
            sse: crate::sse::Decoder::new(false),
            socket_id: String::new(),
        }
    }

    /// Calls `f` for each event in what the next read brings (at least one
    /// frame). NATS `PING`s are answered. `f` returning `Flow::Stop` ends
    /// the batch early (the rest stays buffered for the next call).
    pub async fn recv(&mut self, mut f: impl FnMut(Event<'_>) -> Flow) -> Result<()> {
        match self.kind {
            Kind::Tidegate | Kind::Relay => {
                self.ws
                    .read_frames(|op, p| f(classify_tidegate(op, p)))
                    .await?;
            }
            Kind::Graphql => {
                self.ws
                    .read_frames(|op, p| f(graphql::classify(op, p)))
                    .await?;
            }
            Kind::Pusher => {
                self.ws
                    .read_frames(|op, p| f(pusher::classify(op, p)))
                    .await?;
            }
            Kind::Sse => loop {
                let (seen, go_on) = self.sse.events(|b| f(sse::classify(b)));
                if seen > 0 || !go_on {
                    break;
                }
                if self.sse.done() {
                    f(Event::Closed { code: None });
                    break;
                }
                let (dec, mut fed) = (&mut self.sse, Ok((0, true)));
                self.ws
                    .read_bytes(|raw| fed = dec.feed_events(raw, |b| f(sse::classify(b))))
                    .await?;
                let (seen, go_on) = fed?;
                if seen > 0 || !go_on {
                    break;
                }
            },
            Kind::Nats => {
                let mut pings = 0;
                let mut result = Ok(());
                let parser = &mut self.parser;
                self.ws
                    .read_frames(|op, p| match op {
                        OP_BINARY | OP_TEXT => {
                            let mut flow = Flow::Continue;
                            let r = parser.feed(p, |sop| {
                                let e = match sop {
                                    nats::ServerOp::Msg { payload } => {
                                        Event::Message { data: payload }
                                    }
                                    nats::ServerOp::Pong => Event::Ack,
                                    nats::ServerOp::Ping => {
                                        pings += 1;
                                        Event::Other
                                    }
                                    nats::ServerOp::Info => Event::Info,
                                    nats::ServerOp::Ok => Event::Other,
                                    nats::ServerOp::Err(e) => Event::Error {
                                        code: String::from_utf8_lossy(e).trim().to_string(),
                                        dropped: 0,
                                    },
                                };
                                // A frame's operations are all delivered;
                                // Stop takes effect after this frame.
                                if f(e) == Flow::Stop {
                                    flow = Flow::Stop;
                                }
                            });
                            if let Err(e) = r {
                                result = Err(e);
                                return Flow::Stop;
                            }
                            flow
                        }
                        OP_CLOSE => f(Event::Closed {
                            code: ws::close_code(p),
                        }),
                        _ => Flow::Continue,
                    })
                    .await?;
                result?;
                for _ in 0..pings {
                    self.send_raw_payload(b"PONG\r\n").await?;
                }
            }
        }
        Ok(())
    }

    /// Releases the read buffers' memory (idle connections).
    pub fn shrink(&mut self) {
        self.ws.shrink();
        self.sse.shrink();
    }

    /// Waits for the first event `pick` accepts.
    pub async fn wait_event<T>(
        &mut self,
        mut pick: impl FnMut(&Event<'_>) -> Option<T>,
    ) -> Result<T> {
        let fut = async {
            loop {
                let mut found = None;
                let mut closed = None;
                self.recv(|e| {
                    if let Event::Closed { code } = &e {
                        closed = Some(*code);
                    }
                    match pick(&e) {
                        Some(v) => {
                            found = Some(v);
                            Flow::Stop
                        }
                        None => Flow::Continue,
                    }
                })
                .await?;
                if let Some(v) = found {
                    return Ok(v);
                }
                if let Some(code) = closed {
                    bail!("closed by the server ({code:?})");
                }
            }
        };
        tokio::time::timeout(PATIENCE, fut)
            .await
            .map_err(|_| anyhow!("no answer within {PATIENCE:?}"))?
    }

    /// Waits for an `ack` (Tidegate) or `PONG` (NATS); an error frame or
    /// `-ERR` fails.
    pub async fn wait_ack(&mut self) -> Result<()> {
        self.wait_event(|e| match e {
            Event::Ack => Some(Ok(())),
            Event::Error { code, .. } => Some(Err(anyhow!("error: {code}"))),
            _ => None,
        })
        .await?
    }

    /// Sends bytes as one frame (text for Tidegate, binary for NATS).
    pub async fn send_raw_payload(&mut self, payload: &[u8]) -> Result<()> {
        let op = if self.kind.tidegate_wire() {
            OP_TEXT
        } else {
            OP_BINARY
        };
        self.ws.send(op, payload).await?;
        Ok(())
    }

    /// Subscribes to `topic` and waits until the broker confirms it.
    pub async fn subscribe(&mut self, topic: &str) -> Result<()> {
        match self.kind {
            Kind::Tidegate | Kind::Relay => {
                let f = format!(r#"{{"type":"subscribe","channel":"{topic}","id":0}}"#);
                self.send_raw_payload(f.as_bytes()).await?;
            }
            Kind::Graphql => {
                // No acknowledgement in the protocol: the channel holds one
                // message after `since` (see `fanout`), whose `next` says
                // the subscription is live.
                self.send_raw_payload(
                    graphql::subscribe(&self.op_id, topic, self.since).as_bytes(),
                )
                .await?;
                return self
                    .wait_event(|e| match e {
                        Event::Message { .. } => Some(Ok(())),
                        Event::Error { code, .. } => Some(Err(anyhow!("error: {code}"))),
                        _ => None,
                    })
                    .await?;
            }
            // The stream named its channel as it opened; its position (an
            // `id:` alone) says the subscription is live.
            Kind::Sse => {}
            Kind::Nats => self.send_raw_payload(&nats::sub(topic, 1)).await?,
            Kind::Pusher => {
                let frame = pusher::subscribe(topic, &self.socket_id)?;
                self.send_raw_payload(frame.as_bytes()).await?;
            }
        }
        self.wait_ack().await
    }

    /// Appends one publish of `data` (raw JSON) with ack request `id` to
    /// `out`, as a complete WebSocket frame.
    pub fn publish_frame(&mut self, topic: &str, data: &[u8], id: u64, out: &mut Vec<u8>) {
        self.scratch.clear();
        match self.kind {
            // GraphQL subscribers' publishers are `/v1/ws` connections.
            Kind::Tidegate | Kind::Relay | Kind::Graphql | Kind::Sse => {
                self.scratch
                    .extend_from_slice(br#"{"type":"publish","channel":""#);
                self.scratch.extend_from_slice(topic.as_bytes());
                self.scratch.extend_from_slice(br#"","id":"#);
                self.scratch.extend_from_slice(id.to_string().as_bytes());
                self.scratch.extend_from_slice(br#","data":"#);
                self.scratch.extend_from_slice(data);
                self.scratch.push(b'}');
                let payload = std::mem::take(&mut self.scratch);
                self.ws.frame_into(OP_TEXT, &payload, out);
                self.scratch = payload;
            }
            Kind::Pusher => {
                pusher::client_event(topic, data, &mut self.scratch);
                let payload = std::mem::take(&mut self.scratch);
                self.ws.frame_into(OP_TEXT, &payload, out);
                self.scratch = payload;
            }
            Kind::Nats => {
                nats::publish(topic, data, true, &mut self.scratch);
                let payload = std::mem::take(&mut self.scratch);
                self.ws.frame_into(OP_BINARY, &payload, out);
                self.scratch = payload;
            }
        }
    }
}
