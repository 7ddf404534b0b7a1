//! A minimal Server-Sent Events reader for load generation (Tidegate's
//! `GET /v1/sse`, PROTOCOL.md §14).
//!
//! Plain HTTP/1.1, no WebSocket framing: the request is written here (the
//! token in `Authorization`, so a refusal is reported with its status and
//! body as for an upgrade), the response must be `200` with
//! `text/event-stream`, and its body (chunked, as actix sends a streaming
//! body, or not) is decoded into events: blocks of `field: value` lines
//! ended by a blank line. Each event goes to a callback as borrowed
//! slices, as `ws.rs` hands over frames; the only copy is the de-chunking
//! into one buffer per stream.

use std::io;
use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;

use crate::ws::{self, Flow, Refused, Ws};

/// One event as the stream wrote it (§14: `id:` / `event:` / `data:`).
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// `event:` (empty when the block has none).
    pub event: &'a [u8],
    /// The `data:` lines joined with `\n` (empty when none).
    pub data: &'a [u8],
    /// Whether the block carried an `id:` (a block with only an `id:`
    /// moves the reader's position without dispatching anything).
    pub has_id: bool,
}

/// Opens `GET path` on `addr` with a bearer token. `Ok(Err(..))` is a
/// refusal; a `200` that is not an event stream is an error. Returns the
/// stream (its buffer holding the body bytes read with the head) and its
/// decoder.
pub async fn open(
    addr: SocketAddr,
    path: &str,
    token: &str,
    read_chunk: usize,
    recv_buffer: u32,
) -> io::Result<Result<(Ws, Decoder), Refused>> {
    let mut stream = ws::connect(addr, recv_buffer).await?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
         Cache-Control: no-cache\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await?;
    let (head, body, status) = ws::read_head(&mut stream).await?;
    if status != 200 {
        return Ok(Err(ws::refusal(&mut stream, &head, body).await));
    }
    let content_type = ws::header(&head, "content-type").unwrap_or_default();
    if !content_type.starts_with("text/event-stream") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("200 with content-type {content_type:?}, not text/event-stream"),
        ));
    }
    let chunked = ws::header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    Ok(Ok((
        Ws::plain(stream, body, read_chunk),
        Decoder::new(chunked),
    )))
}

/// Where the chunked framing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// Inside a chunk with this many bytes left.
    Data(usize),
    /// Skipping the line break after a chunk's data.
    End,
    /// The last (zero-size) chunk came: the body is over.
    Done,
}

/// A stream body's decoder: chunked framing off, then events.
#[derive(Debug)]
pub struct Decoder {
    chunked: bool,
    chunk: Chunk,
    /// A chunk-size line split across reads (a few bytes).
    line: Vec<u8>,
    /// De-chunked body not yet handed over: at most one partial event
    /// plus one read (`events` consumes every complete one).
    text: Vec<u8>,
    /// Start of what is not yet handed over in `text`.
    start: usize,
    /// Multi-line `data:` joined (only for events with several lines).
    joined: Vec<u8>,
}

impl Decoder {
    pub fn new(chunked: bool) -> Decoder {
        Decoder {
            chunked,
            chunk: Chunk::Size,
            line: Vec::new(),
            text: Vec::new(),
            start: 0,
            joined: Vec::new(),
        }
    }

    /// Takes bytes of the body as they came off the socket.
    pub fn feed(&mut self, mut raw: &[u8]) -> io::Result<()> {
        if !self.chunked {
            self.text.extend_from_slice(raw);
            return Ok(());
        }
        while !raw.is_empty() {
            match self.chunk {
                Chunk::Size | Chunk::End => {
                    let Some(i) = raw.iter().position(|b| *b == b'\n') else {
                        if self.chunk == Chunk::Size {
                            self.line.extend_from_slice(raw);
                        }
                        return Ok(());
                    };
                    if self.chunk == Chunk::End {
                        self.chunk = Chunk::Size;
                    } else {
                        self.line.extend_from_slice(&raw[..i]);
                        let n = chunk_size(&self.line)?;
                        self.line.clear();
                        self.chunk = if n == 0 { Chunk::Done } else { Chunk::Data(n) };
                    }
                    raw = &raw[i + 1..];
                }
                Chunk::Data(left) => {
                    let take = left.min(raw.len());
                    self.text.extend_from_slice(&raw[..take]);
                    raw = &raw[take..];
                    self.chunk = if take == left {
                        Chunk::End
                    } else {
                        Chunk::Data(left - take)
                    };
                }
                Chunk::Done => return Ok(()),
            }
        }
        Ok(())
    }

    /// Whether the body ended (the zero-size chunk).
    pub fn done(&self) -> bool {
        self.chunk == Chunk::Done
    }

