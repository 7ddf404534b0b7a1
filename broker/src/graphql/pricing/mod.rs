//! GraphQL's cost function (§12, seed 004): a document is priced from its
//! parsed form and its variables, before anything executes, in one walk
//! that is linear in the document (each fragment is priced once, however
//! often it is spread). After execution, [`actual`] sums the same prices
//! with every list sized by what it returned, for the refund.
//!
//! The rules: every selected field costs `graphql_field`, times the sizes
//! of the lists above it (a list field is not multiplied by its own size;
//! its children are). A list's size is its `first`/`last` argument, as
//! given or as the schema defaults it; a list without one is sized
//! `graphql_list_size`. `budget`, `prices` and `__typename` cost nothing;
//! `__schema` and `__type` cost `graphql_introspection` once for their
//! subtree; `publish` costs what an HTTP publish of that message costs and
//! `publishBatch` the sum of its messages (their selections add nothing:
//! the publish is the work). Deeper than `graphql_max_depth` is refused.

use std::collections::HashMap;

use async_graphql::parser::Positioned;
use async_graphql::parser::types::{
    ExecutableDocument, Field, OperationDefinition, OperationType, Selection, SelectionSet,
    VariableDefinition,
};
use async_graphql_value::{ConstValue, Name, Value, Variables};

use crate::config::Costs;

/// How far selection sets and fragments may nest inside one another while
/// they are priced (fragments and inline fragments add no depth, so a
/// chain of them is bounded here). Past it the document is too deep.
const MAX_NESTING: u32 = 64;

/// The numbers of the plan's cost table that pricing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub field: u64,
    pub list_size: u64,
    pub introspection: u64,
    pub max_depth: u32,
}

impl Weights {
    pub fn new(costs: &Costs) -> Weights {
        Weights {
            field: u64::from(costs.graphql_field),
            list_size: u64::from(costs.graphql_list_size),
            introspection: u64::from(costs.graphql_introspection),
            max_depth: costs.graphql_max_depth,
        }
    }
}

/// The price of publishing `data` on `channel`: the caller's cost table,
/// size and the channel's fan-out included (`pricing::publish`).
pub trait PublishPrice {
    fn price(&self, channel: &str, data: &ConstValue) -> u64;
}

impl<F: Fn(&str, &ConstValue) -> u64> PublishPrice for F {
    fn price(&self, channel: &str, data: &ConstValue) -> u64 {
        self(channel, data)
    }
}

/// What an operation is estimated to cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub cost: u64,
    pub depth: u32,
    /// The operation's type (`None`: no operation matched; execution says
    /// why, and the price is 0).
    pub operation: Option<OperationType>,
    /// Some list was sized by an argument or an assumption: what it
    /// returns may be smaller, so [`actual`] is worth computing.
    pub sized_lists: bool,
}

/// The document is deeper than the plan allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("query depth {depth} exceeds the maximum of {max}; select fewer nested fields")]
pub struct TooDeep {
    pub depth: u32,
    pub max: u32,
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

/// What one field or selection set costs at multiplier 1, and how deep.
#[derive(Debug, Clone, Copy, Default)]
struct Priced {
    cost: u64,
    depth: u32,
}

/// The values a document's arguments refer to.
struct Args<'a> {
    variables: &'a Variables,
    definitions: &'a [Positioned<VariableDefinition>],
}

