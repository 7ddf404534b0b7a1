//! Fields collected by response key, as GraphQL's CollectFields does:
//! aliases, a field selected twice under one key merged (its selection
//! sets together) in first-seen order, fragments and inline fragments
//! expanded, `@skip`/`@include` honoured ([`Args::skipped`]). What a
//! subscription renders per message is this collection (its shapes,
//! `graphql/ws/shape.rs`), so the rule that a subscription renders each
//! field once ([`subscription`]) is checked on it too.
//!
//! Run only on documents the pricer admitted: their expansion is within
//! `graphql_max_fields`, so collecting is bounded by it.

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};

use super::Refusal;
use super::args::Args;

/// A response key, its field's name and every selection set merged under
/// it.
pub type Collected<'a> = (String, String, Vec<&'a SelectionSet>);

/// How far fragments may nest while they are collected (the pricer has
/// refused cycles and deeper chains already; this bounds a caller that
/// did not price first).
const MAX_NESTING: u32 = 64;

/// The fields of `sets` by response key, in first-seen order.
pub fn collect<'a>(
    doc: &'a ExecutableDocument,
    args: &Args<'_>,
    sets: &[&'a SelectionSet],
) -> Vec<Collected<'a>> {
    let mut out: Vec<Collected<'a>> = Vec::new();
    for set in sets {
        collect_into(doc, args, set, &mut out, 0);
    }
    out
}

fn collect_into<'a>(
    doc: &'a ExecutableDocument,
    args: &Args<'_>,
    set: &'a SelectionSet,
    out: &mut Vec<Collected<'a>>,
    nesting: u32,
) {
    if nesting > MAX_NESTING {
        return;
    }
    for sel in &set.items {
        match &sel.node {
            Selection::Field(f) => {
                let f = &f.node;
                if args.skipped(&f.directives) {
                    continue;
                }
                let key = f.response_key().node.as_str();
                match out.iter_mut().find(|(k, _, _)| k == key) {
                    Some((_, _, sets)) => sets.push(&f.selection_set.node),
                    None => out.push((
                        key.to_owned(),
                        f.name.node.to_string(),
                        vec![&f.selection_set.node],
                    )),
                }
            }
            Selection::InlineFragment(i) => {
                let i = &i.node;
                if !args.skipped(&i.directives) {
                    collect_into(doc, args, &i.selection_set.node, out, nesting + 1);
                }
            }
            Selection::FragmentSpread(s) => {
                let s = &s.node;
                if args.skipped(&s.directives) {
                    continue;
                }
                if let Some(f) = doc.fragments.get(&s.fragment_name.node)
                    && !args.skipped(&f.node.directives)
                {
                    collect_into(doc, args, &f.node.selection_set.node, out, nesting + 1);
                }
            }
        }
    }
}

/// A subscription renders each field once per message: it selects exactly
/// one root field, and under it no field is selected under two response
/// keys (`a: data b: data` would render every message's `data` twice, for
/// a price paid once when the subscription started). The same field
/// selected twice under one key is merged, and rendered once.
pub fn subscription(
    doc: &ExecutableDocument,
    args: &Args<'_>,
    root: &SelectionSet,
) -> Result<(), Refusal> {
    let roots = collect(doc, args, &[root]);
    if roots.len() != 1 {
        return Err(Refusal::Subscription(format!(
            "a subscription selects exactly one root field; this one selects {}",
            roots.len()
        )));
    }
    once_each(doc, args, &roots[0].2, 0)
}

/// No field of `sets` (merged) under two keys, nor of their children.
fn once_each(
    doc: &ExecutableDocument,
    args: &Args<'_>,
    sets: &[&SelectionSet],
    nesting: u32,
) -> Result<(), Refusal> {
    if nesting > MAX_NESTING {
        return Ok(());
    }
    let fields = collect(doc, args, sets);
    for (i, (key, name, _)) in fields.iter().enumerate() {
        if let Some((other, _, _)) = fields[..i].iter().find(|(_, n, _)| n == name) {
            return Err(Refusal::Subscription(format!(
                "a subscription renders each field once per message: {name} is selected \
                 as both {other:?} and {key:?}"
            )));
        }
    }
    for (_, _, children) in &fields {
        once_each(doc, args, children, nesting + 1)?;
    }
    Ok(())
}
