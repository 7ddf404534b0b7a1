//! GraphQL's cost function (§12, seed 004): a document is priced from its
//! parsed form and its variables, before anything executes, in one walk
//! that is linear in the document (each fragment is walked once, however
//! often it is spread: `walk.rs`). Price what runs: the pricer reads the
//! operation as the executor will run it (`args.rs`: variables with their
//! defaults, `@skip`/`@include` decided on them, a list input given one
//! value as a list of one). After execution, [`actual`] sums the same
//! prices with every list sized by what it returned, for the refund.
//!
//! The rules: every selected field costs `graphql_field`, times the sizes
//! of the lists above it (a list field is not multiplied by its own size;
//! its children are). A list's size is its `first`/`last` argument, as
//! given or as the schema defaults it; a list without one is sized
//! `graphql_list_size`. `budget`, `prices` and `__typename` weigh nothing;
//! `__schema` and `__type` cost `graphql_introspection` once for their
//! subtree; `publish` costs what an HTTP publish of that message costs and
//! `publishBatch` the sum of its messages (their selections add nothing:
//! the publish is the work). Every operation costs at least 1.
//!
//! The limits, measured in the same walk: deeper than `graphql_max_depth`
//! (introspection included), more than `graphql_max_fields` fields once
//! fragments are expanded where they are spread (aliases included), a
//! fragment that spreads itself; and a subscription renders each field
//! once per message (`collect.rs`).

use std::collections::HashMap;

use async_graphql::parser::Positioned;
use async_graphql::parser::types::{ExecutableDocument, OperationDefinition, OperationType};
use async_graphql_value::Variables;

use crate::config::Costs;
use publishes::Publishes;
use walk::Walk;

/// What any operation costs at least (§12 amended: none is free).
pub const MIN_COST: u64 = 1;

/// The numbers of the plan's cost table that pricing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub field: u64,
    pub list_size: u64,
    pub introspection: u64,
    pub max_depth: u32,
    pub max_fields: u64,
}

impl Weights {
    pub fn new(costs: &Costs) -> Weights {
        Weights {
            field: u64::from(costs.graphql_field),
            list_size: u64::from(costs.graphql_list_size),
            introspection: u64::from(costs.graphql_introspection),
            max_depth: costs.graphql_max_depth,
            max_fields: u64::from(costs.graphql_max_fields),
        }
    }
}

/// The price of publishing `len` bytes of `data` (its compact JSON) on
/// `channel`: the caller's cost table, size and the channel's fan-out
/// included (`pricing::publish`).
pub trait PublishPrice {
    fn price(&self, channel: &str, len: usize) -> u64;
}

impl<F: Fn(&str, usize) -> u64> PublishPrice for F {
    fn price(&self, channel: &str, len: usize) -> u64 {
        self(channel, len)
    }
}

/// What an operation is estimated to cost, and its measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// At least [`MIN_COST`].
    pub cost: u64,
    pub depth: u32,
    /// Fields selected with fragments expanded (at most `max_fields`).
    pub fields: u64,
    pub operation: OperationType,
    /// Some list was sized by an argument or an assumption: what it
    /// returns may be smaller, so [`actual`] is worth computing.
    pub sized_lists: bool,
}

/// Why a document is refused before any of it runs (each costs the
/// caller `costs.malformed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("query depth {depth} exceeds the maximum of {max}; select fewer nested fields")]
    TooDeep { depth: u32, max: u32 },
    /// `fields`: counted when the walk stopped (at least that many).
    #[error(
        "the document selects more than {max} fields once its fragments are expanded where \
         they are spread; select fewer fields or spread fewer fragments"
    )]
    TooComplex { fields: u64, max: u64 },
    #[error("Cannot spread fragment \"{0}\" within itself")]
    Cycle(String),
    #[error("{0}")]
    NoOperation(String),
    #[error("{0}")]
    Subscription(String),
}

/// The schema's types, as far as pricing needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Query,
    Mutation,
    Subscription,
    Channel,
    Message,
    Member,
    PresenceStats,
    PresenceDiff,
    Budget,
    Prices,
    Published,
    /// Not in the schema (validation refuses it later).
    Unknown,
}

/// How a list's size is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// The named argument, or its schema default when omitted.
    Arg(&'static str, u64),
    /// `graphql_list_size`.
    Assumed,
}

/// How one field is priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Leaf,
    Object(Ty),
    List(Ty, Size),
    /// Costs nothing, with everything under it.
    Free,
    Introspection,
    Publish,
    PublishBatch,
}

