//! `/v1/graphql` over HTTP (§12), after the *GraphQL over HTTP*
//! specification: `POST` with `application/json`, `GET` for queries,
//! answers in `application/json` or `application/graphql-response+json`
//! as the client accepts. Identify, price, consume, execute, refund: each
//! step here, the charge in [`super::admission`], the price in
//! [`super::pricing`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use async_graphql::parser::types::{ExecutableDocument, OperationType};
use async_graphql::{Request, ServerError};
use async_graphql_value::ConstValue;

use super::admission::{Start, Ticket};
use super::caller::Caller;
use super::charge::{self, Balance};
use super::pricing::{self, Weights};
use super::reply::{Media, RateLimit, Reply};
pub(crate) use super::request::text_nesting;
use super::request::{Params, Refused, json_len, read_get, read_post};
use super::schema::{Code, SCHEMA};
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;

/// The largest document (§12: larger is 413).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// How far `{`, `[` and `(` may nest in a document's text before it is
/// parsed (the depth limit refuses far less once parsed; this bounds the
/// parser's own recursion on hostile input).
pub(crate) const MAX_TEXT_NESTING: usize = 128;

pub async fn post(
    req: HttpRequest,
    payload: web::Payload,
    node: web::Data<Arc<Node>>,
) -> HttpResponse {
    serve(req, Some(payload), node.get_ref().clone()).await
}

pub async fn get(req: HttpRequest, node: web::Data<Arc<Node>>) -> HttpResponse {
    serve(req, None, node.get_ref().clone()).await
}

async fn serve(req: HttpRequest, payload: Option<web::Payload>, node: Arc<Node>) -> HttpResponse {
    let started = Instant::now();
    let Some(media) = Media::negotiate(req.headers().get("accept")) else {
        let r = Refused::status(
            StatusCode::NOT_ACCEPTABLE,
            Code::NotAcceptable,
            "accept application/graphql-response+json or application/json",
        );
        return refuse(&node, None, Media::Json, r, None).await;
    };
    if node.is_draining() {
        let r = Refused::status(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::Draining,
            "this node is draining for shutdown; retry on another node",
        );
        return refuse(&node, None, media, r, Some(Duration::from_secs(1))).await;
    }
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let caller = match Caller::identify(&node, authorization) {
        Ok(c) => c,
        Err(e) => {
            let r = Refused::status(
                StatusCode::UNAUTHORIZED,
                Code::Unauthenticated,
                e.to_string(),
            );
            return refuse(&node, None, media, r, None).await;
        }
    };
    let ip = crate::gate::request_ip(req.head(), &node.config.load().node.trusted_proxies);
    if let Some(ban) = node.admin.bans.check(Some(&caller.account), Some(ip)) {
        let r = Refused::status(StatusCode::FORBIDDEN, Code::Banned, ban.message());
        return refuse(&node, Some(&caller), media, r, Some(ban.remaining)).await;
    }
    let via = if payload.is_none() {
        Via::Get
    } else {
        Via::Post
    };
    let params = match payload {
        Some(p) => read_post(&req, p, &node, &caller).await,
        None => read_get(&req),
    };
    let params = match params {
        Ok(p) => p,
        Err(r) => return refuse(&node, Some(&caller), media, r, None).await,
    };
    let ran = run(&node, caller, media, params, via).await;
    node.metrics.graphql_done(ran.operation, started);
    ran.reply.into_response()
}

/// A refusal before any charge, with the caller's balance when known.
async fn refuse(
    node: &Node,
    caller: Option<&Caller>,
    media: Media,
    r: Refused,
    retry_after: Option<Duration>,
) -> HttpResponse {
    Exceeded::new(
        Layer::Graphql,
        r.code.reason(),
        caller.map_or("", |c| c.account.as_str()),
    )
    .reset(retry_after.unwrap_or_default())
    .emit(&node.metrics);
    let rate = match caller {
        Some(c) => Some(RateLimit::uncharged(
            0,
            read_balance(node, c).await,
            max(node, c),
        )),
        None => None,
    };
    let status = match media {
        Media::GraphqlResponse => r.status,
        Media::Json => r.json_status,
    };
    Reply {
        status,
        media,
        data: None,
        errors: vec![r.error()],
        rate,
        retry_after,
    }
    .into_response()
}

async fn read_balance(node: &Node, caller: &Caller) -> Balance {
    charge::charge(node, caller, 0).await.balance
}

fn max(node: &Node, caller: &Caller) -> u64 {
    caller.max_single(node.bridge.account_share(&caller.account))
}

