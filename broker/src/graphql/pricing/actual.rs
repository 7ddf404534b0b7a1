//! The actual cost after execution (§12's refund): the estimate's sum
//! with every list sized by what it returned, at least [`MIN_COST`].

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql_value::{ConstValue, Variables};

use super::{Args, Kind, MIN_COST, Ty, Weights, field, operation, root};

/// The same sum as [`estimate`], with every list sized by what it
/// returned in `data` (the response's `data`), and never below
/// [`MIN_COST`]. Mutations and operations without sized lists cost their
/// estimate; this is for the rest.
pub fn actual(
    doc: &ExecutableDocument,
    name: Option<&str>,
    variables: &Variables,
    w: Weights,
    data: &ConstValue,
) -> u64 {
    let Some(op) = operation(doc, name) else {
        return MIN_COST;
    };
    let args = Args::new(variables, &op.node);
    let mut seen = Vec::new();
    let cost = actual_set(
        doc,
        &args,
        w,
        &op.node.selection_set.node,
        root(op.node.ty),
        data,
        &mut seen,
    );
    cost.max(MIN_COST)
}

/// `seen`: the fragments being walked (a cycle walks as nothing).
fn actual_set<'a>(
    doc: &'a ExecutableDocument,
    args: &Args<'_>,
    w: Weights,
    set: &'a SelectionSet,
    ty: Ty,
    value: &ConstValue,
    seen: &mut Vec<&'a str>,
) -> u64 {
    let ConstValue::Object(obj) = value else {
        return 0;
    };
    let mut cost = 0u64;
    for item in &set.items {
        let c = match &item.node {
            Selection::Field(f) => {
                let f = &f.node;
                if args.skipped(&f.directives) {
                    continue;
                }
                let v = obj.get(f.response_key().node.as_str());
                let below = &f.selection_set.node;
                match field(ty, f.name.node.as_str()) {
                    Kind::Leaf => w.field,
                    Kind::Free => 0,
                    Kind::Introspection => w.introspection,
                    // Not reached by queries; mutations keep their estimate.
                    Kind::Publish | Kind::PublishBatch => 0,
                    Kind::Object(child) => w.field.saturating_add(
                        v.map_or(0, |v| actual_set(doc, args, w, below, child, v, seen)),
                    ),
                    Kind::List(child, _) => {
                        let mut c = w.field;
                        if let Some(ConstValue::List(items)) = v {
                            for item in items {
                                c = c.saturating_add(actual_set(
                                    doc, args, w, below, child, item, seen,
                                ));
                            }
                        }
                        c
                    }
                }
            }
            Selection::FragmentSpread(s) => {
                if args.skipped(&s.node.directives) {
                    continue;
                }
                let name = s.node.fragment_name.node.as_str();
                let Some(def) = doc.fragments.get(name) else {
                    continue;
                };
                if seen.contains(&name) {
                    continue;
                }
                seen.push(name);
                let c = actual_set(doc, args, w, &def.node.selection_set.node, ty, value, seen);
                seen.pop();
                c
            }
            Selection::InlineFragment(i) => {
                if args.skipped(&i.node.directives) {
                    continue;
                }
                actual_set(doc, args, w, &i.node.selection_set.node, ty, value, seen)
            }
        };
        cost = cost.saturating_add(c);
    }
    cost
}
