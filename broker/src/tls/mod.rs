//! TLS with rustls and one crypto provider (ring) for the whole process:
//! the HTTP/WebSocket and gRPC listeners (a certificate and key from PEM
//! files, swapped on SIGHUP without dropping a connection: `certs.rs`;
//! the gRPC listener's handshakes run in `grpc/incoming.rs`), https
//! webhooks and `rediss://`.
//!
//! Why one provider, installed as the process default: reqwest and redis
//! build their client configs from the default, and ring is the provider
//! that needs no C toolchain beyond what the crate already builds
//! (aws-lc-rs needs cmake).

mod certs;

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

pub use certs::{CertStore, TlsError};

use crate::config::Config;

/// The process's crypto provider (ring), installed as the default the
/// first time it is asked for.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: std::sync::OnceLock<Arc<CryptoProvider>> = std::sync::OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            // Another part of the process may have installed one first;
            // that one is then the default, and used here too.
            let _ = rustls::crypto::ring::default_provider().install_default();
            CryptoProvider::get_default()
                .cloned()
                .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
        })
        .clone()
}

/// A server config answering with `store`'s certificate, offering `alpn`.
pub fn server_config(store: Arc<CertStore>, alpn: &[&[u8]]) -> rustls::ServerConfig {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        // ring supports every safe default version.
        .expect("the provider supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// The certificates of a PEM bundle (roots to trust).
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let at = |why: String| TlsError::new(path, why);
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| at(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| at(e.to_string()))?;
    if certs.is_empty() {
        return Err(at("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The listeners' certificates, one store each (`None`: plaintext).
#[derive(Debug, Default)]
pub struct Listeners {
    pub http: Option<Arc<CertStore>>,
    pub grpc: Option<Arc<CertStore>>,
}

impl Listeners {
    /// Loads `[node]` and `[grpc]`'s `tls_cert_file` / `tls_key_file`.
    pub fn load(config: &Config) -> Result<Listeners, TlsError> {
        let store = |cert: &str, key: &str| -> Result<Option<Arc<CertStore>>, TlsError> {
            if cert.is_empty() {
                return Ok(None);
            }
            CertStore::load(Path::new(cert), Path::new(key)).map(|s| Some(Arc::new(s)))
        };
        Ok(Listeners {
            http: store(&config.node.tls_cert_file, &config.node.tls_key_file)?,
            grpc: store(&config.grpc.tls_cert_file, &config.grpc.tls_key_file)?,
        })
    }

    /// Reads the files again (SIGHUP, a config reload), from the paths in
    /// `config`: a renewed certificate is served to new connections. A
    /// listener started without TLS stays plaintext (that needs a
    /// restart); nothing changes when any file is unreadable.
    pub fn reload(&self, config: &Config) -> Result<(), Vec<String>> {
        let pairs = [
            (
                "node",
                &self.http,
                &config.node.tls_cert_file,
                &config.node.tls_key_file,
            ),
            (
                "grpc",
                &self.grpc,
                &config.grpc.tls_cert_file,
                &config.grpc.tls_key_file,
            ),
        ];
        let mut problems = Vec::new();
        let mut loaded = Vec::new();
        for (section, store, cert, key) in pairs {
            match (store, cert.is_empty()) {
                (Some(store), false) => match certs::load_pair(Path::new(cert), Path::new(key)) {
                    Ok(pair) => loaded.push((store, cert, key, pair)),
                    Err(e) => problems.push(format!("{section}.tls_cert_file: {e}")),
                },
                (Some(_), true) => problems.push(format!(
                    "{section}.tls_cert_file: this listener serves TLS; turning it off needs a restart"
                )),
                (None, false) => tracing::warn!(
                    section,
                    "TLS was configured for a listener that started in plaintext; it takes effect at the next restart"
                ),
                (None, true) => {}
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        for (store, cert, key, pair) in loaded {
            store.replace(Path::new(cert), Path::new(key), pair);
        }
        Ok(())
    }
}

/// The TCP stream under a listener's connection, plain or TLS.
pub trait PeerStream {
    fn tcp(&self) -> &actix_web::rt::net::TcpStream;
}

impl PeerStream for actix_web::rt::net::TcpStream {
    fn tcp(&self) -> &actix_web::rt::net::TcpStream {
        self
    }
}

impl PeerStream for actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream> {
    fn tcp(&self) -> &actix_web::rt::net::TcpStream {
        self.get_ref().0
    }
}
