//! A handshake without a token (§15's `connect`): the connect hook names
//! the identity, after the per-IP layers and before the identity bucket.
//! A page of another site (`Origin` not allowed) is refused before the
//! call: a cookie-authenticated socket must not be opened cross-site.

use std::net::IpAddr;
use std::sync::Arc;

use actix_http::RequestHead;
use actix_web::http::StatusCode;
use actix_web::http::header;
use serde_json::{Map, Value};

use super::who::admit_who;
use super::{Admitted, Refused, Slots, identity, refused};
use crate::admission::{TokenTimes, Who};
use crate::auth::{AuthError, Grants};
use crate::config::Config;
use crate::exceeded::Exceeded;
use crate::gate::IpSlot;
use crate::hooks::{Ask, Client, Decision, Event};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::protocol::glob::GlobSet;

/// Whether a tokenless handshake's `Origin` may open a socket: no header
/// (not a browser) passes; `null` never does; with `allowed` set, only its
/// entries; else the Origin's host (and port) must be the `Host`.
pub fn origin_allowed(origin: Option<&str>, host: Option<&str>, allowed: &[String]) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    let origin = origin.trim();
    if origin.eq_ignore_ascii_case("null") {
        return false;
    }
    if !allowed.is_empty() {
        return allowed.iter().any(|a| a.eq_ignore_ascii_case(origin));
    }
    let authority = origin.split_once("://").map(|(_, rest)| rest);
    matches!((authority, host), (Some(a), Some(h)) if !a.is_empty() && a.eq_ignore_ascii_case(h.trim()))
}

impl Refused {
    /// The refusal as `/v1/ws` and SSE say it: §1's body, with a hook's own
    /// code when a hook refused.
    pub(in crate::socket) fn response(&self) -> actix_web::HttpResponse {
        match &self.custom {
            Some(code) => {
                crate::refusal::refusal_code(self.status, code, &self.message, self.retry)
            }
            None => crate::refusal::refusal(self.status, self.code, &self.message, self.retry),
        }
    }
}

fn unauthorized(node: &Node) -> Refused {
    Exceeded::new(Layer::Handshake, ErrorCode::Unauthorized.as_str(), "").emit(&node.metrics);
    refused(
        StatusCode::UNAUTHORIZED,
        ErrorCode::Unauthorized,
        AuthError::Missing.to_string(),
        None,
    )
}

/// The §1 layers of a tokenless handshake from the connect hook on.
pub(super) async fn admit_by_hook(
    req: &RequestHead,
    node: &Arc<Node>,
    config: &Config,
    ip: IpAddr,
    ip_slot: IpSlot,
    transport: &'static str,
) -> Result<Admitted, Refused> {
    let Some(hook) = node.hooks.hook_for(Event::Connect, None) else {
        return Err(unauthorized(node));
    };
    let text = |name: header::HeaderName| req.headers().get(name).and_then(|v| v.to_str().ok());
    if !origin_allowed(
        text(header::ORIGIN),
        text(header::HOST),
        &hook.config.allowed_origins,
    ) {
        Exceeded::new(Layer::Hook, ErrorCode::ForbiddenOrigin.as_str(), "").emit(&node.metrics);
        return Err(refused(
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenOrigin,
            "a connection without a token must come from an allowed origin (the same host, or the hook's allowed_origins)",
            None,
        ));
    }
    let conn = node.next_conn();
    let headers = hook
        .config
        .headers
        .iter()
        .filter_map(|name| {
            let values: Vec<&str> = req
                .headers()
                .get_all(name.as_str())
                .filter_map(|v| v.to_str().ok())
                .collect();
            (!values.is_empty()).then(|| (name.clone(), values.join(", ")))
        })
        .collect();
    let client = Client {
        conn_id: format!("{}-{conn:x}", config.node.id).into(),
        ip,
        transport,
        sub: None,
        plan: None,
        info: None,
    };
    let mut ask = Ask::new(Event::Connect, client);
    ask.headers = headers;
    let refuse_as = |reason: &'static str| {
        Exceeded::new(Layer::Hook, reason, "").emit(&node.metrics);
    };
    let result = match node.hooks.ask(&hook, ask).await {
        Decision::Allowed {
            failed_open: true, ..
        } => return Err(unauthorized(node)),
        Decision::Allowed { result, .. } => result,
        other => {
            // A hook's `error`, `disconnect` or failure under `deny`.
            let Some(r) = other.http_refusal("this connection") else {
                unreachable!("an allowing decision was matched above")
            };
            refuse_as(r.reason);
            let code = if r.status == StatusCode::SERVICE_UNAVAILABLE {
                ErrorCode::HookUnavailable
            } else {
                ErrorCode::Forbidden
            };
            let mut out = refused(r.status, code, r.message, r.retry_after);
            out.custom = Some(r.code);
            return Err(out);
        }
    };
    let (who, channels, life) = who_from(node, config, &result)?;
    let account = admit_who(node, config, ip, &who, conn).await?;
    let mut identity = identity(config, conn, ip, who);
    identity.server_channels = channels;
    identity.hook_life_ms = life;
    Ok(Admitted {
        limits: identity_limits(config, &identity),
        identity,
        slots: Slots {
            ip: Some(ip_slot),
            account,
        },
    })
}

