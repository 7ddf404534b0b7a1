//! A secret the config holds, and the cluster's control-message keys:
//! shared by `[auth]` (its fingerprint key is derived from the cluster's)
//! and `[cluster]`, so neither section's file imports the other.

/// The shortest secret an HMAC key is taken from: the JWT secret, the
/// cluster's and the fingerprint secret alike (16 bytes, 128 bits).
pub const MIN_SECRET_BYTES: usize = 16;

/// A secret's bytes; its `Debug` shows only the length.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// The control messages' keys: `sign` signs and verifies, each of `accept`
/// only verifies (a rotation in progress).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSecrets {
    pub sign: Option<Secret>,
    pub accept: Vec<Secret>,
}

impl ClusterSecrets {
    /// Every key a control message may be signed with.
    pub fn verifying(&self) -> impl Iterator<Item = &[u8]> {
        self.sign
            .iter()
            .chain(self.accept.iter())
            .map(|s| s.0.as_slice())
    }
}
