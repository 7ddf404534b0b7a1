//! The outbox's queue of encoded frames, with conflation (§11): a message
//! of a conflating channel replaces the unsent one with the same key.
//!
//! Replacing must keep the socket's frames in `seq` order, so the newer
//! message goes to the back and the older one's place becomes a tombstone
//! (an empty frame, skipped when popped) instead of being removed from the
//! middle of the deque. Tombstones are compacted away once they outnumber
//! live frames, so a paused reader's queue holds at most about twice its
//! live frames: the number of distinct keys, not the number of messages.
//! The `"queue"` fast path is a push and a pop, as before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::wire;

/// One conflation slot: a channel and a key in it.
type Slot = Arc<(Arc<str>, Arc<str>)>;

/// Compaction waits for at least this many tombstones.
const COMPACT_MIN: usize = 64;

#[derive(Debug)]
struct Entry {
    /// Empty: a tombstone.
    frame: Bytes,
    tag: Tag,
}

/// What else an [`Entry`] is. One field, not one per kind, so an entry
/// stays 48 bytes (a `/v1/ws` delivery stores one into a cold ring slot
/// per socket: a larger entry costs every delivery).
#[derive(Debug)]
enum Tag {
    /// A frame of its own.
    Whole,
    /// A later part of the frame the entry before began (a message sent in
    /// parts, [`OutQueue::push_parts`]): never separated from it.
    Cont,
    /// A conflating channel's frame and its slot.
    Keyed(Slot),
    /// `frame` is the head of a frame whose rest, shared with other
    /// sockets, follows ([`OutQueue::push_pair`]): one entry, not two.
    Pair(Arc<Bytes>),
}

const _: () = assert!(std::mem::size_of::<Entry>() == 48);

/// What pushing a keyed frame did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyed {
    /// No unsent frame had that key: queued at the back (its length).
    Queued(usize),
    /// Replaced the unsent frame of that key (its length), queued as a
    /// `"conflated":true` frame (the new length).
    Replaced { old: usize, new: usize },
    /// A new key while the unsent keyed bytes are at or over `room`: not
    /// queued (so memory stays bounded even when keys are not).
    Refused,
}

#[derive(Debug, Default)]
pub struct OutQueue {
    entries: VecDeque<Entry>,
    /// Absolute position (pops + index) of each slot's unsent frame.
    slots: HashMap<Slot, u64, foldhash::fast::RandomState>,
    popped: u64,
    tombstones: usize,
    /// Bytes of unsent keyed frames.
    keyed_bytes: usize,
}

impl OutQueue {
    /// Queues a frame of a queueing channel (or one the socket made).
    #[inline]
    pub fn push(&mut self, frame: Bytes) {
        self.push_entry(Entry {
            frame,
            tag: Tag::Whole,
        });
    }

    /// Queues one frame as `head` (its header and what is the socket's
    /// own) followed by `rest` (bytes shared with other sockets, not
    /// copied): one entry, which the transport writes as two slices.
    #[inline]
    pub fn push_pair(&mut self, head: Bytes, rest: Arc<Bytes>) {
        debug_assert!(!head.is_empty(), "an empty head is a tombstone");
        self.push_entry(Entry {
            frame: head,
            tag: Tag::Pair(rest),
        });
    }

    /// Queues one frame sent in `parts` (its header in the first), so a
    /// message's shared bytes need not be copied into each socket's frame.
    /// [`OutQueue::clear`] never cuts such a frame once its first part has
    /// been taken. The parts are moved out of `parts` (left empty).
    pub fn push_parts(&mut self, parts: &mut [Bytes]) {
        for (i, part) in parts.iter_mut().enumerate() {
            self.push_entry(Entry {
                frame: std::mem::take(part),
                tag: if i > 0 { Tag::Cont } else { Tag::Whole },
            });
        }
    }

    /// Queues a frame of a conflating channel, replacing the unsent one
    /// with the same `channel` and `key`; a new key is refused when the
    /// unsent keyed frames already take `room` bytes or more.
    pub fn push_keyed(
        &mut self,
        channel: &Arc<str>,
        key: Arc<str>,
        frame: Bytes,
        room: usize,
    ) -> Keyed {
        let slot: Slot = Arc::new((channel.clone(), key));
        let at = self
            .slots
            .get(&slot)
            .map(|abs| (abs - self.popped) as usize);
        let Some(i) = at else {
            let len = frame.len();
            // As the hub's own check: at or over the room before this one
            // (so at least one frame is always queued, and a refusal always
            // leaves frames whose sending ends the drop episode).
            if self.keyed_bytes >= room {
                return Keyed::Refused;
            }
            self.keyed_bytes += len;
            self.slots.insert(slot.clone(), self.abs_back());
            self.push_entry(Entry {
                frame,
                tag: Tag::Keyed(slot),
            });
            return Keyed::Queued(len);
        };
        let old = std::mem::take(&mut self.entries[i].frame).len();
        self.entries[i].tag = Tag::Whole;
        self.tombstones += 1;
        let frame = wire::conflated(&frame);
        let new = frame.len();
        self.keyed_bytes = self.keyed_bytes - old + new;
        self.slots.insert(slot.clone(), self.abs_back());
        self.push_entry(Entry {
            frame,
            tag: Tag::Keyed(slot),
        });
        self.maybe_compact();
        Keyed::Replaced { old, new }
    }