    /// Calls `f` for every complete event decoded; `Flow::Stop` leaves the
    /// rest for the next call. Returns (events seen, whether `f` wants
    /// more). Comments (`: ping`) and `retry:` are blocks with nothing in
    /// them; lines end with `\n` (what Tidegate writes). One pass over the
    /// bytes, line ends found with `memchr`: this runs for every event of
    /// every stream, on the load generator's one core.
    pub fn events(&mut self, mut f: impl FnMut(Block<'_>) -> Flow) -> (usize, bool) {
        let Decoder {
            text,
            start,
            joined,
            ..
        } = self;
        let mut seen = 0;
        let mut go_on = true;
        'events: while *start < text.len() {
            let (mut event, mut has_id, mut lines) = (&b""[..], false, 0);
            let mut data: &[u8] = b"";
            let mut at = *start;
            joined.clear();
            loop {
                let Some(len) = memchr::memchr(b'\n', &text[at..]) else {
                    // An incomplete event: it waits for more bytes.
                    break 'events;
                };
                let line = &text[at..at + len];
                at += len + 1;
                if line.is_empty() {
                    break;
                }
                let (name, value) = field(line);
                match name {
                    b"event" => event = value,
                    b"id" => has_id = true,
                    b"data" => {
                        if lines > 0 {
                            if lines == 1 {
                                joined.extend_from_slice(data);
                            }
                            joined.push(b'\n');
                            joined.extend_from_slice(value);
                        }
                        data = value;
                        lines += 1;
                    }
                    _ => {}
                }
            }
            *start = at;
            if lines > 1 {
                data = joined;
            }
            seen += 1;
            if f(Block {
                event,
                data,
                has_id,
            }) == Flow::Stop
            {
                go_on = false;
                break;
            }
        }
        if *start == text.len() {
            text.clear();
            *start = 0;
        } else if *start > text.len() / 2 {
            text.drain(..*start);
            *start = 0;
        }
        (seen, go_on)
    }

    /// Releases the buffers' memory (idle streams).
    pub fn shrink(&mut self) {
        self.text.drain(..self.start);
        self.start = 0;
        self.text.shrink_to_fit();
        self.joined = Vec::new();
    }
}

/// A line's field name and value (one leading space off the value); a
/// comment (`: ping`) is a field with no name.
fn field(line: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b':', line) {
        Some(i) => {
            let v = &line[i + 1..];
            (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
        }
        None => (line, &b""[..]),
    }
}

/// A chunk-size line: hex digits, maybe `;extensions`, maybe `\r`.
fn chunk_size(line: &[u8]) -> io::Result<usize> {
    let hex = line.split(|b| *b == b';').next().unwrap_or_default();
    std::str::from_utf8(hex)
        .ok()
        .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad chunk size {:?}", String::from_utf8_lossy(line)),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(d: &mut Decoder) -> Vec<(String, String, bool)> {
        let mut out = Vec::new();
        d.events(|b| {
            let s = |x: &[u8]| String::from_utf8_lossy(x).into_owned();
            out.push((s(b.event), s(b.data), b.has_id));
            Flow::Continue
        });
        out
    }

    #[test]
    fn chunks_split_anywhere_make_the_same_events() {
        let body = "id: a\nevent: welcome\ndata: {\"w\":1}\n\n: ping\n\nid: b\n\n\
                    id: c\nevent: message\ndata: {\"x\":\ndata: 2}\n\n";
        let mut wire = Vec::new();
        for part in [&body[..7], &body[7..40], &body[40..]] {
            wire.extend_from_slice(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes());
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        for step in [1, 3, wire.len()] {
            let mut d = Decoder::new(true);
            let mut got = Vec::new();
            for piece in wire.chunks(step) {
                d.feed(piece).unwrap();
                got.extend(collect(&mut d));
            }
            let want = vec![
                ("welcome".into(), "{\"w\":1}".into(), true),
                (String::new(), String::new(), false),
                (String::new(), String::new(), true),
                ("message".into(), "{\"x\":\n2}".into(), true),
            ];
            assert_eq!(got, want, "step {step}");
            assert!(d.done());
        }
    }

    #[test]
    fn a_bad_chunk_size_is_an_error() {
        let mut d = Decoder::new(true);
        assert!(d.feed(b"zz\r\nabc").is_err());
    }

    #[test]
    fn stop_leaves_the_rest_for_later() {
        let mut d = Decoder::new(false);
        d.feed(b"event: a\n\nevent: b\n\nevent: c").unwrap();
        let mut n = 0;
        assert_eq!(
            d.events(|_| {
                n += 1;
                Flow::Stop
            }),
            (1, false)
        );
        assert_eq!(collect(&mut d).len(), 1);
        d.feed(b"\n\n").unwrap();
        assert_eq!(collect(&mut d)[0].0, "c");
    }
}
