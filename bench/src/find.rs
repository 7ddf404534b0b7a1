//! Substring search with the searcher built once per needle.
//!
//! `memchr::memmem::find` builds a fresh searcher (a rare-byte ranking
//! and a SIMD prefilter) on every call. The load generator looks for the
//! same few keys in every frame of every subscriber, and profiling SSE
//! fan-out showed that building took 12 % of its one core: more than
//! the search itself. [`finder!`] keeps one [`memchr::memmem::Finder`]
//! per call site in a `static`, built on first use.

/// A `&'static memchr::memmem::Finder` for a constant needle, built once.
#[macro_export]
macro_rules! finder {
    ($needle:expr) => {{
        static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($needle));
        &*FINDER
    }};
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_what_memmem_finds() {
        for hay in [&b"a,\"data\":1"[..], b"", b"\"data\":", b"no key here"] {
            assert_eq!(
                crate::finder!(br#""data":"#).find(hay),
                memchr::memmem::find(hay, br#""data":"#)
            );
        }
    }
}
