//! Tidegate's SSE streams as the load generator reads them: `GET /v1/sse`
//! naming one channel (§14), the token in `Authorization`, so fan-out
//! over SSE is measured with the same subscribers, publishers and
//! payloads as over `/v1/ws`.

use anyhow::{Context, Result};

use super::frames::tidegate_data;
use super::{Conn, Event, Kind, Target, Who};
use crate::sse::Block;
use crate::ws::Refused;

/// The stream's path.
pub const PATH: &str = "/v1/sse";

impl Target {
    /// Opens a stream on `channel` and waits for its `welcome` event. Its
    /// subscription is live when the channel's position (an `id:` alone,
    /// `Event::Ack`) follows: [`Conn::subscribe`] waits for that. A
    /// refusal is `Ok(Err(..))`.
    pub async fn connect_sse(
        &self,
        who: &Who<'_>,
        channel: &str,
        read_chunk: usize,
        recv_buffer: u32,
    ) -> Result<std::result::Result<Conn, Refused>> {
        let token = match who.token {
            Some(t) => t.to_string(),
            None => self.token(who).unwrap_or_default(),
        };
        // Channel names need no escaping in a query (`doc:name`).
        let path = format!("{PATH}?channel={channel}");
        let opened = crate::sse::open(self.addr, &path, &token, read_chunk, recv_buffer).await?;
        let (ws, decoder) = match opened {
            Ok(o) => o,
            Err(r) => return Ok(Err(r)),
        };
        let mut conn = Conn::new(Kind::Sse, ws);
        conn.sse = decoder;
        conn.wait_event(|e| matches!(e, Event::Info).then_some(()))
            .await
            .context("waiting for the welcome event")?;
        Ok(Ok(conn))
    }
}

/// What an SSE event means to a scenario: `message` carries the socket's
/// message JSON without its `"type"` (so its `data` is found the same
/// way), `welcome` is `Event::Info`, an `id:` alone is `Event::Ack`,
/// `close` is `Event::Closed` with its code.
pub fn classify(b: Block<'_>) -> Event<'_> {
    match b.event {
        b"message" => match tidegate_data(b.data) {
            Some(data) => Event::Message { data },
            None => Event::Other,
        },
        b"welcome" => Event::Info,
        b"close" => {
            let v: serde_json::Value = serde_json::from_slice(b.data).unwrap_or_default();
            Event::Closed {
                code: v["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
            }
        }
        b"" if b.has_id && b.data.is_empty() => Event::Ack,
        _ => Event::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<'a>(event: &'a [u8], data: &'a [u8], has_id: bool) -> Block<'a> {
        Block {
            event,
            data,
            has_id,
        }
    }

    #[test]
    fn message_data_and_the_live_position() {
        let m = br#"{"channel":"doc:a","seq":3,"data":"abc"}"#;
        match classify(block(b"message", m, true)) {
            Event::Message { data } => assert_eq!(data, br#""abc""#),
            e => panic!("{e:?}"),
        }
        assert!(matches!(classify(block(b"", b"", true)), Event::Ack));
        assert!(matches!(classify(block(b"", b"", false)), Event::Other));
        let close = br#"{"code":4008,"reason":"slow"}"#;
        assert!(matches!(
            classify(block(b"close", close, true)),
            Event::Closed { code: Some(4008) }
        ));
    }
}
