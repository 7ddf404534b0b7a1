//! The subscription cap (§0's `maxSubscriptions`, the plan's
//! `max_subscriptions`): the one decision of whether a connection may
//! hold one more subscription, and of what dry run means for it, on
//! every front that subscribes (`/v1/ws`, SSE, gRPC `Subscribe`,
//! graphql-ws, Pusher). Issue 42: each front made it in its own shape,
//! and gRPC refused in dry run what the others let through.
//!
//! Over the cap with `subscriptions` in the plan's `dry_run`, the
//! subscription is let through and counted as a dry-run
//! `too_many_subscriptions` ([`Cap::Shadowed`]); otherwise it is refused
//! with `too_many_subscriptions`, which costs what
//! [`super::refusal_units`] says. The front counts the event under its
//! own layer and words the refusal.

use crate::config::{LimitName, Limits};

/// What the cap says of a connection that would hold `held`
/// subscriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    Within,
    /// Over, and the limit is in dry run: let through, counted as a
    /// dry-run refusal.
    Shadowed,
    /// Over: refused `too_many_subscriptions`.
    Refused {
        max: usize,
    },
}

impl Cap {
    /// Over the cap, in dry run or not: the event to count.
    pub fn is_over(self) -> bool {
        self != Cap::Within
    }

    /// Whether the event counts as a dry-run refusal.
    pub fn is_dry_run(self) -> bool {
        self == Cap::Shadowed
    }
}

/// The cap's decision for a connection that would hold `held`
/// subscriptions with the one (or the ones) it asks for.
pub fn subscription_cap(limits: &Limits, held: usize) -> Cap {
    let max = limits.max_subscriptions as usize;
    if held <= max {
        Cap::Within
    } else if limits.is_dry_run(LimitName::Subscriptions) {
        Cap::Shadowed
    } else {
        Cap::Refused { max }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_itself_is_held_one_more_is_refused_or_shadowed() {
        let mut limits = Limits {
            max_subscriptions: 2,
            ..Limits::default()
        };
        assert_eq!(subscription_cap(&limits, 2), Cap::Within);
        assert_eq!(subscription_cap(&limits, 3), Cap::Refused { max: 2 });
        limits.dry_run = vec![LimitName::Subscriptions];
        assert_eq!(subscription_cap(&limits, 3), Cap::Shadowed);
        assert!(Cap::Shadowed.is_over() && Cap::Shadowed.is_dry_run());
        assert!(!Cap::Within.is_over());
    }
}
