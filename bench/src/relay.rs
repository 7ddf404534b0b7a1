//! `tidegate-relay`: the smallest WebSocket relay that speaks enough of
//! Tidegate's wire protocol (docs/protocol.md) for the load generator's
//! `fanout`, `idle` and `handshakes` scenarios: a second reference beside
//! NATS, showing how close Tidegate is to what this machine can do.
//!
//! Deliberately without everything that makes Tidegate a broker: no token
//! check (the `bearer.` subprotocol is accepted unread), no limits, no
//! history, no outbound bound (a slow reader's queue grows without end),
//! no heartbeats. One tokio task per socket on one thread, a plain
//! WebSocket codec (tokio-tungstenite), and a channel map of unbounded
//! queues: each publish is encoded once and its bytes shared by every
//! subscriber's queue.
//!
//! Frames it understands: `subscribe` and `unsubscribe` (answered with an
//! `ack` carrying the channel's `seq`), `publish` (fanned out as `message`
//! frames, then acknowledged with its `seq`). Anything else gets an
//! `error` frame with code `bad_request`. Publishing over HTTP is not
//! offered.
//!
//! ```text
//! tidegate-relay --listen 127.0.0.1:9000
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

use anyhow::{Context, Result};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_tungstenite::tungstenite::handshake::server::{
    Callback, ErrorResponse, Request, Response,
};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

#[derive(Parser)]
#[command(
    name = "tidegate-relay",
    about = "A minimal WebSocket relay speaking Tidegate's wire protocol, for benchmarks"
)]
struct Cli {
    /// Address to listen on (loopback in benchmarks).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

/// A subscriber's queue: the bytes of whole text messages.
type Queue = UnboundedSender<Message>;

#[derive(Default)]
struct Channel {
    seq: u64,
    subscribers: Vec<(u64, Queue)>,
}

/// Every channel, shared by the socket tasks of the one thread.
#[derive(Default)]
struct Hub {
    channels: HashMap<Box<str>, Channel>,
}

impl Hub {
    fn subscribe(&mut self, channel: &str, conn: u64, queue: &Queue) -> u64 {
        let ch = self.channels.entry(channel.into()).or_default();
        if !ch.subscribers.iter().any(|(c, _)| *c == conn) {
            ch.subscribers.push((conn, queue.clone()));
        }
        ch.seq
    }

    fn unsubscribe(&mut self, channel: &str, conn: u64) -> u64 {
        let Some(ch) = self.channels.get_mut(channel) else {
            return 0;
        };
        ch.subscribers.retain(|(c, _)| *c != conn);
        ch.seq
    }

