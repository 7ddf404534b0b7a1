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
use super::{Message, PresenceDiff, Seq};

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
        readable(t, &channel)?;
        *t.subscribe.lock() = Some((channel, since.map(|s| s.0)));
        Ok(empty())
    }

    /// §13 diffs; answers as a namespace without presence does.
    async fn presence(&self, channel: String) -> Result<Empty<PresenceDiff>> {
        Err(no_presence(&channel))
    }
}
