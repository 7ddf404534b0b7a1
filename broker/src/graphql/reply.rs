//! A GraphQL response over HTTP: the media type the client accepts, the
//! status, and the runtime signal (§12) on every one: the `X-RateLimit-*`
//! triplet, and `extensions.rateLimit` with what the operation cost.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::HeaderValue;
use async_graphql::ServerError;
use async_graphql_value::ConstValue;
use serde::Serialize;

use super::admission::retry_secs;
use super::charge::Balance;

/// The response's media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// `application/json`: request errors are 200 (legacy clients).
    Json,
    /// `application/graphql-response+json`: request errors are 4xx.
    GraphqlResponse,
}

impl Media {
    /// From `Accept`: `graphql-response+json` when the client lists it,
    /// else JSON (also for `*/*` and no header); `None` when it accepts
    /// neither (406).
    pub fn negotiate(accept: Option<&HeaderValue>) -> Option<Media> {
        let accept = accept.and_then(|v| v.to_str().ok()).unwrap_or("").trim();
        if accept.is_empty() {
            return Some(Media::Json);
        }
        let mut json = false;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if refused {
                continue;
            }
            match essence.as_str() {
                "application/graphql-response+json" => return Some(Media::GraphqlResponse),
                "application/json" | "application/*" | "*/*" => json = true,
                _ => {}
            }
        }
        json.then_some(Media::Json)
    }

    fn content_type(self) -> &'static str {
        match self {
            Media::Json => "application/json; charset=utf-8",
            Media::GraphqlResponse => "application/graphql-response+json; charset=utf-8",
        }
    }
}

/// `extensions.rateLimit`.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    /// What the operation finally cost: charged − refunded.
    pub cost: u64,
    pub estimated: u64,
    pub refunded: u64,
    pub balance: Balance,
    pub max_single: u64,
    /// Shadow mode: whether it would have been refused.
    pub shadow: Option<bool>,
}

impl RateLimit {
    /// For an operation refused before its charge.
    pub fn uncharged(estimated: u64, balance: Balance, max_single: u64) -> RateLimit {
        RateLimit {
            cost: 0,
            estimated,
            refunded: 0,
            balance,
            max_single,
            shadow: None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RateLimitJson {
    cost: u64,
    estimated: u64,
    refunded: u64,
    remaining: u64,
    reset_in: u64,
    max_single_cost: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_refuse: Option<bool>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Extensions {
    rate_limit: RateLimitJson,
}

#[derive(Serialize)]
struct Body<'a> {
    /// Absent when nothing executed (a request error).
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a ConstValue>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    errors: &'a [ServerError],
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions: Option<Extensions>,
}

pub struct Reply {
    pub status: StatusCode,
    pub media: Media,
    /// `Some` once the operation executed (`null` included).
    pub data: Option<ConstValue>,
    pub errors: Vec<ServerError>,
    pub rate: Option<RateLimit>,
    /// `Retry-After` (429, 503, a ban).
    pub retry_after: Option<Duration>,
}

fn seconds_up(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000) as u64
}

impl Reply {
    pub fn into_response(self) -> HttpResponse {
        let mut b = HttpResponse::build(self.status);
        b.insert_header(("content-type", self.media.content_type()));
        if let Some(r) = &self.rate {
            b.insert_header(("X-RateLimit-Limit", r.balance.limit.to_string()));
            b.insert_header(("X-RateLimit-Remaining", r.balance.remaining.to_string()));
            b.insert_header(("X-RateLimit-Reset", seconds_up(r.balance.reset).to_string()));
        }
        if let Some(d) = self.retry_after {
            b.insert_header(("Retry-After", retry_secs(d).to_string()));
        }
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            b.insert_header(("Allow", "POST"));
        }
        let body = self.body();
        match body {
            Ok(bytes) => b.body(bytes),
            Err(e) => {
                tracing::error!(error = %e, "a GraphQL response could not be serialized");
                HttpResponse::InternalServerError().finish()
            }
        }
    }

    fn extensions(&self) -> Option<Extensions> {
        self.rate.map(|r| Extensions {
            rate_limit: RateLimitJson {
                cost: r.cost,
                estimated: r.estimated,
                refunded: r.refunded,
                remaining: r.balance.remaining,
                reset_in: seconds_up(r.balance.reset),
                max_single_cost: r.max_single,
                mode: r.shadow.map(|_| "shadow"),
                would_refuse: r.shadow,
            },
        })
    }

    /// The response's JSON (an HTTP body, a `next` message's payload).
    pub fn body(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(&Body {
            data: self.data.as_ref(),
            errors: &self.errors,
            extensions: self.extensions(),
        })
    }

    /// `{"rateLimit":{..}}` alone (the first `next` of a subscription).
    pub fn extensions_json(&self) -> Option<String> {
        self.extensions()
            .and_then(|x| serde_json::to_string(&x).ok())
    }

    /// The errors as a JSON array (an `error` message's payload).
    pub fn errors_json(&self) -> String {
        serde_json::to_string(&self.errors).unwrap_or_else(|_| "[]".to_owned())
    }
}