impl<'a> Args<'a> {
    fn variable(&self, name: &Name) -> Option<&'a ConstValue> {
        self.variables.get(name).or_else(|| {
            self.definitions
                .iter()
                .find(|d| d.node.name.node == *name)
                .and_then(|d| d.node.default_value())
        })
    }

    fn int(&self, v: &Value) -> Option<i64> {
        match v {
            Value::Number(n) => n.as_i64(),
            Value::Variable(name) => match self.variable(name)? {
                ConstValue::Number(n) => n.as_i64(),
                _ => None,
            },
            _ => None,
        }
    }

    fn boolean(&self, v: &Value) -> Option<bool> {
        match v {
            Value::Boolean(b) => Some(*b),
            Value::Variable(name) => match self.variable(name)? {
                ConstValue::Boolean(b) => Some(*b),
                _ => None,
            },
            _ => None,
        }
    }

    /// `v` with its variables filled in (a variable given whole is not
    /// copied).
    fn constant(&self, v: &Value) -> std::borrow::Cow<'a, ConstValue> {
        if let Value::Variable(name) = v {
            return match self.variable(name) {
                Some(c) => std::borrow::Cow::Borrowed(c),
                None => std::borrow::Cow::Owned(ConstValue::Null),
            };
        }
        std::borrow::Cow::Owned(
            v.clone()
                .into_const_with(|name| {
                    Ok::<_, std::convert::Infallible>(
                        self.variable(&name).cloned().unwrap_or(ConstValue::Null),
                    )
                })
                .unwrap_or(ConstValue::Null),
        )
    }

    /// `@skip(if: true)` or `@include(if: false)`.
    fn skipped(&self, directives: &[Positioned<async_graphql::parser::types::Directive>]) -> bool {
        directives.iter().any(|d| {
            let on = d
                .node
                .get_argument("if")
                .and_then(|v| self.boolean(&v.node));
            match d.node.name.node.as_str() {
                "skip" => on == Some(true),
                "include" => on == Some(false),
                _ => false,
            }
        })
    }

    fn size(&self, f: &Field, size: Size, assumed: u64) -> u64 {
        match size {
            Size::Assumed => assumed,
            Size::Arg(name, default) => match f.get_argument(name).map(|v| &v.node) {
                None | Some(Value::Null) => default,
                Some(v) => self.int(v).map_or(default, |n| n.max(0) as u64),
            },
        }
    }
}

struct Walk<'a> {
    doc: &'a ExecutableDocument,
    args: Args<'a>,
    w: Weights,
    publish: &'a dyn PublishPrice,
    /// Fragments priced so far (`None` while one is being priced: a cycle,
    /// which validation refuses, prices as nothing). Bounded by the
    /// document's fragments.
    fragments: HashMap<&'a str, Option<Priced>>,
    sized_lists: bool,
    nesting: u32,
}

impl<'a> Walk<'a> {
    fn too_deep(&self, depth: u32) -> TooDeep {
        TooDeep {
            depth,
            max: self.w.max_depth,
        }
    }

