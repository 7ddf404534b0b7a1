//! A message's event, rendered once per publish and shared by the streams
//! of a worker (the SSE counterpart of the shared WebSocket frame).
//!
//! Every stream subscribed to a channel takes the same frame (`Bytes`
//! shared by the outboxes) and writes the same `event: message` and
//! `data:` lines for it; only the `id:` line is the stream's own. So the
//! first stream to write a frame renders those lines here and the others
//! copy them (or, on a connection the stream took, write the same bytes:
//! `feed.rs`), with the encoded pair of the message's channel (a stream
//! whose position names only that channel copies its whole `id:` too).
//!
//! The memo is per worker thread (a stream is written on its worker),
//! keyed by the frame's address and length. An entry holds a reference to
//! its frame, so no other frame can be allocated at that address while the
//! entry lives: equal address and length are the same bytes.

use std::cell::RefCell;

use bytes::Bytes;

use crate::protocol::position::pair_token;

/// Entries, by frame address (direct-mapped: a collision replaces the
/// older entry). More than one batch of frames (`body.rs`, 64), so the
/// streams that take the same batch one after the other all find it.
const SLOTS: usize = 256;

/// Larger frames are rendered by each stream and never kept: with
/// [`SLOTS`], what the memo holds per worker is bounded by 256 frames and
/// events of at most about 4 KiB each (about 2 MiB).
pub(super) const MAX_FRAME: usize = 4096;

/// One message frame's shared rendering.
pub(super) struct Message {
    /// The key (kept alive: see the module's doc).
    frame: Bytes,
    pub(super) channel: Box<str>,
    pub(super) seq: u64,
    /// The position's part for this channel at `seq` as a first pair
    /// (`Position::set_encoded`).
    pub(super) first_token: String,
    /// `event: message` and the `data:` lines, up to the blank line
    /// (shared: streams on a taken connection write it as it is).
    pub(super) event: Bytes,
}

thread_local! {
    /// At most [`SLOTS`] entries of frames up to [`MAX_FRAME`] bytes.
    static MEMO: RefCell<Box<[Option<Message>]>> =
        RefCell::new((0..SLOTS).map(|_| None).collect());
}

fn slot(frame: &Bytes) -> usize {
    let addr = frame.as_ptr() as usize as u64;
    // Fibonacci hashing: allocations are aligned, so the low bits alone
    // would use few slots.
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

/// Calls `write` with `frame`'s rendering, made with `render` when this
/// worker has none for it (`None`: the frame has no event). The frame
/// must be at most [`MAX_FRAME`] bytes.
pub(super) fn with<R>(
    frame: &Bytes,
    render: impl FnOnce() -> Option<(Box<str>, u64, Bytes)>,
    write: impl FnOnce(&Message) -> R,
) -> Option<R> {
    debug_assert!(frame.len() <= MAX_FRAME);
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        let entry = &mut memo[slot(frame)];
        let hit = entry
            .as_ref()
            .is_some_and(|m| m.frame.as_ptr() == frame.as_ptr() && m.frame.len() == frame.len());
        if !hit {
            let (channel, seq, event) = render()?;
            let mut first_token = String::new();
            pair_token(true, &channel, seq, &mut first_token);
            *entry = Some(Message {
                frame: frame.clone(),
                channel,
                seq,
                first_token,
                event,
            });
        }
        entry.as_ref().map(write)
    })
}
