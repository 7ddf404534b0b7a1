//! Parsed documents, kept by their text: backends send the same few
//! operations over and over (the `publish` mutation with variables), and
//! parsing one costs ~35× copying its parsed form (9.3 µs against 0.26 µs
//! for the publish mutation, `bench/benches/graphql.rs`).
//!
//! Bounded: at most [`ENTRIES`] documents of at most [`MAX_TEXT`] bytes
//! each (so at most 1 MiB of text and its parsed form); when full it is
//! emptied and refills with what is sent next. Documents that fail to parse
//! are never kept.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use async_graphql::parser::types::ExecutableDocument;
use parking_lot::Mutex;

const ENTRIES: usize = 256;
const MAX_TEXT: usize = 4096;

type Cache = Mutex<HashMap<Arc<str>, ExecutableDocument, foldhash::fast::RandomState>>;

static CACHE: LazyLock<Cache> = LazyLock::new(|| Mutex::new(HashMap::default()));

/// `text` parsed, from the cache when it was parsed before.
pub fn parse(text: &str) -> Result<ExecutableDocument, async_graphql::parser::Error> {
    if text.len() > MAX_TEXT {
        return async_graphql::parser::parse_query(text);
    }
    if let Some(doc) = CACHE.lock().get(text) {
        return Ok(doc.clone());
    }
    let doc = async_graphql::parser::parse_query(text)?;
    let mut cache = CACHE.lock();
    if cache.len() >= ENTRIES {
        cache.clear();
    }
    cache.insert(Arc::from(text), doc.clone());
    Ok(doc)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_document_parses_the_same_from_the_cache() {
        let q = "query Cached($n: Int) { channels(prefix: \"a\", first: $n) { name } }";
        let first = super::parse(q).unwrap();
        let again = super::parse(q).unwrap();
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert!(super::parse("{").is_err());
        assert!(super::parse("{").is_err(), "errors are not kept");
    }
}
