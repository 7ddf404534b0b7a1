//! One client connection to a broker under test, on whichever wire its
//! [`Kind`] speaks, and what it receives reduced to an [`Event`].

use anyhow::{Result, anyhow, bail};

use super::frames::classify_tidegate;
use super::{Kind, PATIENCE, graphql, pusher, sse};
use crate::nats;
use crate::ws::{self, Flow, OP_BINARY, OP_CLOSE, OP_TEXT, Ws};

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
    pub(super) since: u64,
    /// GraphQL: the id of its (one) operation, distinct per connection.
    pub(super) op_id: String,
    /// SSE: the body's decoder (`ws` is then a plain HTTP stream).
    pub(super) sse: crate::sse::Decoder,
    /// Pusher: the connection's `socket_id` (what a subscription signs).
    pub(super) socket_id: String,
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
            Kind::Pusher | Kind::Sockudo => {
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
        let op = if self.kind.text_frames() {
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
            Kind::Pusher | Kind::Sockudo => {
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
            Kind::Pusher | Kind::Sockudo => {
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
