//! A message's event, rendered once per publish and shared by the streams
//! of a worker (the SSE counterpart of the shared WebSocket frame).
//!
//! Every stream subscribed to a channel takes the same frame (`Bytes`
//! shared by the outboxes) and writes the same `event: message` and
//! `data:` lines for it; only the `id:` line is the stream's own. So the
//! first stream to write a frame renders those lines here and the others
//! copy them (or, on a connection the stream took, write the same bytes:
//! `feed.rs`). A stream of that channel alone (most streams) has as its
//! whole `id:` the position of that channel at the message's `seq`
//! ([`Position::sole_token`]), so the memo keeps the event with its `id:`
//! line too, and such a stream copies it whole: no position is encoded
//! and nothing compared but the channel (stop 35: about 28 µs less broker
//! CPU per publish at 1,000 streams, `bench/README.md`). A stream of more
//! channels rewrites its channel's field of its own position (eight
//! digits) and writes its `id:`, then the shared lines.
//!
//! The memo is per worker thread (a stream is written on its worker),
//! keyed by the frame's address and length. An entry holds a reference to
//! its frame, so no other frame can be allocated at that address while the
//! entry lives: equal address and length are the same bytes.

use std::cell::RefCell;

use bytes::Bytes;

use crate::protocol::position::Position;

/// Entries, in [`SETS`] sets of [`WAYS`] by frame address: a frame is
/// looked for in its set only, and a miss replaces the set's oldest
/// entry. Direct-mapped (one way) was tried first: two frames in flight
/// at once whose addresses hash alike evicted each other at every stream,
/// so each of the 1,000 streams of a fan-out rendered them again.
/// 256 entries cover more than the frames a worker's streams have in
/// flight at once (a batch is 64 to 256 frames of the same publishes).
const SETS: usize = 32;
const WAYS: usize = 8;
const SLOTS: usize = SETS * WAYS;

/// Larger frames are rendered by each stream and never kept: with
/// [`SLOTS`], what the memo holds per worker is bounded by 256 frames and
/// events of at most about 4 KiB each (about 2 MiB).
pub(super) const MAX_FRAME: usize = 4096;

/// One message frame's shared rendering.
pub(super) struct Message {
    /// The key's frame, kept alive (see the module's doc), never read.
    _frame: Bytes,
    pub(super) channel: Box<str>,
    pub(super) seq: u64,
    /// `event: message` and the `data:` lines, up to the blank line
    /// (shared: streams on a taken connection write it as it is); a
    /// slice of [`Message::whole`].
    pub(super) event: Bytes,
    /// `id: <Position::sole_token>` and then [`Message::event`]: the whole
    /// event of a stream of this channel alone.
    pub(super) whole: Bytes,
}

/// The keys of one worker's entries, scanned without touching the
/// entries themselves: a set's keys are 8 × 16 bytes.
#[derive(Clone, Copy, Default)]
struct Key {
    addr: usize,
    len: u32,
    /// When the entry was made (the worker's count of misses): the
    /// smallest in a set is replaced.
    made: u32,
}

struct Memo {
    keys: [Key; SLOTS],
    entries: Box<[Option<Message>]>,
    misses: u32,
}

thread_local! {
    /// At most [`SLOTS`] entries of frames up to [`MAX_FRAME`] bytes.
    static MEMO: RefCell<Memo> = RefCell::new(Memo {
        keys: [Key::default(); SLOTS],
        entries: (0..SLOTS).map(|_| None).collect(),
        misses: 0,
    });
}

/// The first slot of `frame`'s set.
fn set(frame: &Bytes) -> usize {
    let addr = frame.as_ptr() as usize as u64;
    // Fibonacci hashing: allocations are aligned, so the low bits alone
    // would use few sets.
    let set = (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SETS.trailing_zeros())) as usize;
    set * WAYS
}

