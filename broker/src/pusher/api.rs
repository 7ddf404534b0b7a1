//! Pusher's HTTP API (§16) under `/apps/{id}/...`: every request signed
//! with the app's secret (`auth.rs`), events priced like §5's publishes
//! (per channel, size and fan-out) and charged to the app's key bucket
//! through the one charge primitive; refusals keep Tidegate's JSON body
//! with the status, `Retry-After` and `X-RateLimit-*` the `pusher`
//! library reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, web};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::names::{self, Kind};
use super::signed::{bad, banned, read_signed, refuse, signed};
use super::sink::publish_data;
use super::{frames, presence};
use crate::charge::{Balance, KeyState, Payer, Price};
use crate::config::{Limits, PusherApp};
use crate::metrics::Layer;
use crate::node::Node;
use crate::protocol::ErrorCode;
use crate::protocol::glob::GlobSet;
use crate::refusal::{refusal_builder, retry_after_ms};

/// Pusher's own caps: channels of one event, events of one batch.
const MAX_CHANNELS: usize = 100;
const MAX_BATCH: usize = 10;
/// Longest event name, in bytes.
const MAX_NAME: usize = 200;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/apps/{id}/events", web::post().to(events))
        .route("/apps/{id}/batch_events", web::post().to(batch_events))
        .route("/apps/{id}/channels", web::get().to(channels))
        .route("/apps/{id}/channels/{channel}", web::get().to(channel))
        .route("/apps/{id}/channels/{channel}/users", web::get().to(users))
        .route(
            "/apps/{id}/users/{user_id}/terminate_connections",
            web::post().to(super::users_api::terminate),
        );
}

/// One event as the API takes it.
#[derive(Deserialize)]
struct Event {
    name: String,
    data: Value,
    #[serde(default)]
    channels: Option<Vec<String>>,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    socket_id: Option<String>,
    #[serde(default)]
    info: Option<String>,
}

#[derive(Deserialize)]
struct Batch {
    batch: Vec<Event>,
}

/// The app's key bucket: its account plan's burst and rate, cluster-wide,
/// as an API key's (§5).
fn key_of(app: &PusherApp) -> KeyState {
    KeyState {
        account: app.account.clone(),
        publish: GlobSet::new(&["*"]),
        subscribe: GlobSet::new::<&str>(&[]),
        id: format!("pusher-app-{}", app.id),
    }
}

/// `X-RateLimit-*` from the bucket's balance.
fn with_rate(status: StatusCode, balance: Option<&Balance>) -> HttpResponseBuilder {
    let mut b = HttpResponse::build(status);
    if let Some(balance) = balance {
        for header in balance.rate_limit_headers() {
            b.insert_header(header);
        }
    }
    b
}

/// An event checked and priced: its hub channels and units.
struct Priced {
    channels: Vec<(String, String)>,
    frame_data: String,
    units: u32,
}

/// Checks one event (names, channel count, size) and prices it per
/// channel, size and fan-out (§5's `publish` price per channel).
fn price(
    app: &PusherApp,
    limits: &Limits,
    node: &Node,
    e: &Event,
) -> Result<Priced, (StatusCode, ErrorCode, String)> {
    let bad = |why: String| (StatusCode::BAD_REQUEST, ErrorCode::BadRequest, why);
    if e.name.is_empty() || e.name.len() > MAX_NAME {
        return Err(bad(format!("an event name is 1-{MAX_NAME} bytes")));
    }
    let list: Vec<String> = match (&e.channels, &e.channel) {
        (Some(list), None) => list.clone(),
        (None, Some(one)) => vec![one.clone()],
        _ => return Err(bad("give `channels` (a list) or `channel`".into())),
    };
    if list.is_empty() || list.len() > MAX_CHANNELS {
        return Err(bad(format!("an event goes to 1-{MAX_CHANNELS} channels")));
    }
    let data = frames::data_string(&e.data);
    if data.len() > limits.max_payload_bytes {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!(
                "data is {} bytes, above the limit of {}",
                data.len(),
                limits.max_payload_bytes
            ),
        ));
    }
    let mut units = 0u32;
    let mut channels = Vec::with_capacity(list.len());
    for name in list {
        let user_channel = name.starts_with("#server-to-user-");
        if !names::valid(&name) && !user_channel {
            return Err(bad(format!(
                "{name:?} is not a channel name (1-200 bytes of [A-Za-z0-9_-=@,.;])"
            )));
        }
        let internal = names::internal(&app.id, &name);
        let cost = crate::pricing::publish(
            &limits.costs,
            data.len(),
            node.broker.subscribers(&internal),
        );
        if let Err(over) = crate::admission::check_single(cost, limits.costs.max_single) {
            return Err((
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::CostExceedsMax,
                format!("this event on {name:?} {over}"),
            ));
        }
        units = units.saturating_add(cost);
        channels.push((name, internal));
    }
    Ok(Priced {
        channels,
        frame_data: data,
        units,
    })
}

