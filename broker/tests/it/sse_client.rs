//! A raw SSE client over a plain TCP stream (§14): the request, the
//! response head, the chunked body and its events, as the bytes come, so
//! a test can also stop reading or read the close.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::PATIENCE;

/// One SSE block: its fields (a comment as `comment`).
#[derive(Debug, Clone, Default)]
pub struct Event {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Option<String>,
    pub retry: Option<u64>,
    pub comment: Option<String>,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(self.data.as_deref().unwrap_or("null")).unwrap()
    }

    pub fn is(&self, name: &str) -> bool {
        self.event.as_deref() == Some(name)
    }
}

/// An open stream (after a 200).
pub struct Sse {
    pub s: TcpStream,
    pub head: String,
    /// Raw body bytes not yet de-chunked.
    raw: Vec<u8>,
    /// De-chunked text not yet split into blocks.
    text: String,
    pub ended: bool,
    /// The last `id:` seen (what `EventSource` would send back).
    pub last_id: Option<String>,
}

/// A refusal: status, body, head.
pub type Refused = (u16, Value, String);

/// `GET path` with extra headers; the open stream or the refusal.
pub async fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<Sse, Refused> {
    open_on(TcpStream::connect(addr).await.unwrap(), addr, path, headers).await
}

pub async fn open_on(
    s: TcpStream,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, Refused> {
    open_pipelined(s, addr, path, headers, b"").await
}

/// [`open_on`], with `after` sent in the same write as the request head
/// (a pipelined request, or any bytes).
pub async fn open_pipelined(
    mut s: TcpStream,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    after: &[u8],
) -> Result<Sse, Refused> {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(after);
    s.write_all(&bytes).await.unwrap();
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
            .await
            .expect("no response head in time")
            .unwrap();
        assert!(n > 0, "closed before the response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status: u16 = head[9..12].parse().unwrap();
    let mut sse = Sse {
        s,
        head,
        raw: buf[head_end..].to_vec(),
        text: String::new(),
        ended: false,
        last_id: None,
    };
    if status == 200 {
        return Ok(sse);
    }
    // A refusal's body (sized, not chunked).
    let len: usize = sse
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while sse.raw.len() < len {
        let mut chunk = [0u8; 4096];
        let n = sse.s.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        sse.raw.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&sse.raw[..len]).unwrap_or(Value::Null);
    Err((status, body, sse.head))
}

impl Sse {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    /// Moves whole chunks from `raw` into `text`.
    fn dechunk(&mut self) {
        loop {
            let Some(line) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size_text = String::from_utf8_lossy(&self.raw[..line]).to_string();
            let size = usize::from_str_radix(size_text.trim(), 16).expect("chunk size");
            if size == 0 {
                self.ended = true;
                self.raw.clear();
                return;
            }
            let start = line + 2;
            if self.raw.len() < start + size + 2 {
                return;
            }
            self.text
                .push_str(std::str::from_utf8(&self.raw[start..start + size]).unwrap());
            self.raw.drain(..start + size + 2);
        }
    }

    /// The next block, or `None` once the response (or connection) ended.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            self.dechunk();
            if let Some(i) = self.text.find("\n\n") {
                let block: String = self.text.drain(..i + 2).collect();
                let event = parse(&block);
                if let Some(id) = &event.id {
                    self.last_id = Some(id.clone());
                }
                return Some(event);
            }
            if self.ended {
                return None;
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tokio::time::timeout(PATIENCE, self.s.read(&mut chunk))
                .await
                .expect("no event in time")
                .unwrap_or(0);
            if n == 0 {
                self.ended = true;
                continue;
            }
            self.raw.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next event with an `event:` name (skipping comments and
    /// `id:`-only blocks).
    pub async fn event(&mut self) -> Event {
        loop {
            let e = self.next().await.expect("the stream ended");
            if e.event.is_some() {
                return e;
            }
        }
    }

    /// The next `message` event's data.
    pub async fn message(&mut self) -> Value {
        let e = self.event().await;
        assert!(e.is("message"), "{e:?}");
        e.json()
    }

    /// Reads until the `close` event (skipping what comes before) and the
    /// end of the response; its data.
    pub async fn close(&mut self) -> Value {
        loop {
            let e = self.next().await.expect("ended without a close event");
            if e.is("close") {
                let data = e.json();
                assert!(self.next().await.is_none(), "nothing after close");
                return data;
            }
        }
    }
}

fn parse(block: &str) -> Event {
    let mut e = Event::default();
    for line in block.lines() {
        if let Some(c) = line.strip_prefix(':') {
            e.comment = Some(c.trim().to_owned());
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => e.id = Some(value.to_owned()),
            "event" => e.event = Some(value.to_owned()),
            "retry" => e.retry = value.parse().ok(),
            "data" => match &mut e.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => e.data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    e
}