    /// Queues one `message` frame (encoded once) to every subscriber;
    /// returns its `seq`.
    fn publish(&mut self, channel: &str, data: &RawValue) -> u64 {
        let ch = self.channels.entry(channel.into()).or_default();
        ch.seq += 1;
        let mut text = String::with_capacity(64 + channel.len() + data.get().len());
        text.push_str(r#"{"type":"message","channel":"#);
        push_json_str(&mut text, channel);
        text.push_str(r#","seq":"#);
        text.push_str(&ch.seq.to_string());
        text.push_str(r#","data":"#);
        text.push_str(data.get());
        text.push('}');
        let frame = Message::Text(Utf8Bytes::from(text));
        // A subscriber whose task ended is dropped here.
        ch.subscribers
            .retain(|(_, q)| q.send(frame.clone()).is_ok());
        ch.seq
    }
}

fn push_json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// A client frame, with `id` and `data` kept as their raw JSON.
#[derive(Deserialize)]
struct ClientFrame<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow, default)]
    channel: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

fn ack(id: Option<&RawValue>, channel: Option<&str>, seq: u64) -> Message {
    let mut text = String::from(r#"{"type":"ack""#);
    if let Some(id) = id {
        text.push_str(r#","id":"#);
        text.push_str(id.get());
    }
    if let Some(c) = channel {
        text.push_str(r#","channel":"#);
        push_json_str(&mut text, c);
    }
    text.push_str(r#","seq":"#);
    text.push_str(&seq.to_string());
    text.push('}');
    Message::text(text)
}

fn bad_request(message: &str) -> Message {
    let v = serde_json::json!({"type":"error","code":"bad_request","message":message});
    Message::text(v.to_string())
}

/// Offers back `tidegate.v1` when the client asks for it, as Tidegate does.
struct Subprotocol;

impl Callback for Subprotocol {
    fn on_request(self, req: &Request, mut resp: Response) -> Result<Response, ErrorResponse> {
        let offered = req
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == "tidegate.v1");
        if offered {
            resp.headers_mut().insert(
                "sec-websocket-protocol",
                HeaderValue::from_static("tidegate.v1"),
            );
        }
        Ok(resp)
    }
}

/// One socket, start to end: its own frames and its queue, in one task.
async fn serve(tcp: TcpStream, conn: u64, hub: Rc<RefCell<Hub>>) -> Result<()> {
    tcp.set_nodelay(true)?;
    let mut ws = tokio_tungstenite::accept_hdr_async(tcp, Subprotocol).await?;
    let (queue, mut rx): (Queue, UnboundedReceiver<Message>) = unbounded_channel();
    ws.send(Message::text(format!(
        r#"{{"type":"welcome","conn":"relay-{conn:x}","account":"","node":"relay","limits":{{}}}}"#
    )))
    .await?;
    let mut subscribed: Vec<Box<str>> = Vec::new();
    let result = async {
        loop {
            tokio::select! {
                msg = ws.next() => {
                    let Some(msg) = msg else { return Ok(()) };
                    let text = match msg? {
                        Message::Text(t) => t,
                        Message::Close(_) => continue,
                        Message::Binary(_) => {
                            ws.send(bad_request("binary frames are not accepted")).await?;
                            continue;
                        }
                        _ => continue,
                    };
                    let answer = handle(text.as_str(), conn, &queue, &hub, &mut subscribed);
                    // A publisher that left without reading its acks must
                    // not lose the publishes it sent before leaving: the
                    // frames already read are still relayed.
                    let _ = ws.send(answer).await;
                }
                Some(first) = rx.recv() => {
                    // Everything already queued goes out in one flush.
                    ws.feed(first).await?;
                    while let Ok(more) = rx.try_recv() {
                        ws.feed(more).await?;
                    }
                    ws.flush().await?;
                }
            }
        }
    }
    .await;
    let mut hub = hub.borrow_mut();
    for c in subscribed {
        hub.unsubscribe(&c, conn);
    }
    result
}

fn handle(
    text: &str,
    conn: u64,
    queue: &Queue,
    hub: &RefCell<Hub>,
    subscribed: &mut Vec<Box<str>>,
) -> Message {
    let frame: ClientFrame<'_> = match serde_json::from_str(text) {
        Ok(f) => f,
        Err(e) => return bad_request(&format!("not a frame: {e}")),
    };
    let Some(channel) = frame.channel.as_deref() else {
        return bad_request("no channel");
    };
    match frame.kind {
        "subscribe" => {
            let seq = hub.borrow_mut().subscribe(channel, conn, queue);
            if !subscribed.iter().any(|c| &**c == channel) {
                subscribed.push(channel.into());
            }
            ack(frame.id, Some(channel), seq)
        }
        "unsubscribe" => {
            let seq = hub.borrow_mut().unsubscribe(channel, conn);
            subscribed.retain(|c| &**c != channel);
            ack(frame.id, Some(channel), seq)
        }
        "publish" => match frame.data {
            Some(data) => {
                let seq = hub.borrow_mut().publish(channel, data);
                ack(frame.id, None, seq)
            }
            None => bad_request("publish without data"),
        },
        other => bad_request(&format!("unknown frame type {other:?}")),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(cli.listen)
            .await
            .with_context(|| format!("binding {}", cli.listen))?;
        println!("relay listening on {}", listener.local_addr()?);
        let hub = Rc::new(RefCell::new(Hub::default()));
        let mut next = 0u64;
        loop {
            let (tcp, _) = match listener.accept().await {
                Ok(a) => a,
                // Out of descriptors: the connection waits in the backlog
                // until a socket closes.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            next += 1;
            let (hub, conn) = (hub.clone(), next);
            tokio::task::spawn_local(async move {
                let _ = serve(tcp, conn, hub).await;
            });
        }
    })
}
