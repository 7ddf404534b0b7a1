//! Each Pusher app's figures (§16): its connections, occupied channels,
//! presence users, client and API events, and refusals, for the
//! `tidegate_pusher_app_*` series and the admin overview's `pusherApps`.
//!
//! Every figure is an aggregate kept as it changes (a connection opens, a
//! channel gets its first local subscriber, a user's first connection joins
//! a presence channel), never counted by walking sockets or channels, so
//! reading them costs the same at 100,000 sockets as at ten. The `app`
//! label is an app id from `[[pusher.apps]]`: bounded by the config, never
//! by what clients send.
//!
//! Refusals are attributed by account: every exceeded event names the
//! account it was charged to, and an app is one account (§16), so an app's
//! refusals are its account's, on every layer (the handshake's cap, the
//! connection's buckets, the account budget, the outbound mark, the HTTP
//! API). An account that two apps share, or that `/v1/ws` clients use as
//! well, shows the account's refusals under each of its apps.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use dashmap::DashMap;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Layer;
use crate::protocol::channel::PUSHER_PREFIX;

/// One app's figures on this node.
#[derive(Debug)]
pub struct AppTally {
    pub id: Arc<str>,
    connections: AtomicI64,
    /// Channels of the app with a subscriber on this node.
    channels: AtomicI64,
    /// (presence channel, user) pairs with a connection on this node.
    presence_users: AtomicI64,
    client_events: AtomicU64,
    api_events: AtomicU64,
    /// By (layer, reason): both come from the code, so the map is bounded
    /// by its names.
    refusals: DashMap<(&'static str, &'static str), AtomicU64>,
}

/// An app's figures at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppFigures {
    pub connections: u64,
    pub channels: u64,
    pub presence_users: u64,
    pub client_events: u64,
    pub api_events: u64,
    /// (layer, reason, count), sorted.
    pub refusals: Vec<(&'static str, &'static str, u64)>,
}

/// A gauge read as a count: a transition seen by a tally that a reload
/// replaced cannot make it negative.
fn count(g: &AtomicI64) -> u64 {
    g.load(Ordering::Relaxed).max(0) as u64
}

impl AppTally {
    fn new(id: &str) -> AppTally {
        AppTally {
            id: id.into(),
            connections: AtomicI64::new(0),
            channels: AtomicI64::new(0),
            presence_users: AtomicI64::new(0),
            client_events: AtomicU64::new(0),
            api_events: AtomicU64::new(0),
            refusals: DashMap::new(),
        }
    }

    /// A connection of the app opened (`true`) or closed.
    pub fn connection(&self, open: bool) {
        self.connections
            .fetch_add(if open { 1 } else { -1 }, Ordering::Relaxed);
    }

