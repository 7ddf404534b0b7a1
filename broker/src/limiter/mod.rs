//! Limiter primitives. Everything here is a pure function of the `now` it
//! is given: no clock is read, nothing sleeps, so every rule is unit-tested
//! by moving `now` forward.

pub mod bucket;
pub mod keyed;
pub mod notice;
pub mod sampled;
pub mod sampler;

pub use bucket::TokenBucket;
pub use keyed::KeyedBuckets;
pub use notice::{DropNotice, Due, PendingNotice};
pub use sampled::SampledBucket;
pub use sampler::{Sample, Sampler};

#[cfg(test)]
mod properties;
