//! A subscription's recovered history (`since`), as whoever delivers it
//! takes it: frame by frame, under its own bound.
//!
//! In memory mode the whole backlog is known at the join and its frames
//! are the hub's own history frames (shared, not copied: at most
//! `history.size` of them). From a cluster's history the frames are read
//! in pages ([`Pages`]): the join only learns how many messages and bytes
//! there are, and each page is read when the one before is used up, under
//! a byte budget the subscriber chooses (half its outbound mark), so a
//! subscriber that does not read holds at most one page per recovering
//! subscription, never a copy of the history.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

/// One page of a cluster's history.
#[derive(Debug, Default)]
pub struct Page {
    /// How many messages of the recovery's range the history still held
    /// when the page was read (those in it included): fewer than the
    /// recovery still expects means some were trimmed away meanwhile.
    pub held: u64,
    /// The oldest of them, as message frames, at least one when `held` > 0.
    pub frames: Vec<(u64, Bytes)>,
}

/// A page being read; `None`: the history could not answer.
pub type PageRead = Pin<Box<dyn Future<Output = Option<Page>> + Send>>;

/// Where a paged recovery reads its pages (the Redis bridge's history).
pub trait Pages: Send + Sync {
    /// The oldest messages with `after` < `seq` <= `until`, stopping before
    /// `budget` bytes are passed (at least one message).
    fn page(&self, after: u64, until: u64, budget: usize) -> PageRead;
}

/// The paged part of a recovery.
struct Paged {
    source: Arc<dyn Pages>,
    /// The last `seq` read (at first `since`): the next page follows it.
    after: u64,
    /// The last `seq` the recovery covers (the history's newest at the
    /// join; newer ones are delivered live).
    until: u64,
    /// Messages not read yet.
    left: u64,
    /// A page is being read (at most one at a time).
    reading: bool,
}

/// A subscription's recovered history still to be delivered.
#[derive(Default)]
pub struct Recovery {
    /// Frames ready to deliver, oldest first: the whole backlog in memory
    /// mode (the hub's history frames), one page of a cluster's history
    /// otherwise (at most the page budget, or one message).
    frames: VecDeque<(u64, Bytes)>,
    paged: Option<Paged>,
    /// The recovery's size at the join, what it is priced by.
    bytes: usize,
    /// The last `seq` it covers (0: none).
    last: u64,
}

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Recovery({} ready, {} bytes, last {})",
            self.frames.len(),
            self.bytes,
            self.last
        )
    }
}

impl From<Vec<(u64, Bytes)>> for Recovery {
    /// A backlog known whole (the hub's own history frames).
    fn from(frames: Vec<(u64, Bytes)>) -> Recovery {
        Recovery {
            bytes: frames.iter().map(|(_, f)| f.len()).sum(),
            last: frames.last().map_or(0, |(seq, _)| *seq),
            frames: frames.into(),
            paged: None,
        }
    }
}

impl Recovery {
    /// `count` messages of `bytes` after `since`, up to `until`, to be read
    /// from `source` in pages.
    pub fn paged(
        source: Arc<dyn Pages>,
        since: u64,
        until: u64,
        count: u64,
        bytes: usize,
    ) -> Recovery {
        if count == 0 {
            return Recovery::default();
        }
        Recovery {
            frames: VecDeque::new(),
            paged: Some(Paged {
                source,
                after: since,
                until,
                left: count,
                reading: false,
            }),
            bytes,
            last: until,
        }
    }

    /// The bytes recovered, as known at the join (what it is priced by).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The last `seq` the recovery covers.
    pub fn last(&self) -> Option<u64> {
        (self.last > 0).then_some(self.last)
    }

    /// Nothing is left to deliver or to read.
    pub fn is_done(&self) -> bool {
        self.frames.is_empty()
            && self
                .paged
                .as_ref()
                .is_none_or(|p| p.left == 0 && !p.reading)
    }

    /// The next frame to deliver, if one is ready.
    pub fn pop(&mut self) -> Option<(u64, Bytes)> {
        self.frames.pop_front()
    }

    /// The frames ready now, and their bytes.
    pub fn ready(&self) -> (usize, usize) {
        let bytes = self.frames.iter().map(|(_, f)| f.len()).sum();
        (self.frames.len(), bytes)
    }

    /// Whether the ready frames are used up, more are to be read, and no
    /// page is being read: [`Recovery::next_page`] would start one.
    pub fn wants_page(&self) -> bool {
        self.frames.is_empty()
            && self
                .paged
                .as_ref()
                .is_some_and(|p| !p.reading && p.left > 0)
    }

    /// The `seq` the subscriber holds everything up to before any of this
    /// is delivered (`since`, or just before the first frame).
    pub fn before_first(&self) -> Option<u64> {
        match (&self.paged, self.frames.front()) {
            (Some(p), _) => Some(p.after),
            (None, Some((seq, _))) => Some(seq.saturating_sub(1)),
            (None, None) => None,
        }
    }

