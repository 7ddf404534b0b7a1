//! The limits a plan sets, resolved for one connection.
//!
//! A plan is a `[plans.NAME]` table; an account can override any key of its
//! plan in `[accounts.NAME]`. Both deserialize into this one struct (the
//! account's keys are merged over the plan's table first), so there is a
//! single list of limits, a single set of defaults (the contract's §0) and a
//! single validation.

use serde::Deserialize;

pub use crate::protocol::Op;

/// Everything a plan limits. Defaults are the contract's §0 (`free` plan).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct Limits {
    /// Per-connection message budget: refill rate (messages/s).
    pub messages_per_sec: f64,
    /// Per-connection message budget: bucket capacity.
    pub burst: u32,
    /// Per-connection inbound bytes/s (0 = no byte limit).
    pub bytes_per_sec: u64,
    /// Per-connection inbound byte burst (0 = one second's worth).
    pub bytes_burst: u64,
    /// Account-wide message budget over all sockets, cluster-wide.
    pub account_messages_per_sec: f64,
    pub account_burst: u32,
    /// A socket charges the account every N admitted messages with N units.
    pub account_sample_every: u32,
    /// Concurrent connections per account.
    pub max_connections: u32,
    /// Per-identity handshake bucket.
    pub handshake_burst: u32,
    pub handshake_refill_per_sec: f64,
    /// Subscriptions per connection.
    pub max_subscriptions: u32,
    /// Largest assembled client message (bytes).
    pub max_payload_bytes: usize,
    /// Unsent outbound bytes above which messages to a socket are dropped.
    pub outbound_high_water_bytes: usize,
    /// How long a socket may stay above the mark before close 4008.
    pub outbound_grace_ms: u64,
    /// Ping (control frame) budget per connection; excess pings are ignored.
    pub pings_per_sec: f64,
    pub ping_burst: u32,
    /// Frames priced 0 units (`budget` by default, or any operation a plan
    /// prices at 0) are charged to their own small bucket instead, so a
    /// free frame is never unlimited: past it they are dropped and
    /// reported in `rate_limited` like any dropped frame.
    pub free_frames_per_sec: f64,
    pub free_frame_burst: u32,
    /// Deepest JSON nesting accepted in a client frame.
    pub max_json_depth: u32,
    /// What each operation costs.
    pub costs: Costs,
    /// Extra limits by account, channel, account+channel or connection.
    pub rules: Vec<Rule>,
    /// Limits that only observe: they log and count what they would have
    /// rejected and let it through (seed 004's shadow mode).
    pub dry_run: Vec<LimitName>,
    /// Token roles (`role` claim) that skip every rule.
    pub skip_rules_for_roles: Vec<String>,
    /// Skip every rule for this account (service accounts).
    pub skip_rules: bool,
    /// Send unsolicited `budget` frames while a budget is below half.
    pub budget_frames: bool,
    /// Least time between two unsolicited budget frames.
    pub budget_frame_interval_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            messages_per_sec: 20.0,
            burst: 20,
            bytes_per_sec: 0,
            bytes_burst: 0,
            account_messages_per_sec: 100.0,
            account_burst: 200,
            account_sample_every: 25,
            max_connections: 8,
            handshake_burst: 10,
            handshake_refill_per_sec: 0.5,
            max_subscriptions: 100,
            max_payload_bytes: 64 * 1024,
            outbound_high_water_bytes: 1024 * 1024,
            outbound_grace_ms: 5_000,
            pings_per_sec: 10.0,
            ping_burst: 20,
            free_frames_per_sec: 10.0,
            free_frame_burst: 20,
            max_json_depth: 32,
            costs: Costs::default(),
            rules: Vec::new(),
            dry_run: Vec::new(),
            skip_rules_for_roles: Vec::new(),
            skip_rules: false,
            budget_frames: true,
            budget_frame_interval_ms: 5_000,
        }
    }
}

