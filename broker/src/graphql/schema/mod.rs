//! The §12 schema: its types and scalars here, one resolver file per root
//! type (`query.rs`, `mutation.rs`, `subscription.rs`). Every name is
//! contract. Resolvers reach the node and the caller through the request's
//! [`Ticket`](super::admission::Ticket).

mod mutation;
mod query;
mod subscription;

use std::sync::LazyLock;

use async_graphql::{
    InputObject, InputValueError, InputValueResult, Name, Scalar, ScalarType, Schema, SimpleObject,
    Value,
};

pub use super::code::Code;
pub use mutation::Mutation;
pub use query::{Channel, Query, SCAN_PER_UNIT};
pub use subscription::Subscription;

pub type ApiSchema = Schema<Query, Mutation, Subscription>;

/// The schema, built once: it holds no node state (resolvers find the
/// node and the caller in the request's data), so every node and worker
/// shares it.
pub static SCHEMA: LazyLock<ApiSchema> = LazyLock::new(|| {
    Schema::build(Query, Mutation, Subscription)
        .extension(super::admission::Admission)
        // The parser stops at 64 nested selection sets; the cost table's
        // depth limit (10 by default) refuses far less before this.
        .limit_recursive_depth(64)
        .limit_directives(16)
        .finish()
});

/// `scalar JSON`: any JSON value. A stored message's `data` is delivered
/// byte for byte as it was published; an input is kept as its value and
/// published in compact form.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// JSON text, answered as is.
    Raw(String),
    Value(Value),
}

impl Json {
    /// The value as JSON text (compact for an input).
    pub fn text(&self) -> String {
        match self {
            Json::Raw(s) => s.clone(),
            Json::Value(v) => serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned()),
        }
    }
}

#[Scalar(name = "JSON")]
impl ScalarType for Json {
    fn parse(value: Value) -> InputValueResult<Self> {
        Ok(Json::Value(value))
    }

    fn to_value(&self) -> Value {
        match self {
            // Serialized as the raw text itself (async-graphql's
            // `raw_value`).
            Json::Raw(text) => Value::Object(
                std::iter::once((
                    Name::new(async_graphql_value::RAW_VALUE_TOKEN),
                    Value::String(text.clone()),
                ))
                .collect(),
            ),
            Json::Value(v) => v.clone(),
        }
    }
}

/// `scalar Seq`: a channel sequence number, a JSON number (a safe integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seq(pub u64);

#[Scalar(name = "Seq")]
impl ScalarType for Seq {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::Number(n) => n
                .as_u64()
                .map(Seq)
                .ok_or_else(|| InputValueError::custom("a Seq is a non-negative integer")),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::Number(self.0.into())
    }
}

#[derive(Debug, Clone, SimpleObject)]
pub struct Message {
    pub channel: String,
    pub seq: Seq,
    pub data: Json,
}

/// A presence member (§13).
#[derive(Debug, Clone, SimpleObject)]
pub struct Member {
    pub user: String,
    pub conn_id: String,
    pub info: Option<Json>,
}

#[derive(Debug, Clone, SimpleObject)]
pub struct PresenceStats {
    pub users: i32,
    pub connections: i32,
}

#[derive(Debug, Clone, SimpleObject)]
pub struct PresenceDiff {
    pub channel: String,
    pub joins: Vec<Member>,
    pub leaves: Vec<Member>,
}

#[derive(Debug, Clone, SimpleObject)]
pub struct Budget {
    pub remaining: i64,
    pub capacity: i64,
    pub refill_per_sec: f64,
    /// Seconds until full, rounded up.
    pub reset_in: i64,
}

#[derive(Debug, Clone, SimpleObject)]
pub struct Prices {
    /// The same document as `GET /v1/prices`.
    pub json: Json,
}

#[derive(Debug, Clone, InputObject)]
pub struct PublishInput {
    pub channel: String,
    pub data: Json,
    /// An idempotency key (§17): a key published within the window is
    /// answered with the first one's `seq` and not published again.
    pub key: Option<String>,
}

#[derive(Debug, Clone, SimpleObject)]
pub struct Published {
    pub channel: String,
    pub seq: Seq,
    /// The key was published already: `seq` is the first one's (§17).
    pub duplicate: bool,
}