fn operation_label(op: Option<OperationType>) -> &'static str {
    match op {
        Some(OperationType::Query) => "query",
        Some(OperationType::Mutation) => "mutation",
        Some(OperationType::Subscription) => "subscription",
        None => "unknown",
    }
}

/// How an operation arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// `GET`: queries only.
    Get,
    /// `POST`: queries and mutations.
    Post,
    /// A `subscribe` message on the WebSocket: subscriptions too.
    Socket,
}

/// One operation's outcome.
pub(super) struct Ran {
    pub reply: Reply,
    /// The operation's type (for the latency histogram).
    pub operation: &'static str,
    /// A subscription that started (over the socket only; the socket
    /// subscribes).
    pub subscribe: Option<Start>,
}

/// Prices, charges, executes and refunds one operation.
pub(super) async fn run(
    node: &Arc<Node>,
    caller: Caller,
    media: Media,
    params: Params,
    via: Via,
) -> Ran {
    let max = max(node, &caller);
    let (r, estimated) = match price(node, &caller, &params, via) {
        Ok(priced) => {
            let label = operation_label(priced.estimate.operation);
            node.metrics.graphql_cost(label, priced.estimate.cost);
            let over = priced.estimate.cost > max;
            let shadow = caller.limits.is_dry_run(crate::config::LimitName::Graphql);
            if over && shadow {
                Exceeded::new(
                    Layer::Graphql,
                    Code::QueryTooExpensive.reason(),
                    &caller.account,
                )
                .dry_run(true)
                .emit(&node.metrics);
            }
            if over && !shadow {
                let cost = priced.estimate.cost;
                (
                    Refused::request(
                        Code::QueryTooExpensive,
                        format!(
                            "query cost {cost} exceeds the maximum of {max}; \
                             request smaller pages or fewer nested lists"
                        ),
                    )
                    .with("cost", cost)
                    .with("max", max),
                    cost,
                )
            } else {
                let (reply, subscribe) =
                    execute(node, caller, media, params, priced, max, over).await;
                return Ran {
                    reply,
                    operation: label,
                    subscribe,
                };
            }
        }
        Err(r) => (r, 0),
    };
    Exceeded::new(Layer::Graphql, r.code.reason(), &caller.account).emit(&node.metrics);
    let balance = read_balance(node, &caller).await;
    let status = match media {
        Media::GraphqlResponse => r.status,
        Media::Json => r.json_status,
    };
    let reply = Reply {
        status,
        media,
        data: None,
        errors: vec![r.error()],
        rate: Some(RateLimit::uncharged(estimated, balance, max)),
        retry_after: None,
    };
    Ran {
        reply,
        operation: "refused",
        subscribe: None,
    }
}

/// A parsed and priced document.
struct Priced {
    doc: ExecutableDocument,
    estimate: pricing::Estimate,
}

/// Parses, checks the method, prices: everything before a charge.
fn price(node: &Node, caller: &Caller, params: &Params, via: Via) -> Result<Priced, Refused> {
    if params.query.len() > MAX_DOCUMENT_BYTES {
        return Err(Refused::status(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::PayloadTooLarge,
            format!(
                "the document is {} bytes, above the limit of {MAX_DOCUMENT_BYTES}",
                params.query.len()
            ),
        ));
    }
    if text_nesting(&params.query) > MAX_TEXT_NESTING {
        return Err(Refused::request(
            Code::QueryTooDeep,
            format!("the document nests deeper than {MAX_TEXT_NESTING} brackets"),
        ));
    }
    let doc = super::documents::parse(&params.query).map_err(|e| {
        let e = ServerError::from(e);
        Refused::request(Code::BadRequest, e.message)
    })?;
    match pricing::operation(&doc, params.operation_name.as_deref()).map(|o| o.node.ty) {
        Some(OperationType::Mutation) if via == Via::Get => {
            return Err(Refused::status(
                StatusCode::METHOD_NOT_ALLOWED,
                Code::MethodNotAllowed,
                "GET runs queries only: send mutations with POST",
            ));
        }
        Some(OperationType::Subscription) if via != Via::Socket => {
            return Err(Refused::request(
                Code::BadRequest,
                "subscriptions are served over a WebSocket with the graphql-transport-ws \
                 subprotocol at /v1/graphql",
            ));
        }
        _ => {}
    }
    let costs = &caller.limits.costs;
    let bridge = &node.bridge;
    let publish = |channel: &str, data: &ConstValue| -> u64 {
        let len = json_len(data);
        u64::from(crate::pricing::publish(
            costs,
            len,
            bridge.subscribers(channel),
        ))
    };
    let estimate = pricing::estimate(
        &doc,
        params.operation_name.as_deref(),
        &params.variables,
        Weights::new(costs),
        &publish,
    )
    .map_err(|e| {
        Refused::request(Code::QueryTooDeep, e.to_string())
            .with("depth", e.depth)
            .with("max", e.max)
    })?;
    Ok(Priced { doc, estimate })
}