/// The price of each operation, in message-budget units (seed 004).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct Costs {
    pub publish: u32,
    /// Extra units per started KiB of a publish's `data` (0 = flat price).
    pub publish_per_kib: u32,
    /// Extra units per full 1,000 current subscribers of the channel
    /// (cluster-wide in cluster mode): the fan-out the publish causes
    /// (docs/limits.md, "Pricing by the work caused").
    pub publish_per_1k_subscribers: u32,
    pub subscribe: u32,
    /// Extra units for a `subscribe` with `since` (history recovery).
    pub recovery: u32,
    /// Units per started KiB of history a recovery delivers, charged once
    /// the backlog is known (it may take the connection's budget below
    /// zero: its next frames wait for the refill), so a client that makes
    /// the broker read and queue history pays for the bytes.
    pub recovery_per_kib: u32,
    pub unsubscribe: u32,
    pub budget: u32,
    /// A `refresh` frame (a new token on the socket): it costs a signature
    /// check, so it is not free.
    pub refresh: u32,
    /// A presence read (§13), per started 100 of its `limit`.
    pub presence: u32,
    /// A `presence_stats` read (§13).
    pub presence_stats: u32,
    /// An `rpc` frame (§15): one call to the backend's `rpc` hook.
    pub rpc: u32,
    /// Malformed and binary frames: garbage is not free.
    pub malformed: u32,
    /// The largest single charge; an operation priced above it is refused
    /// with `cost_exceeds_max` without touching any bucket.
    pub max_single: u32,
    /// GraphQL (§12): the weight of a selected field.
    pub graphql_field: u32,
    /// GraphQL: the size assumed for a list field without `first`/`last`.
    pub graphql_list_size: u32,
    /// GraphQL: an introspection field (`__schema`, `__type`), its whole
    /// subtree included.
    pub graphql_introspection: u32,
    /// GraphQL: the deepest selection accepted (`{ a { b } }` is 2),
    /// introspection included.
    pub graphql_max_depth: u32,
    /// GraphQL: the most fields one document may select once its fragments
    /// are expanded where they are spread (aliases and `__typename`
    /// counted, `@skip` not honoured): past it the document is refused
    /// with `QUERY_TOO_COMPLEX` before any of it runs, so the work of
    /// validating and running it stays proportional to what was paid.
    pub graphql_max_fields: u32,
    /// GraphQL: the largest price of one operation; 0 means the capacity of
    /// the bucket the caller is charged from (so an operation that could
    /// never fit is told so).
    pub graphql_max_single: u32,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            publish: 1,
            publish_per_kib: 0,
            publish_per_1k_subscribers: 0,
            subscribe: 1,
            recovery: 0,
            recovery_per_kib: 1,
            unsubscribe: 1,
            budget: 0,
            refresh: 1,
            presence: 1,
            presence_stats: 1,
            rpc: 1,
            malformed: 1,
            max_single: 20,
            graphql_field: 1,
            graphql_list_size: 50,
            graphql_introspection: 100,
            graphql_max_depth: 10,
            graphql_max_fields: 500,
            graphql_max_single: 0,
        }
    }
}

/// What a rule's bucket is keyed by (seed 003's `trackBy`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum TrackBy {
    Account,
    Channel,
    AccountChannel,
    Connection,
}

impl TrackBy {
    pub const fn as_str(self) -> &'static str {
        match self {
            TrackBy::Account => "account",
            TrackBy::Channel => "channel",
            TrackBy::AccountChannel => "account_channel",
            TrackBy::Connection => "connection",
        }
    }
}

/// An extra limit: `capacity` operations per `window_ms`, refilled
/// continuously, keyed by `track_by`. Every rule that applies must pass.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    pub track_by: TrackBy,
    pub capacity: u32,
    pub window_ms: u64,
    /// Only channels of this namespace (the part before the first `:`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Operations the rule counts (default: publish).
    #[serde(default = "default_rule_ops")]
    pub ops: Vec<Op>,
    /// Hold instead of dropping: when the wait for a token is at most this,
    /// stop reading the socket until it refills (lossless throttling).
    #[serde(default)]
    pub hold_max_delay_ms: u64,
    /// Observe only (log and count, never reject).
    #[serde(default)]
    pub dry_run: bool,
}

fn default_rule_ops() -> Vec<Op> {
    vec![Op::Publish]
}

impl Rule {
    pub fn refill_per_sec(&self) -> f64 {
        f64::from(self.capacity) * 1000.0 / self.window_ms as f64
    }
}

