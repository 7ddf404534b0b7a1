//! The ban list (§10): accounts and client addresses an operator banned,
//! each until a wall-clock expiry, so every node of a cluster agrees on when
//! a ban ends. This node's copy answers every check (handshake, HTTP
//! publish, and the gRPC layer through [`Bans::check`]) without a network
//! call; the cluster bridge keeps the copies in step.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::clock::unix_ms;
use crate::exceeded::Exceeded;
use crate::gate::ip_key;
use crate::metrics::{Layer, Metrics};
use crate::protocol::ErrorCode;
use crate::refusal::refusal;

/// What a ban names: `{"account":"acme"}` or `{"ip":"203.0.113.7"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BanTarget {
    Account(String),
    Ip(IpAddr),
}

impl BanTarget {
    /// `account:acme` / `ip:203.0.113.7`: its name in the ban list in Redis.
    pub fn key(&self) -> String {
        match self {
            BanTarget::Account(a) => format!("account:{a}"),
            BanTarget::Ip(ip) => format!("ip:{ip}"),
        }
    }

    pub fn from_key(key: &str) -> Option<BanTarget> {
        match key.split_once(':')? {
            ("account", a) if !a.is_empty() => Some(BanTarget::Account(a.to_owned())),
            ("ip", ip) => ip.parse().ok().map(BanTarget::Ip),
            _ => None,
        }
    }
}

impl std::fmt::Display for BanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BanTarget::Account(a) => write!(f, "account {a:?}"),
            BanTarget::Ip(ip) => write!(f, "address {ip}"),
        }
    }
}

/// A ban in force for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ban {
    pub target: BanTarget,
    pub remaining: Duration,
}

impl Ban {
    /// The refusal's sentence.
    pub fn message(&self) -> String {
        format!(
            "{} is banned by an operator for another {} s",
            self.target,
            self.remaining.as_millis().div_ceil(1000)
        )
    }

    /// An HTTP publish's answer under this ban (§10; `/v1/publish`, the
    /// Pusher API's triggers): 403 `banned` with `Retry-After` = the
    /// ban's remaining time, counted once under the `http` layer.
    pub fn http_refusal(&self, account: &str, metrics: &Metrics) -> actix_web::HttpResponse {
        Exceeded::new(Layer::Http, ErrorCode::Banned.as_str(), account)
            .reset(self.remaining)
            .emit(metrics);
        refusal(
            actix_web::http::StatusCode::FORBIDDEN,
            ErrorCode::Banned,
            &self.message(),
            Some(self.remaining),
        )
    }
}

/// One entry of the ban list as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BanEntry {
    #[serde(flatten)]
    pub target: BanTarget,
    /// Unix milliseconds.
    pub expires_at: u64,
    pub remaining_ms: u64,
}

/// This node's copy of the cluster's ban list.
#[derive(Debug)]
pub struct Bans {
    accounts: DashMap<String, u64>,
    /// Keyed by [`ip_key`]: a ban of `a.b.c.d` also refuses
    /// `::ffff:a.b.c.d`, and one of an IPv6 address its whole network
    /// (`handshake.ipv6_prefix_len`); the value holds the address as
    /// banned. Bounded by what operators ban (each entry expires).
    ips: DashMap<IpAddr, (IpAddr, u64)>,
    /// `handshake.ipv6_prefix_len` of the running config.
    v6_prefix: AtomicU8,
    /// When this copy last changed by an action (not by a sync), so a sync
    /// does not undo an action whose Redis write is still on its way.
    changed: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl Default for Bans {
    fn default() -> Self {
        Bans {
            accounts: DashMap::new(),
            ips: DashMap::new(),
            v6_prefix: AtomicU8::new(crate::config::HandshakeSection::default().ipv6_prefix_len),
            changed: parking_lot::Mutex::default(),
        }
    }
}

impl Bans {
    /// Sets the IPv6 network size addresses are banned by (on start and
    /// reload); the bans held are keyed again.
    pub fn set_v6_prefix(&self, prefix: u8) {
        if self.v6_prefix.swap(prefix, Ordering::Relaxed) != prefix {
            let held: Vec<(IpAddr, u64)> = self.ips.iter().map(|e| *e.value()).collect();
            self.ips.clear();
            for (ip, until) in held {
                self.ips.insert(self.key(ip), (ip, until));
            }
        }
    }

