//! The one helper: a real broker on a free port, in this process, plus a
//! thin WebSocket client and HTTP helpers.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tidegate::Node;
use tidegate::auth::{Claims, unix_now};
use tidegate::config::{Config, DEFAULT_TOML};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A safety net so a broken test fails instead of hanging; never a way to
/// wait for something to happen.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub const API_KEY: &str = "tidegate-sample-publish-key";

/// What every test broker changes from the shipped config: a short drain
/// window, so a broker dropped with sockets open stops quickly, and the
/// secret cluster mode requires (unused by a single node).
const TEST_BASE: &str = "[cluster]\ndrain_ms = 300\nsecret = \"test-cluster-secret-0123456789\"\n";

/// The cluster secret of every test broker (for nodes run as processes).
pub const CLUSTER_SECRET: &str = "test-cluster-secret-0123456789";

/// The shipped config with `overrides` (TOML) merged over it.
pub fn config(overrides: &str) -> Config {
    let mut base: toml::Table = DEFAULT_TOML.parse().unwrap();
    merge(&mut base, TEST_BASE.parse().unwrap());
    let over: toml::Table = overrides.parse().expect("overrides are TOML");
    merge(&mut base, over);
    Config::from_toml(&toml::to_string(&base).unwrap(), &|_| None).expect("test config is valid")
}

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// A broker running in this process until dropped.
pub struct Broker {
    pub addr: SocketAddr,
    /// The gRPC API's address (§8).
    pub grpc_addr: SocketAddr,
    pub node: Arc<Node>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Broker {
    pub fn start(overrides: &str) -> Broker {
        Broker::with_config(config(overrides))
    }

    pub fn with_config(config: Config) -> Broker {
        Broker::on(TcpListener::bind("127.0.0.1:0").unwrap(), config)
    }

    /// A broker serving HTTP on `listener` (a dual-stack one, say).
    pub fn on(listener: TcpListener, config: Config) -> Broker {
        let addr = listener.local_addr().unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").unwrap();
        let grpc_addr = grpc.local_addr().unwrap();
        let node = Node::new(config).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let n = node.clone();
        let thread = std::thread::spawn(move || {
            actix_rt::System::new()
                .block_on(async move {
                    tidegate::serve_with_grpc(listener, Some(grpc), n, async {
                        let _ = rx.await;
                    })
                    .await
                })
                .unwrap();
        });
        Broker {
            addr,
            grpc_addr,
            node,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/v1/ws", self.addr)
    }

    /// A token for `account` allowed on `doc:*` both ways.
    pub fn token(&self, account: &str) -> String {
        self.token_with(account, &["doc:*"], &["doc:*"], None)
    }

    pub fn token_with(
        &self,
        account: &str,
        sub: &[&str],
        publ: &[&str],
        plan: Option<&str>,
    ) -> String {
        self.mint(Claims {
            sub: account.into(),
            exp: unix_now() + 600,
            plan: plan.map(Into::into),
            role: None,
            sub_channels: sub.iter().map(|s| s.to_string()).collect(),
            pub_channels: publ.iter().map(|s| s.to_string()).collect(),
            info: None,
        })
    }

    /// A subscriber's token for `user` (its `sub`) on `sub_channels`, with
    /// presence `info`: what presence tests connect with.
    pub fn member_token(&self, user: &str, sub_channels: &[&str], info: Option<Value>) -> String {
        self.mint(Claims {
            sub: user.into(),
            exp: unix_now() + 600,
            plan: None,
            role: None,
            sub_channels: sub_channels.iter().map(|c| c.to_string()).collect(),
            pub_channels: vec![],
            info,
        })
    }

    pub fn mint(&self, claims: Claims) -> String {
        self.node.auth.load().mint(&claims)
    }

    /// Waits (polling, with a deadline) until the broker counts `n` open
    /// sockets: closes are seen by the broker asynchronously.
    pub async fn wait_sockets(&self, n: usize) {
        let deadline = std::time::Instant::now() + PATIENCE;
        while self.node.sockets.len() != n {
            assert!(
                std::time::Instant::now() < deadline,
                "{} sockets open, expected {n}",
                self.node.sockets.len()
            );
            tokio::task::yield_now().await;
        }
    }

    /// A handshake's outcome: the client, or the refusal's status, body and
    /// `Retry-After`.
    pub async fn try_connect(&self, token: &str) -> Result<Client, (u16, Value, Option<u64>)> {
        refusal(Client::connect(&self.ws_url(), token).await)
    }

    /// Connects with the token in the subprotocol and reads the welcome.
    pub async fn client(&self, account: &str) -> Client {
        let mut c = Client::connect(&self.ws_url(), &self.token(account))
            .await
            .unwrap();
        let welcome = c.next_json().await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        c
    }

    pub async fn publish_http(&self, channel: &str, data: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/v1/publish"))
            .bearer_auth(API_KEY)
            .json(&json!({"channel": channel, "data": data}))
            .send()
            .await
            .unwrap()
    }

    /// Publishes over HTTP with the sample API key, expects 200 and gives
    /// the message's `seq`.
    pub async fn published(&self, channel: &str, data: Value) -> u64 {
        let r = self.publish_http(channel, data).await;
        assert_eq!(r.status(), 200, "publish to {channel}");
        r.json::<Value>().await.unwrap()["seq"].as_u64().unwrap()
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(self.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A counter or gauge value from `/metrics` (0 when absent).
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics().await, series)
    }
}

/// A number no other call in this process (nor, in practice, another
/// test process) gives: for Redis key prefixes, account and user names.
pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    nanos.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Splits a connection attempt into the client or (status, body, Retry-After).
pub fn refusal(
    result: Result<Client, tungstenite::Error>,
) -> Result<Client, (u16, Value, Option<u64>)> {
    match result {
        Ok(c) => Ok(c),
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp.body().clone().unwrap_or_default();
            let retry = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse().ok());
            let status = resp.status().as_u16();
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            check_refusal_body(status, &body, retry);
            Err((status, body, retry))
        }
        Err(e) => panic!("connection failed without an HTTP answer: {e}"),
    }
}

