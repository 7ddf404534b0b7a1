//! Per-shard outage on Redis Cluster: which hash slots this node currently
//! treats as unreachable.
//!
//! A command that fails marks its key's slot down (and keeps the key, to
//! probe it later); only channels and accounts whose keys hash to a down
//! slot are served alone (local fan-out, a share of their limits), so the
//! shards that did not fail never stop. Slots are marked lazily, as this
//! node touches them: a slot it never uses is never down. The recovery
//! (`slot_recovery.rs`) brings a slot back once its shard answers again
//! and this node's state there is re-synced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Redis Cluster's slot count.
const SLOTS: u16 = 16384;

/// The hash slot of `key`, as Redis computes it: CRC16 (XMODEM) of the
/// hash tag (the first non-empty `{...}`) or of the whole key, mod 16384.
pub(super) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in data {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slots down, each with a key of this node's that lives there.
#[derive(Debug, Default)]
pub(super) struct DownSlots {
    /// How many slots are down: the hot path reads only this while none is.
    count: AtomicUsize,
    slots: Mutex<HashMap<u16, String>>,
}

impl DownSlots {
    /// Marks `key`'s slot down; true if it was up.
    pub(super) fn mark(&self, key: &str) -> bool {
        let mut slots = self.slots.lock();
        let fresh = slots.insert(slot_of(key), key.to_owned()).is_none();
        self.count.store(slots.len(), Ordering::Release);
        fresh
    }

    /// Brings `slot` back.
    pub(super) fn clear(&self, slot: u16) {
        let mut slots = self.slots.lock();
        slots.remove(&slot);
        self.count.store(slots.len(), Ordering::Release);
    }

    pub(super) fn is_down(&self, key: &str) -> bool {
        self.count.load(Ordering::Acquire) > 0 && self.slots.lock().contains_key(&slot_of(key))
    }

    pub(super) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// The slots down now, each with its probe key.
    pub(super) fn snapshot(&self) -> HashMap<u16, String> {
        self.slots.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` (Redis 7).
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("bar"), 5061);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_ne!(
            slot_of("foo{}{bar}"),
            slot_of("bar"),
            "an empty tag is no tag"
        );
        assert_eq!(slot_of("t:seq:{doc:1}"), slot_of("t:hist:{doc:1}"));
    }

    #[test]
    fn a_marked_slot_is_down_until_cleared() {
        let down = DownSlots::default();
        assert!(!down.any());
        assert!(down.mark("p:seq:{doc:1}"));
        assert!(!down.mark("p:hist:{doc:1}"), "same slot");
        assert!(down.is_down("q:ch:{doc:1}"));
        assert!(!down.is_down("p:seq:{doc:2}") || slot_of("doc:2") == slot_of("doc:1"));
        down.clear(slot_of("doc:1"));
        assert!(!down.any());
    }
}
