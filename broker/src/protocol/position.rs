//! An SSE stream's position (§14): the last `seq` of every channel of the
//! stream, as the opaque `id:` an `EventSource` sends back in
//! `Last-Event-ID` when it reconnects.
//!
//! A stream is reopened with the same request, so its position need not
//! spell the channels' names: the request lists them. The token this
//! broker writes (the *compact form*) is
//!
//! ```text
//! ~2.HHHHHH RRRRRRRR RRRRRRRR …      (no spaces)
//! ```
//!
//! `~2.` (the form and its version: `~` and `.` are outside base64url, so
//! no token of the named form starts so), six base64url digits of a
//! 32-bit FNV-1a hash of the request's channels ([`list_hash`]), then one
//! field of [`FIELD_DIGITS`] base64url digits (48 bits) per channel, in
//! the order the request named them (repeats dropped, as the stream drops
//! them): all-`A` (zero) is a channel that has no `seq` yet (it starts
//! live), any other value `v` is `(seq mod M) + 1` with `M` =
//! [`MODULUS`] = 2^48 − 1, big-endian. Every character is URL- and
//! header-safe. Fixed-width fields keep the token a pure function of the
//! seqs and let an event rewrite its channel's eight characters in place:
//! no event re-encodes the others.
//!
//! Why a residue is enough: every `seq` is clock-based (a channel with no
//! state starts from the clock floor, `hub::seq_floor`, µs since the
//! epoch, and so does a fenced counter on Redis Cluster), so a `seq` stays
//! at or below the clock as long as its channel averages under a million
//! messages a second. [`reconstruct`] takes the one value of the residue's
//! class in the window of `M` values that ends [`SLACK`] (2^40 µs, 12.7
//! days) above the broker's clock: exact for a position up to `M − SLACK`
//! µs (8.9 years) old, with no lookup.
//!
//! The hash ties a token to its channel list: a token presented with
//! another list (other channels, another order, another count) is refused
//! [`PositionError::OtherChannels`] (400 `bad_request`) rather than read
//! as naming none, which would start every channel live and lose what the
//! reader missed without saying so.
//!
//! Size: the names cost nothing, so a position of `n` channels is
//! `9 + 8 n` bytes whatever their length; [`MAX_CHANNELS`] (510) fit
//! [`MAX_POSITION_BYTES`], above the shipped plans' largest
//! `max_subscriptions` (`pro`, 500; a plan above it warns at load).
//!
//! Older tokens still resume a stream: the `~1.` compact form (nine digits
//! a field holding `seq + 1` whole, written by builds that never shipped
//! in a release; read by re-encoding, a few lines), and the *named form*,
//! base64url of `channel seq` pairs joined by `,` (written by earlier
//! builds, and by the SDK when every channel's `seq` is known whole and it
//! fits): each of the stream's channels takes the `seq` the token names
//! for it, the others start live.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::{BufMut, BytesMut};
use thiserror::Error;

use super::channel;

/// The longest position token (§14: it must fit a proxy's header buffers).
pub const MAX_POSITION_BYTES: usize = 4096;

/// The compact form's start: `~`, the version `2`, `.`.
pub const COMPACT_PREFIX: &str = "~2.";

/// The unreleased first compact form's start: its fields are
/// [`V1_DIGITS`] digits of `seq + 1`. Still read.
const V1_PREFIX: &str = "~1.";

/// The hash's digits: 36 bits, the 32 of the hash right-aligned.
const HASH_DIGITS: usize = 6;

/// The digits of one channel's field: 48 bits, `(seq mod M) + 1`.
pub const FIELD_DIGITS: usize = 8;

/// The digits of a `~1.` field.
const V1_DIGITS: usize = 9;

/// `M`, the modulus of a field's residue: 2^48 − 1, so that `M` itself
/// (residue `M − 1`, plus one) is the largest value 48 bits hold and zero
/// stays "no `seq`".
pub const MODULUS: u64 = (1 << (6 * FIELD_DIGITS)) - 1;

/// How far above the broker's clock (µs) a `seq` may run and still be
/// reconstructed exactly: 2^40 µs, 12.7 days (a channel that averaged
/// over a million messages a second for that long, or a node whose clock
/// is that far behind another's).
pub const SLACK: u64 = 1 << 40;

/// The digits before the first field (both versions).
const HEAD: usize = COMPACT_PREFIX.len() + HASH_DIGITS;

/// The most channels a compact position holds within
/// [`MAX_POSITION_BYTES`]: (4096 − 9) / 8 = 510, whatever their names'
/// length (a stream of more is refused at its start).
pub const MAX_CHANNELS: usize = (MAX_POSITION_BYTES - HEAD) / FIELD_DIGITS;

