//! A listener's certificate, swappable while it serves: the rustls server
//! config asks this store for the certificate on every handshake, and a
//! reload (SIGHUP) replaces it, so a renewed certificate reaches new
//! connections with no restart and open connections keep theirs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate or key file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {why}")]
pub struct TlsError {
    pub path: String,
    pub why: String,
}

impl TlsError {
    pub fn new(path: &Path, why: impl Into<String>) -> TlsError {
        TlsError {
            path: path.display().to_string(),
            why: why.into(),
        }
    }
}

/// The certificate a listener serves, and the files it came from.
#[derive(Debug)]
pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
    files: Mutex<(PathBuf, PathBuf)>,
}

/// A certificate chain and its key, checked to belong together.
pub(super) fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| TlsError::new(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::new(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::new(cert, "no PEM certificate in it"));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError::new(key, format!("no PEM private key in it ({e})")))?;
    CertifiedKey::from_der(chain, private, &super::provider())
        .map_err(|e| TlsError::new(key, format!("does not fit the certificate ({e})")))
}

impl CertStore {
    pub fn load(cert: &Path, key: &Path) -> Result<CertStore, TlsError> {
        Ok(CertStore {
            current: ArcSwap::from_pointee(load_pair(cert, key)?),
            files: Mutex::new((cert.to_owned(), key.to_owned())),
        })
    }

    /// Reads the same files again; on an error the served certificate
    /// stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let (cert, key) = self.files.lock().clone();
        let pair = load_pair(&cert, &key)?;
        self.current.store(Arc::new(pair));
        Ok(())
    }

    /// Serves `pair` (loaded from `cert` and `key`) from now on.
    pub(super) fn replace(&self, cert: &Path, key: &Path, pair: CertifiedKey) {
        *self.files.lock() = (cert.to_owned(), key.to_owned());
        self.current.store(Arc::new(pair));
    }

    /// The certificate chain served now (its first entry is the leaf).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current.load().cert.clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        (cert, key)
    }

    #[test]
    fn a_reload_swaps_the_certificate_and_a_bad_file_keeps_the_old_one() {
        let dir = std::env::temp_dir().join(format!("tidegate-certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = write_pair(&dir, "a");
        let store = CertStore::load(&cert, &key).unwrap();
        let first = store.chain();
        // Renewed in place, as certbot and cert-manager do.
        let (new_cert, new_key) = write_pair(&dir, "b");
        std::fs::rename(&new_cert, &cert).unwrap();
        std::fs::rename(&new_key, &key).unwrap();
        store.reload().unwrap();
        let second = store.chain();
        assert_ne!(first, second);
        // A key that is not the certificate's: refused, nothing changes.
        let (_, other_key) = write_pair(&dir, "c");
        std::fs::copy(&other_key, &key).unwrap();
        let e = store.reload().unwrap_err();
        assert!(e.why.contains("does not fit"), "{e}");
        assert_eq!(store.chain(), second);
        std::fs::write(&cert, "not pem").unwrap();
        assert!(
            store
                .reload()
                .unwrap_err()
                .why
                .contains("no PEM certificate")
        );
        assert!(CertStore::load(&dir.join("missing.crt"), &key).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