/// Calls `write` with `frame`'s rendering, made with `render` when this
/// worker has none for it (`None`: the frame has no event). The frame
/// must be at most [`MAX_FRAME`] bytes.
pub(super) fn with<R>(
    frame: &Bytes,
    render: impl FnOnce() -> Option<(Box<str>, u64, Vec<u8>)>,
    write: impl FnOnce(&Message) -> R,
) -> Option<R> {
    debug_assert!(frame.len() <= MAX_FRAME);
    MEMO.with(|memo| {
        let memo = &mut *memo.borrow_mut();
        let first = set(frame);
        let (addr, len) = (frame.as_ptr() as usize, frame.len() as u32);
        let ways = &memo.keys[first..first + WAYS];
        // A key names its frame only while its entry holds that frame
        // (entries are made with their key and never emptied).
        let at = match ways.iter().position(|k| k.addr == addr && k.len == len) {
            Some(way) => first + way,
            None => {
                let (channel, seq, event) = render()?;
                let mut token = String::new();
                Position::sole_token(&channel, seq, &mut token);
                let mut whole = Vec::with_capacity(token.len() + 5 + event.len());
                whole.extend_from_slice(b"id: ");
                whole.extend_from_slice(token.as_bytes());
                whole.push(b'\n');
                let id_len = whole.len();
                whole.extend_from_slice(&event);
                let whole = Bytes::from(whole);
                let way = (0..WAYS).min_by_key(|w| ways[*w].made).unwrap_or(0);
                memo.misses = memo.misses.wrapping_add(1);
                memo.keys[first + way] = Key {
                    addr,
                    len,
                    made: memo.misses,
                };
                memo.entries[first + way] = Some(Message {
                    _frame: frame.clone(),
                    channel,
                    seq,
                    event: whole.slice(id_len..),
                    whole,
                });
                first + way
            }
        };
        memo.entries[at].as_ref().map(write)
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use bytes::Bytes;

    use super::{WAYS, set, with};

    /// Renders `frame` through the memo, counting renderings in `made`.
    fn write(frame: &Bytes, made: &Cell<usize>) -> u64 {
        let render = || {
            made.set(made.get() + 1);
            Some(("doc:1".into(), frame.len() as u64, b"event".to_vec()))
        };
        with(frame, render, |m| m.seq).unwrap_or(0)
    }

    #[test]
    fn frames_of_one_set_in_flight_together_are_each_rendered_once() {
        // Frames kept alive together, then the ones that share a set: a
        // direct-mapped memo renders such frames again at every stream.
        let frames: Vec<Bytes> = (0..4000)
            .map(|i| Bytes::from(vec![b'x'; 16 + i % 7]))
            .collect();
        let first = set(&frames[0]);
        let same: Vec<&Bytes> = frames
            .iter()
            .filter(|f| set(f) == first)
            .take(WAYS)
            .collect();
        assert_eq!(same.len(), WAYS, "4,000 frames fill every set");
        let made = Cell::new(0);
        for _stream in 0..3 {
            for f in &same {
                assert_eq!(write(f, &made), f.len() as u64);
            }
        }
        assert_eq!(made.get(), WAYS);
    }

    #[test]
    fn the_whole_event_is_the_id_of_the_channel_alone_then_the_event() {
        let frame = Bytes::from(vec![b'z'; 40]);
        let render = || Some(("doc:1".into(), 12, b"event: message\n\n".to_vec()));
        let (whole, event) = with(&frame, render, |m| (m.whole.clone(), m.event.clone())).unwrap();
        let mut alone = crate::protocol::position::Position::new(&["doc:1"]);
        alone.set("doc:1", 12);
        let token = alone.encode();
        assert_eq!(whole, format!("id: {token}\nevent: message\n\n").as_bytes());
        assert_eq!(event, &b"event: message\n\n"[..]);
    }

    #[test]
    fn one_more_frame_than_a_set_holds_replaces_the_oldest() {
        let frames: Vec<Bytes> = (0..4000).map(|_| Bytes::from(vec![b'y'; 24])).collect();
        let first = set(&frames[0]);
        let same: Vec<&Bytes> = frames
            .iter()
            .filter(|f| set(f) == first)
            .take(WAYS + 1)
            .collect();
        assert_eq!(same.len(), WAYS + 1);
        let made = Cell::new(0);
        for f in &same {
            write(f, &made);
        }
        assert_eq!(made.get(), WAYS + 1);
        // The newest WAYS are still there; the first was replaced.
        for f in &same[1..] {
            write(f, &made);
        }
        assert_eq!(made.get(), WAYS + 1);
        write(same[0], &made);
        assert_eq!(made.get(), WAYS + 2);
    }
}
