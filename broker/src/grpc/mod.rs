//! The gRPC API for backend services (PROTOCOL.md §8, `proto/tidegate.proto`):
//! `tidegate.v1.Broker` with `Publish`, `PublishStream` and `Subscribe`, on
//! its own address (`[grpc] listen`) and its own tokio runtime.
//!
//! - `service.rs`: identify (API key), price, consume through
//!   [`crate::charge`] as HTTP publish does: one bucket per key across
//!   both transports.
//! - `publish_stream.rs`: per-message charging, in-order replies, a bounded
//!   reply queue.
//! - `subscribe.rs`: a hub subscriber with the socket's recovery, `seq`
//!   order and slow-consumer bound: one `session::Subscription` per
//!   channel; `stream_sink.rs`: its hub sink and its `Message` rendering.
//! - `operator.rs`: open streams registered with the node, so an
//!   operator's ban or disconnect (§10) ends them.
//! - `status.rs`: codes, trailers, `RetryInfo`; `trailers.rs`: the unary
//!   reply's balance moved into its trailers.
//! - `server.rs`: the runtime thread; `incoming.rs`: the listener's
//!   connection caps and handshake deadline; `drain.rs`: the staggered drain.

mod broker;
mod drain;
mod idle;
mod incoming;
mod operator;
mod presence;
mod publish_stream;
mod server;
mod service;
pub mod status;
mod stream_sink;
mod subscribe;
mod trailers;

pub use server::{GrpcServer, start};
pub use service::BrokerService;
/// The checks and price of a `Subscribe` call (for the fuzz targets).
pub(crate) use subscribe::check as check_subscribe;

/// The messages and service of `tidegate.v1`, generated at build time.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("tidegate.v1");
}

#[cfg(test)]
mod tests {
    /// The contract's wire schema (PROTOCOL.md §8), message by message:
    /// every field with its label, type and number. `proto/tidegate.proto`
    /// is the schema of record; a field of the contract renumbered,
    /// retyped or dropped breaks every client built from the contract's
    /// file, so it fails here. The one addition is this project's
    /// amendment, `SubscribeAck.seq` (docs/protocol.md).
    const CONTRACT: &[(&str, &[&str])] = &[
        (
            "PublishRequest",
            &[
                "string channel = 1",
                "string data_json = 2",
                "string id = 3",
                // §17.
                "string idempotency_key = 4",
            ],
        ),
        (
            "PublishReply",
            &[
                "string id = 1",
                "uint64 seq = 2",
                "Refusal error = 3",
                // §17.
                "bool duplicate = 4",
            ],
        ),
        (
            "Refusal",
            &[
                "string code = 1",
                "string message = 2",
                "uint64 retry_after_ms = 3",
            ],
        ),
        ("SubscribeRequest", &["repeated ChannelSince channels = 1"]),
        (
            "ChannelSince",
            &["string channel = 1", "optional uint64 since = 2"],
        ),
        (
            "SubscribeEvent",
            &[
                "SubscribeAck ack = 1",
                "Message message = 2",
                "SlowConsumer slow_consumer = 3",
            ],
        ),
        (
            "SubscribeAck",
            &["string channel = 1", "optional bool recovered = 2"],
        ),
        (
            "Message",
            &[
                "string channel = 1",
                "uint64 seq = 2",
                "string data_json = 3",
            ],
        ),
        ("SlowConsumer", &["uint64 dropped = 1"]),
        // §13.
        (
            "PresenceRequest",
            &["string channel = 1", "uint32 limit = 2"],
        ),
        (
            "PresenceReply",
            &[
                "string channel = 1",
                "repeated Member members = 2",
                "uint32 users = 3",
                "uint32 connections = 4",
                "bool partial = 5",
            ],
        ),
        (
            "Member",
            &[
                "string user = 1",
                "string conn_id = 2",
                "string info_json = 3",
            ],
        ),
    ];
    const AMENDMENTS: &[(&str, &str)] = &[("SubscribeAck", "uint64 seq = 3")];
    const SERVICE: &[&str] = &[
        "rpc Publish(PublishRequest) returns (PublishReply)",
        "rpc PublishStream(stream PublishRequest) returns (stream PublishReply)",
        "rpc Subscribe(SubscribeRequest) returns (stream SubscribeEvent)",
        "rpc Presence(PresenceRequest) returns (PresenceReply)",
    ];

    /// Each message's field lines (comments and `oneof` wrappers left out).
    fn messages(proto: &str) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        let mut current: Option<(String, Vec<String>)> = None;
        for line in proto.lines() {
            let line = line.split("//").next().unwrap_or("").trim();
            if let Some(name) = line.strip_prefix("message ") {
                current = Some((name.trim_end_matches('{').trim().to_owned(), Vec::new()));
            } else if line == "}" {
                if let Some(m) = current.take() {
                    out.push(m);
                }
            } else if let Some((_, fields)) = current.as_mut()
                && line.ends_with(';')
            {
                fields.push(line.trim_end_matches(';').to_owned());
            }
        }
        out
    }

    #[test]
    fn the_proto_is_the_contracts_plus_the_amendment() {
        let proto = include_str!("../../proto/tidegate.proto");
        assert!(proto.contains("package tidegate.v1;"));
        for rpc in SERVICE {
            assert!(proto.contains(&format!("{rpc};")), "{rpc}");
        }
        let expected: Vec<(String, Vec<String>)> = CONTRACT
            .iter()
            .map(|(name, fields)| {
                let mut fields: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
                for (m, added) in AMENDMENTS {
                    if m == name {
                        fields.push((*added).to_owned());
                    }
                }
                ((*name).to_owned(), fields)
            })
            .collect();
        assert_eq!(messages(proto), expected);
    }
}
