//! A minimal WebSocket client for load generation.
//!
//! The load generator has to read hundreds of thousands of frames a second
//! on one core, so it does not decode frames into owned messages: it reads
//! into one buffer per connection and hands each complete frame's payload
//! to a callback as a borrowed slice. Server frames are unmasked; client
//! frames are masked as RFC 6455 requires. The opening handshake is plain
//! HTTP/1.1 written here, so a refusal (429, 503, 401) is reported with
//! its status and body instead of as an error.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

mod frame;

use frame::parse_head;
pub use frame::{close_code, encode_frame};

pub const OP_CONT: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// Longest HTTP response head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// A handshake the server answered with something other than 101.
#[derive(Debug, Clone)]
pub struct Refused {
    pub status: u16,
    /// The `error` code of a JSON refusal body, when there is one.
    pub code: Option<String>,
    pub retry_after_secs: Option<u64>,
}

/// An open WebSocket connection.
pub struct Ws {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Start of unread data in `buf`.
    start: usize,
    read_chunk: usize,
    mask: u32,
}

/// What the handshake produced.
pub enum Opened {
    Ok(Ws),
    Refused(Refused),
}

/// Options for opening a connection.
#[derive(Debug, Clone, Default)]
pub struct Open<'a> {
    pub path: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    /// Bytes read per `read` call (the buffer grows to at least this).
    pub read_chunk: usize,
    /// `SO_RCVBUF` for this connection (0 = the OS default).
    pub recv_buffer: u32,
}

fn random_key(seed: u64) -> String {
    // 16 bytes, base64 (RFC 6455 §4.1 only needs them to be unpredictable
    // to proxies; the accept check below is what matters here).
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x = seed | 1;
    let mut bytes = [0u8; 16];
    for b in &mut bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut out = String::with_capacity(24);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub(crate) fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Connects to `addr` (with `SO_RCVBUF` when given), `TCP_NODELAY` on.
pub(crate) async fn connect(addr: SocketAddr, recv_buffer: u32) -> io::Result<TcpStream> {
    let stream = if recv_buffer > 0 {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.set_recv_buffer_size(recv_buffer)?;
        s.connect(addr).await?
    } else {
        TcpStream::connect(addr).await?
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Opens a WebSocket to `addr` and performs the upgrade.
pub async fn open(addr: SocketAddr, opts: &Open<'_>, seed: u64) -> io::Result<Opened> {
    let stream = connect(addr, opts.recv_buffer).await?;
    upgrade(stream, addr, opts, seed).await
}

async fn upgrade(
    mut stream: TcpStream,
    addr: SocketAddr,
    opts: &Open<'_>,
    seed: u64,
) -> io::Result<Opened> {
    let key = random_key(seed);
    let mut req = format!(
        "GET {} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
        if opts.path.is_empty() { "/" } else { opts.path }
    );
    for (k, v) in opts.headers {
        req.push_str(k);
        req.push_str(": ");
        req.push_str(v);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await?;

    let (head, buf, status) = read_head(&mut stream).await?;
    if status != 101 {
        return Ok(Opened::Refused(refusal(&mut stream, &head, buf).await));
    }
    let want = derive_accept_key(key.as_bytes());
    if header(&head, "sec-websocket-accept") != Some(want.as_str()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad Sec-WebSocket-Accept",
        ));
    }
    let read_chunk = opts.read_chunk.max(512);
    Ok(Opened::Ok(Ws {
        stream,
        buf,
        start: 0,
        read_chunk,
        mask: (seed as u32) | 1,
    }))
}

/// Reads an HTTP/1.1 response head: (the head, the bytes after it, the
/// status).
pub(crate) async fn read_head(stream: &mut TcpStream) -> io::Result<(String, Vec<u8>, u16)> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "response head too long",
            ));
        }
        let mut chunk = [0u8; 2048];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed during the handshake",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP status"))?;
    buf.drain(..head_end);
    Ok((head, buf, status))
}

