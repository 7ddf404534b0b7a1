//! The `ack` frames (§3): a subscribe's, a publish's, a refresh's.

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::wire::json_frame;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RefreshAck<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a RawValue,
    token_expires_at: u64,
}

/// The answer to a `refresh` (§2): the new token's `exp` in unix ms.
pub fn refresh_ack(id: &RawValue, token_expires_at: u64) -> Bytes {
    json_frame(&RefreshAck {
        kind: "ack",
        id,
        token_expires_at,
    })
}

#[derive(Serialize)]
struct Ack<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recovered: Option<bool>,
    /// §17: a publish whose key was published already (`seq` is the
    /// first one's); left out for a first publish.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    duplicate: bool,
}

pub fn ack(id: &RawValue, seq: Option<u64>, recovered: Option<bool>) -> Bytes {
    json_frame(&Ack {
        kind: "ack",
        id,
        seq,
        recovered,
        duplicate: false,
    })
}

/// The ack of a publish: its `seq`, and `"duplicate":true` when an earlier
/// publish with the same idempotency key had it (§17).
pub fn published_ack(id: &RawValue, seq: u64, duplicate: bool) -> Bytes {
    json_frame(&Ack {
        kind: "ack",
        id,
        seq: Some(seq),
        recovered: None,
        duplicate,
    })
}
