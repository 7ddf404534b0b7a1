//! `type Mutation`: publishing, through the same path as HTTP publish
//! (§5): the same checks, the same bridge, the same webhooks. The price
//! was charged for the whole operation before it ran.

use std::time::Instant;

use async_graphql::{Context, ErrorExtensions, Object, Result};

use super::query::ticket;
use super::{Code, Json, PublishInput, Published, Seq};
use crate::charge::RulesPassed;
use crate::graphql::admission::Ticket;
use crate::graphql::admission::{retry_ms, retry_secs};
use crate::graphql::hooked;
use crate::hooks::{ChannelHook, Event};
use crate::idempotency::Keyed;
use crate::pricing;
use crate::protocol::Op;
use crate::protocol::channel;

pub struct Mutation;

/// The message's channel and `data` text, or why it cannot be published.
/// For a channel a hook decides (`who`), the hook replaces the token's
/// `pub_channels` (§15: asked in [`hooked::publish`]).
fn checked(
    t: &Ticket,
    channel: &str,
    data: &Json,
    key: Option<&str>,
    who: &ChannelHook,
) -> Result<String> {
    channel::validate(channel).map_err(|why| Code::BadRequest.error(why))?;
    if let Some(key) = key {
        crate::idempotency::validate(key).map_err(|e| Code::BadRequest.error(e.to_string()))?;
    }
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
    if !matches!(who, ChannelHook::Deciding(_)) && !t.caller.may_publish(channel) {
        hooked::shadow(t, who, Event::Publish, channel, Some(&text), false);
        return Err(Code::Forbidden.error(format!(
            "this credential may not publish on {channel:?} (its pub_channels do not allow it)"
        )));
    }
    Ok(text)
}

/// The plan's rules for a publish on `channel` (issue 42: they held on
/// socket frames only). A rule's refusal fails the field with
/// `RATE_LIMITED` and its `retryAfterMs`, makes the response a 429, and
/// gives back what the message was priced in the operation's estimate:
/// nothing was published.
async fn rules<'t>(
    t: &'t Ticket,
    channel: &'t str,
    text_len: usize,
) -> Result<Option<RulesPassed<'t>>> {
    let limits = &t.caller.limits;
    let checked = t.node.ledger().rules_alone(
        &t.caller.account,
        limits,
        Op::Publish,
        channel,
        Instant::now(),
    );
    let refused = match checked {
        Ok(passed) => return Ok(passed),
        Err(r) => r,
    };
    let price = pricing::publish(&limits.costs, text_len, t.node.broker.subscribers(channel));
    t.give_back(u64::from(price)).await;
    t.extra.lock().refused = Some(refused.retry_after);
    let ms = retry_ms(refused.retry_after);
    Err(Code::RateLimited
        .error(format!(
            "a rule of this plan limits publishes on {channel:?}; retry after {ms} ms"
        ))
        .extend_with(|_, x| {
            x.set("retryAfter", retry_secs(refused.retry_after));
            x.set("retryAfterMs", ms);
        }))
}

fn keyed<'a>(t: &'a Ticket, key: Option<&'a str>) -> Option<Keyed<'a>> {
    key.map(|key| Keyed {
        publisher: &t.caller.account,
        key,
    })
}

/// Publishes a checked message once per key (§17). The operation was
/// priced before it ran, a publish in full: a duplicate gives back what it
/// paid over the base price at once.
async fn publish_one(t: &Ticket, channel: String, text: &str, key: Option<&str>) -> Published {
    let keyed = key.map(|key| Keyed {
        publisher: &t.caller.account,
        key,
    });
    let published = t.node.publish(&channel, text, "graphql", keyed).await;
    if published.duplicate {
        let costs = &t.caller.limits.costs;
        let full = pricing::publish(costs, text.len(), t.node.broker.subscribers(&channel));
        t.give_back(u64::from(full.saturating_sub(costs.publish)))
            .await;
    }
    Published {
        channel,
        seq: Seq(published.seq),
        duplicate: published.duplicate,
    }
}

#[Object]
impl Mutation {
    /// Publishes one message; costs what an HTTP publish of it costs (a
    /// duplicate of `key`, the base price).
    async fn publish(
        &self,
        ctx: &Context<'_>,
        channel: String,
        data: Json,
        key: Option<String>,
    ) -> Result<Published> {
        let t = ticket(ctx);
        let who = hooked::who(t, Event::Publish, &channel);
        let text = checked(t, &channel, &data, key.as_deref(), &who)?;
        let passed = rules(t, &channel, text.len()).await?;
        let keyed = keyed(t, key.as_deref());
        let text = match hooked::publish(t, &who, &channel, text, keyed).await {
            Ok(text) => text,
            Err(e) => {
                t.node.ledger().give_back_rules(passed);
                return Err(e);
            }
        };
        drop(passed);
        Ok(publish_one(t, channel, &text, key.as_deref()).await)
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
        let at = |i: usize| {
            move |mut e: async_graphql::Error| {
                e.message = format!("messages[{i}]: {}", e.message);
                e
            }
        };
        let whos: Vec<ChannelHook> = messages
            .iter()
            .map(|m| hooked::who(t, Event::Publish, &m.channel))
            .collect();
        let texts = messages
            .iter()
            .zip(&whos)
            .enumerate()
            .map(|(i, (m, who))| {
                checked(t, &m.channel, &m.data, m.key.as_deref(), who).map_err(at(i))
            })
            .collect::<Result<Vec<_>>>()?;
        // Every rule and every hook answers before any message is sent: a
        // refusal refuses the whole batch (the rules' tokens go back).
        let mut passed = Vec::with_capacity(texts.len());
        let mut decided = Vec::with_capacity(texts.len());
        for (i, ((m, who), text)) in messages.iter().zip(&whos).zip(texts).enumerate() {
            let keyed = keyed(t, m.key.as_deref());
            let allowed = match rules(t, &m.channel, text.len()).await {
                Ok(p) => hooked::publish(t, who, &m.channel, text, keyed)
                    .await
                    .map(|text| (p, text)),
                Err(e) => Err(e),
            };
            match allowed {
                Ok((p, text)) => {
                    passed.push(p);
                    decided.push(text);
                }
                Err(e) => {
                    for p in passed {
                        t.node.ledger().give_back_rules(p);
                    }
                    return Err(at(i)(e));
                }
            }
        }
        let texts = decided;
        let mut out = Vec::with_capacity(messages.len());
        for (m, text) in messages.into_iter().zip(texts) {
            out.push(publish_one(t, m.channel, &text, m.key.as_deref()).await);
        }
        Ok(out)
    }
}
