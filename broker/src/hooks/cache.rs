//! `cache_ms`: `connect` and `subscribe` answers (allowed or refused)
//! reused for that long (§15), so a reconnect storm costs the backend one
//! call per distinct decision. Bounded by the hook's `cache_max_entries`:
//! past it the oldest entry is evicted. Pure: it takes `now`.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::wire::Answer;

#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    max: usize,
    entries: HashMap<String, (Instant, Answer)>,
    /// Insertion order, for eviction: each key once, with the expiry it
    /// was stored with (a stale pair is skipped).
    order: VecDeque<(String, Instant)>,
}

impl Cache {
    pub fn new(ttl: Duration, max: usize) -> Cache {
        Cache {
            ttl,
            max: max.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    pub fn get(&mut self, key: &str, now: Instant) -> Option<Answer> {
        match self.entries.get(key) {
            Some((expires, answer)) if *expires > now => Some(answer.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn put(&mut self, key: String, answer: Answer, now: Instant) {
        if !self.enabled() {
            return;
        }
        let expires = now + self.ttl;
        // Expired entries at the front go first; then the oldest, if full.
        while let Some((k, e)) = self.order.front() {
            let stale = self.entries.get(k).is_none_or(|(cur, _)| cur != e);
            if stale || *e <= now || self.entries.len() >= self.max {
                let (k, e) = self.order.pop_front().expect("front exists");
                if self.entries.get(&k).is_some_and(|(cur, _)| *cur == e) {
                    self.entries.remove(&k);
                }
            } else {
                break;
            }
        }
        self.order.push_back((key.clone(), expires));
        self.entries.insert(key, (expires, answer));
        // A key stored again leaves its old pair behind: compacting past
        // twice the bound keeps the order queue bounded as well.
        if self.order.len() > 2 * self.max {
            let entries = &self.entries;
            self.order
                .retain(|(k, e)| entries.get(k).is_some_and(|(cur, _)| cur == e));
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Answer {
        Answer::Result(Default::default())
    }

    #[test]
    fn answers_live_cache_ms_and_the_count_is_bounded() {
        let t0 = Instant::now();
        let mut c = Cache::new(Duration::from_millis(100), 2);
        c.put("a".into(), ok(), t0);
        assert_eq!(c.get("a", t0 + Duration::from_millis(99)), Some(ok()));
        assert_eq!(c.get("a", t0 + Duration::from_millis(100)), None);
        c.put("a".into(), ok(), t0);
        c.put("b".into(), ok(), t0);
        c.put("c".into(), ok(), t0);
        assert_eq!(c.len(), 2, "the oldest was evicted");
        assert_eq!(c.get("a", t0), None);
        assert!(c.get("c", t0).is_some());
        let mut off = Cache::new(Duration::ZERO, 2);
        off.put("a".into(), ok(), t0);
        assert!(off.is_empty());
    }
}
