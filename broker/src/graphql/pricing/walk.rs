//! One walk of an operation that prices it and measures it: its cost
//! (`@skip`/`@include` honoured, as the executor runs it), its depth and
//! its expanded size (every field once per place it is spread, aliases
//! and skipped selections included: what async-graphql's validation
//! passes walk). Each fragment is walked once and its numbers reused
//! wherever it is spread (they do not depend on the place: a fragment's
//! type is its type condition), with saturating sums, so a document whose
//! fragments spread each other twice per level is measured in time linear
//! in its text and its size comes out exponential, as it is.

use std::collections::HashMap;

use async_graphql::parser::types::{ExecutableDocument, Field, Selection, SelectionSet};

use super::args::Args;
use super::publishes::Publishes;
use super::{Kind, PublishPrice, Refusal, Ty, Weights, field, ty};

/// How far selection sets and fragments may nest inside one another while
/// they are walked (fragments and inline fragments add no depth, so a
/// chain of them is bounded here). Past it the document is too deep.
const MAX_NESTING: u32 = 64;

/// One selection's numbers at multiplier 1.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Measured {
    pub cost: u64,
    pub depth: u32,
    /// Fields selected, fragments expanded.
    pub fields: u64,
}

pub(super) struct Walk<'a> {
    pub doc: &'a ExecutableDocument,
    pub args: Args<'a>,
    pub w: Weights,
    pub publish: &'a dyn PublishPrice,
    /// Each publish's and batch's price, variables measured once.
    pub publishes: Publishes<'a>,
    /// Fragments measured so far (`None` while one is being measured: met
    /// again, it spreads itself). Bounded by the document's fragments.
    pub fragments: HashMap<&'a str, Option<Measured>>,
    pub sized_lists: bool,
    pub nesting: u32,
}

impl<'a> Walk<'a> {
    fn too_deep(&self, depth: u32) -> Refusal {
        Refusal::TooDeep {
            depth,
            max: self.w.max_depth,
        }
    }

    /// `set` (on `ty`) at multiplier 1; refused as soon as it is known to
    /// be too deep or too large.
    pub fn set(&mut self, set: &'a SelectionSet, ty: Ty, depth: u32) -> Result<Measured, Refusal> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.too_deep(depth.max(self.w.max_depth + 1)));
        }
        let mut out = Measured::default();
        for item in &set.items {
            let (m, directives) = match &item.node {
                Selection::Field(f) => (self.field(&f.node, ty, depth + 1)?, &f.node.directives),
                Selection::FragmentSpread(s) => (
                    self.fragment(s.node.fragment_name.node.as_str(), depth)?,
                    &s.node.directives,
                ),
                Selection::InlineFragment(i) => {
                    let on = i.node.type_condition.as_ref();
                    let ty = on.map_or(ty, |c| super::ty(c.node.on.node.as_str()));
                    (
                        self.set(&i.node.selection_set.node, ty, depth)?,
                        &i.node.directives,
                    )
                }
            };
            if !self.args.skipped(directives) {
                out.cost = out.cost.saturating_add(m.cost);
            }
            out.depth = out.depth.max(m.depth);
            out.fields = out.fields.saturating_add(m.fields);
            if out.fields > self.w.max_fields {
                return Err(Refusal::TooComplex {
                    fields: out.fields,
                    max: self.w.max_fields,
                });
            }
        }
        self.nesting -= 1;
        Ok(out)
    }

    /// A spread fragment: measured once, then reused (the depth adds to
    /// the spread's). One that spreads itself is refused.
    fn fragment(&mut self, name: &'a str, depth: u32) -> Result<Measured, Refusal> {
        let m = match self.fragments.get(name) {
            Some(Some(m)) => *m,
            Some(None) => return Err(Refusal::Cycle(name.to_owned())),
            None => {
                let Some(def) = self.doc.fragments.get(name) else {
                    // Validation refuses an unknown fragment.
                    return Ok(Measured::default());
                };
                self.fragments.insert(name, None);
                let on = ty(def.node.type_condition.node.on.node.as_str());
                let m = self.set(&def.node.selection_set.node, on, 0)?;
                self.fragments.insert(name, Some(m));
                m
            }
        };
        if depth + m.depth > self.w.max_depth {
            return Err(self.too_deep(depth + m.depth));
        }
        Ok(m)
    }

    fn field(&mut self, f: &'a Field, ty: Ty, depth: u32) -> Result<Measured, Refusal> {
        if depth > self.w.max_depth {
            return Err(self.too_deep(depth));
        }
        let below = &f.selection_set.node;
        let (cost, under) = match field(ty, f.name.node.as_str()) {
            // Priced flat, measured like any selection.
            Kind::Introspection => (self.w.introspection, self.set(below, Ty::Unknown, depth)?),
            // A leaf with a selection is not in the schema (validation
            // refuses it); its depth and size still count.
            Kind::Leaf if below.items.is_empty() => (self.w.field, Measured::default()),
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
                let cost = self.publishes.publish(&self.args, f, self.publish);
                (cost, self.set(below, Ty::Unknown, depth)?)
            }
            Kind::PublishBatch => {
                let cost = self.publishes.batch(&self.args, f, self.publish);
                (cost, self.set(below, Ty::Unknown, depth)?)
            }
        };
        Ok(Measured {
            cost,
            depth: 1 + under.depth,
            fields: under.fields.saturating_add(1),
        })
    }
}
