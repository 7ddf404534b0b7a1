//! Channel permission globs (`sub_channels`, `pub_channels`): `*` matches
//! any run of characters, `:` included; everything else is literal.
//!
//! Compiled once per connection (at the handshake), matched per frame.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    /// Literal pieces between the stars.
    parts: Vec<Box<str>>,
    starts_with_star: bool,
    ends_with_star: bool,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        Glob {
            parts: pattern
                .split('*')
                .filter(|p| !p.is_empty())
                .map(Into::into)
                .collect(),
            starts_with_star: pattern.starts_with('*'),
            ends_with_star: pattern.ends_with('*'),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        let mut rest = name;
        let n = self.parts.len();
        if n == 0 {
            // "" matches only ""; "*" (or "**") matches anything.
            return self.starts_with_star || name.is_empty();
        }
        for (i, part) in self.parts.iter().enumerate() {
            let first = i == 0;
            let last = i == n - 1;
            if first && !self.starts_with_star {
                let Some(r) = rest.strip_prefix(&**part) else {
                    return false;
                };
                rest = r;
                if last && !self.ends_with_star {
                    return rest.is_empty();
                }
                continue;
            }
            if last && !self.ends_with_star {
                return rest.len() >= part.len() && rest.ends_with(&**part);
            }
            match rest.find(&**part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A set of globs: matches if any does. Empty matches nothing. Shared
/// (`Arc`): connections whose tokens carry the same patterns hold one
/// compiled set (`auth::Claims::grants`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobSet(std::sync::Arc<[Glob]>);

impl GlobSet {
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> GlobSet {
        GlobSet(patterns.iter().map(|p| Glob::new(p.as_ref())).collect())
    }

    pub fn matches(&self, name: &str) -> bool {
        self.0.iter().any(|g| g.matches(name))
    }

    /// Whether the set allows nothing at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Glob::new(p).matches(s)
    }

    #[test]
    fn literal_and_star() {
        assert!(m("doc:42", "doc:42"));
        assert!(!m("doc:42", "doc:421"));
        assert!(m("doc:*", "doc:42"));
        assert!(m("doc:*", "doc:"));
        assert!(m("doc:*", "doc:a:b"), "* crosses colons");
        assert!(!m("doc:*", "docs:1"));
        assert!(m("*", "anything:at:all"));
        assert!(m("*:42", "doc:42"));
        assert!(!m("*:42", "doc:43"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXcYYb"));
        assert!(m("a*a", "aa"));
        assert!(!m("a*a", "a"));
        assert!(!m("", "x"));
    }

    #[test]
    fn set_semantics() {
        assert!(
            !GlobSet::default().matches("doc:1"),
            "missing claim allows nothing"
        );
        let s = GlobSet::new(&["chat:*", "doc:1"]);
        assert!(s.matches("chat:x") && s.matches("doc:1") && !s.matches("doc:2"));
    }
}
