//! An idempotency key with its publisher (§17), and the scope it is held
//! under. The key itself is checked by [`validate`] (the wire contract's
//! one check, in `protocol`).

pub use crate::protocol::idempotency_key::{KeyError, MAX_KEY_BYTES, unquoted, validate};

/// A checked key, and whose it is: the scope is (publisher, channel, key),
/// where the publisher is the account (an API key's account, or a token's
/// `sub`, which is the account: the two collide by design, §17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyed<'a> {
    pub publisher: &'a str,
    pub key: &'a str,
}

impl<'a> Keyed<'a> {
    /// `key` checked, for `publisher`.
    pub fn new(publisher: &'a str, key: &'a str) -> Result<Keyed<'a>, KeyError> {
        validate(key)?;
        Ok(Keyed { publisher, key })
    }

    /// The scope on `channel` as one string, lengths first so no two
    /// scopes share a name (a publisher or channel may hold `:`).
    pub fn scope(&self, channel: &str) -> String {
        let mut s = String::new();
        self.write_scope(channel, &mut s);
        s
    }

    /// [`Keyed::scope`], appended to `out`.
    pub fn write_scope(&self, channel: &str, out: &mut String) {
        // `itoa`, not `write!`: the formatting machinery (twice a publish)
        // was about half of the instructions a key added to a socket
        // publish (bench/README.md, idempotency).
        let mut n = itoa::Buffer::new();
        out.reserve(24 + self.publisher.len() + channel.len() + self.key.len());
        out.push_str(n.format(self.publisher.len()));
        out.push(':');
        out.push_str(n.format(channel.len()));
        out.push(':');
        out.push_str(self.publisher);
        out.push_str(channel);
        out.push_str(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_never_collide_across_parts() {
        let a = Keyed::new("a:b", "c").unwrap().scope("x");
        let b = Keyed::new("a", "b:c").unwrap().scope("x");
        let c = Keyed::new("a", "c").unwrap().scope("b:x");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
    }
}
