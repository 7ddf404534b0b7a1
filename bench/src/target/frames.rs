//! Tidegate's `/v1/ws` frames reduced to what scenarios count.

use super::Event;
use crate::ws::{self, OP_CLOSE, OP_TEXT};

/// The publisher's payload inside a Tidegate `message` frame.
pub(super) fn tidegate_data(frame: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = br#","data":"#;
    // The data is the last field; its key follows the seq near the start.
    let at = crate::finder!(KEY).find(frame)? + KEY.len();
    frame.get(at..frame.len().checked_sub(1)?)
}

fn tidegate_error(frame: &[u8]) -> Event<'static> {
    let v: serde_json::Value = serde_json::from_slice(frame).unwrap_or_default();
    Event::Error {
        code: v["code"].as_str().unwrap_or("?").to_string(),
        dropped: v["dropped"].as_u64().unwrap_or(0),
    }
}

pub(super) fn classify_tidegate(op: u8, p: &[u8]) -> Event<'_> {
    match op {
        OP_TEXT if p.starts_with(br#"{"type":"message""#) => match tidegate_data(p) {
            Some(data) => Event::Message { data },
            None => Event::Other,
        },
        OP_TEXT if p.starts_with(br#"{"type":"ack""#) => Event::Ack,
        OP_TEXT if p.starts_with(br#"{"type":"error""#) => tidegate_error(p),
        OP_CLOSE => Event::Closed {
            code: ws::close_code(p),
        },
        _ => Event::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_data_in_a_tidegate_message() {
        let f = br#"{"type":"message","channel":"doc:a","seq":17,"data":"abc"}"#;
        assert_eq!(tidegate_data(f), Some(&br#""abc""#[..]));
    }
}