/// Charges `units` to the app's key bucket: the balance, or the 429.
async fn charge(
    node: &Node,
    app: &PusherApp,
    limits: &Limits,
    units: u32,
) -> Result<Option<Balance>, Box<HttpResponse>> {
    let key = key_of(app);
    let payer = Payer::Key {
        layer: Layer::Http,
        key: &key,
        limits,
    };
    match node
        .ledger()
        .charge(payer, Price::units(units, None), Instant::now())
        .wait()
        .await
    {
        Ok(a) => Ok(a.balance),
        Err(r) => {
            let builder = with_rate(StatusCode::TOO_MANY_REQUESTS, r.balance.as_ref());
            let why = format!(
                "this app's budget is empty; retry after {} ms",
                retry_after_ms(r.retry_after)
            );
            Err(Box::new(refusal_builder(
                builder,
                ErrorCode::RateLimited,
                &why,
                Some(r.retry_after),
            )))
        }
    }
}

/// Publishes a priced event on each of its channels (one event for the
/// app's figures); its `info` asked.
async fn publish(node: &Node, app: &PusherApp, e: &Event, p: &Priced) -> Value {
    node.metrics.pusher.api_events(&app.id, 1);
    let exclude = e.socket_id.as_deref().unwrap_or("");
    let mut info = Map::new();
    for (name, internal) in &p.channels {
        let frame = frames::channel_event(&e.name, name, &p.frame_data, None);
        node.publish(internal, &publish_data(exclude, &frame), "pusher", None)
            .await;
        if let Some(wanted) = &e.info {
            info.insert(
                name.clone(),
                channel_info(node, internal, names::kind(name), wanted).await,
            );
        }
    }
    Value::Object(info)
}

/// `subscription_count` and `user_count` (presence channels only) as
/// `info` asks.
async fn channel_info(node: &Node, internal: &str, kind: Kind, wanted: &str) -> Value {
    let mut out = Map::new();
    for attr in wanted.split(',') {
        match attr {
            "subscription_count" => {
                out.insert(attr.into(), json!(node.broker.subscribers(internal)));
            }
            "user_count" if kind == Kind::Presence => {
                let users = presence::user_count(node, internal).await;
                out.insert(attr.into(), json!(users));
            }
            _ => {}
        }
    }
    Value::Object(out)
}

async fn events(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let (app, body) = match read_signed(&req, payload, &node).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Some(refusal) = banned(&req, &node, &app) {
        return refusal;
    }
    let e: Event = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(err) => return bad(&node, &app, &format!("malformed event: {err}")),
    };
    let limits = node.config.load().account_limits(&app.account);
    let priced = match price(&app, &limits, &node, &e) {
        Ok(p) => p,
        Err((status, code, why)) => return refuse(&node, &app.account, status, code, &why),
    };
    let balance = match charge(&node, &app, &limits, priced.units).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let info = publish(&node, &app, &e, &priced).await;
    let body = if e.info.is_some() {
        json!({"channels": info})
    } else {
        json!({})
    };
    with_rate(StatusCode::OK, balance.as_ref()).json(body)
}

