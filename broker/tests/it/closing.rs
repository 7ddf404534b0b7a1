//! Closing handshakes as RFC 6455 §7.1.1 has them: the server closes TCP
//! first. A polite client (one that sends or answers a close frame, then
//! waits for the server's end of stream) must see the close answered and
//! the connection end, and the broker must stop counting it.
//!
//! The brokers here set `close_timeout_ms` far above the suite's
//! `PATIENCE`: it also bounds how long a finished connection may linger,
//! so a broker that waited for the client to close first would make these
//! tests time out instead of passing late.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Broker, PATIENCE, masked_text, raw_upgrade};

const PATIENT_CLOSE: &str = "[socket]\nclose_timeout_ms = 60000\n";

const OP_TEXT: u8 = 0x1;
const OP_CLOSE: u8 = 0x8;

/// A masked client close frame with `code`.
fn masked_close(code: u16) -> Vec<u8> {
    let mask = [9u8, 8, 7, 6];
    let mut f = vec![0x80 | OP_CLOSE, 0x80 | 2];
    f.extend_from_slice(&mask);
    f.extend(
        code.to_be_bytes()
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4]),
    );
    f
}

/// One server frame: opcode and payload (server frames are unmasked).
#[derive(Debug)]
struct Frame {
    opcode: u8,
    payload: Vec<u8>,
}

impl Frame {
    fn close_code(&self) -> Option<u16> {
        (self.opcode == OP_CLOSE && self.payload.len() >= 2)
            .then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }
}

/// Splits the whole frames off the front of `buf`.
fn take_frames(buf: &mut Vec<u8>) -> Vec<Frame> {
    let mut frames = Vec::new();
    loop {
        if buf.len() < 2 {
            return frames;
        }
        assert_eq!(buf[1] & 0x80, 0, "a server frame is never masked");
        let (len, head) = match buf[1] & 0x7f {
            126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
            127 if buf.len() >= 10 => (
                usize::try_from(u64::from_be_bytes(buf[2..10].try_into().unwrap())).unwrap(),
                10,
            ),
            126 | 127 => return frames,
            n => (usize::from(n), 2),
        };
        if buf.len() < head + len {
            return frames;
        }
        let opcode = buf[0] & 0x0f;
        let payload = buf[head..head + len].to_vec();
        buf.drain(..head + len);
        frames.push(Frame { opcode, payload });
    }
}

/// Reads frames until a close frame; returns every frame read.
async fn until_close(s: &mut TcpStream) -> Vec<Frame> {
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        frames.extend(take_frames(&mut buf));
        if frames.iter().any(|f| f.opcode == OP_CLOSE) {
            assert!(buf.is_empty(), "bytes after the close frame");
            return frames;
        }
        let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
            .await
            .expect("no close frame in time")
            .expect("read");
        assert!(n > 0, "the connection ended without a close frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads to the end of the stream (the server's FIN), which must come
/// without the client closing anything; returns the frames read.
async fn until_eof(s: &mut TcpStream) -> Vec<Frame> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
            .await
            .expect("the server did not close the TCP connection")
            .expect("the server ended the connection with a reset, not a close");
        if n == 0 {
            let frames = take_frames(&mut buf);
            assert!(buf.is_empty(), "a partial frame before the end of stream");
            return frames;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The client closes: the broker answers with the same code, then ends
/// the TCP connection, and stops counting the socket.
#[tokio::test]
async fn a_client_close_is_answered_then_the_server_closes_tcp() {
    let broker = Broker::start(PATIENT_CLOSE);
    let mut s = raw_upgrade(broker.addr, &broker.token("acme")).await;
    let welcome = until_first_text(&mut s).await;
    assert!(welcome.contains("\"welcome\""), "{welcome}");
    assert_eq!(
        broker
            .metric("tidegate_connections{transport=\"ws\"}")
            .await,
        1.0
    );

    s.write_all(&masked_close(1000)).await.unwrap();
    let frames = until_eof(&mut s).await;
    let last = frames.last().expect("the close frame was answered");
    assert_eq!(last.close_code(), Some(1000), "{frames:?}");
    assert!(
        frames[..frames.len() - 1]
            .iter()
            .all(|f| f.opcode != OP_CLOSE),
        "{frames:?}"
    );
    // The socket stopped before its last frame went out.
    assert!(broker.node.sockets.is_empty());
    assert_eq!(
        broker
            .metric("tidegate_connections{transport=\"ws\"}")
            .await,
        0.0
    );
}

/// A close code the client chose (4000–4999) is echoed as it was sent.
#[tokio::test]
async fn an_application_close_code_is_echoed_then_tcp_closed() {
    let broker = Broker::start(PATIENT_CLOSE);
    let mut s = raw_upgrade(broker.addr, &broker.token("acme")).await;
    until_first_text(&mut s).await;
    s.write_all(&masked_close(4321)).await.unwrap();
    let frames = until_eof(&mut s).await;
    assert_eq!(frames.last().and_then(Frame::close_code), Some(4321));
    assert_eq!(
        broker
            .metric("tidegate_connections{transport=\"ws\"}")
            .await,
        0.0
    );
}

/// The broker closes (a message over the payload limit, 1009): the client
/// answers the close frame and waits, and the broker ends TCP.
#[tokio::test]
async fn a_server_close_for_a_limit_ends_tcp_once_answered() {
    let broker = Broker::start(&format!(
        "{PATIENT_CLOSE}[plans.free]\nmax_payload_bytes = 1024\n"
    ));
    let mut s = raw_upgrade(broker.addr, &broker.token("acme")).await;
    until_first_text(&mut s).await;
    s.write_all(&masked_text(&[b'x'; 1025])).await.unwrap();
    let frames = until_close(&mut s).await;
    assert_eq!(frames.last().and_then(Frame::close_code), Some(1009));

    s.write_all(&masked_close(1009)).await.unwrap();
    let after = until_eof(&mut s).await;
    assert!(after.is_empty(), "frames after the close frame: {after:?}");
    assert!(broker.node.sockets.is_empty());
    assert_eq!(
        broker
            .metric("tidegate_connections{transport=\"ws\"}")
            .await,
        0.0
    );
}

/// The drain (1012) is a server close too: answered, then TCP ends.
#[tokio::test]
async fn a_drain_close_ends_tcp_once_answered() {
    let broker = Broker::start(PATIENT_CLOSE);
    let node = broker.node.clone();
    let mut s = raw_upgrade(broker.addr, &broker.token("acme")).await;
    until_first_text(&mut s).await;
    // Dropping the broker drains it (and waits for the server to stop).
    let stopping = tokio::task::spawn_blocking(move || drop(broker));
    let frames = until_close(&mut s).await;
    assert_eq!(frames.last().and_then(Frame::close_code), Some(1012));

    s.write_all(&masked_close(1012)).await.unwrap();
    let after = until_eof(&mut s).await;
    assert!(after.is_empty(), "frames after the close frame: {after:?}");
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("the broker did not stop")
        .unwrap();
    assert!(node.sockets.is_empty());
    assert_eq!(node.metrics.connections("ws"), 0);
}

/// Reads up to and including the first text frame; returns its text.
async fn until_first_text(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if let Some(f) = take_frames(&mut buf)
            .into_iter()
            .find(|f| f.opcode == OP_TEXT)
        {
            return String::from_utf8(f.payload).unwrap();
        }
        let n = tokio::time::timeout(PATIENCE, s.read(&mut chunk))
            .await
            .expect("no text frame in time")
            .expect("read");
        assert!(n > 0, "the connection ended before any text frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}