/// The price rule of `ty.name`: the one table pricing, the SDL's
/// directives and the schema test read.
pub fn field(ty: Ty, name: &str) -> Kind {
    match (ty, name) {
        (_, "__typename") => Kind::Free,
        (Ty::Query, "__schema" | "__type") => Kind::Introspection,
        (Ty::Query, "channel") => Kind::Object(Ty::Channel),
        (Ty::Query, "channels") => Kind::List(Ty::Channel, Size::Arg("first", 50)),
        (Ty::Query, "budget" | "prices") => Kind::Free,
        (Ty::Channel, "history") => Kind::List(Ty::Message, Size::Arg("last", 50)),
        (Ty::Channel, "presence") => Kind::List(Ty::Member, Size::Arg("first", 100)),
        (Ty::Channel, "presenceStats") => Kind::Object(Ty::PresenceStats),
        (Ty::Mutation, "publish") => Kind::Publish,
        (Ty::Mutation, "publishBatch") => Kind::PublishBatch,
        (Ty::Subscription, "messages") => Kind::Object(Ty::Message),
        (Ty::Subscription, "presence") => Kind::Object(Ty::PresenceDiff),
        (Ty::PresenceDiff, "joins" | "leaves") => Kind::List(Ty::Member, Size::Assumed),
        _ => Kind::Leaf,
    }
}

/// The type named `name` in the SDL.
pub fn ty(name: &str) -> Ty {
    match name {
        "Query" => Ty::Query,
        "Mutation" => Ty::Mutation,
        "Subscription" => Ty::Subscription,
        "Channel" => Ty::Channel,
        "Message" => Ty::Message,
        "Member" => Ty::Member,
        "PresenceStats" => Ty::PresenceStats,
        "PresenceDiff" => Ty::PresenceDiff,
        "Budget" => Ty::Budget,
        "Prices" => Ty::Prices,
        "Published" => Ty::Published,
        _ => Ty::Unknown,
    }
}

fn root(op: OperationType) -> Ty {
    match op {
        OperationType::Query => Ty::Query,
        OperationType::Mutation => Ty::Mutation,
        OperationType::Subscription => Ty::Subscription,
    }
}

/// The operation a request runs: the named one, or the only one.
pub fn operation<'a>(
    doc: &'a ExecutableDocument,
    name: Option<&str>,
) -> Option<&'a Positioned<OperationDefinition>> {
    let mut ops = doc.operations.iter();
    match name {
        Some(name) => ops.find(|(n, _)| n.is_some_and(|n| n.as_str() == name)),
        None => {
            let first = ops.next()?;
            ops.next().is_none().then_some(first)
        }
    }
    .map(|(_, op)| op)
}

/// Prices the operation `name` (or the only one) of `doc` with
/// `variables` (sent; defaults are read from the operation, as
/// [`coerce`] fills them in for the executor), and measures it against
/// the plan's limits: too deep, too large once its fragments are
/// expanded, a fragment that spreads itself, no operation to run, a
/// subscription that would render a field twice per message. Every
/// operation costs at least 1: none is free.
pub fn estimate(
    doc: &ExecutableDocument,
    name: Option<&str>,
    variables: &Variables,
    w: Weights,
    publish: &dyn PublishPrice,
) -> Result<Estimate, Refusal> {
    let Some(op) = operation(doc, name) else {
        return Err(Refusal::NoOperation(match name {
            Some(name) => format!("the document has no operation named {name:?}"),
            None if doc.operations.iter().next().is_none() => {
                "the document has no operation".to_owned()
            }
            None => "the document has several operations: name one (operationName)".to_owned(),
        }));
    };
    let mut walk = Walk {
        doc,
        args: Args::new(variables, &op.node),
        w,
        publish,
        publishes: Publishes::new(),
        fragments: HashMap::new(),
        sized_lists: false,
        nesting: 0,
    };
    let m = walk.set(&op.node.selection_set.node, root(op.node.ty), 0)?;
    if op.node.ty == OperationType::Subscription {
        collect::subscription(doc, &walk.args, &op.node.selection_set.node)?;
    }
    Ok(Estimate {
        cost: m.cost.max(MIN_COST),
        depth: m.depth,
        fields: m.fields,
        operation: op.node.ty,
        sized_lists: walk.sized_lists,
    })
}

mod actual;
mod args;
mod collect;
mod publishes;
mod walk;

pub use actual::actual;
pub use args::{Args, coerce};
pub use collect::{Collected, collect};
pub use publishes::json_len;

#[cfg(test)]
mod tests;
