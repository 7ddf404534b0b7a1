//! `type Query`: reads of channels, the caller's balance and price list.

use std::sync::Arc;

use async_graphql::{Context, Object, Result};

use super::{Budget, Code, Json, Member, Message, PresenceStats, Prices, Seq};
use crate::graphql::admission::Ticket;
use crate::protocol::{channel, wire};

pub struct Query;

pub(super) fn ticket<'a>(ctx: &Context<'a>) -> &'a Arc<Ticket> {
    ctx.data_unchecked::<Arc<Ticket>>()
}

/// A `first`/`last` argument (`Int = default`: null is the default): 0
/// or more.
pub(super) fn count(name: &str, n: Option<i32>, default: i32) -> Result<usize> {
    usize::try_from(n.unwrap_or(default))
        .map_err(|_| Code::BadRequest.error(format!("{name} must be 0 or more")))
}

/// A channel the caller may read, or the refusal. For a channel a
/// subscribe hook decides, the hook replaces the token's `sub_channels`
/// (§15): a read of a channel the caller may not subscribe to must not
/// leak it; the hook's cache makes repeated reads cheap.
pub(super) async fn readable(ticket: &Ticket, name: &str) -> Result<()> {
    channel::validate(name).map_err(|why| Code::BadRequest.error(why))?;
    if crate::graphql::hooked::read(ticket, name).await? {
        return Ok(());
    }
    if !ticket.caller.may_read(name) {
        return Err(not_readable(name));
    }
    Ok(())
}

/// The refusal of a channel the token's `sub_channels` do not allow.
pub(super) fn not_readable(name: &str) -> async_graphql::Error {
    Code::Forbidden.error(format!(
        "this credential may not read {name:?} (its sub_channels do not allow it)"
    ))
}

#[Object]
impl Query {
    /// One channel; needs `sub_channels` permission, or the subscribe
    /// hook's for a channel one decides (§15).
    async fn channel(&self, ctx: &Context<'_>, name: String) -> Result<Channel> {
        readable(ticket(ctx), &name).await?;
        Ok(Channel { name })
    }

    /// Occupied channels (cluster-wide) starting with `prefix` that the
    /// caller may read, in name order. Finding them scans every channel
    /// the node knows, so the scan is paid before it runs
    /// ([`scan_price`]); `first: 0` scans nothing.
    async fn channels(
        &self,
        ctx: &Context<'_>,
        prefix: String,
        #[graphql(default = 50)] first: Option<i32>,
    ) -> Result<Vec<Channel>> {
        let first = count("first", first, 50)?;
        if first == 0 {
            return Ok(Vec::new());
        }
        let t = ticket(ctx);
        let known = t.node.hub.channel_count();
        t.pay(scan_price(&t.caller.limits.costs, known), || {
            format!("scanning the node's {known} channels")
        })
        .await?;
        let mut names: Vec<_> = t
            .node
            .broker
            .occupied(&prefix)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        // A channel a subscribe hook decides is listed only if the hook
        // allows it (§15). The hook is asked about at most `first`
        // channels, each paid as one of the `first` entries the list was
        // priced for; hooked channels past that are left out.
        let mut asks = first;
        let mut listed = Vec::new();
        for name in names {
            if listed.len() == first {
                break;
            }
            let allowed = if asks > 0
                && let Some(allowed) = crate::graphql::hooked::lists(t, &name).await
            {
                asks -= 1;
                allowed
            } else {
                !crate::graphql::hooked::decides(t, &name) && t.caller.may_read(&name)
            };
            if allowed {
                listed.push(Channel {
                    name: name.to_string(),
                });
            }
        }
        Ok(listed)
    }

    /// The caller's balance (weighs 0): read once per operation, however
    /// often it is selected.
    async fn budget(&self, ctx: &Context<'_>) -> Budget {
        let t = ticket(ctx);
        let b = *t
            .budget
            .get_or_init(|| async {
                crate::graphql::charge::charge(&t.node, &t.caller, 0)
                    .await
                    .balance
            })
            .await;
        Budget {
            remaining: b.remaining as i64,
            capacity: b.limit as i64,
            refill_per_sec: b.refill_per_sec,
            reset_in: b.reset.as_millis().div_ceil(1000) as i64,
        }
    }

    /// The caller's price list (weighs 0): the document `GET /v1/prices`
    /// answers, built once per operation.
    async fn prices(&self, ctx: &Context<'_>) -> Prices {
        let t = ticket(ctx);
        let doc = t
            .prices
            .get_or_init(|| async {
                Arc::from(crate::graphql::prices::document(&t.node, &t.caller).to_string())
            })
            .await;
        Prices {
            json: Json::Raw(doc.to_string()),
        }
    }
}

