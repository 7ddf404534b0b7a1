//! An SSE stream's position (§14): the last `seq` of every channel of the
//! stream, as the opaque `id:` an `EventSource` sends back in
//! `Last-Event-ID` when it reconnects.
//!
//! The token is base64url (no padding) of `channel seq` pairs joined by
//! `,`: channel names never contain a space or a comma (§2's charset), so
//! the text needs no escaping, and base64url keeps it opaque and safe in a
//! header. It is at most [`MAX_POSITION_BYTES`] so it fits a proxy's header
//! buffers; a stream whose channels could not fit is refused at the start.
//!
//! A stream writes its position with every event, and an event moves one
//! channel's `seq`, so the token is kept per pair: each pair's text (its
//! `,` included) is padded to whole 3-byte groups with leading zeros on
//! the `seq`, which makes its base64 independent of the pairs around it.
//! An event re-encodes one pair and copies the others' encoded parts. The
//! padded text is still `channel seq` pairs (`"doc:1 0042"` reads as 42),
//! so tokens written before the padding, and readers that decode tokens
//! (the SDK's `decodePosition`, a broker of an earlier build during a
//! rolling upgrade), read both alike.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::{BufMut, BytesMut};
use thiserror::Error;

use super::channel;

/// The longest position token (§14: it must fit a proxy's header buffers).
pub const MAX_POSITION_BYTES: usize = 4096;

/// The digits of the largest `seq` (below 2^53, §11's clock-based floor).
const MAX_SEQ_DIGITS: usize = 16;

/// The longest pair text: `,`, a channel, a space, two padding zeros and
/// a `u64`'s 20 digits.
const MAX_PAIR_TEXT: usize = 1 + channel::MAX_CHANNEL_LEN + 1 + 2 + 20;

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

/// One channel's `seq`, with its part of the token.
#[derive(Debug, Clone)]
struct Pair {
    channel: String,
    seq: u64,
    /// The pair's encoded part ([`pair_token`]); empty while it must be
    /// written again. At most `4 / 3 * MAX_PAIR_TEXT` bytes.
    token: String,
}

/// Each channel's last `seq` (channels in the order the stream named
/// them; bounded by the stream's subscriptions, §0's `maxSubscriptions`).
#[derive(Debug, Clone, Default)]
pub struct Position(Vec<Pair>);

impl PartialEq for Position {
    fn eq(&self, other: &Position) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|(a, b)| a.channel == b.channel && a.seq == b.seq)
    }
}

impl Eq for Position {}

