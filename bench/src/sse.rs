//! A minimal Server-Sent Events reader for load generation (Tidegate's
//! `GET /v1/sse`, PROTOCOL.md §14).
//!
//! Plain HTTP/1.1, no WebSocket framing: the request is written here (the
//! token in `Authorization`, so a refusal is reported with its status and
//! body as for an upgrade), the response must be `200` with
//! `text/event-stream`, and its body (chunked, as actix sends a streaming
//! body, or not) is decoded into events: blocks of `field: value` lines
//! ended by a blank line. Each event goes to a callback as borrowed
//! slices of the read buffer, as `ws.rs` hands over frames; the only copy
//! is of an event a read or a chunk boundary split.

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

/// A stream body's decoder: chunked framing off, then events, parsed
/// where the read put them.
///
/// Each chunk's data is parsed in the read buffer itself, one `memchr`
/// pass finding its line ends; only the start of an event a read (or a
/// chunk) split is copied, into `carry`, and completed from the next
/// bytes. The first version de-chunked every byte into a buffer of its
/// own and searched each line separately: about 93 ns of load-generator
/// CPU per message more than reading a `/v1/ws` frame, enough to make the
/// client, not the broker, the limit (bench/README, stop 37).
#[derive(Debug)]
pub struct Decoder {
    chunked: bool,
    chunk: Chunk,
    /// A chunk-size line split across reads (a few bytes).
    line: Vec<u8>,
    /// Body bytes not yet handed over: the start of one event a read
    /// split, or, after `Flow::Stop`, the rest of that read.
    carry: Vec<u8>,
    /// Start of what is not yet handed over in `carry`.
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
            carry: Vec::new(),
            start: 0,
            joined: Vec::new(),
        }
    }

    /// Whether the body ended (the zero-size chunk).
    pub fn done(&self) -> bool {
        self.chunk == Chunk::Done
    }

    /// Calls `f` for every complete event already buffered (what a
    /// `Flow::Stop` left); `Flow::Stop` leaves the rest for the next
    /// call. Returns (events seen, whether `f` wants more).
    pub fn events(&mut self, mut f: impl FnMut(Block<'_>) -> Flow) -> (usize, bool) {
        self.buffered(&mut f)
    }

    /// Takes bytes of the body as they came off the socket and calls `f`
    /// for every event they complete, as [`Decoder::events`] does.
    pub fn feed_events(
        &mut self,
        mut raw: &[u8],
        mut f: impl FnMut(Block<'_>) -> Flow,
    ) -> io::Result<(usize, bool)> {
        let (mut seen, mut go_on) = (0, true);
        while let Some(seg) = self.segment(&mut raw)? {
            if go_on {
                let (s, g) = self.parse_segment(seg, &mut f);
                seen += s;
                go_on = g;
            } else {
                self.carry.extend_from_slice(seg);
            }
        }
        Ok((seen, go_on))
    }

    /// Releases the buffers' memory (idle streams).
    pub fn shrink(&mut self) {
        self.carry.drain(..self.start);
        self.start = 0;
        self.carry.shrink_to_fit();
        self.joined = Vec::new();
    }

    /// The next run of body bytes in `raw` (a chunk's data, or all of an
    /// unchunked body), chunk framing consumed.
    fn segment<'r>(&mut self, raw: &mut &'r [u8]) -> io::Result<Option<&'r [u8]>> {
        if !self.chunked {
            return Ok((!raw.is_empty()).then(|| std::mem::take(raw)));
        }
        while !raw.is_empty() {
            match self.chunk {
                Chunk::Size | Chunk::End => {
                    let Some(i) = memchr::memchr(b'\n', raw) else {
                        if self.chunk == Chunk::Size {
                            self.line.extend_from_slice(raw);
                        }
                        return Ok(None);
                    };
                    if self.chunk == Chunk::End {
                        self.chunk = Chunk::Size;
                    } else {
                        self.line.extend_from_slice(&raw[..i]);
                        let n = chunk_size(&self.line)?;
                        self.line.clear();
                        self.chunk = if n == 0 { Chunk::Done } else { Chunk::Data(n) };
                    }
                    *raw = &raw[i + 1..];
                }
                Chunk::Data(left) => {
                    let take = left.min(raw.len());
                    let (seg, rest) = raw.split_at(take);
                    *raw = rest;
                    self.chunk = if take == left {
                        Chunk::End
                    } else {
                        Chunk::Data(left - take)
                    };
                    return Ok(Some(seg));
                }
                Chunk::Done => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Hands over the events in `seg`: first the one `carry` holds the
    /// start of (completed from `seg`), then the rest in place; an
    /// incomplete last event goes to `carry`.
    fn parse_segment(
        &mut self,
        mut seg: &[u8],
        f: &mut impl FnMut(Block<'_>) -> Flow,
    ) -> (usize, bool) {
        let mut seen = 0;
        if self.carry.len() > self.start {
            // The carried event ends at the first blank line.
            let end = if self.carry.last() == Some(&b'\n') && seg.first() == Some(&b'\n') {
                Some(1)
            } else {
                crate::finder!(b"\n\n").find(seg).map(|i| i + 2)
            };
            let Some(end) = end else {
                self.carry.extend_from_slice(seg);
                return (0, true);
            };
            self.carry.extend_from_slice(&seg[..end]);
            seg = &seg[end..];
            let (s, go_on) = self.buffered(f);
            seen += s;
            if !go_on {
                self.carry.extend_from_slice(seg);
                return (seen, false);
            }
        }
        let (used, s, go_on) = parse(seg, &mut self.joined, f);
        self.carry.extend_from_slice(&seg[used..]);
        (seen + s, go_on)
    }

    /// Hands over the complete events in `carry`.
    fn buffered(&mut self, f: &mut impl FnMut(Block<'_>) -> Flow) -> (usize, bool) {
        let Decoder {
            carry,
            start,
            joined,
            ..
        } = self;
        let (used, seen, go_on) = parse(&carry[*start..], joined, f);
        *start += used;
        if *start == carry.len() {
            carry.clear();
            *start = 0;
        } else if *start > carry.len() / 2 {
            carry.drain(..*start);
            *start = 0;
        }
        (seen, go_on)
    }
}

/// Calls `f` for each complete event in `text` (lines end with `\n`, as
/// Tidegate writes them; comments and `retry:` are blocks with nothing in
/// them). Returns (bytes used, events seen, whether `f` wants more): an
/// incomplete last event, or what follows a `Flow::Stop`, is not used.
fn parse(
    text: &[u8],
    joined: &mut Vec<u8>,
    f: &mut impl FnMut(Block<'_>) -> Flow,
) -> (usize, usize, bool) {
    let (mut used, mut seen, mut at) = (0, 0, 0);
    let (mut event, mut data, mut has_id, mut lines) = (&b""[..], &b""[..], false, 0);
    joined.clear();
    for end in memchr::memchr_iter(b'\n', text) {
        let line = &text[at..end];
        at = end + 1;
        if line.is_empty() {
            seen += 1;
            let flow = f(Block {
                event,
                data: if lines > 1 { &joined[..] } else { data },
                has_id,
            });
            used = at;
            (event, data, has_id, lines) = (&b""[..], &b""[..], false, 0);
            joined.clear();
            if flow == Flow::Stop {
                return (used, seen, false);
            }
            continue;
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
    (used, seen, true)
}

/// A line's field name and value (one leading space off the value); a
/// comment (`: ping`) is a field with no name. The three fields Tidegate
/// writes on every message are matched by prefix before any search.
fn field(line: &[u8]) -> (&[u8], &[u8]) {
    for name in [&b"data"[..], b"id", b"event"] {
        if let Some(rest) = line.strip_prefix(name)
            && let Some(value) = rest.strip_prefix(b": ")
        {
            return (name, value);
        }
    }
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

    type Got = Vec<(String, String, bool)>;

    fn push(out: &mut Got, b: Block<'_>) -> Flow {
        let s = |x: &[u8]| String::from_utf8_lossy(x).into_owned();
        out.push((s(b.event), s(b.data), b.has_id));
        Flow::Continue
    }

    fn collect(d: &mut Decoder) -> Got {
        let mut out = Vec::new();
        d.events(|b| push(&mut out, b));
        out
    }

    fn feed(d: &mut Decoder, raw: &[u8]) -> Got {
        let mut out = Vec::new();
        d.feed_events(raw, |b| push(&mut out, b)).unwrap();
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
                got.extend(feed(&mut d, piece));
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
    fn fields_by_prefix_and_by_search_agree() {
        let cases: [(&[u8], &[u8], &[u8]); 7] = [
            (b"data: {}", b"data", b"{}"),
            (b"data:{}", b"data", b"{}"),
            (b"database: x", b"database", b"x"),
            (b"id: ", b"id", b""),
            (b"id", b"id", b""),
            (b"event: message", b"event", b"message"),
            (b": ping", b"", b"ping"),
        ];
        for (line, name, value) in cases {
            assert_eq!(field(line), (name, value), "{line:?}");
        }
    }

    #[test]
    fn a_bad_chunk_size_is_an_error() {
        let mut d = Decoder::new(true);
        assert!(d.feed_events(b"zz\r\nabc", |_| Flow::Continue).is_err());
    }

    #[test]
    fn stop_leaves_the_rest_for_later() {
        let mut d = Decoder::new(false);
        let mut n = 0;
        let stop_each = |_: Block<'_>| {
            n += 1;
            Flow::Stop
        };
        let fed = d.feed_events(b"event: a\n\nevent: b\n\nevent: c", stop_each);
        assert_eq!(fed.unwrap(), (1, false));
        assert_eq!(n, 1);
        assert_eq!(collect(&mut d), [("b".into(), String::new(), false)]);
        assert_eq!(feed(&mut d, b"\n\n")[0].0, "c");
    }

    #[test]
    fn stop_in_one_chunk_keeps_the_chunks_after_it() {
        let mut d = Decoder::new(true);
        let mut wire = Vec::new();
        for part in ["id: 1\n\n", "event: x\ndata: 2", "\n\n\n"] {
            wire.extend_from_slice(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes());
        }
        let fed = d.feed_events(&wire, |_| Flow::Stop).unwrap();
        assert_eq!(fed, (1, false));
        let want = vec![
            ("x".into(), "2".into(), false),
            (String::new(), String::new(), false),
        ];
        assert_eq!(collect(&mut d), want);
        assert!(collect(&mut d).is_empty());
    }

    #[test]
    fn an_event_without_data_after_one_with_data_has_none() {
        let mut d = Decoder::new(false);
        let got = feed(&mut d, b"data: a\ndata: b\n\nid: 2\n\ndata: c\n\n");
        let want = vec![
            (String::new(), "a\nb".into(), false),
            (String::new(), String::new(), true),
            (String::new(), "c".into(), false),
        ];
        assert_eq!(got, want);
    }
}
