//! Fan-out through Redis: publish (one script), subscribe (interest, then
//! recovery from the cluster's history), and what arrives from Redis.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use std::sync::Arc;

use super::resharding::invoke_following;
use super::{RedisBridge, SEQ_TTL_MS, SUBSCRIBE_WAIT, SubCmd, reads};
use crate::cluster::{ChannelRead, Pending};
use crate::hub::{Joined, Pages, Recovery, Subscriber, seq_floor};
use crate::idempotency::{Keyed, Published};
use crate::protocol::wire;

/// Parses the `seq` out of a message JSON built by the publish script.
pub(super) fn parse_seq(channel: &str, msg: &[u8]) -> Option<u64> {
    let skip = r#"{"type":"message","channel":""#.len() + channel.len() + r#"","seq":"#.len();
    let digits = msg.get(skip..)?;
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

impl RedisBridge {
    /// A message from the cluster, as delivered by Redis.
    pub(super) fn on_message(&self, topic: &str, payload: &[u8]) {
        if topic == self.control_topic() {
            let text = self.open_control(payload);
            if let Some(events) = self.events.upgrade() {
                if let Some(account) = text.and_then(|p| p.strip_prefix("breach:")) {
                    events.breach(account);
                } else if let Some(action) = text.and_then(|p| p.strip_prefix(super::ADMIN_MESSAGE))
                {
                    match serde_json::from_str::<crate::cluster::Envelope>(action) {
                        Ok(envelope) => events.operator(envelope),
                        Err(e) => {
                            tracing::warn!(target: "tidegate::admin", error = %e, "unreadable operator action ignored")
                        }
                    }
                }
            }
            return;
        }
        let channel = topic
            .strip_prefix(self.prefix.as_str())
            .and_then(|t| t.strip_prefix("ch:"));
        let Some(channel) = channel else {
            return;
        };
        match parse_seq(channel, payload) {
            Some(seq) => {
                self.hub.deliver(channel, seq, wire::text(payload));
            }
            None => tracing::warn!(%channel, "unparseable message from Redis ignored"),
        }
    }

    /// A control message's body when a node signed it (`control.rs`);
    /// anything else is counted, logged at most every ten seconds, and
    /// ignored.
    fn open_control<'a>(&self, payload: &'a [u8]) -> Option<&'a str> {
        let now = super::control::now_ms();
        let opened = std::str::from_utf8(payload)
            .map_err(|_| super::Forged::Unsigned)
            .and_then(|text| self.control.open(text, now));
        match opened {
            Ok(body) => Some(body),
            Err(why) => {
                self.metrics.control_rejected(why.as_str());
                if let Some(ignored) = self.control.log_due(now) {
                    tracing::warn!(
                        reason = why.as_str(),
                        ignored,
                        "control message from Redis not signed by a node of this cluster; ignored (check cluster.secret, the nodes' clocks, and who may PUBLISH on this Redis)"
                    );
                }
                None
            }
        }
    }

    pub(super) fn add_interest(&self, channel: &str) -> Option<oneshot::Receiver<()>> {
        let mut interest = self.interest.lock();
        let entry = interest.entry(channel.into()).or_default();
        entry.refs += 1;
        if entry.refs == 1 {
            let _ = self.cmds.send(SubCmd::Touch(channel.into()));
        }
        if entry.live || !self.pubsub_ok.load(Ordering::Acquire) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        entry.waiters.push(tx);
        Some(rx)
    }

    pub(super) fn remove_interest(&self, channel: &str) {
        let mut interest = self.interest.lock();
        if let Some(entry) = interest.get_mut(channel) {
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0 {
                interest.remove(channel);
                let _ = self.cmds.send(SubCmd::Touch(channel.into()));
            }
        }
    }

    /// The cluster's position for a subscription that just went live, and
    /// with `since`, whether the cluster's history covers it and the
    /// recovery after it, read in the same atomic step (so the backlog ends
    /// exactly at the position) as counts only: its messages are read in
    /// pages as the subscriber takes them (`pages.rs`). `None` when Redis
    /// could not answer.
    pub(super) async fn join_position(
        &self,
        channel: &str,
        since: Option<u64>,
    ) -> Option<(u64, Option<(bool, Recovery)>)> {
        let seq_key = self.key("seq", channel);
        let (_, ttl, _) = self.history();
        let (mut conn, _in_flight) = self.command(&seq_key)?;
        let result: redis::RedisResult<(String, String, String, String, u64, u64)> = self
            .metrics
            .time_script(
                "join",
                invoke_following(
                    self.join_invocation(channel, &seq_key)
                        .arg(self.hub.seq(channel))
                        .arg(seq_floor())
                        .arg(SEQ_TTL_MS.max(ttl))
                        .arg(if since.is_some() { "1" } else { "0" })
                        .arg(ttl)
                        .arg(since.unwrap_or(0)),
                    &mut conn,
                ),
            )
            .await;
        let (cur, pos, oldest, newest, count, bytes) = match result {
            Ok(r) => r,
            Err(e) => {
                self.failed_at(&seq_key, &e);
                return None;
            }
        };
        let pos: u64 = pos.parse().unwrap_or(0);
        let Some(since) = since else {
            return Some((pos, None));
        };
        let number = |s: &str| s.parse::<u64>().unwrap_or(0);
        let held = Held {
            cur: number(&cur),
            oldest: number(&oldest),
            newest: number(&newest),
            count,
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
        };
        let pages = || self.pages(channel);
        Some((pos, Some(held.recovery(since, pages))))
    }

    /// The channel's `seq` and its newest `last` held messages after
    /// `after` from Redis, reading only those ([`reads::HISTORY`]); this
    /// node's own view while Redis is away or does not answer.
    pub(super) fn read_channel_impl(
        &self,
        channel: &str,
        last: usize,
        after: u64,
    ) -> Pending<ChannelRead> {
        let seq_key = self.key("seq", channel);
        let local = move |hub: &crate::hub::Hub, channel: &str| {
            let (seq, held) = hub.held(channel);
            ChannelRead::newest(seq, held, last, after)
        };
        if !self.up_at(&seq_key) {
            return Pending::Ready(local(&self.hub, channel));
        }
        let this = self.arc();
        let channel = channel.to_owned();
        Pending::later(async move {
            let Some((mut conn, _in_flight)) = this.command(&seq_key) else {
                return local(&this.hub, &channel);
            };
            let result: redis::RedisResult<(String, Vec<Vec<u8>>)> = this
                .metrics
                .time_script(
                    "read_channel",
                    invoke_following(
                        reads::HISTORY
                            .key(&seq_key)
                            .key(this.key("hist", &channel))
                            .arg(u64::try_from(last).unwrap_or(u64::MAX))
                            .arg(after),
                        &mut conn,
                    ),
                )
                .await;
            match result {
                Ok((seq, held)) => ChannelRead {
                    seq: seq.parse().unwrap_or(0),
                    held: held
                        .iter()
                        .filter_map(|m| Some((parse_seq(&channel, m)?, wire::text(m))))
                        .collect(),
                },
                Err(e) => {
                    this.failed_at(&seq_key, &e);
                    local(&this.hub, &channel)
                }
            }
        })
    }

    /// The Redis key of an idempotency key (§17), in the channel's slot
    /// (its hash tag on Redis Cluster), lengths first so no two scopes
    /// share a name.
    pub(super) fn idem_key(&self, channel: &str, keyed: &Keyed<'_>) -> String {
        // Built in one string of the right size (it was two `format!`s and
        // a third string).
        let mut name = self.key_with("idem", channel, 1 + keyed.scope_len(channel));
        name.push(':');
        keyed.write_scope(channel, &mut name);
        name
    }

    /// Publishes here alone (Redis is away or refused the script): the
    /// message gets a local `seq`, and its key, if any, was checked by this
    /// node only (counted).
    fn publish_alone(&self, channel: &str, data: &str, keyed: bool) -> Published {
        if keyed {
            self.metrics.idempotency.unshared.inc();
        }
        Published::first(self.hub.publish(channel, data))
    }

    pub(super) fn publish_impl(
        &self,
        channel: &str,
        data: &str,
        keyed: Option<Keyed<'_>>,
    ) -> Pending<Published> {
        let seq_key = self.key("seq", channel);
        if !self.up_at(&seq_key) {
            return Pending::Ready(self.publish_alone(channel, data, keyed.is_some()));
        }
        let this = self.arc();
        let idem = keyed.map(|k| self.idem_key(channel, &k));
        let (channel, data) = (channel.to_owned(), data.to_owned());
        Pending::later(async move {
            let Some((mut conn, _in_flight)) = this.command(&seq_key) else {
                return this.publish_alone(&channel, &data, idem.is_some());
            };
            let (size, ttl, _) = this.history();
            let mut invocation = this.publish_invocation(&channel, &seq_key);
            let window = match &idem {
                Some(k) => {
                    invocation.key(k);
                    this.idempotency_window_ms.load(Ordering::Relaxed)
                }
                None => 0,
            };
            invocation
                .arg(this.topic(&channel))
                .arg(&channel)
                .arg(&data)
                .arg(size)
                .arg(ttl)
                .arg(this.hub.seq(&channel))
                .arg(seq_floor())
                .arg(SEQ_TTL_MS.max(ttl))
                .arg(window);
            let result: redis::RedisResult<(String, u64, Vec<String>, u8)> = this
                .metrics
                .time_script("publish", invoke_following(&invocation, &mut conn))
                .await;
            if let Ok((seq, len, trimmed, 0)) = &result
                && *len > 0
            {
                this.indexed(&channel, seq, *len, trimmed.clone());
            }
            match result.map(|(s, _, _, dup)| (s.parse::<u64>(), dup)) {
                Ok((Ok(seq), dup)) => Published {
                    seq,
                    duplicate: dup == 1,
                },
                Ok((Err(_), _)) => this.publish_alone(&channel, &data, idem.is_some()),
                Err(e) => {
                    // Availability first: the message may or may not have
                    // reached Redis; serve it locally either way.
                    this.failed_at(&seq_key, &e);
                    this.publish_alone(&channel, &data, idem.is_some())
                }
            }
        })
    }

    pub(super) fn subscribe_impl(
        &self,
        channel: &str,
        sub: Subscriber,
        since: Option<u64>,
    ) -> Pending<Joined> {
        // A socket subscribing again (to recover with `since`) already
        // counts in the channel's interest.
        let again = self.hub.is_subscribed(channel, sub.conn);
        let wait = if again {
            None
        } else {
            self.add_interest(channel)
        };
        if !self.up_at(&self.key("seq", channel)) {
            // Alone: local delivery is live now; recovery from local history.
            return Pending::Ready(self.hub.subscribe(channel, sub, since));
        }
        let joined = self.hub.subscribe_follower(channel, sub);
        let this = self.arc();
        let channel = channel.to_owned();
        Pending::later(async move {
            if let Some(rx) = wait {
                let _ = tokio::time::timeout(SUBSCRIBE_WAIT, rx).await;
            }
            match this.join_position(&channel, since).await {
                Some((pos, recovery)) => {
                    let (recovered, backlog) = recovery.unzip();
                    Joined {
                        recovered,
                        backlog: backlog.unwrap_or_default(),
                        last_seq: joined.last_seq.max(pos),
                    }
                }
                None => {
                    // Redis did not answer: this node's own view, as while
                    // it serves alone.
                    let (recovered, backlog) = match since {
                        Some(since) => {
                            let (r, b) = this.hub.recover(&channel, since);
                            (Some(r), b.into())
                        }
                        None => (None, Recovery::default()),
                    };
                    Joined {
                        recovered,
                        backlog,
                        ..joined
                    }
                }
            }
        })
    }

    pub(super) fn unsubscribe_impl(&self, channel: &str, conn: u64) {
        self.hub.unsubscribe(channel, conn);
        self.remove_interest(channel);
    }
}

