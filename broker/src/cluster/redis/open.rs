//! Where the bridge's (and the webhooks') Redis is and how to reach it: a
//! `redis://` URL in plaintext, or `rediss://` over TLS (rustls), with the
//! roots and client certificate `[cluster]` names. Every client is made
//! here, so one Redis and a Redis Cluster get the same TLS settings.

use redis::cluster::ClusterClientBuilder;
use redis::{ClientTlsConfig, ErrorKind, RedisError, TlsCertificates};

use crate::config::ClusterSection;

/// A Redis to connect to, with its TLS material when the URL is
/// `rediss://`.
#[derive(Clone)]
pub struct RedisTarget {
    pub client: redis::Client,
    certs: Option<TlsCertificates>,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisTarget(tls={})", self.certs.is_some())
    }
}

/// A config problem as a Redis error (it is reported where one is).
fn invalid(what: String) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, "cluster", what))
}

fn read(key: &str, path: &str) -> Result<Vec<u8>, RedisError> {
    std::fs::read(path).map_err(|e| invalid(format!("cluster.{key}: {path}: {e}")))
}

impl RedisTarget {
    /// Reads `redis_url` and, for `rediss://`, the PEM files. Errors never
    /// quote the URL (it may carry a password).
    pub fn open(cluster: &ClusterSection) -> Result<RedisTarget, RedisError> {
        // TLS works with one crypto provider for the whole process.
        crate::tls::provider();
        let url = cluster.redis_url.as_str();
        if !url.starts_with("rediss://") {
            return Ok(RedisTarget {
                client: redis::Client::open(url)?,
                certs: None,
            });
        }
        let root_cert = match cluster.redis_ca_file.as_str() {
            "" => None,
            path => Some(read("redis_ca_file", path)?),
        };
        let client_tls = match (
            cluster.redis_cert_file.as_str(),
            cluster.redis_key_file.as_str(),
        ) {
            ("", "") => None,
            (cert, key) => Some(ClientTlsConfig {
                client_cert: read("redis_cert_file", cert)?,
                client_key: read("redis_key_file", key)?,
            }),
        };
        let certs = TlsCertificates {
            client_tls,
            root_cert,
        };
        Ok(RedisTarget {
            client: redis::Client::build_with_tls(url, certs.clone())?,
            certs: Some(certs),
        })
    }

    /// A Redis Cluster client builder seeded with this node, its TLS
    /// settings applied to every shard it discovers.
    pub fn cluster_builder(&self) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(vec![self.client.get_connection_info().clone()]);
        match &self.certs {
            Some(certs) => builder.certs(certs.clone()),
            None => builder,
        }
    }
}
