//! What an operation costs, as [`super::Ledger::charge`] takes it: units,
//! bytes, the single-charge limit it is held to, and whether it may be
//! refused at all ([`Price::owed`]).

use crate::config::Limits;
use crate::protocol::Op;

/// What it costs.
#[derive(Debug, Clone, Copy)]
pub struct Price<'a> {
    /// In message-budget units (seed 004's cost table).
    pub units: u32,
    /// Bytes, for a connection's byte bucket.
    pub bytes: usize,
    /// The largest single charge: a price above it is refused before any
    /// bucket is touched. `None`: checked already (a batch, message by
    /// message), or charged whatever it costs and never an operation to
    /// shadow (a frame that did not parse: garbage is not free).
    pub max_single: Option<u32>,
    /// What it is for, for the event.
    pub channel: Option<&'a str>,
    /// Taken even below zero, never refused by a bucket: what was bought
    /// cannot wait for a refill, so the payer's next operations wait
    /// instead (an SSE stream's opening, which is one request and cannot
    /// resend a frame; a recovery's history, on every front and from
    /// every payer: [`super::recovery`]; [`Price::owed`]).
    pub owed: bool,
    /// The operation the plan's rules know it as, for a payer without
    /// connection buckets (a connection passes its rules with its own
    /// buckets, `Connection::rules`): with [`Price::channel`], the rules
    /// that apply are checked before the payer's bucket.
    pub op: Option<Op>,
}

impl<'c> Price<'c> {
    /// This price as the operation `op` for the plan's rules.
    pub fn rules_as(mut self, op: Op) -> Price<'c> {
        self.op = Some(op);
        self
    }
}

impl Price<'_> {
    /// A frame's price on a connection, with the plan's single-charge limit.
    #[inline]
    pub fn frame<'c>(
        units: u32,
        bytes: usize,
        limits: &Limits,
        channel: Option<&'c str>,
    ) -> Price<'c> {
        Price {
            units,
            bytes,
            max_single: Some(limits.costs.max_single),
            channel,
            owed: false,
            op: None,
        }
    }

    /// A frame that did not parse, or a binary frame.
    pub fn malformed(limits: &Limits) -> Price<'static> {
        Price {
            units: limits.costs.malformed,
            bytes: 0,
            max_single: None,
            channel: None,
            owed: false,
            op: None,
        }
    }

    /// Units already checked against their limits (a backend's publish or
    /// batch, priced by [`super::publish::price`]).
    pub fn units<'c>(units: u32, channel: Option<&'c str>) -> Price<'c> {
        Price {
            units,
            bytes: 0,
            max_single: None,
            channel,
            owed: false,
            op: None,
        }
    }

    /// Units owed for what is held or delivered already, each part checked
    /// against `max_single` by its front ([`super::subscribe::price`]):
    /// taken even below zero, never refused (an SSE stream's channels at
    /// its opening; a recovery's history, [`super::recovery`]).
    pub fn owed(units: u32) -> Price<'static> {
        Price {
            units,
            bytes: 0,
            max_single: None,
            channel: None,
            owed: true,
            op: None,
        }
    }
}
