//! `GET /v1/graphql/schema.graphql`: the schema as SDL with its prices,
//! as directives after IBM's GraphQL cost specification: `@cost(weight:)`
//! on every field and `@listSize(assumedSize:, slicingArguments:)` on
//! every list, read from the same table pricing uses and the caller's
//! (or the default plan's) cost table.

use super::pricing::{self, Kind, Size};
use super::schema::SCHEMA;
use crate::config::Costs;

const DIRECTIVES: &str = r#"# Prices (PROTOCOL.md §12): a field costs its weight times the sizes of the
# lists above it; a list is sized by its slicing argument (as given, or its
# default) or assumedSize. Mutation.publish costs what an HTTP publish of the
# message costs (size and fan-out included), publishBatch the sum.
directive @cost(weight: String!) on ARGUMENT_DEFINITION | ENUM | FIELD_DEFINITION | INPUT_FIELD_DEFINITION | OBJECT | SCALAR
directive @listSize(assumedSize: Int, slicingArguments: [String!], sizedFields: [String!], requireOneSlicingArgument: Boolean = true) on FIELD_DEFINITION

"#;

/// The directives of `ty.field` under `costs`.
fn directives(ty: pricing::Ty, field: &str, costs: &Costs) -> String {
    let w = costs.graphql_field;
    match pricing::field(ty, field) {
        Kind::Leaf | Kind::Object(_) => format!(r#" @cost(weight: "{w}")"#),
        Kind::Free => r#" @cost(weight: "0")"#.to_owned(),
        Kind::Introspection => format!(r#" @cost(weight: "{}")"#, costs.graphql_introspection),
        Kind::Publish => format!(r#" @cost(weight: "{}")"#, costs.publish),
        Kind::PublishBatch => format!(
            r#" @cost(weight: "{}") @listSize(slicingArguments: ["messages"], requireOneSlicingArgument: true)"#,
            costs.publish
        ),
        Kind::List(_, Size::Arg(arg, default)) => format!(
            r#" @cost(weight: "{w}") @listSize(assumedSize: {default}, slicingArguments: ["{arg}"], requireOneSlicingArgument: false)"#
        ),
        Kind::List(_, Size::Assumed) => format!(
            r#" @cost(weight: "{w}") @listSize(assumedSize: {})"#,
            costs.graphql_list_size
        ),
    }
}

/// The SDL with `costs`'s prices.
pub fn document(costs: &Costs) -> String {
    annotate(&SCHEMA.sdl(), costs)
}

/// Adds the directives to every field definition of `sdl` (async-graphql's
/// export: one field a line, descriptions in block strings).
fn annotate(sdl: &str, costs: &Costs) -> String {
    let mut out = String::with_capacity(sdl.len() * 2);
    out.push_str(DIRECTIVES);
    let mut ty: Option<pricing::Ty> = None;
    let mut in_description = false;
    for line in sdl.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("\"\"\"") {
            // A one-line description opens and closes on the same line.
            let closes = trimmed.len() >= 6 && trimmed.ends_with("\"\"\"");
            if !closes {
                in_description = !in_description;
            }
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if in_description {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("type ") {
            let name = rest.split([' ', '{']).next().unwrap_or("");
            ty = Some(pricing::ty(name));
        } else if trimmed.starts_with('}') {
            ty = None;
        } else if let Some(t) = ty
            && !trimmed.is_empty()
        {
            let name_end = trimmed
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(trimmed.len());
            let name = &trimmed[..name_end];
            if !name.is_empty() && t != pricing::Ty::Unknown {
                out.push_str(line);
                out.push_str(&directives(t, name, costs));
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_carries_its_price_and_the_sdl_still_parses() {
        let sdl = document(&Costs::default());
        async_graphql::parser::parse_schema(&sdl).expect("the annotated SDL parses");
        for needle in [
            r#"channels(prefix: String!, first: Int = 50): [Channel!]! @cost(weight: "1") @listSize(assumedSize: 50, slicingArguments: ["first"]"#,
            r#"history(last: Int = 50, since: Seq): [Message!]! @cost(weight: "1") @listSize(assumedSize: 50, slicingArguments: ["last"]"#,
            r#"budget: Budget! @cost(weight: "0")"#,
            r#"joins: [Member!]! @cost(weight: "1") @listSize(assumedSize: 50)"#,
            "scalar JSON",
            "scalar Seq",
        ] {
            assert!(sdl.contains(needle), "{needle} missing from\n{sdl}");
        }
    }
}
