//! A `presence` subscription's selection set (§12, §13), compiled once
//! when it starts: the `data` of each of its `next` messages is then
//! written from a window's joins and leaves without the executor. Fields
//! are collected as for `messages` (aliases, merged fields, fragments,
//! `@skip`/`@include`); the channel and every `__typename` are constants.

use std::fmt::Write as _;

use async_graphql::parser::types::{ExecutableDocument, OperationDefinition, SelectionSet};
use async_graphql_value::Variables;

use super::{Ctx, json_string};
use crate::protocol::presence::Member;

/// One field of a `Member`.
#[derive(Debug, Clone)]
enum MemberField {
    Lit(String),
    User,
    ConnId,
    Info,
}

/// One field of a `PresenceDiff`.
#[derive(Debug, Clone)]
enum DiffField {
    Lit(String),
    Joins(Vec<(String, MemberField)>),
    Leaves(Vec<(String, MemberField)>),
}

/// One root field of the subscription.
#[derive(Debug, Clone)]
enum Root {
    Lit(String),
    Diff(Vec<(String, DiffField)>),
}

/// What every `next` message of one `presence` subscription carries.
#[derive(Debug, Clone)]
pub struct PresenceShape {
    /// `{"type":"next","id":..,"payload":{`.
    head: String,
    roots: Vec<(String, Root)>,
}

impl PresenceShape {
    /// The shape of operation `op` of `doc` for subscription `id` on
    /// `channel`, with `variables` deciding `@skip`/`@include`.
    pub fn compile(
        doc: &ExecutableDocument,
        op: &OperationDefinition,
        variables: &Variables,
        id: &str,
        channel: &str,
    ) -> PresenceShape {
        let ctx = Ctx {
            doc,
            args: crate::graphql::pricing::Args::new(variables, op),
            channel,
        };
        let roots = ctx
            .collect(&[&op.selection_set.node])
            .into_iter()
            .map(|(key, name, sets)| {
                let root = match name.as_str() {
                    "__typename" => Root::Lit("\"Subscription\"".to_owned()),
                    _ => Root::Diff(diff(&ctx, &sets)),
                };
                (json_string(&key), root)
            })
            .collect();
        PresenceShape {
            head: format!(r#"{{"type":"next","id":{},"payload":{{"#, json_string(id)),
            roots,
        }
    }

    /// The `next` message (its JSON text) for a diff, with `extensions`
    /// (a JSON object's text) when given.
    pub fn render(&self, extensions: Option<&str>, joins: &[Member], leaves: &[Member]) -> String {
        let mut out =
            String::with_capacity(self.head.len() + 64 + 96 * (joins.len() + leaves.len()));
        out.push_str(&self.head);
        if let Some(x) = extensions {
            out.push_str(r#""extensions":"#);
            out.push_str(x);
            out.push(',');
        }
        out.push_str(r#""data":{"#);
        for (i, (key, root)) in self.roots.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push(':');
            match root {
                Root::Lit(s) => out.push_str(s),
                Root::Diff(fields) => {
                    out.push('{');
                    for (j, (key, f)) in fields.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push_str(key);
                        out.push(':');
                        match f {
                            DiffField::Lit(s) => out.push_str(s),
                            DiffField::Joins(m) => members(&mut out, m, joins),
                            DiffField::Leaves(m) => members(&mut out, m, leaves),
                        }
                    }
                    out.push('}');
                }
            }
        }
        out.push_str("}}}");
        out
    }
}

/// A `PresenceDiff` object's fields.
fn diff<'a>(ctx: &Ctx<'a>, sets: &[&'a SelectionSet]) -> Vec<(String, DiffField)> {
    ctx.collect(sets)
        .into_iter()
        .map(|(key, name, sets)| {
            let f = match name.as_str() {
                "channel" => DiffField::Lit(json_string(ctx.channel)),
                "joins" => DiffField::Joins(member(ctx, &sets)),
                "leaves" => DiffField::Leaves(member(ctx, &sets)),
                "__typename" => DiffField::Lit("\"PresenceDiff\"".to_owned()),
                // Not a field of PresenceDiff: validation refused it.
                _ => DiffField::Lit("null".to_owned()),
            };
            (json_string(&key), f)
        })
        .collect()
}

/// A `Member` object's fields.
fn member<'a>(ctx: &Ctx<'a>, sets: &[&'a SelectionSet]) -> Vec<(String, MemberField)> {
    ctx.collect(sets)
        .into_iter()
        .map(|(key, name, _)| {
            let f = match name.as_str() {
                "user" => MemberField::User,
                "connId" => MemberField::ConnId,
                "info" => MemberField::Info,
                "__typename" => MemberField::Lit("\"Member\"".to_owned()),
                _ => MemberField::Lit("null".to_owned()),
            };
            (json_string(&key), f)
        })
        .collect()
}

/// A list of members as `fields` select them.
fn members(out: &mut String, fields: &[(String, MemberField)], list: &[Member]) {
    out.push('[');
    for (i, m) in list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        for (j, (key, f)) in fields.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(out, "{key}:");
            match f {
                MemberField::Lit(s) => out.push_str(s),
                MemberField::User => out.push_str(&json_string(&m.user)),
                MemberField::ConnId => out.push_str(&json_string(&m.conn_id)),
                // The token's `info` claim, compact JSON checked at the
                // handshake.
                MemberField::Info => out.push_str(m.info.as_deref().unwrap_or("null")),
            }
        }
        out.push('}');
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;
    use serde_json::{Value, json};

    use super::*;

    fn m(user: &str, conn: &str, info: Option<&str>) -> Member {
        Member {
            user: user.into(),
            conn_id: conn.into(),
            info: info.map(Into::into),
        }
    }

    fn render(query: &str, ext: Option<&str>, joins: &[Member], leaves: &[Member]) -> Value {
        let doc = parse_query(query).unwrap();
        let (_, op) = doc.operations.iter().next().unwrap();
        let shape = PresenceShape::compile(&doc, &op.node, &Variables::default(), "p1", "note:1");
        serde_json::from_str(&shape.render(ext, joins, leaves)).unwrap()
    }

    #[test]
    fn renders_the_selection_with_aliases_fragments_and_typenames() {
        let q = r#"subscription { __typename p: presence(channel: "note:1") {
            channel ... on PresenceDiff { joins { user who: connId info __typename } }
            leaves { connId } } }"#;
        let joins = [
            m("ann", "n1-1", Some(r#"{"name":"Ann"}"#)),
            m("bob", "n1-2", None),
        ];
        let leaves = [m("cat", "n2-1", None)];
        let v = render(q, Some(r#"{"rateLimit":{"cost":1}}"#), &joins, &leaves);
        assert_eq!(
            v,
            json!({"type":"next","id":"p1","payload":{
                "extensions":{"rateLimit":{"cost":1}},
                "data":{"__typename":"Subscription","p":{
                    "channel":"note:1",
                    "joins":[
                        {"user":"ann","who":"n1-1","info":{"name":"Ann"},"__typename":"Member"},
                        {"user":"bob","who":"n1-2","info":null,"__typename":"Member"}],
                    "leaves":[{"connId":"n2-1"}]}}}})
        );
    }

    #[test]
    fn an_empty_diff_is_empty_lists() {
        let q =
            r#"subscription { presence(channel: "note:1") { joins { user } leaves { user } } }"#;
        let v = render(q, None, &[], &[]);
        assert_eq!(
            v["payload"]["data"]["presence"],
            json!({"joins":[],"leaves":[]})
        );
        assert!(v["payload"].get("extensions").is_none());
    }
}