    /// When the ready frames are used up and more are to be read, and no
    /// page is being read: the read of the next page (of at most `budget`
    /// bytes, or one message), to hand to [`Recovery::fill`] once done.
    pub fn next_page(&mut self, budget: usize) -> Option<PageRead> {
        let p = self.paged.as_mut()?;
        if !self.frames.is_empty() || p.reading || p.left == 0 {
            return None;
        }
        p.reading = true;
        Some(p.source.page(p.after, p.until, budget.max(1)))
    }

    /// Whether `source` is this recovery's (a page answers the recovery
    /// that asked for it, not a later one of the same channel).
    pub fn reads_from(&self, source: &Arc<dyn Pages>) -> bool {
        self.paged
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(&p.source, source))
    }

    /// The page the source read: its frames are ready to deliver. Returns
    /// how many messages were lost: trimmed out of the history before
    /// their page was read, or all that were left when the history could
    /// not answer (the recovery then ends; never waits again).
    pub fn fill(&mut self, page: Option<Page>) -> u64 {
        let Some(p) = self.paged.as_mut() else {
            return 0;
        };
        p.reading = false;
        let Some(page) = page else {
            return std::mem::take(&mut p.left);
        };
        let lost = p.left.saturating_sub(page.held);
        let read = page.frames.len() as u64;
        p.left = page.held.min(p.left).saturating_sub(read);
        if let Some((seq, _)) = page.frames.last() {
            p.after = *seq;
        }
        if read == 0 {
            p.left = 0;
        }
        self.frames.extend(page.frames);
        lost
    }

    /// The source of a paged recovery.
    pub fn source(&self) -> Option<Arc<dyn Pages>> {
        self.paged.as_ref().map(|p| p.source.clone())
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;

    /// A history in memory, read as a cluster's would be.
    struct List(Mutex<Vec<(u64, Bytes)>>);

    impl Pages for List {
        fn page(&self, after: u64, until: u64, budget: usize) -> PageRead {
            let held: Vec<(u64, Bytes)> = self
                .0
                .lock()
                .iter()
                .filter(|(seq, _)| *seq > after && *seq <= until)
                .cloned()
                .collect();
            let mut frames = Vec::new();
            let mut bytes = 0;
            for (seq, f) in &held {
                if !frames.is_empty() && bytes + f.len() > budget {
                    break;
                }
                bytes += f.len();
                frames.push((*seq, f.clone()));
            }
            let page = Page {
                held: held.len() as u64,
                frames,
            };
            Box::pin(async move { Some(page) })
        }
    }

    fn read(r: &mut Recovery, budget: usize) -> u64 {
        let mut page = r.next_page(budget).expect("a page to read");
        let cx = &mut std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(page) = page.as_mut().poll(cx) else {
            panic!("the list answers at once");
        };
        r.fill(page)
    }

    fn drain(r: &mut Recovery) -> Vec<u64> {
        std::iter::from_fn(|| r.pop()).map(|(seq, _)| seq).collect()
    }

    #[test]
    fn pages_come_in_order_under_the_budget_and_report_what_was_trimmed() {
        let msg = Bytes::from(vec![b'x'; 100]);
        let list = Arc::new(List(Mutex::new(
            (11..=20).map(|seq| (seq, msg.clone())).collect(),
        )));
        let mut r = Recovery::paged(list.clone(), 10, 20, 10, 1000);
        assert_eq!((r.bytes(), r.last()), (1000, Some(20)));
        assert!(r.wants_page() && !r.is_done());
        assert_eq!(read(&mut r, 250), 0);
        assert!(!r.wants_page(), "one page at a time, read when used up");
        assert_eq!(drain(&mut r), [11, 12]);
        // A budget smaller than a message still reads one.
        assert_eq!(read(&mut r, 1), 0);
        assert_eq!(drain(&mut r), [13]);
        // 14..=16 are trimmed away before their page is read.
        list.0.lock().retain(|(seq, _)| *seq > 16);
        assert_eq!(read(&mut r, 250), 3, "the lost messages are counted");
        assert_eq!(drain(&mut r), [17, 18]);
        assert_eq!(read(&mut r, 1000), 0);
        assert_eq!(drain(&mut r), [19, 20]);
        assert!(r.is_done());
        assert!(r.next_page(1000).is_none());
    }

    #[test]
    fn a_history_that_cannot_answer_ends_the_recovery_with_what_it_lost() {
        let list = Arc::new(List(Mutex::new(Vec::new())));
        let mut r = Recovery::paged(list, 10, 20, 10, 1000);
        let _ = r.next_page(100);
        assert_eq!(r.fill(None), 10);
        assert!(r.is_done());
    }
}
