//! The HTTP side: publish for backend services, and the operations
//! endpoints. Refusals share one body shape (§1, §5).

pub mod body;
mod client_hook;
pub mod client_publish;
mod keyed;
pub mod ops;
pub mod presence;
pub mod publish;
mod refused;

pub use crate::gate::request_ip;
pub use crate::refusal::{ErrorBody, refusal, refusal_builder, retry_after_ms, retry_after_secs};