    /// Whether `channel` has an unsent frame with `key`.
    #[cfg(test)]
    fn has_key(&self, channel: &Arc<str>, key: &Arc<str>) -> bool {
        self.slots
            .contains_key(&Arc::new((channel.clone(), key.clone())))
    }

    /// The next frame to send, skipping tombstones: its bytes, then the
    /// shared rest of a pair ([`OutQueue::push_pair`]; empty otherwise).
    #[inline]
    pub fn pop(&mut self) -> Option<(Bytes, Bytes)> {
        loop {
            let e = self.entries.pop_front()?;
            let abs = self.popped;
            self.popped += 1;
            match e.tag {
                Tag::Keyed(slot) if self.slots.get(&slot) == Some(&abs) => {
                    self.slots.remove(&slot);
                    self.keyed_bytes -= e.frame.len();
                }
                Tag::Pair(rest) => return Some((e.frame, Bytes::clone(&rest))),
                _ => {}
            }
            if !e.frame.is_empty() {
                return Some((e.frame, Bytes::new()));
            }
            self.tombstones -= 1;
        }
    }

    /// Empties the queue but for the rest of a frame whose first part was
    /// taken already (so the connection stays a valid WebSocket stream);
    /// returns the bytes thrown away.
    pub fn clear(&mut self) -> usize {
        let kept = self
            .entries
            .iter()
            .take_while(|e| matches!(e.tag, Tag::Cont))
            .count();
        let gone = self.entries.len() - kept;
        self.popped += gone as u64;
        self.slots.clear();
        self.tombstones = 0;
        self.keyed_bytes = 0;
        self.entries
            .drain(kept..)
            .map(|e| match &e.tag {
                Tag::Pair(rest) => e.frame.len() + rest.len(),
                _ => e.frame.len(),
            })
            .sum()
    }

    /// Live frames plus tombstones: what the queue holds in memory.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Appends `e`. The first entry allocates room for one, not the four
    /// `VecDeque` starts with: most sockets are idle, and an idle socket's
    /// queue only ever held its welcome and an ack, one at a time, yet kept
    /// 192 bytes for them (issue 42). A busier queue grows as usual (to
    /// four at its second entry) and keeps its room.
    #[inline]
    fn push_entry(&mut self, e: Entry) {
        if self.entries.capacity() == 0 {
            self.entries.reserve_exact(1);
        }
        self.entries.push_back(e);
    }

    fn abs_back(&self) -> u64 {
        self.popped + self.entries.len() as u64
    }

