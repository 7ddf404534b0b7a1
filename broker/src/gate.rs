//! The node's handshake defences that come before any account state
//! (§1, seed 002): the node accept budget and the per-IP handshake rate,
//! open-socket cap and cap on connections still sending their request head. Per node by design: they protect this process; the edge
//! in front protects the fleet. (The per-identity bucket is cluster-wide and
//! lives behind the bridge.)

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use parking_lot::Mutex;

use crate::config::{HandshakeSection, ProxyRange};
use crate::limiter::{KeyedBuckets, TokenBucket};

#[derive(Debug)]
pub struct HandshakeGate {
    node_budget: Mutex<TokenBucket>,
    ip_rate: KeyedBuckets<IpAddr>,
    ip_open: DashMap<IpAddr, u32>,
    ip_unfinished: DashMap<IpAddr, u32>,
}

/// What an [`IpSlot`] counts.
#[derive(Debug, Clone, Copy)]
enum Counted {
    /// An open socket.
    Open,
    /// A TCP connection that has not sent its whole request head.
    Unfinished,
}

/// One open socket (or unfinished connection) counted against its IP;
/// released on drop, so the count follows the socket's life.
#[derive(Debug)]
pub struct IpSlot {
    gate: Arc<HandshakeGate>,
    ip: IpAddr,
    counted: Counted,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        self.gate
            .counts(self.counted)
            .remove_if_mut(&self.ip, |_, n| {
                *n -= 1;
                *n == 0
            });
    }
}

impl HandshakeGate {
    pub fn new(cfg: &HandshakeSection) -> Arc<HandshakeGate> {
        let now = Instant::now();
        Arc::new(HandshakeGate {
            // One second's worth of burst: the budget is a rate.
            node_budget: Mutex::new(TokenBucket::new(
                cfg.node_accepts_per_sec,
                cfg.node_accepts_per_sec,
                now,
            )),
            ip_rate: KeyedBuckets::default(),
            ip_open: DashMap::new(),
            ip_unfinished: DashMap::new(),
        })
    }

    fn counts(&self, counted: Counted) -> &DashMap<IpAddr, u32> {
        match counted {
            Counted::Open => &self.ip_open,
            Counted::Unfinished => &self.ip_unfinished,
        }
    }

    fn count(self: &Arc<Self>, counted: Counted, ip: IpAddr, max: u32) -> Option<IpSlot> {
        let mut n = self.counts(counted).entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            gate: self.clone(),
            ip,
            counted,
        })
    }

    /// The node accept budget: handshakes per second this node takes.
    pub fn node_accept(&self, cfg: &HandshakeSection, now: Instant) -> Result<(), Duration> {
        let mut b = self.node_budget.lock();
        if b.rate() != cfg.node_accepts_per_sec {
            b.reconfigure(cfg.node_accepts_per_sec, cfg.node_accepts_per_sec, now);
        }
        b.try_take(1.0, now)
    }

    pub fn ip_rate(
        &self,
        ip: IpAddr,
        cfg: &HandshakeSection,
        now: Instant,
    ) -> Result<(), Duration> {
        self.ip_rate.try_take(
            &ip,
            1.0,
            f64::from(cfg.ip_handshake_burst),
            cfg.ip_handshakes_per_sec,
            now,
        )
    }

    /// Counts one more open socket for `ip`, unless it is at its cap.
    pub fn ip_open(self: &Arc<Self>, ip: IpAddr, cfg: &HandshakeSection) -> Option<IpSlot> {
        self.count(Counted::Open, ip, cfg.ip_max_open)
    }

    /// Counts one more connection from `ip` still sending its request
    /// head, unless it is at its cap.
    pub fn ip_unfinished(self: &Arc<Self>, ip: IpAddr, cfg: &HandshakeSection) -> Option<IpSlot> {
        self.count(Counted::Unfinished, ip, cfg.ip_max_unfinished)
    }

    /// Connections from `ip` still sending their request head.
    pub fn unfinished(&self, ip: IpAddr) -> u32 {
        self.ip_unfinished.get(&ip).map_or(0, |n| *n)
    }

    /// Forgets buckets that refilled (bounded memory under IP churn).
    pub fn sweep(&self, now: Instant) {
        self.ip_rate.sweep(now);
    }
}

/// The client address of a request: the peer, or the right-most untrusted
/// `X-Forwarded-For` entry when the peer is a trusted proxy (§1). Every
/// front that checks a ban or a per-IP limit reads the address here.
pub fn request_ip(req: &actix_http::RequestHead, trusted: &[ProxyRange]) -> IpAddr {
    let peer = req.peer_addr.map_or([127, 0, 0, 1].into(), |a| a.ip());
    let xff = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok());
    client_ip(peer, xff, trusted)
}

