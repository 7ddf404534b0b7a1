//! An SSE stream's position (§14): the last `seq` of every channel of the
//! stream, as the opaque `id:` an `EventSource` sends back in
//! `Last-Event-ID` when it reconnects.
//!
//! A stream is reopened with the same request, so its position need not
//! spell the channels' names: the request lists them. The token this
//! broker writes (the *compact form*) is
//!
//! ```text
//! ~1.HHHHHH SSSSSSSSS SSSSSSSSS …      (no spaces)
//! ```
//!
//! `~1.` (the form and its version: `~` and `.` are outside base64url, so
//! no token of the older form starts so), six base64url digits of a 32-bit
//! FNV-1a hash of the request's channels ([`list_hash`]), then one field
//! of [`SEQ_DIGITS`] base64url digits per channel, in the order the
//! request named them (repeats dropped, as the stream drops them): the
//! field holds `seq + 1`, big-endian, and all-`A` (zero) is a channel that
//! has no `seq` yet (it starts live). Every character is URL- and
//! header-safe. Fixed-width fields keep the token a pure function of the
//! seqs and let an event rewrite its channel's nine characters in place:
//! no event re-encodes the others.
//!
//! The hash ties a token to its channel list: a token presented with
//! another list (other channels, another order, another count) is refused
//! [`PositionError::OtherChannels`] (400 `bad_request`) rather than read
//! as naming none, which would start every channel live and lose what the
//! reader missed without saying so.
//!
//! Size: the names cost nothing, so a position of `n` channels is
//! `9 + 9 n` bytes whatever their length; [`MAX_CHANNELS`] (454) fit
//! [`MAX_POSITION_BYTES`]. Nine digits (54 bits) is the fewest that hold
//! every `seq` below 2^53 (the hub's bound, kept for JavaScript) and the
//! "none" value; 500 such seqs need 500 × 53 bits, 4,417 base64 digits,
//! so no base64 token of 4 KiB can hold every 500-channel stream.
//!
//! The older *named form*, base64url of `channel seq` pairs joined by `,`
//! (written by earlier builds, and by the SDK before it knew the compact
//! form), still resumes a stream: each of the stream's channels takes the
//! `seq` the token names for it, the others start live.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::{BufMut, BytesMut};
use thiserror::Error;

use super::channel;

/// The longest position token (§14: it must fit a proxy's header buffers).
pub const MAX_POSITION_BYTES: usize = 4096;

/// The compact form's start: `~`, the version `1`, `.`.
pub const COMPACT_PREFIX: &str = "~1.";

/// The hash's digits: 36 bits, the 32 of the hash right-aligned.
const HASH_DIGITS: usize = 6;

/// The digits of one channel's field: 54 bits, `seq + 1`.
pub const SEQ_DIGITS: usize = 9;

/// The digits before the first field.
const HEAD: usize = COMPACT_PREFIX.len() + HASH_DIGITS;

/// The most channels a compact position holds within
/// [`MAX_POSITION_BYTES`]: (4096 − 9) / 9 = 454, whatever their names'
/// length (a stream of more is refused at its start).
pub const MAX_CHANNELS: usize = (MAX_POSITION_BYTES - HEAD) / SEQ_DIGITS;

/// The largest `seq` a field holds exactly (2^54 − 2). The hub keeps every
/// `seq` below 2^53; a larger one is written as this (a resume from it
/// repeats messages the reader has, which the SDK drops, rather than skip
/// any).
pub const MAX_SEQ: u64 = (1 << (6 * SEQ_DIGITS)) - 2;

const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Why a `Last-Event-ID` is not a position of this stream.
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
    #[error(
        "the position is for another list of channels (it resumes a stream of the same channels, in the same order)"
    )]
    OtherChannels,
}

