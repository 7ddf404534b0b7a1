//! An SSE stream's position (§14): the last `seq` of every channel of the
//! stream, as the opaque `id:` an `EventSource` sends back in
//! `Last-Event-ID` when it reconnects.
//!
//! The token is base64url (no padding) of `channel seq` pairs joined by
//! `,`: channel names never contain a space or a comma (§2's charset), so
//! the text needs no escaping, and base64url keeps it opaque and safe in a
//! header. It is at most [`MAX_POSITION_BYTES`] so it fits a proxy's header
//! buffers; a stream whose channels could not fit is refused at the start.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use thiserror::Error;

use super::channel;

/// The longest position token (§14: it must fit a proxy's header buffers).
pub const MAX_POSITION_BYTES: usize = 4096;

/// The digits of the largest `seq` (below 2^53, §11's clock-based floor).
const MAX_SEQ_DIGITS: usize = 16;

/// Why a `Last-Event-ID` is not a position this broker wrote.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PositionError {
    #[error("the position is longer than {MAX_POSITION_BYTES} bytes")]
    TooLong,
    #[error("the position is not base64url")]
    NotBase64,
    #[error("the position does not name channels and seqs")]
    Malformed,
    #[error("the position names an invalid channel: {0}")]
    BadChannel(&'static str),
}

/// Each channel's last `seq` (channels in the order the stream named
/// them; bounded by the stream's subscriptions, §0's `maxSubscriptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position(Vec<(String, u64)>);

impl Position {
    /// The `seq` recorded for `channel`.
    pub fn get(&self, channel: &str) -> Option<u64> {
        self.0.iter().find(|(c, _)| c == channel).map(|(_, s)| *s)
    }

    /// Records `seq` as `channel`'s last.
    pub fn set(&mut self, channel: &str, seq: u64) {
        match self.0.iter_mut().find(|(c, _)| c == channel) {
            Some((_, s)) => *s = seq,
            None => self.0.push((channel.to_owned(), seq)),
        }
    }

    /// Keeps only the channels `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|(c, _)| keep(c));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The opaque token.
    pub fn encode(&self) -> String {
        let mut token = String::new();
        self.encode_into(&mut String::new(), &mut token);
        token
    }

    /// [`Position::encode`] into `token` (cleared first), with `text` as
    /// scratch: a stream writes a position with every event, so it keeps
    /// both buffers instead of allocating two strings per event.
    pub fn encode_into(&self, text: &mut String, token: &mut String) {
        text.clear();
        token.clear();
        let mut n = itoa::Buffer::new();
        for (i, (channel, seq)) in self.0.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(channel);
            text.push(' ');
            text.push_str(n.format(*seq));
        }
        URL_SAFE_NO_PAD.encode_string(text.as_bytes(), token);
    }

    /// Reads a token [`Position::encode`] wrote.
    pub fn decode(token: &str) -> Result<Position, PositionError> {
        if token.len() > MAX_POSITION_BYTES {
            return Err(PositionError::TooLong);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim())
            .map_err(|_| PositionError::NotBase64)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| PositionError::Malformed)?;
        let mut position = Position::default();
        if text.is_empty() {
            return Ok(position);
        }
        for pair in text.split(',') {
            let (channel, seq) = pair.split_once(' ').ok_or(PositionError::Malformed)?;
            channel::validate(channel).map_err(PositionError::BadChannel)?;
            let seq: u64 = seq.parse().map_err(|_| PositionError::Malformed)?;
            position.set(channel, seq);
        }
        Ok(position)
    }

    /// Whether a position naming every one of `channels` (at the largest
    /// `seq`) fits [`MAX_POSITION_BYTES`].
    pub fn fits<'a>(channels: impl IntoIterator<Item = &'a str>) -> bool {
        let text: usize = channels
            .into_iter()
            .map(|c| c.len() + 2 + MAX_SEQ_DIGITS)
            .sum();
        text.div_ceil(3) * 4 <= MAX_POSITION_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_header_safe() {
        let mut p = Position::default();
        p.set("doc:1", 1188);
        p.set("a.b@c=d-e_f", 9_007_199_254_740_000);
        p.set("doc:1", 1189);
        let token = p.encode();
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        let back = Position::decode(&token).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.get("doc:1"), Some(1189));
        assert_eq!(Position::decode("").unwrap(), Position::default());
    }

    #[test]
    fn malformed_tokens_are_named() {
        let enc = |t: &str| URL_SAFE_NO_PAD.encode(t);
        assert_eq!(Position::decode("*!"), Err(PositionError::NotBase64));
        assert_eq!(
            Position::decode(&enc("doc:1")),
            Err(PositionError::Malformed)
        );
        assert_eq!(
            Position::decode(&enc("doc:1 x")),
            Err(PositionError::Malformed)
        );
        assert!(matches!(
            Position::decode(&enc("bad channel 1")),
            Err(PositionError::Malformed | PositionError::BadChannel(_))
        ));
        assert!(matches!(
            Position::decode(&enc("doc/1 1")),
            Err(PositionError::BadChannel(_))
        ));
        assert_eq!(
            Position::decode(&"A".repeat(MAX_POSITION_BYTES + 1)),
            Err(PositionError::TooLong)
        );
    }

    #[test]
    fn fits_bounds_the_token() {
        let long: Vec<String> = (0..100).map(|i| format!("{i:0>128}")).collect();
        assert!(!Position::fits(long.iter().map(String::as_str)));
        let mut p = Position::default();
        let short: Vec<String> = (0..100).map(|i| format!("doc:{i}")).collect();
        assert!(Position::fits(short.iter().map(String::as_str)));
        for c in &short {
            p.set(c, 9_007_199_254_740_991);
        }
        assert!(p.encode().len() <= MAX_POSITION_BYTES);
    }
}
