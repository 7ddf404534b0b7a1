//! Where the bridge's (and the webhooks') Redis is and how to reach it: a
//! `redis://` URL in plaintext, or `rediss://` over TLS (rustls), with the
//! roots and client certificate `[cluster]` names. Every client is made
//! here, so one Redis and a Redis Cluster get the same TLS settings.

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::{
    ClientTlsConfig, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, TlsCertificates, Value,
};

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

    /// A Redis Cluster client builder seeded with `seeds` (from
    /// [`RedisTarget::cluster_seeds`]), this node's TLS settings applied to
    /// every shard it discovers.
    pub fn cluster_builder(&self, seeds: Vec<ConnectionInfo>) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(seeds);
        match &self.certs {
            Some(certs) => builder.certs(certs.clone()),
            None => builder,
        }
    }

    /// The configured node, then every master and replica its
    /// `CLUSTER SLOTS` names, with the configured node's credentials and
    /// TLS. The cluster client falls back to its seeds when it cannot
    /// rebuild the topology from the connections it holds (a master died
    /// and its slots have no owner yet): seeded with the configured node
    /// alone, a dead one, it would try that node alone, again and again,
    /// long after a replica took over. If the node does not answer, it is
    /// the only seed (the client finds the rest once it does).
    pub async fn cluster_seeds(&self) -> Vec<ConnectionInfo> {
        let configured = self.client.get_connection_info().clone();
        let mut seeds = vec![configured.clone()];
        let slots = async {
            let mut conn = self.client.get_multiplexed_async_connection().await?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Vec<Value>>(&mut conn)
                .await
        };
        let Ok(Ok(ranges)) = tokio::time::timeout(SEEDS_TIMEOUT, slots).await else {
            return seeds;
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            // start, end, then the master and its replicas, each `[host,
            // port, id, …]`; a host of "" or "?" is one Redis cannot name.
            for node in fields.iter().skip(2) {
                let Value::Array(node) = node else { continue };
                let (Some(Value::BulkString(host)), Some(Value::Int(port))) =
                    (node.first(), node.get(1))
                else {
                    continue;
                };
                let (Ok(host), Ok(port)) = (std::str::from_utf8(host), u16::try_from(*port)) else {
                    continue;
                };
                if host.is_empty() || host == "?" {
                    continue;
                }
                let seed = at(&configured, host, port);
                if !seeds.iter().any(|s| s.addr() == seed.addr()) {
                    seeds.push(seed);
                }
            }
        }
        seeds
    }
}

/// How long the configured node may take to name the cluster's others.
const SEEDS_TIMEOUT: Duration = Duration::from_secs(2);

/// `info` at another `host` and `port`: the same credentials and, over
/// TLS, the same certificates and verification.
fn at(info: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    info.clone().set_addr(addr)
}