/// A refusal from its head and the body bytes read so far (the rest of
/// the body, up to `Content-Length` and 64 KiB, is read here).
pub(crate) async fn refusal(stream: &mut TcpStream, head: &str, mut body: Vec<u8>) -> Refused {
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let len: usize = header(head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
        .min(64 * 1024);
    while body.len() < len {
        let mut chunk = [0u8; 2048];
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        body.extend_from_slice(&chunk[..n]);
    }
    let code = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error")?.as_str().map(str::to_owned));
    Refused {
        status,
        code,
        retry_after_secs: header(head, "retry-after").and_then(|v| v.parse().ok()),
    }
}

/// What a frame callback wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

impl Ws {
    /// A plain HTTP/1.1 response stream (SSE, `sse.rs`) after its head:
    /// `buf` holds the body bytes already read. Only [`Ws::read_bytes`]
    /// (and writes) make sense on it.
    pub(crate) fn plain(stream: TcpStream, buf: Vec<u8>, read_chunk: usize) -> Ws {
        Ws {
            stream,
            buf,
            start: 0,
            read_chunk: read_chunk.max(512),
            mask: 1,
        }
    }

    /// Hands every buffered byte to `f` (reading once from the socket
    /// first if none is), then forgets them: for streams that are not
    /// WebSocket frames. `Err(UnexpectedEof)` when the peer closed.
    pub(crate) async fn read_bytes(&mut self, f: impl FnOnce(&[u8])) -> io::Result<()> {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.fill().await?;
        }
        f(&self.buf[self.start..]);
        self.buf.clear();
        self.start = 0;
        Ok(())
    }

    fn next_mask(&mut self) -> u32 {
        let mut x = self.mask;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.mask = x;
        x
    }

    /// Encodes one masked frame into `out` (to batch several writes).
    pub fn frame_into(&mut self, opcode: u8, payload: &[u8], out: &mut Vec<u8>) {
        let mask = self.next_mask();
        encode_frame(opcode, payload, mask, out);
    }

    /// Sends one frame.
    pub async fn send(&mut self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        let mut out = Vec::with_capacity(payload.len() + 14);
        self.frame_into(opcode, payload, &mut out);
        self.stream.write_all(&out).await
    }

    /// Writes bytes already encoded with [`Ws::frame_into`].
    pub async fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Sends a close frame with `code` (best effort).
    pub async fn close(&mut self, code: u16) {
        let _ = self.send(OP_CLOSE, &code.to_be_bytes()).await;
    }

    /// Sends a close frame and waits (at most `patience`) for the server's
    /// close frame or the end of the stream.
    pub async fn close_and_wait(mut self, code: u16, patience: Duration) {
        self.close(code).await;
        let _ = tokio::time::timeout(patience, async {
            loop {
                let mut closed = false;
                match self
                    .read_frames(|op, _| {
                        if op == OP_CLOSE {
                            closed = true;
                            Flow::Stop
                        } else {
                            Flow::Continue
                        }
                    })
                    .await
                {
                    Ok(true) if !closed => {}
                    _ => return,
                }
            }
        })
        .await;
    }

    /// A polite close (RFC 6455 §7.1.1): sends a close frame, then reads
    /// until the server ends the TCP connection, as a client that lets the
    /// server close first does. `true` when the end of stream came within
    /// `patience`.
    pub async fn close_politely(mut self, code: u16, patience: Duration) -> bool {
        self.close(code).await;
        let until_eof = async {
            loop {
                match self.read_frames(|_, _| Flow::Continue).await {
                    Ok(_) => {}
                    Err(e) => return e.kind() == io::ErrorKind::UnexpectedEof,
                }
            }
        };
        tokio::time::timeout(patience, until_eof)
            .await
            .unwrap_or(false)
    }

    /// Calls `f` for every complete frame already buffered; pings are
    /// collected to be answered. Returns (frames seen, whether `f` wants
    /// more, pong payloads).
    fn drain_buffered(
        &mut self,
        f: &mut impl FnMut(u8, &[u8]) -> Flow,
    ) -> io::Result<(usize, bool, Vec<Vec<u8>>)> {
        let mut pongs = Vec::new();
        let mut seen = 0;
        loop {
            let avail = &self.buf[self.start..];
            let Some(h) = parse_head(avail)? else { break };
            let total = h.header + h.len;
            if avail.len() < total {
                // Make room for the rest of a large frame.
                let need = total - avail.len();
                if self.buf.capacity() - self.buf.len() < need {
                    self.compact();
                    self.buf.reserve(need);
                }
                break;
            }
            let payload = &avail[h.header..total];
            // Neither broker fragments the messages used here; a
            // continuation is handed over as the data it carries.
            let op = if h.opcode == OP_CONT {
                OP_BINARY
            } else {
                h.opcode
            };
            if op == OP_PING {
                pongs.push(payload.to_vec());
            }
            let flow = f(op, payload);
            self.start += total;
            seen += 1;
            if flow == Flow::Stop {
                return Ok((seen, false, pongs));
            }
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok((seen, true, pongs))
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Delivers the buffered frames to `f`, first reading from the socket
    /// if none is complete. Returns `Ok(false)` when `f` stopped,
    /// `Err(UnexpectedEof)` when the peer closed the stream.
    pub async fn read_frames(&mut self, mut f: impl FnMut(u8, &[u8]) -> Flow) -> io::Result<bool> {
        loop {
            let (seen, go_on, pongs) = self.drain_buffered(&mut f)?;
            for p in pongs {
                self.send(OP_PONG, &p).await?;
            }
            if seen > 0 || !go_on {
                return Ok(go_on);
            }
            self.fill().await?;
        }
    }

    /// Reads once from the socket into the buffer.
    async fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 && self.buf.capacity() - self.buf.len() < self.read_chunk / 4 {
            self.compact();
        }
        if self.buf.capacity() - self.buf.len() < self.read_chunk / 4 {
            self.buf.reserve(self.read_chunk);
        }
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
        }
        Ok(())
    }

    /// Waits for the first frame for which `pick` returns `Some`, skipping
    /// others, within `patience`.
    pub async fn wait_for<T>(
        &mut self,
        patience: Duration,
        mut pick: impl FnMut(u8, &[u8]) -> Option<T>,
    ) -> io::Result<T> {
        let fut = async {
            loop {
                let mut found = None;
                self.read_frames(|op, p| match pick(op, p) {
                    Some(v) => {
                        found = Some(v);
                        Flow::Stop
                    }
                    None => Flow::Continue,
                })
                .await?;
                if let Some(v) = found {
                    return Ok(v);
                }
            }
        };
        tokio::time::timeout(patience, fut)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))?
    }

    /// The underlying socket (for shutting it down abruptly).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Releases the read buffer's memory (idle connections).
    pub fn shrink(&mut self) {
        self.compact();
        self.buf.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_24_chars_of_base64() {
        let k = random_key(42);
        assert_eq!(k.len(), 24);
        assert!(k.ends_with("=="));
    }
}
