//! The wire contract (`PROTOCOL.md`): client frames in, server frames out,
//! channel names, globs and the code table.

mod acks;
pub mod channel;
pub mod codes;
pub mod frames;
pub mod glob;
mod hook_frames;
pub mod idempotency_key;
pub mod json;
pub mod position;
pub mod presence;
pub mod wire;

pub use codes::{CloseCode, ErrorCode};
pub use frames::{ClientFrame, FrameError, Op};