async fn batch_events(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    let (app, body) = match read_signed(&req, payload, &node).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Some(refusal) = banned(&req, &node, &app) {
        return refusal;
    }
    let b: Batch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => return bad(&node, &app, &format!("malformed batch: {err}")),
    };
    if b.batch.is_empty() || b.batch.len() > MAX_BATCH {
        return bad(&node, &app, &format!("a batch holds 1-{MAX_BATCH} events"));
    }
    let limits = node.config.load().account_limits(&app.account);
    let mut priced = Vec::with_capacity(b.batch.len());
    for e in &b.batch {
        match price(&app, &limits, &node, e) {
            Ok(p) => priced.push(p),
            Err((status, code, why)) => return refuse(&node, &app.account, status, code, &why),
        }
    }
    // The sum of its events' prices, charged at once.
    let units = priced.iter().fold(0u32, |a, p| a.saturating_add(p.units));
    let balance = match charge(&node, &app, &limits, units).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let mut infos = Vec::with_capacity(priced.len());
    for (e, p) in b.batch.iter().zip(&priced) {
        let info = publish(&node, &app, e, p).await;
        infos.push(
            info.as_object()
                .and_then(|m| m.values().next().cloned())
                .unwrap_or(json!({})),
        );
    }
    let any_info = b.batch.iter().any(|e| e.info.is_some());
    let body = if any_info {
        json!({"batch": infos})
    } else {
        json!({})
    };
    with_rate(StatusCode::OK, balance.as_ref()).json(body)
}

/// The query's parameters, decoded.
fn query(req: &HttpRequest) -> HashMap<String, String> {
    web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .unwrap_or_default()
}

async fn channels(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    let app = match signed(&req, &node, b"") {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let q = query(&req);
    let filter = q.get("filter_by_prefix").map_or("", String::as_str);
    let wants_users = q
        .get("info")
        .is_some_and(|i| i.split(',').any(|a| a == "user_count"));
    if wants_users && !filter.starts_with("presence-") {
        return bad(
            &node,
            &app,
            "info=user_count needs filter_by_prefix=presence-",
        );
    }
    let prefix = names::app_prefix(&app.id);
    let mut out = Map::new();
    for (internal, n) in node.broker.occupied(&format!("{prefix}{filter}")) {
        if n == 0 {
            continue;
        }
        let name = &internal[prefix.len()..];
        // A user's channel is the user's, not one of the app's to list.
        if names::user_of(name).is_some() {
            continue;
        }
        let info = if wants_users {
            json!({"user_count": presence::user_count(&node, &internal).await})
        } else {
            json!({})
        };
        out.insert(name.to_owned(), info);
    }
    HttpResponse::Ok().json(json!({"channels": out}))
}

async fn channel(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    let app = match signed(&req, &node, b"") {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let name = req.match_info().get("channel").unwrap_or("").to_owned();
    let internal = names::internal(&app.id, &name);
    let count = node.broker.subscribers(&internal);
    let mut out = json!({"occupied": count > 0});
    let kind = names::kind(&name);
    let wanted = query(&req).get("info").cloned();
    if kind != Kind::Presence
        && wanted
            .iter()
            .any(|w| w.split(',').any(|a| a == "user_count"))
    {
        return bad(
            &node,
            &app,
            "Cannot retrieve the user count unless the channel is a presence channel",
        );
    }
    if let Some(wanted) = wanted
        && let Value::Object(info) = channel_info(&node, &internal, kind, &wanted).await
    {
        out.as_object_mut().expect("an object").extend(info);
    }
    HttpResponse::Ok().json(out)
}

async fn users(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    let app = match signed(&req, &node, b"") {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let name = req.match_info().get("channel").unwrap_or("");
    if names::kind(name) != Kind::Presence {
        return bad(&node, &app, "users are listed for presence channels only");
    }
    let internal = names::internal(&app.id, name);
    let users: Vec<Value> = presence::user_ids(&node, &app, &internal)
        .await
        .into_iter()
        .map(|id| json!({"id": &*id}))
        .collect();
    HttpResponse::Ok().json(json!({"users": users}))
}
