//! The values a document's arguments and directives refer to, read the
//! way the executor reads them, so the pricer and the executor see the
//! same operation: variables with their defaults filled in ([`coerce`],
//! and the executor is given the same map), `@skip`/`@include` decided
//! as async-graphql decides them (a condition that is not the boolean
//! `true` is false), and a list argument given one value as a list of
//! that one value (GraphQL's input coercion).

use async_graphql::parser::Positioned;
use async_graphql::parser::types::{Directive, Field, OperationDefinition, VariableDefinition};
use async_graphql_value::{ConstValue, Name, Value, Variables};

use super::Size;

/// `sent` with every variable `op` declares with a default and the
/// request did not send set to that default: what the pricer reads and
/// what the executor is given (async-graphql decides `@skip`/`@include`
/// from the sent variables alone, so without this a default the pricer
/// honours would not be seen by the executor).
pub fn coerce(op: &OperationDefinition, mut sent: Variables) -> Variables {
    for d in &op.variable_definitions {
        let d = &d.node;
        if let Some(default) = d.default_value()
            && !sent.contains_key(&d.name.node)
        {
            sent.insert(d.name.node.clone(), default.clone());
        }
    }
    sent
}

/// The values an operation's arguments refer to.
pub struct Args<'a> {
    variables: &'a Variables,
    definitions: &'a [Positioned<VariableDefinition>],
}

impl<'a> Args<'a> {
    pub fn new(variables: &'a Variables, op: &'a OperationDefinition) -> Args<'a> {
        Args {
            variables,
            definitions: &op.variable_definitions,
        }
    }

    /// A variable's value: sent, else its default (for a caller that did
    /// not [`coerce`]).
    pub fn variable(&self, name: &Name) -> Option<&'a ConstValue> {
        self.variables.get(name).or_else(|| {
            self.definitions
                .iter()
                .find(|d| d.node.name.node == *name)
                .and_then(|d| d.node.default_value())
        })
    }

    pub fn int(&self, v: &Value) -> Option<i64> {
        match v {
            Value::Number(n) => n.as_i64(),
            Value::Variable(name) => match self.variable(name)? {
                ConstValue::Number(n) => n.as_i64(),
                _ => None,
            },
            _ => None,
        }
    }

    /// A directive's condition as the executor reads it: `true` only for
    /// the boolean `true`.
    fn condition(&self, v: &Value) -> bool {
        match v {
            Value::Boolean(b) => *b,
            Value::Variable(name) => matches!(self.variable(name), Some(ConstValue::Boolean(true))),
            _ => false,
        }
    }

    /// Whether `@skip`/`@include` leave the selection out: a `@skip` whose
    /// condition is true, or an `@include` whose condition is not.
    pub fn skipped(&self, directives: &[Positioned<Directive>]) -> bool {
        directives.iter().any(|d| {
            let d = &d.node;
            let include = match d.name.node.as_str() {
                "skip" => false,
                "include" => true,
                _ => return false,
            };
            match d.get_argument("if") {
                Some(v) => self.condition(&v.node) != include,
                None => false,
            }
        })
    }

    /// A list's size: its slicing argument (a negative one is 0: the
    /// resolver refuses it), or its default when omitted or null.
    pub fn size(&self, f: &Field, size: Size, assumed: u64) -> u64 {
        match size {
            Size::Assumed => assumed,
            Size::Arg(name, default) => match f.get_argument(name).map(|v| &v.node) {
                None | Some(Value::Null) => default,
                Some(v) => self.int(v).map_or(default, |n| n.max(0) as u64),
            },
        }
    }
}

/// The items of a list input as the executor coerces it: a list's items,
/// nothing for null, and any other value as a list of that one value.
pub fn items(v: &ConstValue) -> &[ConstValue] {
    match v {
        ConstValue::List(items) => items,
        ConstValue::Null => &[],
        one => std::slice::from_ref(one),
    }
}
