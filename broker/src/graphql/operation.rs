//! One operation's way through §12, over HTTP and over the socket alike:
//! parse, price and measure ([`super::pricing`]), refuse, charge (in
//! [`super::admission`], between validation and execution), execute,
//! refund. All of it runs on the GraphQL runtime ([`super::executor`]),
//! off the actix worker that read the request.
//!
//! No operation is free: an admitted one costs at least 1; a document
//! refused before it ran (unparsable, invalid, too deep, too complex, the
//! wrong method for its type) costs `costs.malformed`, and when the
//! bucket cannot pay even that the answer is the 429. Only
//! `QUERY_TOO_EXPENSIVE` is free, as `cost_exceeds_max` is on every
//! front: nothing ran.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use async_graphql::parser::types::{ExecutableDocument, OperationType};
use async_graphql::{Request, ServerError, Variables};
use async_graphql_value::ConstValue;

use super::admission::{Start, Ticket, rate_limited, single_publishes};
use super::caller::Caller;
use super::charge::{self, Balance};
use super::code::Code;
use super::pricing::{self, Refusal, Weights};
use super::reply::{Media, RateLimit, Reply};
use super::request::{MAX_DOCUMENT_BYTES, MAX_TEXT_NESTING};
use super::request::{Params, Refused, text_nesting};
use super::schema::SCHEMA;
use crate::config::LimitName;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;

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

impl Ran {
    fn refused(reply: Reply) -> Ran {
        Ran {
            reply,
            operation: "refused",
            subscribe: None,
        }
    }
}

pub(super) async fn read_balance(node: &Node, caller: &Caller) -> Balance {
    charge::charge(node, caller, 0).await.balance
}

pub(super) fn max(node: &Node, caller: &Caller) -> u64 {
    caller.max_single(node.limiter_store.account_share(&caller.account))
}

fn operation_label(op: OperationType) -> &'static str {
    match op {
        OperationType::Query => "query",
        OperationType::Mutation => "mutation",
        OperationType::Subscription => "subscription",
    }
}

fn status(media: Media, r: &Refused) -> StatusCode {
    match media {
        Media::GraphqlResponse => r.status,
        Media::Json => r.json_status,
    }
}

/// A refusal before execution, with the caller's balance when known; a
/// [`Refused::malformed`] one charged `costs.malformed` first.
pub(super) async fn refused(
    node: &Node,
    caller: Option<&Caller>,
    media: Media,
    r: Refused,
    retry_after: Option<Duration>,
    estimated: u64,
) -> Reply {
    Exceeded::new(
        Layer::Graphql,
        r.code.reason(),
        caller.map_or("", |c| c.account.as_str()),
    )
    .reset(retry_after.unwrap_or_default())
    .emit(&node.metrics);
    let rate = match caller {
        None => None,
        Some(c) if r.malformed => match malformed(node, c, media).await {
            Ok(rate) => Some(rate),
            Err(too_many) => return too_many,
        },
        Some(c) => Some(RateLimit::uncharged(
            estimated,
            read_balance(node, c).await,
            max(node, c),
        )),
    };
    Reply {
        status: status(media, &r),
        media,
        data: None,
        errors: vec![r.error()],
        rate,
        retry_after,
    }
}

/// Charges `costs.malformed` for a document refused before it ran: its
/// runtime signal, or the 429 when the bucket cannot pay (garbage is not
/// free, and an empty bucket is a 429 whatever was sent).
async fn malformed(node: &Node, caller: &Caller, media: Media) -> Result<RateLimit, Reply> {
    let units = u64::from(caller.limits.costs.malformed);
    let taken = charge::charge(node, caller, units).await;
    let shadow = caller.limits.is_dry_run(LimitName::Graphql);
    let rate = RateLimit {
        cost: if taken.allowed { units } else { 0 },
        estimated: units,
        refunded: 0,
        balance: taken.balance,
        max_single: max(node, caller),
        shadow: shadow.then_some(!taken.allowed),
    };
    if taken.allowed || taken.shadowed {
        return Ok(rate);
    }
    Err(Reply {
        status: StatusCode::TOO_MANY_REQUESTS,
        media,
        data: None,
        errors: vec![rate_limited(units, &taken)],
        rate: Some(rate),
        retry_after: Some(taken.retry_after),
    })
}

