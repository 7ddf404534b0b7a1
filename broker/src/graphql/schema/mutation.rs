//! `type Mutation`: publishing, through the same path as HTTP publish
//! (§5): the same checks, the same bridge, the same webhooks. The price
//! was charged for the whole operation before it ran.

use async_graphql::{Context, Object, Result};

use super::query::ticket;
use super::{Code, Json, PublishInput, Published, Seq};
use crate::graphql::admission::Ticket;
use crate::protocol::channel;

pub struct Mutation;

/// The message's channel and `data` text, or why it cannot be published.
fn checked(t: &Ticket, channel: &str, data: &Json) -> Result<String> {
    channel::validate(channel).map_err(|why| Code::BadRequest.error(why))?;
    let limits = &t.caller.limits;
    let text = data.text();
    if text.len() > limits.max_payload_bytes {
        return Err(Code::PayloadTooLarge.error(format!(
            "data is {} bytes, above the limit of {}",
            text.len(),
            limits.max_payload_bytes
        )));
    }
    if crate::protocol::json::depth_exceeds(text.as_bytes(), limits.max_json_depth) {
        return Err(Code::BadRequest.error(format!(
            "data nesting is deeper than {} levels",
            limits.max_json_depth
        )));
    }
    if !t.caller.may_publish(channel) {
        return Err(Code::Forbidden.error(format!(
            "this credential may not publish on {channel:?} (its pub_channels do not allow it)"
        )));
    }
    Ok(text)
}

#[Object]
impl Mutation {
    /// Publishes one message; costs what an HTTP publish of it costs.
    async fn publish(&self, ctx: &Context<'_>, channel: String, data: Json) -> Result<Published> {
        let t = ticket(ctx);
        let text = checked(t, &channel, &data)?;
        let seq = t.node.publish(&channel, &text, "graphql").await;
        Ok(Published {
            channel,
            seq: Seq(seq),
        })
    }

    /// Publishes every message, in order, or none: a message that cannot
    /// be published refuses the whole batch before any is sent.
    async fn publish_batch(
        &self,
        ctx: &Context<'_>,
        messages: Vec<PublishInput>,
    ) -> Result<Vec<Published>> {
        let t = ticket(ctx);
        let max = t.node.config.load().http.max_batch;
        if messages.is_empty() || messages.len() > max {
            return Err(Code::BadRequest.error(format!(
                "a batch holds 1 to {max} messages, this one has {}",
                messages.len()
            )));
        }
        let texts = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                checked(t, &m.channel, &m.data).map_err(|mut e| {
                    e.message = format!("messages[{i}]: {}", e.message);
                    e
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(messages.len());
        for (m, text) in messages.into_iter().zip(texts) {
            let seq = t.node.publish(&m.channel, &text, "graphql").await;
            out.push(Published {
                channel: m.channel,
                seq: Seq(seq),
            });
        }
        Ok(out)
    }
}
