//! Reading the scripts' answers: a flat array of numbers, then a counted
//! list of members that left (`gone`), then what the script lists.

use redis::Value;

use super::wire::Wire;
use crate::protocol::presence::Member;

/// A script's answer, read front to back. Bounded by the answer itself.
pub(super) struct Reply {
    items: std::vec::IntoIter<Value>,
}

impl Reply {
    pub fn new(value: Value) -> Reply {
        let items = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        Reply {
            items: items.into_iter(),
        }
    }

    /// The next number (0 when absent or not a number).
    pub fn int(&mut self) -> i64 {
        match self.items.next() {
            Some(Value::Int(n)) => n,
            Some(Value::BulkString(b)) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// The next text (`None` for a nil or a number).
    pub fn text(&mut self) -> Option<String> {
        match self.items.next() {
            Some(Value::BulkString(b)) => String::from_utf8(b).ok(),
            Some(Value::SimpleString(s)) => Some(s),
            _ => None,
        }
    }

    /// A counted list of stored members (the `gone` part).
    pub fn members(&mut self) -> Vec<Member> {
        let n = usize::try_from(self.int()).unwrap_or(0);
        (0..n).filter_map(|_| parse(self.text())).collect()
    }

    /// Every stored member left in the answer (a read's list, in order;
    /// a member that left between the list and its info is skipped).
    pub fn rest_members(&mut self) -> Vec<Member> {
        let mut out = Vec::with_capacity(self.items.len());
        while self.items.len() > 0 {
            if let Some(m) = parse(self.text()) {
                out.push(m);
            }
        }
        out
    }

    /// Every text left in the answer.
    pub fn rest_texts(&mut self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.items.len());
        while self.items.len() > 0 {
            if let Some(t) = self.text() {
                out.push(t);
            }
        }
        out
    }
}

fn parse(stored: Option<String>) -> Option<Member> {
    serde_json::from_str::<Wire>(&stored?)
        .ok()
        .map(Member::from)
}
