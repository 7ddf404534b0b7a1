//! The frames of backend hooks (§15) the broker sends: an `rpc` reply and
//! an `expiry` (a hook-given expiry extended by the refresh hook).

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::wire::json_frame;

#[derive(Serialize)]
struct RpcReply<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RawValue>,
    data: &'a serde_json::Value,
}

/// The answer to an `rpc` frame (§15).
pub fn rpc_reply(id: Option<&RawValue>, data: &serde_json::Value) -> Bytes {
    json_frame(&RpcReply {
        kind: "rpc",
        id,
        data,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Expiry {
    #[serde(rename = "type")]
    kind: &'static str,
    token_expires_at: u64,
}

/// A hook-given expiry extended by the refresh hook (§15).
pub fn expiry(token_expires_at: u64) -> Bytes {
    json_frame(&Expiry {
        kind: "expiry",
        token_expires_at,
    })
}

/// A server-side subscription listed in `welcome` (§15), with `seq` as a
/// subscribe ack carries it.
#[derive(Debug, Clone, Serialize)]
pub struct WelcomeChannel {
    #[serde(serialize_with = "arc_str")]
    pub channel: std::sync::Arc<str>,
    pub seq: u64,
}

fn arc_str<S: serde::Serializer>(v: &std::sync::Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}
