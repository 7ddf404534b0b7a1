//! What paging recovered history did: the Recovering state's one report
//! to a front's slow-consumer grace, whoever pumps (the socket's own
//! subscriptions in its outbox, a dialect's backlog under its own lock).

#[cfg(doc)]
use super::{Next, Subscription};

/// What one pump of recovering subscriptions did ([`Subscription::pump`]
/// until [`Next::Stalled`], [`Next::Page`] or [`Next::Done`]), for one
/// subscription or, with [`Pumped::and`], several. A backlog that cannot
/// move starts the front's grace (then its slow-consumer close), one that
/// moves again ends it: the same rule on the socket's own subscriptions
/// and on a dialect's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pumped {
    /// Some backlog was queued.
    pub moved: bool,
    /// Some backlog is still waiting for room.
    pub stalled: bool,
    /// A held live message started a drop episode (a conflating key
    /// refused at the mark) while its subscription went live, and the
    /// pump's caller is to say so (a front whose queue says so itself, as
    /// a dialect's outlet does, leaves it `false`).
    pub congested: bool,
    /// Nothing is left to pump (all queued, or the subscription ended):
    /// the front stops pumping it.
    pub done: bool,
}

impl Pumped {
    /// What two pumps did together: moved, stalled or congested if either
    /// did; done if both are.
    pub fn and(self, other: Pumped) -> Pumped {
        Pumped {
            moved: self.moved || other.moved,
            stalled: self.stalled || other.stalled,
            congested: self.congested || other.congested,
            done: self.done && other.done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pumped;

    #[test]
    fn pumps_together_report_what_either_did() {
        let moved = Pumped {
            moved: true,
            done: true,
            ..Pumped::default()
        };
        let stalled = Pumped {
            stalled: true,
            ..Pumped::default()
        };
        let both = moved.and(stalled);
        assert!(both.moved && both.stalled && !both.congested);
        assert!(!both.done, "one still has backlog to pump");
        assert!(moved.and(moved).done);
        assert_eq!(Pumped::default().and(Pumped::default()), Pumped::default());
    }
}
