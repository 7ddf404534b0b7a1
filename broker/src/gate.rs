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
            &ip_key(ip, cfg.ipv6_prefix_len),
            1.0,
            f64::from(cfg.ip_handshake_burst),
            cfg.ip_handshakes_per_sec,
            now,
        )
    }

    /// Counts one more open socket for `ip`, unless it is at its cap.
    pub fn ip_open(self: &Arc<Self>, ip: IpAddr, cfg: &HandshakeSection) -> Option<IpSlot> {
        self.count(
            Counted::Open,
            ip_key(ip, cfg.ipv6_prefix_len),
            cfg.ip_max_open,
        )
    }

    /// Counts one more connection from `ip` still sending its request
    /// head, unless it is at its cap.
    pub fn ip_unfinished(self: &Arc<Self>, ip: IpAddr, cfg: &HandshakeSection) -> Option<IpSlot> {
        self.count(
            Counted::Unfinished,
            ip_key(ip, cfg.ipv6_prefix_len),
            cfg.ip_max_unfinished,
        )
    }

    /// Connections from `ip` (its [`ip_key`]) still sending their request
    /// head.
    pub fn unfinished(&self, ip: IpAddr) -> u32 {
        self.ip_unfinished.get(&ip.to_canonical()).map_or(0, |n| *n)
    }

    /// Forgets buckets that refilled (bounded memory under IP churn).
    pub fn sweep(&self, now: Instant) {
        self.ip_rate.sweep(now);
    }
}

/// The client address of a request: the peer, or the right-most untrusted
/// `X-Forwarded-For` hop when the peer is a trusted proxy (§1), read over
/// every `X-Forwarded-For` line in order (a proxy that appends its own
/// line must not leave the client's forged first line in charge: issue
/// 26). Canonical: an IPv4 client seen on a dual-stack socket
/// (`::ffff:a.b.c.d`) is `a.b.c.d`. Every front that checks a ban or a
/// per-IP limit reads the address here.
pub fn request_ip(req: &actix_http::RequestHead, trusted: &[ProxyRange]) -> IpAddr {
    let peer = req.peer_addr.map_or([127, 0, 0, 1].into(), |a| a.ip());
    let lines: Vec<&str> = req
        .headers()
        .get_all("x-forwarded-for")
        .map(|v| v.to_str().unwrap_or(UNREADABLE_HOP))
        .collect();
    let xff = (!lines.is_empty()).then(|| lines.join(","));
    client_ip(peer, xff.as_deref(), trusted)
}

/// Stands for a header line that is not text: a hop nobody can trust.
const UNREADABLE_HOP: &str = "unreadable";

/// The client's address: the peer, or — when the peer is a trusted proxy —
/// the right-most address of `X-Forwarded-For` that is not one; canonical
/// (IPv4-mapped addresses as IPv4).
pub fn client_ip(peer: IpAddr, forwarded_for: Option<&str>, trusted: &[ProxyRange]) -> IpAddr {
    let peer = peer.to_canonical();
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
        let ip = ip.to_canonical();
        if !trusted_ip(ip) {
            return ip;
        }
        last = ip;
    }
    last
}

/// The address per-IP limits and bans count `ip` under: canonical, and
/// for IPv6 its `/v6_prefix` network (`handshake.ipv6_prefix_len`): one
/// IPv6 host is handed a whole /64 and could otherwise rotate through it
/// around every per-IP limit.
pub fn ip_key(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u32::from(v6_prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
        v4 => v4,
    }
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
    fn every_forwarded_for_line_is_read_and_mapped_addresses_are_canonical() {
        let trusted = [range("10.0.0.1")];
        let proxy = ip("10.0.0.1");
        // The client forged a first line; the proxy appended the real one.
        let head = head_with(proxy, &["6.6.6.6", "1.2.3.4"]);
        assert_eq!(request_ip(&head, &trusted), ip("1.2.3.4"));
        let head = head_with(proxy, &["6.6.6.6, 7.7.7.7", "1.2.3.4, 10.0.0.1"]);
        assert_eq!(request_ip(&head, &trusted), ip("1.2.3.4"));
        assert_eq!(
            request_ip(&head_with(ip("::ffff:1.2.3.4"), &[]), &trusted),
            ip("1.2.3.4"),
            "a v4 client on a dual-stack socket"
        );
        assert_eq!(
            client_ip(proxy, Some("::ffff:5.6.7.8"), &trusted),
            ip("5.6.7.8")
        );
        assert_eq!(
            client_ip(ip("::ffff:10.0.0.1"), Some("5.6.7.8"), &trusted),
            ip("5.6.7.8")
        );
    }

    fn head_with(peer: IpAddr, xff: &[&str]) -> actix_http::RequestHead {
        let mut head = actix_http::RequestHead::default();
        head.peer_addr = Some(std::net::SocketAddr::new(peer, 40000));
        for line in xff {
            head.headers.append(
                actix_http::header::HeaderName::from_static("x-forwarded-for"),
                actix_http::header::HeaderValue::from_str(line).unwrap(),
            );
        }
        head
    }

    #[test]
    fn per_ip_keys_are_canonical_and_ipv6_counts_by_prefix() {
        assert_eq!(ip_key(ip("::ffff:1.2.3.4"), 64), ip("1.2.3.4"));
        assert_eq!(ip_key(ip("1.2.3.4"), 64), ip("1.2.3.4"));
        assert_eq!(
            ip_key(ip("2001:db8:1:2:aa:bb:cc:dd"), 64),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            ip_key(ip("2001:db8:1:2:aa:bb:cc:dd"), 48),
            ip("2001:db8:1::")
        );
        assert_eq!(ip_key(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(ip_key(ip("2001:db8::1"), 0), ip("::"));
        let cfg = HandshakeSection {
            ip_max_open: 1,
            ..HandshakeSection::default()
        };
        let gate = HandshakeGate::new(&cfg);
        let _a = gate.ip_open(ip("2001:db8:1:2::1"), &cfg).unwrap();
        assert!(
            gate.ip_open(ip("2001:db8:1:2::ffff"), &cfg).is_none(),
            "another address of the same /64"
        );
        assert!(gate.ip_open(ip("2001:db8:1:3::1"), &cfg).is_some());
        let _b = gate.ip_open(ip("::ffff:9.9.9.9"), &cfg).unwrap();
        assert!(gate.ip_open(ip("9.9.9.9"), &cfg).is_none(), "mapped is v4");
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
