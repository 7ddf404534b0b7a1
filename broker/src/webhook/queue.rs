//! An endpoint's pending events on a single node: bounded, and when full
//! the oldest event is dropped (and counted) to make room, so a dead
//! receiver costs at most `queue_max` events of memory.

use std::collections::VecDeque;

use super::event::Event;

#[derive(Debug, Default)]
pub struct Queue {
    items: VecDeque<Event>,
}

impl Queue {
    /// Appends `event`; returns the events dropped to stay within `max`.
    pub fn push(&mut self, event: Event, max: usize) -> Vec<Event> {
        self.items.push_back(event);
        self.shrink_to(max)
    }

    /// Puts an event whose attempt failed back at the head, so it is the
    /// next one tried (it is also the oldest, so the first to go if full).
    pub fn push_front(&mut self, event: Event, max: usize) -> Vec<Event> {
        self.items.push_front(event);
        self.shrink_to(max)
    }

    /// Drops the oldest events beyond `max` (a reload lowered it).
    pub fn shrink_to(&mut self, max: usize) -> Vec<Event> {
        let mut dropped = Vec::new();
        while self.items.len() > max.max(1) {
            if let Some(e) = self.items.pop_front() {
                dropped.push(e);
            }
        }
        dropped
    }

    pub fn pop(&mut self) -> Option<Event> {
        self.items.pop_front()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Everything pending (an endpoint removed or re-targeted).
    pub fn take_all(&mut self) -> Vec<Event> {
        self.items.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_drops_its_oldest() {
        let mut q = Queue::default();
        let events: Vec<Event> = (0..4)
            .map(|_| Event::channel("channel.occupied", "c"))
            .collect();
        for e in &events[..3] {
            assert!(q.push(e.clone(), 3).is_empty());
        }
        let dropped = q.push(events[3].clone(), 3);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].id, events[0].id);
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop().unwrap().id, events[1].id);
    }
}
