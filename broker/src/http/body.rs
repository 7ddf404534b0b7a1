//! A publish request's body: read up to its limit, parsed under a nesting
//! cap, and the shape of its messages (`/v1/publish`, its batch and
//! `/v1/client/publish`).

use std::borrow::Cow;

use actix_web::http::StatusCode;
use actix_web::web;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::refused::Refused;
use crate::config::Limits;
use crate::protocol::{ErrorCode, channel};

#[derive(Deserialize)]
pub(super) struct One<'a> {
    #[serde(borrow)]
    pub(super) channel: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) data: &'a RawValue,
    /// The message's idempotency key (§17; a batch's, or a single
    /// publish's without the header): read raw so a bad one is that
    /// message's error, not the batch's.
    #[serde(borrow, default)]
    pub(super) key: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct Batch<'a> {
    #[serde(borrow)]
    pub(super) messages: Vec<One<'a>>,
}

/// Reads at most `limit` bytes of body; more is a 413 without reading on.
pub(super) async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, Refused> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            Refused::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                e.to_string(),
            )
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(Refused::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                format!("request body is larger than {limit} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

pub(super) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8], max_depth: u32) -> Result<T, Refused> {
    if crate::protocol::json::depth_exceeds(body, max_depth) {
        return Err(Refused::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("JSON nesting is deeper than {max_depth} levels"),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        Refused::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("malformed request: {e}"),
        )
    })
}

/// The checks of a publish (or, with `batch`, a batch) body that need no
/// node or key: parsing, nesting, each message's channel and size. How
/// many messages it holds, or the refusal's code. For the fuzz targets.
pub(crate) fn check_body(
    body: &[u8],
    batch: bool,
    limits: &Limits,
) -> Result<usize, (StatusCode, ErrorCode)> {
    let one = |m: &One<'_>| -> Result<(), Refused> {
        channel::validate(&m.channel)
            .map_err(|why| Refused::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, why))?;
        if m.data.get().len() > limits.max_payload_bytes {
            return Err(Refused::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                "",
            ));
        }
        Ok(())
    };
    let refused = |r: Refused| (r.status, r.code);
    if batch {
        let b: Batch<'_> = parse(body, limits.max_json_depth.saturating_add(2)).map_err(refused)?;
        for m in &b.messages {
            one(m).map_err(refused)?;
        }
        Ok(b.messages.len())
    } else {
        let m: One<'_> = parse(body, limits.max_json_depth).map_err(refused)?;
        one(&m).map_err(refused)?;
        Ok(1)
    }
}