/// Every HTTP refusal's body (§1): `error`, `message`, and `retryAfterMs`,
/// which agrees with `Retry-After` when there is one and is 0 without it
/// (waiting cannot help).
pub fn check_refusal_body(status: u16, body: &Value, retry_after: Option<u64>) {
    assert!(status >= 400, "not a refusal: {status}");
    assert!(body["error"].as_str().is_some(), "{status} {body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    let ms = body["retryAfterMs"]
        .as_u64()
        .unwrap_or_else(|| panic!("{status} refusal without retryAfterMs: {body}"));
    match retry_after {
        Some(secs) => assert_eq!(secs, ms.div_ceil(1000).max(1), "{body}"),
        None => assert_eq!(ms, 0, "{body}"),
    }
}

/// Reads an HTTP refusal, checks its body (see [`check_refusal_body`]) and
/// returns it.
pub async fn refusal_json(resp: reqwest::Response) -> Value {
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body: Value = resp.json().await.expect("a JSON refusal body");
    check_refusal_body(status, &body, retry);
    body
}

pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

impl Broker {
    /// Starts the graceful drain (what SIGTERM does) without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the server sent, simplified.
#[derive(Debug)]
pub enum Got {
    Json(Value),
    Close(Option<u16>),
    /// The connection ended without a close frame.
    Gone,
}

pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub protocol: Option<String>,
    /// Skip unsolicited `budget` frames (no `id`), which the broker sends
    /// whenever a budget is below half; on by default.
    pub skip_unsolicited: bool,
}

impl Client {
    pub fn new(ws: WebSocketStream<MaybeTlsStream<TcpStream>>, protocol: Option<String>) -> Client {
        Client {
            ws,
            protocol,
            skip_unsolicited: true,
        }
    }

    pub async fn connect(url: &str, token: &str) -> Result<Client, tungstenite::Error> {
        let mut req = url.into_client_request()?;
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            format!("tidegate.v1, bearer.{token}").parse().unwrap(),
        );
        let (ws, resp) = tokio_tungstenite::connect_async(req).await?;
        let protocol = resp
            .headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap().to_owned());
        Ok(Client::new(ws, protocol))
    }

    pub async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::text(frame.to_string()))
            .await
            .unwrap();
    }

    pub async fn send_raw(&mut self, msg: Message) {
        self.ws.send(msg).await.unwrap();
    }

    /// The next text frame or close, skipping pings and pongs.
    pub async fn next(&mut self) -> Got {
        loop {
            let msg = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("server sent nothing in time");
            match msg {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).expect("server sends JSON");
                    if self.skip_unsolicited && v["type"] == "budget" && v.get("id").is_none() {
                        continue;
                    }
                    return Got::Json(v);
                }
                Some(Ok(Message::Close(frame))) => {
                    return Got::Close(frame.map(|f: CloseFrame| f.code.into()));
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Got::Gone,
            }
        }
    }

    pub async fn next_json(&mut self) -> Value {
        match self.next().await {
            Got::Json(v) => v,
            other => panic!("expected a JSON frame, got {other:?}"),
        }
    }

    /// Reads until a frame matches, returning it (earlier ones are dropped).
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let v = self.next_json().await;
            if pred(&v) {
                return v;
            }
        }
    }

    /// Sends a frame with `id` and returns the frame that answers it.
    pub async fn call(&mut self, mut frame: Value, id: u64) -> Value {
        frame["id"] = json!(id);
        self.send(frame).await;
        self.until(|v| v["id"] == json!(id)).await
    }

    /// Reads until the server closes; returns the close code.
    pub async fn closed(&mut self) -> Option<u16> {
        loop {
            match self.next().await {
                Got::Json(_) => continue,
                Got::Close(code) => return code,
                Got::Gone => return None,
            }
        }
    }
}

/// A WebSocket handshake over a plain TCP stream, for tests that must not
/// behave like a polite client (never read, never answer pings). Returns
/// the stream positioned after the 101 response.
pub async fn raw_upgrade(addr: SocketAddr, token: &str) -> TcpStream {
    let s = TcpStream::connect(addr).await.unwrap();
    upgrade_on(s, addr, token).await
}

/// A TCP connection with a small receive buffer, so a client that stops
/// reading pushes back on the server quickly.
pub async fn small_window(addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(addr).await.unwrap()
}

pub async fn upgrade_on(s: TcpStream, addr: SocketAddr, token: &str) -> TcpStream {
    upgrade_path(s, addr, "/v1/ws", &format!("tidegate.v1, bearer.{token}")).await
}

/// A raw WebSocket upgrade of `path` offering `protocols`; the stream
/// after the 101 response.
pub async fn upgrade_path(
    mut s: TcpStream,
    addr: SocketAddr,
    path: &str,
    protocols: &str,
) -> TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: {protocols}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// A masked client text frame, as a raw client must send it.
pub fn masked_text(payload: &[u8]) -> Vec<u8> {
    masked(0x1, payload)
}

/// A masked client frame with `opcode` (FIN set).
pub fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    let len = payload.len();
    if len < 126 {
        f.push(0x80 | len as u8);
    } else if len <= 65535 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let mask = [1u8, 2, 3, 4];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Reads until the peer closes the TCP connection; returns bytes read.
pub async fn read_until_eof(s: &mut TcpStream) -> usize {
    use tokio::io::AsyncReadExt;
    let mut total = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("connection still open")
        {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}