/// Prices, charges, executes and refunds one operation, on the GraphQL
/// runtime.
pub(super) async fn run(
    node: &Arc<Node>,
    caller: Caller,
    media: Media,
    params: Params,
    via: Via,
) -> Ran {
    let node = node.clone();
    let ran =
        super::executor::run(async move { run_here(&node, caller, media, params, via).await });
    ran.await.unwrap_or_else(|| {
        Ran::refused(Reply {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            media,
            data: None,
            errors: vec![ServerError::new(
                "the operation failed inside the broker",
                None,
            )],
            rate: None,
            retry_after: None,
        })
    })
}

async fn run_here(node: &Arc<Node>, caller: Caller, media: Media, params: Params, via: Via) -> Ran {
    let max = max(node, &caller);
    let priced = match price(node, &caller, params, via) {
        Ok(p) => p,
        Err(r) => return Ran::refused(refused(node, Some(&caller), media, r, None, 0).await),
    };
    let label = operation_label(priced.estimate.operation);
    let cost = priced.estimate.cost;
    node.metrics.graphql_cost(label, cost);
    if let Err(r) = single_publishes(node, &caller, priced.dearest_publish) {
        return Ran::refused(refused(node, Some(&caller), media, r, None, cost).await);
    }
    let over = cost > max;
    let shadow = caller.limits.is_dry_run(LimitName::Graphql);
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
        let r = Refused::request(
            Code::QueryTooExpensive,
            format!(
                "query cost {cost} exceeds the maximum of {max}; \
                 request smaller pages or fewer nested lists"
            ),
        )
        .with("cost", cost)
        .with("max", max);
        return Ran::refused(refused(node, Some(&caller), media, r, None, cost).await);
    }
    let (reply, subscribe) = execute(node, caller, media, priced, max, over).await;
    Ran {
        reply,
        operation: label,
        subscribe,
    }
}

/// A parsed, priced and measured operation, with the variables the pricer
/// read (the sent ones with their defaults) for the executor.
struct Priced {
    doc: ExecutableDocument,
    query: String,
    operation_name: Option<String>,
    variables: Variables,
    estimate: pricing::Estimate,
    /// The highest price of one message the operation publishes (0: it
    /// publishes nothing).
    dearest_publish: u64,
}

/// Parses, checks the method, prices and measures: everything before a
/// charge, in time linear in the document.
fn price(node: &Node, caller: &Caller, params: Params, via: Via) -> Result<Priced, Refused> {
    let Params {
        query,
        operation_name,
        variables,
    } = params;
    if query.len() > MAX_DOCUMENT_BYTES {
        return Err(Refused::status(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::PayloadTooLarge,
            format!(
                "the document is {} bytes, above the limit of {MAX_DOCUMENT_BYTES}",
                query.len()
            ),
        )
        .malformed());
    }
    if text_nesting(&query) > MAX_TEXT_NESTING {
        return Err(Refused::request(
            Code::QueryTooDeep,
            format!("the document nests deeper than {MAX_TEXT_NESTING} brackets"),
        )
        .malformed());
    }
    let doc = super::documents::parse(&query).map_err(|e| {
        let e = ServerError::from(e);
        Refused::request(Code::BadRequest, e.message).malformed()
    })?;
    let op = pricing::operation(&doc, operation_name.as_deref());
    match op.map(|o| o.node.ty) {
        Some(OperationType::Mutation) if via == Via::Get => {
            return Err(Refused::status(
                StatusCode::METHOD_NOT_ALLOWED,
                Code::MethodNotAllowed,
                "GET runs queries only: send mutations with POST",
            )
            .malformed());
        }
        Some(OperationType::Subscription) if via != Via::Socket => {
            return Err(Refused::request(
                Code::BadRequest,
                "subscriptions are served over a WebSocket with the graphql-transport-ws \
                 subprotocol at /v1/graphql",
            )
            .malformed());
        }
        _ => {}
    }
    let variables = match op {
        Some(op) => pricing::coerce(&op.node, variables),
        None => variables,
    };
    let costs = &caller.limits.costs;
    let broker = &node.broker;
    // A name longer than a channel's is refused by the resolver: no
    // lookup for it.
    let dearest = std::cell::Cell::new(0u64);
    let publish = |channel: &str, len: usize| -> u64 {
        let subscribers = if channel.len() <= crate::protocol::channel::MAX_CHANNEL_LEN {
            broker.subscribers(channel)
        } else {
            0
        };
        let price = u64::from(crate::pricing::publish(costs, len, subscribers));
        dearest.set(dearest.get().max(price));
        price
    };
    let estimate = pricing::estimate(
        &doc,
        operation_name.as_deref(),
        &variables,
        Weights::new(costs),
        &publish,
    )
    .map_err(|e| {
        let message = e.to_string();
        match e {
            Refusal::TooDeep { depth, max } => Refused::request(Code::QueryTooDeep, message)
                .with("depth", depth)
                .with("max", max),
            Refusal::TooComplex { max, .. } => {
                Refused::request(Code::QueryTooComplex, message).with("max", max)
            }
            Refusal::Cycle(_) | Refusal::NoOperation(_) | Refusal::Subscription(_) => {
                Refused::request(Code::BadRequest, message)
            }
        }
        .malformed()
    })?;
    Ok(Priced {
        doc,
        query,
        operation_name,
        variables,
        estimate,
        dearest_publish: dearest.get(),
    })
}