/// Appends the encoded part of the pair `channel seq` to `token`: the
/// first pair of a token, or (`first` false) a later one, with its `,`.
/// The text is padded to whole base64 groups (leading zeros on `seq`), so
/// parts concatenate into the token of the pairs joined.
pub fn pair_token(first: bool, channel: &str, seq: u64, token: &mut String) {
    let mut text = [0u8; MAX_PAIR_TEXT];
    let mut n = itoa::Buffer::new();
    let digits = n.format(seq).as_bytes();
    // Channel names are at most MAX_CHANNEL_LEN bytes (validated before a
    // position names them).
    let channel = &channel.as_bytes()[..channel.len().min(channel::MAX_CHANNEL_LEN)];
    let comma = usize::from(!first);
    let zeros = (3 - (comma + channel.len() + 1 + digits.len()) % 3) % 3;
    let mut len = 0;
    for part in [&b","[..comma], channel, b" ", &b"00"[..zeros], digits] {
        text[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    URL_SAFE_NO_PAD.encode_string(&text[..len], token);
}

impl Position {
    /// The `seq` recorded for `channel`.
    pub fn get(&self, channel: &str) -> Option<u64> {
        self.0.iter().find(|p| p.channel == channel).map(|p| p.seq)
    }

    /// Records `seq` as `channel`'s last.
    pub fn set(&mut self, channel: &str, seq: u64) {
        self.pair(channel, seq).token.clear();
    }

    /// [`Position::set`] with the pair's part as the first of a token
    /// ([`pair_token`] with `first`), already encoded by the caller (a
    /// stream's writer shares it between the streams of one message).
    pub fn set_encoded(&mut self, channel: &str, seq: u64, first_token: &str) {
        let first = self.0.first().is_none_or(|p| p.channel == channel);
        let pair = self.pair(channel, seq);
        pair.token.clear();
        if first {
            pair.token.push_str(first_token);
        }
    }

    /// When `channel` is the only channel named, records `seq` as its
    /// last and returns true: the token is then the first pair's part
    /// alone, which the caller writes (a stream's writer has it rendered
    /// already), so this one is encoded again only if it is asked for.
    pub fn set_sole(&mut self, channel: &str, seq: u64) -> bool {
        match self.0.as_mut_slice() {
            [only] if only.channel == channel => {
                only.seq = seq;
                only.token.clear();
                true
            }
            _ => false,
        }
    }

    fn pair(&mut self, channel: &str, seq: u64) -> &mut Pair {
        let i = match self.0.iter().position(|p| p.channel == channel) {
            Some(i) => i,
            None => {
                self.0.push(Pair {
                    channel: channel.to_owned(),
                    seq,
                    token: String::new(),
                });
                self.0.len() - 1
            }
        };
        let pair = &mut self.0[i];
        pair.seq = seq;
        pair
    }

    /// Keeps only the channels `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|p| keep(&p.channel));
        // The first pair may have changed: it is the one without a `,`.
        for p in &mut self.0 {
            p.token.clear();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The opaque token.
    pub fn encode(&self) -> String {
        let mut token = String::new();
        for (i, p) in self.0.iter().enumerate() {
            pair_token(i == 0, &p.channel, p.seq, &mut token);
        }
        token
    }

    /// Appends the token to `out`, encoding only the pairs that changed
    /// since the last call.
    pub fn encode_into(&mut self, out: &mut BytesMut) {
        for (i, p) in self.0.iter_mut().enumerate() {
            if p.token.is_empty() {
                pair_token(i == 0, &p.channel, p.seq, &mut p.token);
            }
            out.put_slice(p.token.as_bytes());
        }
    }

    /// About the token's length (exact once written).
    pub fn token_len(&self) -> usize {
        self.0
            .iter()
            .map(|p| p.token.len().max(p.channel.len() + 24))
            .sum()
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
        let token: usize = channels.into_iter().map(Position::room).sum();
        token <= MAX_POSITION_BYTES
    }

    /// The most bytes `channel`'s pair takes in a token (at the largest
    /// `seq`): what a stream naming it must leave room for. At least 28,
    /// so at most 146 channels fit a position.
    pub fn room(channel: &str) -> usize {
        // Each pair is a whole number of base64 groups (`pair_token`).
        (channel.len() + 2 + MAX_SEQ_DIGITS).div_ceil(3) * 4
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
    fn pairs_are_padded_and_tokens_of_either_form_decode() {
        let mut p = Position::default();
        p.set("doc:1", 42);
        p.set("doc:22", 7);
        let text = URL_SAFE_NO_PAD.decode(p.encode()).unwrap();
        // Still `channel seq` pairs: leading zeros pad each pair (its `,`
        // included) to whole base64 groups.
        assert_eq!(text, b"doc:1 042,doc:22 7");
        assert_eq!(Position::decode(&p.encode()).unwrap(), p);
        // A token written before the padding reads the same.
        let unpadded = URL_SAFE_NO_PAD.encode("doc:1 42,doc:22 7");
        assert_eq!(Position::decode(&unpadded).unwrap(), p);
    }

    #[test]
    fn the_kept_token_follows_every_change() {
        let mut p = Position::default();
        let mut out = BytesMut::new();
        let mut check = |p: &mut Position| {
            out.clear();
            p.encode_into(&mut out);
            assert_eq!(out, p.encode().as_bytes());
            assert_eq!(Position::decode(&p.encode()).unwrap(), *p);
        };
        let mut first = String::new();
        pair_token(true, "a:1", 9, &mut first);
        assert!(!p.set_sole("a:1", 8), "no channel named yet");
        p.set_encoded("a:1", 9, &first);
        check(&mut p);
        assert!(p.set_sole("a:1", 10));
        assert_eq!(p.get("a:1"), Some(10));
        check(&mut p);
        assert!(!p.set_sole("b:2", 3), "not the channel named");
        assert_eq!(p.get("b:2"), None);
        for seq in [10, 99, 100, 1_000_000_000_000_000] {
            p.set("b:2", seq);
            check(&mut p);
            assert!(!p.set_sole("a:1", seq), "two channels named");
            first.clear();
            pair_token(true, "a:1", seq + 1, &mut first);
            p.set_encoded("a:1", seq + 1, &first);
            check(&mut p);
            // Not the first pair: the shared part is not used.
            p.set_encoded("b:2", seq + 2, &first);
            check(&mut p);
        }
        p.retain(|c| c == "b:2");
        check(&mut p);
        assert_eq!(p.get("b:2"), Some(1_000_000_000_000_002));
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