/// The 32-bit FNV-1a hash of `channels`, each followed by `\n` (outside
/// §2's charset, so lists hash apart however their names split). The SDK
/// computes the same (`client-sdk-ts/src/transports/sse-parser.ts`).
pub fn list_hash<S: AsRef<str>>(channels: &[S]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for c in channels {
        for b in c.as_ref().bytes().chain([b'\n']) {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// Writes `value`'s low `6 × out.len()` bits as base64url digits.
fn put_digits(mut value: u64, out: &mut [u8]) {
    for d in out.iter_mut().rev() {
        *d = DIGITS[(value & 63) as usize];
        value >>= 6;
    }
}

/// The value of base64url digits; `None` if one is not a digit.
fn read_digits(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |v, d| {
        let x = match d {
            b'A'..=b'Z' => d - b'A',
            b'a'..=b'z' => d - b'a' + 26,
            b'0'..=b'9' => d - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        Some(v << 6 | u64::from(x))
    })
}

/// A field's digits for `seq` (`None`: no `seq` yet).
fn field(seq: Option<u64>) -> [u8; SEQ_DIGITS] {
    let mut out = [0u8; SEQ_DIGITS];
    put_digits(seq.map_or(0, |s| s.min(MAX_SEQ) + 1), &mut out);
    out
}

/// Each channel's last `seq` and the token that says it. Holds no `seq`
/// besides the token's digits: a stream's position costs its channel
/// names and `9 + 9 n` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The stream's channels, in the request's order, without repeats
    /// (bounded by the stream's subscriptions, §0's `maxSubscriptions`,
    /// and [`MAX_CHANNELS`]).
    channels: Vec<Box<str>>,
    /// The compact token: [`HEAD`] digits, then one field per channel.
    token: String,
}

impl Position {
    /// The position of a stream of `channels` (distinct, valid, at most
    /// [`MAX_CHANNELS`]) where no channel has a `seq` yet.
    pub fn new<S: AsRef<str>>(channels: &[S]) -> Position {
        let mut head = [0u8; HEAD];
        head[..COMPACT_PREFIX.len()].copy_from_slice(COMPACT_PREFIX.as_bytes());
        put_digits(
            u64::from(list_hash(channels)),
            &mut head[COMPACT_PREFIX.len()..],
        );
        let mut token = String::with_capacity(HEAD + SEQ_DIGITS * channels.len());
        // Digits only: ASCII.
        token.push_str(std::str::from_utf8(&head).unwrap_or_default());
        for _ in channels {
            token.push_str(std::str::from_utf8(&field(None)).unwrap_or_default());
        }
        Position {
            channels: channels.iter().map(|c| c.as_ref().into()).collect(),
            token,
        }
    }

    /// The position of a stream of `channels` resumed from `token` (either
    /// form; empty: no position).
    pub fn resume<S: AsRef<str>>(channels: &[S], token: &str) -> Result<Position, PositionError> {
        if token.len() > MAX_POSITION_BYTES {
            return Err(PositionError::TooLong);
        }
        let token = token.trim();
        let mut position = Position::new(channels);
        if token.is_empty() {
            return Ok(position);
        }
        if token.starts_with('~') {
            let fields = token
                .strip_prefix(COMPACT_PREFIX)
                .ok_or(PositionError::Malformed)?;
            let (hash, seqs) = fields
                .split_at_checked(HASH_DIGITS)
                .ok_or(PositionError::Malformed)?;
            let hash = read_digits(hash.as_bytes()).ok_or(PositionError::Malformed)?;
            let fields_ok = seqs
                .as_bytes()
                .chunks(SEQ_DIGITS)
                .all(|f| f.len() == SEQ_DIGITS && read_digits(f).is_some());
            if !fields_ok {
                return Err(PositionError::Malformed);
            }
            if hash != u64::from(list_hash(channels)) || seqs.len() / SEQ_DIGITS != channels.len() {
                return Err(PositionError::OtherChannels);
            }
            position.token.replace_range(HEAD.., seqs);
            return Ok(position);
        }
        let named = decode_named(token)?;
        for (i, c) in channels.iter().enumerate() {
            if let Some(seq) = named.get(c.as_ref()) {
                position.put(i, Some(*seq));
            }
        }
        Ok(position)
    }

    /// Writes channel `i`'s field.
    fn put(&mut self, i: usize, seq: Option<u64>) {
        let at = HEAD + i * SEQ_DIGITS;
        // The field's digits are ASCII, as are the ones they replace.
        self.token.replace_range(
            at..at + SEQ_DIGITS,
            std::str::from_utf8(&field(seq)).unwrap_or_default(),
        );
    }

    /// Channel `i`'s `seq`.
    fn at(&self, i: usize) -> Option<u64> {
        let at = HEAD + i * SEQ_DIGITS;
        let value = read_digits(&self.token.as_bytes()[at..at + SEQ_DIGITS])?;
        value.checked_sub(1)
    }

    /// The `seq` recorded for `channel`.
    pub fn get(&self, channel: &str) -> Option<u64> {
        let i = self.channels.iter().position(|c| &**c == channel)?;
        self.at(i)
    }

    /// Each channel of the stream, in order, with its `seq`.
    pub fn seqs(&self) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.channels
            .iter()
            .enumerate()
            .map(|(i, c)| (&**c, self.at(i)))
    }

    /// Records `seq` as `channel`'s last. A channel not of the stream has
    /// no field and is ignored (a stream receives only its own channels).
    pub fn set(&mut self, channel: &str, seq: u64) {
        if let Some(i) = self.channels.iter().position(|c| &**c == channel) {
            self.put(i, Some(seq));
        }
    }

    /// When `channel` is the stream's only channel, records `seq` as its
    /// last and returns true: the token is then [`Position::sole_token`],
    /// which the caller writes (a stream's writer has it rendered
    /// already).
    pub fn set_sole(&mut self, channel: &str, seq: u64) -> bool {
        match self.channels.as_slice() {
            [only] if &**only == channel => {
                self.put(0, Some(seq));
                true
            }
            _ => false,
        }
    }

    /// Appends to `token` the token of a stream of `channel` alone at
    /// `seq` (what [`Position::set_sole`] leaves).
    pub fn sole_token(channel: &str, seq: u64, token: &mut String) {
        let mut out = [0u8; HEAD + SEQ_DIGITS];
        out[..COMPACT_PREFIX.len()].copy_from_slice(COMPACT_PREFIX.as_bytes());
        put_digits(
            u64::from(list_hash(&[channel])),
            &mut out[COMPACT_PREFIX.len()..HEAD],
        );
        out[HEAD..].copy_from_slice(&field(Some(seq)));
        token.push_str(std::str::from_utf8(&out).unwrap_or_default());
    }

    /// The opaque token.
    pub fn encode(&self) -> &str {
        &self.token
    }

    /// Appends the token to `out`.
    pub fn encode_into(&self, out: &mut BytesMut) {
        out.put_slice(self.token.as_bytes());
    }

    /// The token's length.
    pub fn token_len(&self) -> usize {
        self.token.len()
    }

    /// The token of the named form for `pairs` (what earlier builds
    /// wrote): for tests of the upgrade, and a reader's reference.
    pub fn named_token<'a>(pairs: impl IntoIterator<Item = (&'a str, u64)>) -> String {
        let text: Vec<String> = pairs.into_iter().map(|(c, s)| format!("{c} {s}")).collect();
        URL_SAFE_NO_PAD.encode(text.join(","))
    }
}