    fn key(&self, ip: IpAddr) -> IpAddr {
        ip_key(ip, self.v6_prefix.load(Ordering::Relaxed))
    }

    /// The ban that refuses `account` or `ip` right now, if any (the longer
    /// one when both are banned). This is the hook every transport calls:
    /// HTTP answers 403 `banned`, gRPC `PERMISSION_DENIED`, both with the
    /// remaining time.
    pub fn check(&self, account: Option<&str>, ip: Option<IpAddr>) -> Option<Ban> {
        if self.accounts.is_empty() && self.ips.is_empty() {
            return None;
        }
        let now = unix_ms();
        let by_account = account.and_then(|a| {
            let until = *self.accounts.get(a)?;
            (until > now).then(|| (BanTarget::Account(a.to_owned()), until))
        });
        let by_ip = ip.and_then(|ip| {
            let (banned, until) = *self.ips.get(&self.key(ip))?;
            (until > now).then_some((BanTarget::Ip(banned), until))
        });
        let (target, until) = match (by_account, by_ip) {
            (Some(a), Some(i)) => {
                if i.1 > a.1 {
                    i
                } else {
                    a
                }
            }
            (a, i) => a.or(i)?,
        };
        Some(Ban {
            target,
            remaining: Duration::from_millis(until - now),
        })
    }

    /// Bans `target` until `expires_at` (Unix ms); a later expiry replaces
    /// an earlier one and the other way round (the last operator wins).
    pub fn insert(&self, target: &BanTarget, expires_at: u64) {
        *self.changed.lock() = Some(std::time::Instant::now());
        self.put(target, expires_at);
    }

    fn put(&self, target: &BanTarget, expires_at: u64) {
        match target {
            BanTarget::Account(a) => {
                self.accounts.insert(a.clone(), expires_at);
            }
            BanTarget::Ip(ip) => {
                self.ips.insert(self.key(*ip), (*ip, expires_at));
            }
        }
    }

    /// Lifts a ban; whether there was one in force.
    pub fn remove(&self, target: &BanTarget) -> bool {
        *self.changed.lock() = Some(std::time::Instant::now());
        let now = unix_ms();
        let removed = match target {
            BanTarget::Account(a) => self.accounts.remove(a).map(|(_, u)| u),
            BanTarget::Ip(ip) => self.ips.remove(&self.key(*ip)).map(|(_, (_, u))| u),
        };
        removed.is_some_and(|until| until > now)
    }

    /// The bans in force, soonest expiry first.
    pub fn list(&self) -> Vec<BanEntry> {
        let now = unix_ms();
        let entry = |target: BanTarget, until: u64| BanEntry {
            target,
            expires_at: until,
            remaining_ms: until - now,
        };
        let mut all: Vec<BanEntry> = self
            .accounts
            .iter()
            .filter(|e| *e.value() > now)
            .map(|e| entry(BanTarget::Account(e.key().clone()), *e.value()))
            .chain(
                self.ips
                    .iter()
                    .filter(|e| e.value().1 > now)
                    .map(|e| entry(BanTarget::Ip(e.value().0), e.value().1)),
            )
            .collect();
        all.sort_by_key(|b| b.expires_at);
        all
    }