/// What the join script found of the channel's history.
struct Held {
    /// The counter (0: none).
    cur: u64,
    /// The `seq` of the oldest and newest held message (0: none).
    oldest: u64,
    newest: u64,
    /// The held messages after `since`, and their bytes.
    count: u64,
    bytes: usize,
}

impl Held {
    /// Whether the history covers everything after `since`, and if so the
    /// recovery after it, read in pages from `pages()`.
    fn recovery(&self, since: u64, pages: impl FnOnce() -> Arc<dyn Pages>) -> (bool, Recovery) {
        if self.cur == 0 || since > self.cur {
            return (false, Recovery::default());
        }
        if since == self.cur {
            return (true, Recovery::default());
        }
        if self.oldest == 0 || self.oldest > since + 1 {
            return (false, Recovery::default());
        }
        let recovery = Recovery::paged(pages(), since, self.newest, self.count, self.bytes);
        (true, recovery)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_seq;

    #[test]
    fn seq_is_read_from_the_scripted_message() {
        let msg = br#"{"type":"message","channel":"doc:1","seq":1796038664859005,"data":{"a":1}}"#;
        assert_eq!(parse_seq("doc:1", msg), Some(1_796_038_664_859_005));
        assert_eq!(parse_seq("doc:1", b"{}"), None);
    }
}