    fn maybe_compact(&mut self) {
        if self.tombstones < COMPACT_MIN || self.tombstones * 2 < self.entries.len() {
            return;
        }
        self.entries.retain(|e| !e.frame.is_empty());
        self.tombstones = 0;
        self.slots.clear();
        for (i, e) in self.entries.iter().enumerate() {
            if let Tag::Keyed(slot) = &e.tag {
                self.slots.insert(slot.clone(), self.popped + i as u64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOM: usize = 1 << 20;

    fn msg(seq: u64, data: &str) -> Bytes {
        wire::message("cur:1", seq, data)
    }

    /// The next frame popped, a pair's two slices joined as the wire
    /// carries them.
    fn whole(q: &mut OutQueue) -> Option<Bytes> {
        let (frame, rest) = q.pop()?;
        if rest.is_empty() {
            return Some(frame);
        }
        Some([frame, rest].concat().into())
    }

    fn json(frame: &Bytes) -> serde_json::Value {
        serde_json::from_slice(wire::payload(frame)).unwrap()
    }

    #[test]
    fn a_paused_reader_keeps_the_latest_per_key_in_seq_order_in_bounded_memory() {
        let mut q = OutQueue::default();
        let ch: Arc<str> = Arc::from("cur:1");
        q.push(Bytes::from_static(b"\x81\x02hi"));
        let keys: Vec<Arc<str>> = (0..5).map(|k| Arc::from(format!("{k}"))).collect();
        for seq in 1..=10_000u64 {
            let k = (seq % 5) as usize;
            q.push_keyed(
                &ch,
                keys[k].clone(),
                msg(seq, &format!("{{\"k\":{k}}}")),
                ROOM,
            );
            assert!(q.entries() <= 1 + 5 + 2 * COMPACT_MIN, "{}", q.entries());
        }
        assert_eq!(whole(&mut q).unwrap(), Bytes::from_static(b"\x81\x02hi"));
        let mut got = Vec::new();
        while let Some(f) = whole(&mut q) {
            got.push(json(&f));
        }
        let seqs: Vec<u64> = got.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, vec![9996, 9997, 9998, 9999, 10_000]);
        assert!(got.iter().all(|v| v["conflated"] == true));
        assert_eq!(q.entries(), 0);
    }

    #[test]
    fn a_sent_frame_is_not_replaced_and_the_next_one_queues_unflagged() {
        let mut q = OutQueue::default();
        let ch: Arc<str> = Arc::from("cur:1");
        let k: Arc<str> = Arc::from("a");
        assert!(matches!(
            q.push_keyed(&ch, k.clone(), msg(1, "1"), ROOM),
            Keyed::Queued(_)
        ));
        assert!(q.has_key(&ch, &k));
        whole(&mut q).unwrap();
        assert!(!q.has_key(&ch, &k));
        assert!(matches!(
            q.push_keyed(&ch, k.clone(), msg(2, "2"), ROOM),
            Keyed::Queued(_)
        ));
        let other: Arc<str> = Arc::from("cur:2");
        assert!(matches!(
            q.push_keyed(&other, k.clone(), msg(3, "3"), ROOM),
            Keyed::Queued(_)
        ));
        let Keyed::Replaced { old, new } = q.push_keyed(&ch, k.clone(), msg(4, "4"), ROOM) else {
            panic!("the unsent frame of the same channel and key is replaced");
        };
        assert_eq!(new, old + r#""conflated":true,"#.len());
        let order: Vec<u64> = std::iter::from_fn(|| whole(&mut q))
            .map(|f| json(&f)["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(order, vec![3, 4]);
    }

    #[test]
    fn new_keys_past_the_room_are_refused_but_known_keys_still_replace() {
        let mut q = OutQueue::default();
        let ch: Arc<str> = Arc::from("cur:1");
        let one = msg(1, "1").len();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        // One frame always fits, even one larger than the room.
        assert_eq!(
            q.push_keyed(&ch, a.clone(), msg(1, "1"), 1),
            Keyed::Queued(one)
        );
        assert_eq!(q.push_keyed(&ch, b, msg(2, "2"), one), Keyed::Refused);
        assert!(matches!(
            q.push_keyed(&ch, a, msg(3, "3"), one),
            Keyed::Replaced { .. }
        ));
    }

    #[test]
    fn a_frame_in_parts_is_never_cut_by_a_clear() {
        let mut q = OutQueue::default();
        let parts = [
            Bytes::from_static(b"head"),
            Bytes::from_static(b"data"),
            Bytes::from_static(b"tail"),
        ];
        q.push_parts(&mut parts.clone());
        q.push_parts(&mut parts.clone());
        assert_eq!(whole(&mut q).unwrap(), parts[0], "the first frame began");
        assert_eq!(q.clear(), 12, "the second frame is thrown away whole");
        let rest: Vec<Bytes> = std::iter::from_fn(|| whole(&mut q)).collect();
        assert_eq!(rest, vec![parts[1].clone(), parts[2].clone()]);
        assert_eq!(q.clear(), 0);
    }

    #[test]
    fn clear_counts_live_bytes_only() {
        let mut q = OutQueue::default();
        let ch: Arc<str> = Arc::from("cur:1");
        let k: Arc<str> = Arc::from("a");
        q.push_keyed(&ch, k.clone(), msg(1, "1"), ROOM);
        let Keyed::Replaced { new, .. } = q.push_keyed(&ch, k, msg(2, "2"), ROOM) else {
            panic!()
        };
        assert_eq!(q.clear(), new);
        assert!(whole(&mut q).is_none());
    }

    #[test]
    fn a_pair_is_one_entry_whose_shared_rest_is_not_copied() {
        let mut q = OutQueue::default();
        let ch: Arc<str> = Arc::from("cur:1");
        let body = Bytes::from_static(b"\"data\":{}}}");
        let shared = Arc::new(body.clone());
        q.push_pair(Bytes::from_static(b"\x81\x0bhead"), shared.clone());
        q.push_keyed(&ch, Arc::from("a"), msg(1, "1"), ROOM);
        q.push_pair(Bytes::from_static(b"\x81\x0bdaeh"), shared);
        assert_eq!(q.entries(), 3, "one entry per pair");
        let (head, rest) = q.pop().unwrap();
        assert_eq!((&head[..], &rest[..]), (&b"\x81\x0bhead"[..], &body[..]));
        assert_eq!(rest.as_ptr(), body.as_ptr(), "the shared bytes themselves");
        assert_eq!(whole(&mut q).unwrap(), msg(1, "1"));
        let (_, rest) = q.pop().unwrap();
        assert_eq!(rest.as_ptr(), body.as_ptr());
        assert!(q.pop().is_none());
    }

    #[test]
    fn clear_counts_both_slices_of_a_pair() {
        let mut q = OutQueue::default();
        let body = Arc::new(Bytes::from(vec![b'x'; 100]));
        q.push_pair(Bytes::from_static(b"head"), body.clone());
        q.push(Bytes::from_static(b"frame"));
        q.push_pair(Bytes::from_static(b"h"), body);
        assert_eq!(q.clear(), 4 + 100 + 5 + 1 + 100);
        assert!(q.pop().is_none());
    }
}
