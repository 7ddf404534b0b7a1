//! `type Subscription`: served over `graphql-transport-ws` on this same
//! path (§12). The executor runs a subscription once, when it starts: the
//! resolver checks the channel and the caller's globs and records where
//! to subscribe in the request's ticket; the socket then subscribes, and
//! each message becomes a `next` message without the executor
//! (`graphql/ws/shape.rs`). Over HTTP a subscription is refused before it
//! is priced or executed (`graphql::over_http`).

use async_graphql::{Context, Result, Subscription as SubscriptionRoot};
use futures_util::stream::{Empty, empty};

use super::query::{no_presence, readable, ticket};
use super::{Code, Message, PresenceDiff, Seq};
use crate::graphql::admission::Start;

pub struct Subscription;

#[SubscriptionRoot]
impl Subscription {
    /// A channel's messages, §2/§3 semantics: recovery after `since`, `seq`
    /// order, no gap, no duplicate.
    async fn messages(
        &self,
        ctx: &Context<'_>,
        channel: String,
        since: Option<Seq>,
    ) -> Result<Empty<Message>> {
        let t = ticket(ctx);
        crate::protocol::channel::validate(&channel).map_err(|why| Code::BadRequest.error(why))?;
        // A hook deciding the channel replaces the token's globs (§15).
        if !crate::graphql::hooked::subscribe(t, &channel).await? {
            readable(t, &channel)?;
        }
        *t.subscribe.lock() = Some(Start::Messages {
            channel,
            since: since.map(|s| s.0),
        });
        Ok(empty())
    }

    /// §13 diffs of a channel whose namespace has presence and
    /// `join_leave`: first the members as they stand (as joins), then
    /// one diff per window, as `/v1/ws` subscribers get them; above
    /// `join_leave_max_members` an empty diff with the counts in the
    /// response's `extensions.presenceStats` (`graphql/ws/presence.rs`).
    /// It watches: the connection does not become a member.
    async fn presence(&self, ctx: &Context<'_>, channel: String) -> Result<Empty<PresenceDiff>> {
        let t = ticket(ctx);
        readable(t, &channel)?;
        let namespaces = &t.node.config.load().namespaces;
        let Some(rule) = crate::config::presence_rule(namespaces, &channel) else {
            return Err(no_presence(&channel));
        };
        if !rule.join_leave {
            let namespace = channel.split(':').next().unwrap_or(&channel);
            return Err(Code::BadRequest.error(format!(
                "presence diffs are not enabled for the namespace {namespace:?} (join_leave)"
            )));
        }
        *t.subscribe.lock() = Some(Start::Presence { channel, rule });
        Ok(empty())
    }
}