    /// The cost of `set` (on `ty`) at multiplier 1, and its depth; refused
    /// as soon as it is known to be too deep.
    fn set(&mut self, set: &'a SelectionSet, ty: Ty, depth: u32) -> Result<Priced, TooDeep> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.too_deep(depth.max(self.w.max_depth + 1)));
        }
        let mut out = Priced::default();
        for item in &set.items {
            let p = match &item.node {
                Selection::Field(f) => {
                    if self.args.skipped(&f.node.directives) {
                        continue;
                    }
                    self.field(&f.node, ty, depth + 1)?
                }
                Selection::FragmentSpread(s) => {
                    if self.args.skipped(&s.node.directives) {
                        continue;
                    }
                    self.fragment(s.node.fragment_name.node.as_str(), ty, depth)?
                }
                Selection::InlineFragment(i) => {
                    if self.args.skipped(&i.node.directives) {
                        continue;
                    }
                    self.set(&i.node.selection_set.node, ty, depth)?
                }
            };
            out.cost = out.cost.saturating_add(p.cost);
            out.depth = out.depth.max(p.depth);
        }
        self.nesting -= 1;
        Ok(out)
    }

    /// A spread fragment: priced once, then reused (the price of a
    /// selection set does not depend on where it is spread; the depth
    /// adds to the spread's).
    fn fragment(&mut self, name: &'a str, ty: Ty, depth: u32) -> Result<Priced, TooDeep> {
        let p = match self.fragments.get(name) {
            Some(Some(p)) => *p,
            Some(None) => Priced::default(),
            None => {
                let Some(def) = self.doc.fragments.get(name) else {
                    return Ok(Priced::default());
                };
                self.fragments.insert(name, None);
                let p = self.set(&def.node.selection_set.node, ty, 0)?;
                self.fragments.insert(name, Some(p));
                p
            }
        };
        if depth + p.depth > self.w.max_depth {
            return Err(self.too_deep(depth + p.depth));
        }
        Ok(Priced {
            cost: p.cost,
            depth: p.depth,
        })
    }

    fn field(&mut self, f: &'a Field, ty: Ty, depth: u32) -> Result<Priced, TooDeep> {
        if depth > self.w.max_depth {
            return Err(self.too_deep(depth));
        }
        let below = &f.selection_set.node;
        let (cost, under) = match field(ty, f.name.node.as_str()) {
            Kind::Introspection => {
                return Ok(Priced {
                    cost: self.w.introspection,
                    depth: 1,
                });
            }
            // A leaf with a selection is not in the schema (validation
            // refuses it); its depth still counts.
            Kind::Leaf if below.items.is_empty() => (self.w.field, Priced::default()),
            Kind::Leaf => {
                let under = self.set(below, Ty::Unknown, depth)?;
                (self.w.field.saturating_add(under.cost), under)
            }
            Kind::Free => (0, self.set(below, Ty::Unknown, depth)?),
            Kind::Object(child) => {
                let under = self.set(below, child, depth)?;
                (self.w.field.saturating_add(under.cost), under)
            }
            Kind::List(child, size) => {
                self.sized_lists = true;
                let n = self.args.size(f, size, self.w.list_size);
                let under = self.set(below, child, depth)?;
                (
                    self.w.field.saturating_add(n.saturating_mul(under.cost)),
                    under,
                )
            }
            Kind::Publish => {
                let channel = f
                    .get_argument("channel")
                    .map(|v| self.args.constant(&v.node));
                let data = f.get_argument("data").map(|v| self.args.constant(&v.node));
                let channel = match channel.as_deref() {
                    Some(ConstValue::String(s)) => s.as_str(),
                    _ => "",
                };
                let data = data.as_deref().unwrap_or(&ConstValue::Null);
                let under = self.set(below, Ty::Unknown, depth)?;
                (self.publish.price(channel, data), under)
            }
            Kind::PublishBatch => {
                let messages = f
                    .get_argument("messages")
                    .map(|v| self.args.constant(&v.node));
                let mut cost = 0u64;
                if let Some(ConstValue::List(list)) = messages.as_deref() {
                    for m in list {
                        let (channel, data) = match m {
                            ConstValue::Object(o) => (
                                match o.get("channel") {
                                    Some(ConstValue::String(s)) => s.as_str(),
                                    _ => "",
                                },
                                o.get("data").unwrap_or(&ConstValue::Null),
                            ),
                            _ => ("", &ConstValue::Null),
                        };
                        cost = cost.saturating_add(self.publish.price(channel, data));
                    }
                }
                let under = self.set(below, Ty::Unknown, depth)?;
                (cost, under)
            }
        };
        Ok(Priced {
            cost,
            depth: 1 + under.depth,
        })
    }
}

/// Prices the operation `name` (or the only one) of `doc` with
/// `variables`. No operation matching is priced 0: execution refuses it.
pub fn estimate(
    doc: &ExecutableDocument,
    name: Option<&str>,
    variables: &Variables,
    w: Weights,
    publish: &dyn PublishPrice,
) -> Result<Estimate, TooDeep> {
    let Some(op) = operation(doc, name) else {
        return Ok(Estimate {
            cost: 0,
            depth: 0,
            operation: None,
            sized_lists: false,
        });
    };
    let mut walk = Walk {
        doc,
        args: Args {
            variables,
            definitions: &op.node.variable_definitions,
        },
        w,
        publish,
        fragments: HashMap::new(),
        sized_lists: false,
        nesting: 0,
    };
    let p = walk.set(&op.node.selection_set.node, root(op.node.ty), 0)?;
    Ok(Estimate {
        cost: p.cost,
        depth: p.depth,
        operation: Some(op.node.ty),
        sized_lists: walk.sized_lists,
    })
}

mod actual;
pub use actual::actual;

#[cfg(test)]
mod tests;