/// Executes a priced operation under its ticket, then refunds what the
/// lists did not return. A subscription (over the socket) runs only up to
/// its resolver, which records where to subscribe.
async fn execute(
    node: &Arc<Node>,
    caller: Caller,
    media: Media,
    params: Params,
    priced: Priced,
    max: u64,
    over_max: bool,
) -> (Reply, Option<Start>) {
    let Priced { doc, estimate } = priced;
    // Kept only when the actual cost can be lower: a query with lists.
    let kept =
        (estimate.sized_lists && estimate.operation == Some(OperationType::Query)).then(|| {
            (
                doc.clone(),
                params.variables.clone(),
                params.operation_name.clone(),
            )
        });
    let ticket = Arc::new(Ticket::new(node.clone(), caller, estimate.cost));
    let mut request = Request::new(params.query)
        .variables(params.variables)
        .data(ticket.clone());
    if let Some(name) = &params.operation_name {
        request = request.operation_name(name.clone());
    }
    request.set_parsed_query(doc);
    let response = if estimate.operation == Some(OperationType::Subscription) {
        // The stream's first item is an error; a subscription that started
        // yields nothing here (the socket delivers its messages).
        use futures_util::StreamExt;
        let mut stream = SCHEMA.execute_stream(request);
        stream
            .next()
            .await
            .unwrap_or_else(|| async_graphql::Response::new(ConstValue::Null))
    } else {
        SCHEMA.execute(request).await
    };
    let subscribe = ticket.subscribe.lock().take();
    let outcome = ticket.outcome();
    let caller = &ticket.caller;
    let Some(taken) = outcome.taken else {
        // Refused by validation: nothing was charged.
        Exceeded::new(Layer::Graphql, Code::BadRequest.reason(), &caller.account)
            .emit(&node.metrics);
        let status = match media {
            Media::GraphqlResponse => StatusCode::BAD_REQUEST,
            Media::Json => StatusCode::OK,
        };
        let balance = read_balance(node, caller).await;
        let reply = Reply {
            status,
            media,
            data: None,
            errors: response.errors,
            rate: Some(RateLimit::uncharged(estimate.cost, balance, max)),
            retry_after: None,
        };
        return (reply, None);
    };
    let mut rate = RateLimit {
        cost: outcome.charged,
        estimated: estimate.cost,
        refunded: 0,
        balance: taken.balance,
        max_single: max,
        shadow: ticket.shadow.then_some(outcome.would_refuse || over_max),
    };
    if outcome.rate_limited {
        let reply = Reply {
            status: StatusCode::TOO_MANY_REQUESTS,
            media,
            data: None,
            errors: response.errors,
            rate: Some(rate),
            retry_after: Some(taken.retry_after),
        };
        return (reply, None);
    }
    if let Some((doc, variables, name)) = kept
        && outcome.charged > 0
    {
        let w = Weights::new(&caller.limits.costs);
        let actual = pricing::actual(&doc, name.as_deref(), &variables, w, &response.data);
        let refund = estimate.cost.saturating_sub(actual).min(outcome.charged);
        if refund > 0 {
            rate.balance = charge::refund(node, caller, refund, rate.balance).await;
            rate.refunded = refund;
            rate.cost = outcome.charged - refund;
        }
    }
    let forbidden = response.data == ConstValue::Null
        && response.errors.iter().any(|e| {
            e.extensions
                .as_ref()
                .and_then(|x| x.get("code"))
                .is_some_and(|c| *c == ConstValue::String(Code::Forbidden.as_str().to_owned()))
        });
    if forbidden {
        Exceeded::new(Layer::Graphql, Code::Forbidden.reason(), &caller.account)
            .emit(&node.metrics);
    }
    let subscribe = subscribe.filter(|_| response.errors.is_empty());
    let reply = Reply {
        status: if forbidden {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::OK
        },
        media,
        data: Some(response.data),
        errors: response.errors,
        rate: Some(rate),
        retry_after: None,
    };
    (reply, subscribe)
}