/// Names of limits that can be put in dry-run mode.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum LimitName {
    Messages,
    Bytes,
    AccountMessages,
    MaxConnections,
    Handshake,
    Subscriptions,
    Cost,
    Rules,
    /// GraphQL's price checks (§12): too expensive and the bucket's charge.
    Graphql,
}

impl Limits {
    pub fn is_dry_run(&self, name: LimitName) -> bool {
        self.dry_run.contains(&name)
    }

    /// Every semantic problem with these limits, each prefixed by `path`.
    pub fn problems(&self, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut need = |ok: bool, key: &str, what: &str| {
            if !ok {
                out.push(format!("{path}.{key}: {what}"));
            }
        };
        let rate_ok = |r: f64| r.is_finite() && r > 0.0;
        need(
            rate_ok(self.messages_per_sec),
            "messages_per_sec",
            "must be a positive number",
        );
        need(self.burst >= 1, "burst", "must be at least 1");
        need(
            rate_ok(self.account_messages_per_sec),
            "account_messages_per_sec",
            "must be a positive number",
        );
        need(
            self.account_burst >= 1,
            "account_burst",
            "must be at least 1",
        );
        need(
            self.account_sample_every >= 1,
            "account_sample_every",
            "must be at least 1",
        );
        need(
            self.account_sample_every <= self.account_burst,
            "account_sample_every",
            "must not exceed account_burst (one sample would never fit the bucket)",
        );
        need(
            self.max_connections >= 1,
            "max_connections",
            "must be at least 1",
        );
        need(
            self.handshake_burst >= 1,
            "handshake_burst",
            "must be at least 1",
        );
        need(
            rate_ok(self.handshake_refill_per_sec),
            "handshake_refill_per_sec",
            "must be a positive number",
        );
        need(
            self.max_payload_bytes >= 64,
            "max_payload_bytes",
            "must be at least 64 bytes",
        );
        need(
            self.max_payload_bytes <= 16 * 1024 * 1024,
            "max_payload_bytes",
            "must be at most 16 MiB",
        );
        need(
            self.outbound_high_water_bytes >= 1024,
            "outbound_high_water_bytes",
            "must be at least 1024 bytes",
        );
        need(
            rate_ok(self.pings_per_sec),
            "pings_per_sec",
            "must be a positive number",
        );
        need(self.ping_burst >= 1, "ping_burst", "must be at least 1");
        need(
            rate_ok(self.free_frames_per_sec),
            "free_frames_per_sec",
            "must be a positive number",
        );
        need(
            self.free_frame_burst >= 1,
            "free_frame_burst",
            "must be at least 1",
        );
        need(
            (1..=128).contains(&self.max_json_depth),
            "max_json_depth",
            "must be between 1 and 128",
        );
        need(
            self.costs.max_single >= 1,
            "costs.max_single",
            "must be at least 1",
        );
        need(
            self.costs.max_single <= self.burst,
            "costs.max_single",
            "must not exceed burst: a charge larger than the bucket can never succeed",
        );
        need(
            (1..=64).contains(&self.costs.graphql_max_depth),
            "costs.graphql_max_depth",
            "must be between 1 and 64",
        );
        need(
            self.costs.graphql_max_fields >= 1,
            "costs.graphql_max_fields",
            "must be at least 1",
        );
        need(
            self.costs.graphql_list_size >= 1,
            "costs.graphql_list_size",
            "must be at least 1",
        );
        need(
            self.budget_frame_interval_ms >= 100,
            "budget_frame_interval_ms",
            "must be at least 100 ms",
        );
        let mut seen = std::collections::HashSet::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let at = format!("{path}.rules[{i}]");
            if rule.id.is_empty() {
                out.push(format!("{at}.id: must not be empty"));
            } else if !seen.insert(rule.id.as_str()) {
                out.push(format!("{at}.id: duplicate rule id {:?}", rule.id));
            }
            if rule.capacity == 0 {
                out.push(format!("{at}.capacity: must be at least 1"));
            }
            if rule.window_ms == 0 {
                out.push(format!("{at}.window_ms: must be at least 1"));
            }
            if rule.ops.is_empty() {
                out.push(format!("{at}.ops: must name at least one operation"));
            }
        }
        out
    }
}