/// Channels a `channels` read scans per unit it pays: `graphql_field`
/// per full 1,000 channels the node knows (what its scan walks), so a
/// node of a few hundred channels adds nothing to the estimate.
pub const SCAN_PER_UNIT: usize = 1000;

/// The price of scanning `channels` channels.
fn scan_price(costs: &crate::config::Costs, channels: usize) -> u64 {
    (channels / SCAN_PER_UNIT) as u64 * u64::from(costs.graphql_field)
}

pub struct Channel {
    pub name: String,
}

#[Object]
impl Channel {
    async fn name(&self) -> &str {
        &self.name
    }

    /// The last `seq` (0: none yet), cluster-wide.
    async fn seq(&self, ctx: &Context<'_>) -> Seq {
        Seq(ticket(ctx)
            .node
            .broker
            .read_channel(&self.name, 0, 0)
            .wait()
            .await
            .seq)
    }

    /// Subscribers, cluster-wide.
    async fn subscribers(&self, ctx: &Context<'_>) -> i64 {
        ticket(ctx).node.broker.subscribers(&self.name) as i64
    }

    /// The last `last` held messages (after `since` when given), in `seq`
    /// order. Their `data` is paid by its bytes before it is handed over,
    /// at a recovery's price (`charge::recovery::units`, `recovery_per_kib`
    /// per started KiB), once for each time the selection renders it. A
    /// read, not a recovery: answered at once, nothing under way, so a
    /// bucket that cannot pay refuses it (`RATE_LIMITED`) and nothing of it
    /// is sent.
    async fn history(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 50)] last: Option<i32>,
        since: Option<Seq>,
    ) -> Result<Vec<Message>> {
        let last = count("last", last, 50)?;
        let after = since.map_or(0, |s| s.0);
        let t = ticket(ctx);
        let read = t
            .node
            .broker
            .read_channel(&self.name, last, after)
            .wait()
            .await;
        let held: Vec<_> = read.held.iter().filter(|(seq, _)| *seq > after).collect();
        let skip = held.len().saturating_sub(last);
        let messages: Vec<_> = held
            .into_iter()
            .skip(skip)
            .map(|(seq, frame)| (*seq, wire::message_data(frame, &self.name, *seq)))
            .collect();
        // Every `data` this field's selection renders (aliases and
        // fragments included; what `@skip` left out is gone already).
        let renders = ctx.look_ahead().field("data").selection_fields().len();
        let bytes: usize = messages.iter().map(|(_, d)| d.len()).sum();
        let units =
            crate::charge::recovery::units(&t.caller.limits.costs, bytes.saturating_mul(renders));
        t.pay(u64::from(units), || {
            format!("the history's data ({bytes} bytes, rendered {renders} times)")
        })
        .await?;
        Ok(messages
            .into_iter()
            .map(|(seq, data)| Message {
                channel: self.name.clone(),
                seq: Seq(seq),
                data: Json::Raw(String::from_utf8_lossy(&data).into_owned()),
            })
            .collect())
    }

    /// Who is in the channel (§13), sorted by user then connection id:
    /// at most `first` (0 to 1000).
    async fn presence(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 100)] first: Option<i32>,
    ) -> Result<Vec<Member>> {
        let first = count("first", first, 100)?;
        if first > crate::protocol::frames::PRESENCE_MAX_LIMIT as usize {
            return Err(Code::BadRequest.error("first must be at most 1000"));
        }
        let read = presence_read(ctx, &self.name, first).await?;
        Ok(read
            .members
            .into_iter()
            .map(|m| Member {
                user: m.user.to_string(),
                conn_id: m.conn_id.to_string(),
                info: m.info.map(|i| Json::Raw(i.to_string())),
            })
            .collect())
    }

    /// Distinct users and connections (§13).
    async fn presence_stats(&self, ctx: &Context<'_>) -> Result<PresenceStats> {
        let read = presence_read(ctx, &self.name, 0).await?;
        let clamp = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        Ok(PresenceStats {
            users: clamp(read.counts.users),
            connections: clamp(read.counts.connections),
        })
    }
}

/// A presence read of `channel`, or `bad_request` when its namespace has
/// no presence (the document's price was charged before it ran).
async fn presence_read(
    ctx: &Context<'_>,
    channel: &str,
    limit: usize,
) -> Result<crate::presence::Read> {
    let node = &ticket(ctx).node;
    if crate::config::presence_rule(&node.config.load().namespaces, channel).is_none() {
        return Err(no_presence(channel));
    }
    Ok(node.presence.read(channel, limit).wait().await)
}

pub(super) fn no_presence(channel: &str) -> async_graphql::Error {
    let namespace = channel.split(':').next().unwrap_or(channel);
    Code::BadRequest.error(format!(
        "presence is not enabled for the namespace {namespace:?}"
    ))
}