    /// Makes this copy equal to the cluster's list (read back from Redis),
    /// unless an action changed it within `settle` (its write may not have
    /// reached Redis yet). Whether it synced.
    pub fn replace_all(&self, bans: &[(BanTarget, u64)], settle: std::time::Duration) -> bool {
        if self.changed.lock().is_some_and(|t| t.elapsed() < settle) {
            return false;
        }
        let now = unix_ms();
        let live: Vec<&(BanTarget, u64)> = bans.iter().filter(|(_, u)| *u > now).collect();
        // Add before removing, so a ban in both lists never lapses.
        for (target, until) in &live {
            self.put(target, *until);
        }
        let has = |t: &BanTarget| live.iter().any(|(b, _)| b == t);
        self.accounts
            .retain(|a, _| has(&BanTarget::Account(a.clone())));
        self.ips.retain(|ip, _| {
            live.iter()
                .any(|(b, _)| matches!(b, BanTarget::Ip(i) if self.key(*i) == *ip))
        });
        true
    }

    /// Forgets expired bans.
    pub fn sweep(&self) {
        let now = unix_ms();
        self.accounts.retain(|_, until| *until > now);
        self.ips.retain(|_, (_, until)| *until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ban_refuses_until_it_expires_or_is_lifted() {
        let bans = Bans::default();
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        assert_eq!(bans.check(Some("acme"), Some(ip)), None);
        bans.insert(&BanTarget::Account("acme".into()), unix_ms() + 60_000);
        let ban = bans.check(Some("acme"), None).unwrap();
        assert_eq!(ban.target, BanTarget::Account("acme".into()));
        assert!(
            ban.remaining > Duration::from_secs(50) && ban.remaining <= Duration::from_secs(60)
        );
        assert_eq!(bans.check(Some("other"), Some(ip)), None);
        bans.insert(&BanTarget::Ip(ip), unix_ms() + 120_000);
        assert_eq!(
            bans.check(Some("acme"), Some(ip)).unwrap().target,
            BanTarget::Ip(ip),
            "the longer ban answers"
        );
        assert!(bans.remove(&BanTarget::Ip(ip)));
        assert!(!bans.remove(&BanTarget::Ip(ip)));
        // An expiry in the past is no ban.
        bans.insert(&BanTarget::Account("acme".into()), unix_ms() - 1);
        assert_eq!(bans.check(Some("acme"), None), None);
        assert!(bans.list().is_empty());
    }

    #[test]
    fn an_ip_ban_applies_to_the_mapped_address_and_to_the_ipv6_network() {
        let bans = Bans::default();
        let until = unix_ms() + 60_000;
        bans.insert(&BanTarget::Ip("203.0.113.7".parse().unwrap()), until);
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert!(bans.check(None, Some(mapped)).is_some());
        bans.insert(&BanTarget::Ip("2001:db8:1:2::7".parse().unwrap()), until);
        let same_net: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        let other_net: IpAddr = "2001:db8:1:3::7".parse().unwrap();
        assert!(bans.check(None, Some(same_net)).is_some(), "same /64");
        assert!(bans.check(None, Some(other_net)).is_none());
        bans.set_v6_prefix(128);
        assert!(bans.check(None, Some(same_net)).is_none(), "by address");
        let banned: IpAddr = "2001:db8:1:2::7".parse().unwrap();
        assert_eq!(
            bans.check(None, Some(banned)).unwrap().target,
            BanTarget::Ip(banned)
        );
        // A sync that still lists the bans keeps them.
        assert!(bans.replace_all(&[(BanTarget::Ip(mapped), until)], Duration::ZERO));
        assert!(
            bans.check(None, Some("203.0.113.7".parse().unwrap()))
                .is_some()
        );
        assert!(bans.remove(&BanTarget::Ip(mapped)));
        assert!(bans.list().is_empty());
    }

    #[test]
    fn keys_round_trip_and_bad_keys_are_refused() {
        for t in [
            BanTarget::Account("a:b".into()),
            BanTarget::Ip("2001:db8::1".parse().unwrap()),
        ] {
            assert_eq!(BanTarget::from_key(&t.key()), Some(t));
        }
        assert_eq!(BanTarget::from_key("ip:nope"), None);
        assert_eq!(BanTarget::from_key("user:x"), None);
        assert_eq!(
            serde_json::to_string(&BanTarget::Ip("10.0.0.1".parse().unwrap())).unwrap(),
            r#"{"ip":"10.0.0.1"}"#
        );
    }
}