fn identity_limits(config: &Config, id: &super::Identity) -> Arc<crate::config::Limits> {
    config
        .limits_for(&id.account, id.plan.as_deref())
        .unwrap_or_else(|_| Arc::new(crate::config::Limits::default()))
}

fn strings(result: &Map<String, Value>, key: &str) -> Vec<String> {
    result
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Who a connect result names, its server-side channels, and the life
/// (ms) its `expiresAt` gives.
type Named = (Who, Vec<Arc<str>>, Option<u64>);

/// A connect result as a token's claims would be (the hook's answer was
/// checked for types already, `hooks/wire.rs`).
fn who_from(node: &Node, config: &Config, result: &Map<String, Value>) -> Result<Named, Refused> {
    let sub = result
        .get("sub")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let plan = result
        .get("plan")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let now = crate::clock::unix_ms();
    let expires_at = result.get("expiresAt").and_then(Value::as_u64);
    if expires_at.is_some_and(|e| e <= now) {
        Exceeded::new(Layer::Handshake, ErrorCode::Unauthorized.as_str(), sub).emit(&node.metrics);
        return Err(refused(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "the connect hook's expiresAt has passed",
            None,
        ));
    }
    let limits = config.limits_for(sub, plan.as_deref()).map_err(|e| {
        Exceeded::new(Layer::Handshake, ErrorCode::UnknownPlan.as_str(), sub).emit(&node.metrics);
        refused(
            StatusCode::UNAUTHORIZED,
            ErrorCode::UnknownPlan,
            format!("{e}: the connect hook's plan must name a plan in the config"),
            None,
        )
    })?;
    let channels = strings(result, "channels")
        .into_iter()
        .filter(|c| crate::protocol::channel::validate(c).is_ok())
        .map(Arc::from)
        .collect();
    let who = Who {
        account: sub.to_owned(),
        plan,
        role: None,
        limits,
        grants: Grants {
            subscribe: GlobSet::new(&strings(result, "subChannels")),
            publish: GlobSet::new(&strings(result, "pubChannels")),
        },
        token: expires_at.map(|e| TokenTimes {
            expires_at_ms: e,
            deadline: e.div_ceil(1000),
        }),
        info: result
            .get("info")
            .filter(|v| !v.is_null())
            .map(|v| Arc::from(v.to_string())),
    };
    Ok((who, channels, expires_at.map(|e| e - now)))
}

#[cfg(test)]
mod tests {
    use super::origin_allowed;

    #[test]
    fn origins_follow_the_contract() {
        let host = Some("broker.example:8080");
        assert!(origin_allowed(None, host, &[]), "not a browser");
        assert!(origin_allowed(
            Some("https://broker.example:8080"),
            host,
            &[]
        ));
        assert!(!origin_allowed(Some("https://evil.example"), host, &[]));
        assert!(!origin_allowed(Some("null"), host, &[]));
        let allowed = vec!["https://app.example".to_string()];
        assert!(origin_allowed(Some("https://app.example"), host, &allowed));
        assert!(!origin_allowed(
            Some("https://broker.example:8080"),
            host,
            &allowed
        ));
        assert!(!origin_allowed(Some("null"), host, &allowed));
    }
}
