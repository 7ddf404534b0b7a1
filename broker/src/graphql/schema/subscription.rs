//! `type Subscription`: served over `graphql-transport-ws` on this same
//! path (§12). Over HTTP a subscription is refused before it is priced
//! or executed (`graphql::over_http`), so these resolvers answer only an
//! executor that reaches them without the socket: with an error naming
//! the transport.

use async_graphql::{Result, Subscription as SubscriptionRoot};
use futures_util::stream::Empty;

use super::query::no_presence;
use super::{Code, Message, PresenceDiff, Seq};

pub struct Subscription;

fn needs_socket() -> async_graphql::Error {
    Code::BadRequest.error(
        "subscriptions are served over a WebSocket with the graphql-transport-ws subprotocol at /v1/graphql",
    )
}

#[SubscriptionRoot]
impl Subscription {
    /// A channel's messages, §2/§3 semantics: recovery after `since`, `seq`
    /// order, no gap, no duplicate.
    async fn messages(&self, channel: String, since: Option<Seq>) -> Result<Empty<Message>> {
        let _ = (channel, since);
        Err(needs_socket())
    }

    /// §13 diffs; answers as a namespace without presence does.
    async fn presence(&self, channel: String) -> Result<Empty<PresenceDiff>> {
        Err(no_presence(&channel))
    }
}