/// The client's address: the peer, or — when the peer is a trusted proxy —
/// the right-most address of `X-Forwarded-For` that is not one.
pub fn client_ip(peer: IpAddr, forwarded_for: Option<&str>, trusted: &[ProxyRange]) -> IpAddr {
    let trusted_ip = |ip: IpAddr| trusted.iter().any(|range| range.contains(ip));
    if !trusted_ip(peer) {
        return peer;
    }
    let Some(xff) = forwarded_for else {
        return peer;
    };
    let mut last = peer;
    for hop in xff.rsplit(',') {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            // A malformed hop cannot be trusted further left.
            return last;
        };
        if !trusted_ip(ip) {
            return ip;
        }
        last = ip;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let proxy = ip("10.0.0.1");
        let trusted = ["10.0.0.1", "10.0.0.2"].map(range);
        let xff = Some("1.2.3.4, 5.6.7.8, 10.0.0.2");
        assert_eq!(
            client_ip(ip("9.9.9.9"), xff, &trusted),
            ip("9.9.9.9"),
            "untrusted peer: ignore XFF"
        );
        assert_eq!(
            client_ip(proxy, xff, &trusted),
            ip("5.6.7.8"),
            "right-most untrusted hop"
        );
        assert_eq!(client_ip(proxy, None, &trusted), proxy);
        assert_eq!(
            client_ip(proxy, Some("junk, 10.0.0.2"), &trusted),
            ip("10.0.0.2")
        );
    }

    fn range(s: &str) -> ProxyRange {
        s.parse().unwrap()
    }

    #[test]
    fn trusted_proxies_may_be_cidr_ranges() {
        let trusted = [range("10.0.0.0/8"), range("fd00::/8"), range("192.168.1.7")];
        assert_eq!(
            range("10.1.2.3/8"),
            range("10.0.0.0/8"),
            "host bits dropped"
        );
        let xff = Some("1.2.3.4, 10.200.0.9");
        assert_eq!(client_ip(ip("10.9.9.9"), xff, &trusted), ip("1.2.3.4"));
        assert_eq!(client_ip(ip("fd12::1"), xff, &trusted), ip("1.2.3.4"));
        assert_eq!(
            client_ip(ip("::ffff:10.0.0.5"), xff, &trusted),
            ip("1.2.3.4"),
            "a v4 proxy seen through a dual-stack socket"
        );
        assert_eq!(client_ip(ip("192.168.1.7"), xff, &trusted), ip("1.2.3.4"));
        assert_eq!(
            client_ip(ip("192.168.1.8"), xff, &trusted),
            ip("192.168.1.8"),
            "outside every range: XFF ignored"
        );
        assert_eq!(client_ip(ip("11.0.0.1"), xff, &trusted), ip("11.0.0.1"));
        let err = "10.0.0.0/33".parse::<ProxyRange>().unwrap_err();
        assert!(err.contains("10.0.0.0/33"), "{err}");
    }

    #[test]
    fn ip_open_cap_counts_and_releases() {
        let cfg = HandshakeSection {
            ip_max_open: 2,
            ..HandshakeSection::default()
        };
        let gate = HandshakeGate::new(&cfg);
        let a = gate.ip_open(ip("1.1.1.1"), &cfg).unwrap();
        let _b = gate.ip_open(ip("1.1.1.1"), &cfg).unwrap();
        assert!(gate.ip_open(ip("1.1.1.1"), &cfg).is_none());
        assert!(gate.ip_open(ip("2.2.2.2"), &cfg).is_some());
        drop(a);
        assert!(gate.ip_open(ip("1.1.1.1"), &cfg).is_some());
    }

    #[test]
    fn unfinished_connections_count_apart_from_open_sockets() {
        let cfg = HandshakeSection {
            ip_max_open: 1,
            ip_max_unfinished: 2,
            ..HandshakeSection::default()
        };
        let gate = HandshakeGate::new(&cfg);
        let _open = gate.ip_open(ip("1.1.1.1"), &cfg).unwrap();
        let a = gate.ip_unfinished(ip("1.1.1.1"), &cfg).unwrap();
        let _b = gate.ip_unfinished(ip("1.1.1.1"), &cfg).unwrap();
        assert_eq!(gate.unfinished(ip("1.1.1.1")), 2);
        assert!(gate.ip_unfinished(ip("1.1.1.1"), &cfg).is_none());
        drop(a);
        assert_eq!(gate.unfinished(ip("1.1.1.1")), 1);
        assert!(gate.ip_unfinished(ip("1.1.1.1"), &cfg).is_some());
    }
}