/// The `seq` a nonzero field `value` (`(seq mod M) + 1`) stands for, read
/// at `now_us` (the broker's clock in µs, the one `hub::seq_floor` takes);
/// `None` for zero (no `seq` yet).
///
/// Why this is exact: seqs are clock-based, at or below the clock while a
/// channel averages under a million messages a second. So of the values
/// congruent to `value − 1` modulo [`MODULUS`], the one in the window
/// `(R − M, R]` with `R = now_us + SLACK` is the channel's `seq` whenever
/// it ran at most [`SLACK`] ahead of the clock and the position is at
/// most `M − SLACK` µs (8.9 years) old. One outside those bounds reads as
/// another `seq` of its class: one that ran further ahead reads `M`
/// lower (a resume from the past, which says `recovered:false` when
/// history no longer holds it), one older than 8.9 years as too recent.
/// Below the window's start (a clock under `M`, as in unit tests), the
/// residue itself.
pub fn reconstruct(value: u64, now_us: u64) -> Option<u64> {
    let residue = value.checked_sub(1)? % MODULUS;
    let top = now_us.saturating_add(SLACK);
    let back = (top % MODULUS + MODULUS - residue) % MODULUS;
    Some(top.checked_sub(back).unwrap_or(residue))
}

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

/// A field's value for `seq`: its residue plus one (`None`: no `seq`
/// yet, zero).
pub fn residue(seq: Option<u64>) -> u64 {
    seq.map_or(0, |s| s % MODULUS + 1)
}

/// A field's digits for `seq`.
fn field(seq: Option<u64>) -> [u8; FIELD_DIGITS] {
    let mut out = [0u8; FIELD_DIGITS];
    put_digits(residue(seq), &mut out);
    out
}

/// Each channel's last `seq` and the token that says it. Holds no `seq`
/// besides the token's digits: a stream's position costs its channel
/// names and `9 + 8 n` bytes.
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
        let mut token = String::with_capacity(HEAD + FIELD_DIGITS * channels.len());
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
            let (digits, fields) = if let Some(rest) = token.strip_prefix(COMPACT_PREFIX) {
                (FIELD_DIGITS, rest)
            } else if let Some(rest) = token.strip_prefix(V1_PREFIX) {
                (V1_DIGITS, rest)
            } else {
                return Err(PositionError::Malformed);
            };
            let (hash, seqs) = fields
                .split_at_checked(HASH_DIGITS)
                .ok_or(PositionError::Malformed)?;
            let hash = read_digits(hash.as_bytes()).ok_or(PositionError::Malformed)?;
            let fields_ok = seqs
                .as_bytes()
                .chunks(digits)
                .all(|f| f.len() == digits && read_digits(f).is_some());
            if !fields_ok {
                return Err(PositionError::Malformed);
            }
            if hash != u64::from(list_hash(channels)) || seqs.len() / digits != channels.len() {
                return Err(PositionError::OtherChannels);
            }
            if digits == FIELD_DIGITS {
                position.token.replace_range(HEAD.., seqs);
            } else {
                // `~1.`: whole `seq + 1`s, written again as residues.
                for (i, f) in seqs.as_bytes().chunks(V1_DIGITS).enumerate() {
                    let seq = read_digits(f).and_then(|v| v.checked_sub(1));
                    position.put(i, seq);
                }
            }
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
        let at = HEAD + i * FIELD_DIGITS;
        // The field's digits are ASCII, as are the ones they replace.
        self.token.replace_range(
            at..at + FIELD_DIGITS,
            std::str::from_utf8(&field(seq)).unwrap_or_default(),
        );
    }

    /// Channel `i`'s field value (its residue plus one; zero: none).
    fn value(&self, i: usize) -> u64 {
        let at = HEAD + i * FIELD_DIGITS;
        read_digits(&self.token.as_bytes()[at..at + FIELD_DIGITS]).unwrap_or(0)
    }

    /// The `seq` recorded for `channel`, reconstructed at `now_us`
    /// ([`reconstruct`]).
    pub fn get(&self, channel: &str, now_us: u64) -> Option<u64> {
        let i = self.channels.iter().position(|c| &**c == channel)?;
        reconstruct(self.value(i), now_us)
    }

    /// Each channel of the stream, in order, with its `seq` reconstructed
    /// at `now_us` (the broker's clock in µs, `hub::seq_floor`).
    pub fn seqs(&self, now_us: u64) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.channels
            .iter()
            .enumerate()
            .map(move |(i, c)| (&**c, reconstruct(self.value(i), now_us)))
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
        let mut out = [0u8; HEAD + FIELD_DIGITS];
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
mod tests;
