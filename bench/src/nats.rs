//! The NATS client protocol (the text one: `INFO`, `CONNECT`, `SUB`, `PUB`,
//! `MSG`, `PING`, `PONG`, `+OK`, `-ERR`), carried in WebSocket frames as
//! NATS's WebSocket listener expects. A frame may hold several operations
//! and an operation may span frames, so the parser keeps what is left over.

use std::io;

/// One server operation.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerOp<'a> {
    Info,
    Msg { payload: &'a [u8] },
    Ping,
    Pong,
    Ok,
    Err(&'a [u8]),
}

/// Incremental parser of the server's byte stream.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    start: usize,
}

fn line_end(b: &[u8]) -> Option<usize> {
    crate::finder!(b"\r\n").find(b)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("NATS: {what}"))
}

impl Parser {
    /// Feeds bytes from one WebSocket frame; calls `f` for each complete
    /// operation.
    pub fn feed(&mut self, data: &[u8], mut f: impl FnMut(ServerOp<'_>)) -> io::Result<()> {
        if self.start == self.buf.len() {
            // Nothing pending: parse straight from the frame, keep the rest.
            let used = parse_all(data, &mut f)?;
            self.buf.clear();
            self.start = 0;
            self.buf.extend_from_slice(&data[used..]);
            return Ok(());
        }
        self.buf.extend_from_slice(data);
        let used = parse_all(&self.buf[self.start..], &mut f)?;
        self.start += used;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(())
    }
}

/// Parses every complete operation in `b`; returns the bytes consumed.
fn parse_all(b: &[u8], f: &mut impl FnMut(ServerOp<'_>)) -> io::Result<usize> {
    let mut at = 0;
    while at < b.len() {
        let rest = &b[at..];
        let Some(end) = line_end(rest) else { break };
        let line = &rest[..end];
        if line.starts_with(b"MSG ") {
            let len: usize = line
                .rsplit(|&c| c == b' ')
                .next()
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("MSG without a length"))?;
            let total = end + 2 + len + 2;
            if rest.len() < total {
                break;
            }
            f(ServerOp::Msg {
                payload: &rest[end + 2..end + 2 + len],
            });
            at += total;
            continue;
        }
        let op = if line == b"PING" {
            ServerOp::Ping
        } else if line == b"PONG" {
            ServerOp::Pong
        } else if line == b"+OK" {
            ServerOp::Ok
        } else if line.starts_with(b"INFO") {
            ServerOp::Info
        } else if let Some(e) = line.strip_prefix(b"-ERR") {
            ServerOp::Err(e)
        } else {
            return Err(bad(&format!(
                "unexpected line {:?}",
                String::from_utf8_lossy(line)
            )));
        };
        f(op);
        at += end + 2;
    }
    Ok(at)
}

/// `CONNECT` with a token, then `PING` so the `PONG` confirms it.
pub fn connect(token: Option<&str>) -> Vec<u8> {
    let auth = token
        .map(|t| format!(",\"auth_token\":{}", serde_json::Value::from(t)))
        .unwrap_or_default();
    format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"lang\":\"rust\",\"version\":\"bench\",\
         \"protocol\":1,\"headers\":false,\"no_responders\":false{auth}}}\r\nPING\r\n"
    )
    .into_bytes()
}

pub fn sub(subject: &str, sid: u64) -> Vec<u8> {
    format!("SUB {subject} {sid}\r\nPING\r\n").into_bytes()
}

/// `PUB`, followed by `PING` when `ack` so the `PONG` acknowledges it.
pub fn publish(subject: &str, payload: &[u8], ack: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(b"PUB ");
    out.extend_from_slice(subject.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    if ack {
        out.extend_from_slice(b"PING\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(p: &mut Parser, data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        p.feed(data, |op| {
            out.push(match op {
                ServerOp::Msg { payload } => {
                    format!("msg:{}", String::from_utf8_lossy(payload))
                }
                other => format!("{other:?}"),
            })
        })
        .unwrap();
        out
    }

    #[test]
    fn parses_across_frames() {
        let mut p = Parser::default();
        assert_eq!(
            collect(&mut p, b"INFO {\"a\":1}\r\nPING\r\nMSG a 1 5\r\nhel"),
            ["Info", "Ping"]
        );
        assert_eq!(collect(&mut p, b"lo\r\nPONG\r\n"), ["msg:hello", "Pong"]);
        assert_eq!(
            collect(&mut p, b"MSG a.b 1 r 2\r\nhi\r\n-ERR 'x'\r\n"),
            ["msg:hi", "Err([32, 39, 120, 39])"]
        );
    }

    #[test]
    fn publish_frames() {
        let mut out = Vec::new();
        publish("s", b"abc", true, &mut out);
        assert_eq!(out, b"PUB s 3\r\nabc\r\nPING\r\n");
    }
}