/// Executes a priced operation under its ticket, then refunds what the
/// lists did not return. A subscription (over the socket) runs only up to
/// its resolver, which records where to subscribe.
async fn execute(
    node: &Arc<Node>,
    caller: Caller,
    media: Media,
    priced: Priced,
    max: u64,
    over_max: bool,
) -> (Reply, Option<Start>) {
    let Priced {
        doc,
        query,
        operation_name,
        variables,
        estimate,
        ..
    } = priced;
    // Kept only when the actual cost can be lower: a query with lists.
    let kept = (estimate.sized_lists && estimate.operation == OperationType::Query)
        .then(|| (doc.clone(), variables.clone(), operation_name.clone()));
    let ticket = Arc::new(Ticket::new(node.clone(), caller, estimate.cost));
    let mut request = Request::new(query)
        .variables(variables)
        .data(ticket.clone());
    if let Some(name) = operation_name {
        request = request.operation_name(name);
    }
    request.set_parsed_query(doc);
    let response = if estimate.operation == OperationType::Subscription {
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
        // Refused by validation: a malformed document's price.
        Exceeded::new(Layer::Graphql, Code::BadRequest.reason(), &caller.account)
            .emit(&node.metrics);
        let rate = match malformed(node, caller, media).await {
            Ok(rate) => rate,
            Err(too_many) => return (too_many, None),
        };
        let status = match media {
            Media::GraphqlResponse => StatusCode::BAD_REQUEST,
            Media::Json => StatusCode::OK,
        };
        let reply = Reply {
            status,
            media,
            data: None,
            errors: response.errors,
            rate: Some(rate),
            retry_after: None,
        };
        return (reply, None);
    };
    let extra = ticket.extra();
    let mut rate = RateLimit {
        cost: outcome
            .charged
            .saturating_sub(extra.given_back)
            .saturating_add(extra.charged),
        estimated: estimate.cost,
        refunded: extra.given_back,
        balance: extra.balance.unwrap_or(taken.balance),
        max_single: max,
        shadow: ticket
            .shadow
            .then_some(outcome.would_refuse || over_max || extra.would_refuse),
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
    // What a resolver read but could not pay for to hand over was work
    // done all the same: its estimate is not given back.
    let unpaid = extra.refused.is_some() || extra.too_expensive;
    if let Some((doc, variables, name)) = kept
        && outcome.charged > 0
        && !unpaid
    {
        let w = Weights::new(&caller.limits.costs);
        let actual = pricing::actual(&doc, name.as_deref(), &variables, w, &response.data);
        let kept = outcome.charged.saturating_sub(extra.given_back);
        let refund = estimate.cost.saturating_sub(actual).min(kept);
        if refund > 0 {
            rate.balance = charge::refund(node, caller, refund, rate.balance).await;
            rate.refunded = extra.given_back + refund;
            rate.cost = (kept - refund).saturating_add(extra.charged);
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
    // A subscription starts only without errors; a hook's `disconnect`
    // (an error too) is carried to the socket, which closes.
    let subscribe =
        subscribe.filter(|s| response.errors.is_empty() || matches!(s, Start::Disconnect { .. }));
    let status = if extra.refused.is_some() {
        // A resolver could not pay for what it read: a status-only client
        // must not take the answer for a success.
        StatusCode::TOO_MANY_REQUESTS
    } else if forbidden {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::OK
    };
    let reply = Reply {
        status,
        media,
        data: Some(response.data),
        errors: response.errors,
        rate: Some(rate),
        retry_after: extra.refused,
    };
    (reply, subscribe)
}
