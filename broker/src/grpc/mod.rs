//! The gRPC API for backend services (PROTOCOL.md §8, `proto/tidegate.proto`):
//! `tidegate.v1.Broker` with `Publish`, `PublishStream` and `Subscribe`, on
//! its own address (`[grpc] listen`) and its own tokio runtime.
//!
//! - `service.rs`: identify (API key), price, consume, delegate to
//!   [`crate::backend`], the code HTTP publish uses: one bucket per key
//!   across both transports.
//! - `publish_stream.rs`: per-message charging, in-order replies, a bounded
//!   reply queue.
//! - `subscribe.rs`: a hub subscriber with the socket's recovery, `seq`
//!   order and slow-consumer bound.
//! - `operator.rs`: open streams registered with the node, so an
//!   operator's ban or disconnect (§10) ends them.
//! - `status.rs`: codes, trailers, `RetryInfo`; `trailers.rs`: the unary
//!   reply's balance moved into its trailers.
//! - `server.rs`: the runtime thread; `drain.rs`: the staggered drain.

mod drain;
mod operator;
mod publish_stream;
mod server;
mod service;
pub mod status;
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
    /// The compiled proto is the contract's, `shared/spec/tidegate.proto`
    /// (found in the nearest ancestor that has it: the product folder sits
    /// beside the repository), plus only this project's amendment: the
    /// `SubscribeAck.seq` field (docs/protocol.md).
    #[test]
    fn the_proto_is_the_contracts() {
        const AMENDMENT: &str = "  // Tidegate amendment";
        const ADDED: &str = "  uint64 seq = 3;\n";
        let compiled = include_str!("../../proto/tidegate.proto");
        let start = compiled.find(AMENDMENT).expect("the amendment is marked");
        let end = compiled[start..].find(ADDED).expect("the added field") + start + ADDED.len();
        let ours = format!("{}{}", &compiled[..start], &compiled[end..]);
        let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|d| d.join("shared/spec/tidegate.proto"))
            .find(|p| p.exists())
            .expect("shared/spec/tidegate.proto beside the repository");
        assert_eq!(ours, std::fs::read_to_string(spec).unwrap());
    }
}
