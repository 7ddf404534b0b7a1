//! A message's conflation key (§11): the JSON text of the value its
//! namespace's `conflation_key` pointer finds in `data`, computed once per
//! message on the node, not once per subscriber.

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::channel::{Channel, ChannelState};
use super::{Hub, Reserve};
use crate::config::Conflation;
use crate::protocol::wire;

/// The key of one channel-wide slot (no pointer), and of messages whose
/// `data` has nothing at the pointer. No JSON text is empty, so it never
/// equals a found value's key.
const WHOLE: &str = "";

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    data: &'a RawValue,
}

/// The key of the message in `frame` (a complete WebSocket frame as the
/// hub fans it out). `{"user":"ada"}` under `/user` is `"ada"` (with the
/// quotes: `1` and `"1"` are different keys).
pub fn conflation_key(rule: &Conflation, frame: &Bytes) -> Arc<str> {
    let Some(pointer) = rule.pointer.as_deref() else {
        return Arc::from(WHOLE);
    };
    let found = serde_json::from_slice::<Message<'_>>(wire::payload(frame))
        .ok()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m.data.get()).ok())
        .and_then(|data| data.pointer(pointer).map(ToString::to_string));
    Arc::from(found.as_deref().unwrap_or(WHOLE))
}

impl Hub {
    /// Fan-out on a conflating channel: never dropped at the hub for a
    /// socket (it replaces an unsent message with the same key instead), so
    /// every socket gets it counted in its gauge and sent. A gRPC stream
    /// and a [`RenderSink`](super::RenderSink) (a Pusher subscription) do
    /// not conflate and are bounded like a queueing subscriber.
    pub(super) fn conflating_fan_out(
        &self,
        ch: &Channel,
        st: &ChannelState,
        seq: u64,
        frame: &Bytes,
        key: &Arc<str>,
    ) {
        let len = frame.len();
        let mut delivered = 0u64;
        let mut dropped = 0u64;
        let mut renders = super::Renders::default();
        for sub in st.subscribers.iter() {
            if sub.sink.conflates() {
                sub.gauge.add(len);
                delivered += 1;
                sub.sink
                    .message(&ch.name, seq, frame, Some(key), &mut renders);
                continue;
            }
            let reserved =
                sub.sink
                    .deliver(&sub.gauge, &ch.name, seq, frame, Some(key), &mut renders);
            match reserved {
                None => {}
                Some(Reserve::Queued) => delivered += 1,
                Some(Reserve::FirstDrop | Reserve::Dropped) => dropped += 1,
            }
        }
        self.metrics.messages_out.inc_by(delivered);
        if dropped > 0 {
            self.metrics
                .reject_n(crate::metrics::Layer::Outbound, "slow_consumer", dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pointer: Option<&str>, data: &str) -> String {
        let rule = Conflation {
            pointer: pointer.map(Into::into),
        };
        conflation_key(&rule, &wire::message("cur:1", 7, data)).to_string()
    }

    #[test]
    fn the_pointer_picks_the_key_and_its_absence_means_one_slot() {
        assert_eq!(key(Some("/user"), r#"{"user":"ada","x":1}"#), r#""ada""#);
        assert_eq!(key(Some("/user"), r#"{"user":1}"#), "1");
        assert_eq!(key(Some("/a/0"), r#"{"a":[{"b":2}]}"#), r#"{"b":2}"#);
        assert_eq!(key(Some("/user"), r#"{"x":1}"#), "");
        assert_eq!(key(Some("/user"), r#""just text""#), "");
        assert_eq!(key(None, r#"{"user":"ada"}"#), "");
    }
}