    /// A client event was published (`client-*`).
    pub fn client_event(&self) {
        self.client_events.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` events were triggered through the HTTP API (one per event, for
    /// all its channels).
    pub fn api_events(&self, n: u64) {
        self.api_events.fetch_add(n, Ordering::Relaxed);
    }

    fn refused(&self, layer: &'static str, reason: &'static str, n: u64) {
        if let Some(c) = self.refusals.get(&(layer, reason)) {
            c.fetch_add(n, Ordering::Relaxed);
            return;
        }
        self.refusals
            .entry((layer, reason))
            .or_default()
            .fetch_add(n, Ordering::Relaxed);
    }

    /// The figures now.
    pub fn figures(&self) -> AppFigures {
        let mut refusals: Vec<_> = self
            .refusals
            .iter()
            .map(|e| (e.key().0, e.key().1, e.value().load(Ordering::Relaxed)))
            .collect();
        refusals.sort_unstable();
        AppFigures {
            connections: count(&self.connections),
            channels: count(&self.channels),
            presence_users: count(&self.presence_users),
            client_events: self.client_events.load(Ordering::Relaxed),
            api_events: self.api_events.load(Ordering::Relaxed),
            refusals,
        }
    }
}

/// The apps configured now.
#[derive(Debug, Default)]
struct Configured {
    /// In config order.
    apps: Vec<Arc<AppTally>>,
    /// Each account's apps, for refusals (which name an account).
    by_account: HashMap<String, Vec<Arc<AppTally>>>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppLabel {
    app: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppSource {
    app: String,
    source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppRefusal {
    app: String,
    layer: &'static str,
    reason: &'static str,
}

/// The node's Pusher apps' figures and their series.
#[derive(Debug, Default)]
pub struct PusherMetrics {
    /// Every app id configured since the node started, kept across
    /// reloads (an app removed and added again keeps its counts): bounded
    /// by the ids the config has named.
    tallies: DashMap<Arc<str>, Arc<AppTally>>,
    configured: ArcSwap<Configured>,
    connections: Family<AppLabel, Gauge>,
    channels: Family<AppLabel, Gauge>,
    presence_users: Family<AppLabel, Gauge>,
    events: Family<AppSource, Counter>,
    rejections: Family<AppRefusal, Counter>,
    /// One scrape brings the counters up to the tallies at a time.
    refreshing: Mutex<()>,
}

impl PusherMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "pusher_app_connections",
            "Open /app/{key} connections of each Pusher app on this node",
            self.connections.clone(),
        );
        registry.register(
            "pusher_app_channels",
            "Channels of each Pusher app with a subscriber on this node",
            self.channels.clone(),
        );
        registry.register(
            "pusher_app_presence_users",
            "Users in each Pusher app's presence channels with a connection on this node (one per user and channel)",
            self.presence_users.clone(),
        );
        registry.register(
            "pusher_app_events",
            "Events published by each Pusher app, by source (client: client-* events; api: events triggered through the HTTP API)",
            self.events.clone(),
        );
        registry.register(
            "pusher_app_rejections",
            "Refusals of each Pusher app's account, by layer and reason (as tidegate_rejections_total)",
            self.rejections.clone(),
        );
    }

    /// Sets the configured apps, `(id, account)` in config order (at start
    /// and on every reload). A removed app's series go.
    pub fn configure<'a>(&self, apps: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut next = Configured::default();
        for (id, account) in apps {
            let tally = self
                .tallies
                .entry(id.into())
                .or_insert_with(|| Arc::new(AppTally::new(id)))
                .clone();
            next.by_account
                .entry(account.to_owned())
                .or_default()
                .push(tally.clone());
            next.apps.push(tally);
        }
        let _scrape = self.refreshing.lock();
        let before = self.configured.swap(Arc::new(next));
        let now = self.configured.load();
        for gone in before
            .apps
            .iter()
            .filter(|t| !now.apps.iter().any(|n| n.id == t.id))
        {
            self.forget(gone);
        }
    }

    fn forget(&self, tally: &AppTally) {
        let app = tally.id.to_string();
        let label = AppLabel { app: app.clone() };
        self.connections.remove(&label);
        self.channels.remove(&label);
        self.presence_users.remove(&label);
        for source in ["client", "api"] {
            self.events.remove(&AppSource {
                app: app.clone(),
                source,
            });
        }
        for e in tally.refusals.iter() {
            self.rejections.remove(&AppRefusal {
                app: app.clone(),
                layer: e.key().0,
                reason: e.key().1,
            });
        }
    }

    /// The app with this id, if it was ever configured.
    pub fn app(&self, id: &str) -> Option<Arc<AppTally>> {
        self.tallies.get(id).map(|t| t.clone())
    }

    /// `n` events triggered through the app's HTTP API.
    pub fn api_events(&self, app_id: &str, n: u64) {
        if let Some(t) = self.app(app_id) {
            t.api_events(n);
        }
    }

    /// The apps configured now, in config order.
    pub fn apps(&self) -> Vec<Arc<AppTally>> {
        self.configured.load().apps.clone()
    }

    /// The app a hub channel (`pusher|{id}|{name}`) belongs to.
    fn app_of_channel(&self, channel: &str) -> Option<Arc<AppTally>> {
        let rest = channel.strip_prefix(PUSHER_PREFIX)?;
        let (id, _) = rest.split_once('|')?;
        self.app(id)
    }

    /// A hub channel got its first subscriber on this node (`true`) or
    /// lost its last (the hub's occupancy hook: cheap, it runs under the
    /// channel's lock).
    pub fn occupancy(&self, channel: &str, occupied: bool) {
        if let Some(t) = self.app_of_channel(channel) {
            t.channels
                .fetch_add(if occupied { 1 } else { -1 }, Ordering::Relaxed);
        }
    }

    /// A user's first connection on this node joined a presence channel
    /// (`true`), or its last left.
    pub fn presence_user(&self, channel: &str, joined: bool) {
        if let Some(t) = self.app_of_channel(channel) {
            t.presence_users
                .fetch_add(if joined { 1 } else { -1 }, Ordering::Relaxed);
        }
    }

    /// A refusal charged to `account` (from the exceeded event): counted
    /// for each app that is this account. One load and one lookup, and
    /// nothing at all on a node without apps.
    pub fn rejected(&self, account: &str, layer: Layer, reason: &'static str, n: u64) {
        let configured = self.configured.load();
        if configured.apps.is_empty() {
            return;
        }
        if let Some(apps) = configured.by_account.get(account) {
            for t in apps {
                t.refused(layer.as_str(), reason, n);
            }
        }
    }

    /// Brings the series up to the tallies (at scrape).
    pub fn refresh(&self) {
        let _one = self.refreshing.lock();
        for t in &self.configured.load().apps {
            let f = t.figures();
            let app = t.id.to_string();
            let label = AppLabel { app: app.clone() };
            self.connections
                .get_or_create(&label)
                .set(f.connections as i64);
            self.channels.get_or_create(&label).set(f.channels as i64);
            self.presence_users
                .get_or_create(&label)
                .set(f.presence_users as i64);
            let catch_up = |c: &Counter, total: u64| {
                c.inc_by(total.saturating_sub(c.get()));
            };
            for (source, total) in [("client", f.client_events), ("api", f.api_events)] {
                catch_up(
                    &self.events.get_or_create(&AppSource {
                        app: app.clone(),
                        source,
                    }),
                    total,
                );
            }
            for (layer, reason, total) in f.refusals {
                catch_up(
                    &self.rejections.get_or_create(&AppRefusal {
                        app: app.clone(),
                        layer,
                        reason,
                    }),
                    total,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_transitions_and_refusals_go_to_the_accounts_apps() {
        let m = PusherMetrics::default();
        m.configure([("1", "acme"), ("2", "beta")]);
        let one = m.app("1").unwrap();
        one.connection(true);
        one.connection(true);
        one.connection(false);
        m.occupancy("pusher|1|lobby", true);
        m.occupancy("pusher|2|lobby", true);
        m.occupancy("pusher|2|lobby", false);
        m.occupancy("doc:1", true);
        m.presence_user("pusher|1|presence-room", true);
        m.rejected("acme", Layer::Connection, "rate_limited", 3);
        m.rejected("nobody", Layer::Http, "unauthorized", 1);
        one.client_event();
        one.api_events(2);
        let f = one.figures();
        assert_eq!(
            f,
            AppFigures {
                connections: 1,
                channels: 1,
                presence_users: 1,
                client_events: 1,
                api_events: 2,
                refusals: vec![("connection", "rate_limited", 3)],
            }
        );
        assert_eq!(m.app("2").unwrap().figures(), AppFigures::default());
        // A reload keeps an app's counts; a removed app's series go.
        m.configure([("1", "acme")]);
        assert_eq!(m.apps().len(), 1);
        assert_eq!(m.app("1").unwrap().figures(), f);
    }

    #[test]
    fn the_series_catch_up_with_the_tallies_at_each_scrape() {
        let m = PusherMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.configure([("1", "acme")]);
        let t = m.app("1").unwrap();
        t.client_event();
        m.refresh();
        t.client_event();
        m.refresh();
        m.refresh();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("pusher_app_events_total{app=\"1\",source=\"client\"} 2"),
            "{text}"
        );
        m.configure(std::iter::empty());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("app=\"1\""), "{text}");
    }
}