/// Reads a token of the named form: each channel it names, with its last
/// `seq` (bounded by the token's length, at most 4 KiB).
fn decode_named(token: &str) -> Result<HashMap<String, u64>, PositionError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| PositionError::NotBase64)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| PositionError::Malformed)?;
    let mut named = HashMap::new();
    for pair in text.split(',') {
        let (channel, seq) = pair.split_once(' ').ok_or(PositionError::Malformed)?;
        channel::validate(channel).map_err(PositionError::BadChannel)?;
        let seq: u64 = seq.parse().map_err(|_| PositionError::Malformed)?;
        named.insert(channel.to_owned(), seq);
    }
    Ok(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_safe(token: &str) -> bool {
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_~.".contains(&b))
    }

    #[test]
    fn round_trips_and_is_header_safe() {
        let list = ["doc:1", "a.b@c=d-e_f", "doc:3"];
        let mut p = Position::new(&list);
        p.set("doc:1", 1188);
        p.set("a.b@c=d-e_f", 9_007_199_254_740_991);
        p.set("doc:1", 1189);
        p.set("not:mine", 5);
        let token = p.encode().to_owned();
        assert!(token.starts_with(COMPACT_PREFIX) && header_safe(&token));
        assert_eq!(token.len(), 9 + 9 * list.len());
        let back = Position::resume(&list, &token).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.get("doc:1"), Some(1189));
        assert_eq!(back.get("a.b@c=d-e_f"), Some(9_007_199_254_740_991));
        assert_eq!(back.get("not:mine"), None);
        let seqs: Vec<_> = back.seqs().collect();
        assert_eq!(
            seqs,
            [
                ("doc:1", Some(1189)),
                ("a.b@c=d-e_f", Some(9_007_199_254_740_991)),
                ("doc:3", None)
            ]
        );
        assert_eq!(Position::resume(&list, "").unwrap(), Position::new(&list));
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        // What the SDK's tests check too (sse-parser.ts): the list's hash
        // and the fields, `seq + 1`, all-`A` for no seq.
        assert_eq!(list_hash(&["doc:1", "doc:2"]), 0x921d_6466);
        let mut p = Position::new(&["doc:1", "doc:2"]);
        p.set("doc:1", 42);
        assert_eq!(p.encode(), "~1.CSHWRmAAAAAAAArAAAAAAAAA");
        let mut sole = String::new();
        Position::sole_token("doc:1", 0, &mut sole);
        assert_eq!(sole, "~1.AomIAqAAAAAAAAB");
    }

    #[test]
    fn no_seq_and_seq_zero_differ() {
        let mut p = Position::new(&["a", "b"]);
        assert_eq!(p.get("a"), None);
        p.set("a", 0);
        let back = Position::resume(&["a", "b"], p.encode()).unwrap();
        assert_eq!((back.get("a"), back.get("b")), (Some(0), None));
        p.set("b", u64::MAX);
        assert_eq!(p.get("b"), Some(MAX_SEQ), "written as the largest it holds");
    }

    #[test]
    fn the_worst_case_of_every_plan_fits() {
        // Names cost nothing: the longest names and the largest seqs.
        let names: Vec<String> = (0..MAX_CHANNELS)
            .map(|i| format!("{i:0>width$}", width = channel::MAX_CHANNEL_LEN))
            .collect();
        let mut p = Position::new(&names);
        for n in &names {
            p.set(n, (1 << 53) - 1);
        }
        assert_eq!(p.token_len(), 9 + 9 * 454);
        assert!(p.token_len() <= MAX_POSITION_BYTES);
        // The default plan's maximum fits with room to spare.
        let plan = crate::config::Limits::default().max_subscriptions as usize;
        assert!(plan <= MAX_CHANNELS, "{plan}");
        // 500 seqs below 2^53 are 26,500 bits: 4,417 base64 digits, more
        // than 4 KiB in any base64 encoding.
        assert!((500 * 53usize).div_ceil(6) > MAX_POSITION_BYTES);
    }

    #[test]
    fn sole_tokens_are_what_set_sole_leaves() {
        let mut p = Position::new(&["doc:s"]);
        assert!(!p.set_sole("doc:t", 3), "not the stream's channel");
        for seq in [0, 7, 1_000_000_000_000_000] {
            assert!(p.set_sole("doc:s", seq));
            let mut sole = String::new();
            Position::sole_token("doc:s", seq, &mut sole);
            assert_eq!(p.encode(), sole);
            let mut out = BytesMut::new();
            p.encode_into(&mut out);
            assert_eq!(out, sole.as_bytes());
        }
        let mut two = Position::new(&["doc:s", "doc:t"]);
        assert!(!two.set_sole("doc:s", 1), "two channels");
        assert_eq!(two.get("doc:s"), None);
    }

    #[test]
    fn the_named_form_still_resumes() {
        let token = Position::named_token([("doc:1", 42), ("gone:1", 5), ("doc:2", 7)]);
        let p = Position::resume(&["doc:2", "doc:1", "doc:3"], &token).unwrap();
        let seqs: Vec<_> = p.seqs().collect();
        assert_eq!(
            seqs,
            [("doc:2", Some(7)), ("doc:1", Some(42)), ("doc:3", None)]
        );
        // Pairs padded with leading zeros (the previous build's writer).
        let padded = URL_SAFE_NO_PAD.encode("doc:1 042,doc:22 7");
        let p = Position::resume(&["doc:1", "doc:22"], &padded).unwrap();
        assert_eq!((p.get("doc:1"), p.get("doc:22")), (Some(42), Some(7)));
        // What it resumes to is written in the compact form.
        assert!(p.encode().starts_with(COMPACT_PREFIX));
    }

    #[test]
    fn malformed_tokens_are_named() {
        let list = ["doc:1"];
        let resume = |t: &str| Position::resume(&list, t);
        let enc = |t: &str| URL_SAFE_NO_PAD.encode(t);
        assert_eq!(resume("*!"), Err(PositionError::NotBase64));
        assert_eq!(resume(&enc("doc:1")), Err(PositionError::Malformed));
        assert_eq!(resume(&enc("doc:1 x")), Err(PositionError::Malformed));
        assert!(matches!(
            resume(&enc("bad channel 1")),
            Err(PositionError::Malformed | PositionError::BadChannel(_))
        ));
        assert!(matches!(
            resume(&enc("doc/1 1")),
            Err(PositionError::BadChannel(_))
        ));
        assert_eq!(
            resume(&"A".repeat(MAX_POSITION_BYTES + 1)),
            Err(PositionError::TooLong)
        );
        let good = Position::new(&list).encode().to_owned();
        assert!(resume(&good).is_ok());
        for bad in [
            "~",
            "~1.",
            "~1.AAA",
            "~2.AAAAAAAAAAAAAAA",
            &good[..good.len() - 1],
            &format!("{good}A"),
            &good.replace("AAAAAAAAA", "AAAA*AAAA"),
        ] {
            assert_eq!(resume(bad), Err(PositionError::Malformed), "{bad}");
        }
    }

    #[test]
    fn a_token_of_another_list_is_refused() {
        let mut p = Position::new(&["doc:1", "doc:2"]);
        p.set("doc:1", 3);
        let token = p.encode();
        for other in [
            &["doc:2", "doc:1"][..],
            &["doc:1"],
            &["doc:1", "doc:2", "doc:3"],
            &["doc:1", "doc:x"],
        ] {
            assert_eq!(
                Position::resume(other, token),
                Err(PositionError::OtherChannels),
                "{other:?}"
            );
        }
    }
}
