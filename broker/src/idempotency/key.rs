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

    /// The key's scope on `channel`, for the node's table.
    pub fn on(self, channel: &'a str) -> Scope<'a> {
        Scope {
            keyed: self,
            channel,
        }
    }

    /// The scope on `channel` as one string, lengths first so no two
    /// scopes share a name (a publisher or channel may hold `:`): the
    /// key's name in Redis.
    pub fn scope(&self, channel: &str) -> String {
        let mut s = String::new();
        self.write_scope(channel, &mut s);
        s
    }

    /// At most how many bytes [`Keyed::write_scope`] appends: two
    /// lengths of up to 20 digits, two `:`, and the three parts.
    pub fn scope_len(&self, channel: &str) -> usize {
        42 + self.publisher.len() + channel.len() + self.key.len()
    }

    /// [`Keyed::scope`], appended to `out`.
    pub fn write_scope(&self, channel: &str, out: &mut String) {
        // `itoa`, not `write!`: the formatting machinery (twice a publish)
        // was about half of the instructions a key added to a socket
        // publish (bench/README.md, idempotency).
        let mut n = itoa::Buffer::new();
        out.reserve(self.scope_len(channel));
        out.push_str(n.format(self.publisher.len()));
        out.push(':');
        out.push_str(n.format(channel.len()));
        out.push(':');
        out.push_str(self.publisher);
        out.push_str(channel);
        out.push_str(self.key);
    }
}

/// What a key is held under (§17): (publisher, channel, key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    pub keyed: Keyed<'a>,
    pub channel: &'a str,
}

impl Scope<'_> {
    /// The lengths of the publisher and the channel, then the three
    /// parts: no two scopes write the same bytes (the key is the rest).
    /// What the table's names hash.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let Keyed { publisher, key } = self.keyed;
        out.clear();
        out.extend_from_slice(&(publisher.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.channel.len() as u64).to_le_bytes());
        out.extend_from_slice(publisher.as_bytes());
        out.extend_from_slice(self.channel.as_bytes());
        out.extend_from_slice(key.as_bytes());
    }

    /// Whether [`Scope::write`] wrote `bytes`, compared in place.
    pub(super) fn wrote(&self, bytes: &[u8]) -> bool {
        let Keyed { publisher, key } = self.keyed;
        let (p, c) = (publisher.len(), self.channel.len());
        bytes.len() == 16 + p + c + key.len()
            && bytes[..8] == (p as u64).to_le_bytes()
            && bytes[8..16] == (c as u64).to_le_bytes()
            && &bytes[16..16 + p] == publisher.as_bytes()
            && &bytes[16 + p..16 + p + c] == self.channel.as_bytes()
            && &bytes[16 + p + c..] == key.as_bytes()
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

    #[test]
    fn scopes_write_distinct_bytes_and_recognise_their_own() {
        let scopes = [
            Keyed::new("a:b", "c").unwrap().on("x"),
            Keyed::new("a", "b:c").unwrap().on("x"),
            Keyed::new("a", "c").unwrap().on("b:x"),
            Keyed::new("ab", "c").unwrap().on("x"),
            Keyed::new("a", "c").unwrap().on("bx"),
        ];
        let mut bufs = Vec::new();
        for s in &scopes {
            let mut b = Vec::new();
            s.write(&mut b);
            assert!(s.wrote(&b));
            bufs.push(b);
        }
        for (i, s) in scopes.iter().enumerate() {
            for (j, b) in bufs.iter().enumerate() {
                assert_eq!(s.wrote(b), i == j, "{s:?} against scope {j}");
            }
        }
    }
}
