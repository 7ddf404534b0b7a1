//! The bytes a bench publish carries: a JSON string holding the message's
//! index and send time, padded to the payload size under test, so the
//! receiver can count losses and measure latency from the data alone.

/// A publish payload of exactly `size` bytes: a JSON string carrying the
/// message's index and send time, padded.
pub fn payload(size: usize, index: u64, sent_ns: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(format!("\"{index:010}:{sent_ns:020}:").as_bytes());
    let pad = size.saturating_sub(out.len() + 1);
    out.resize(out.len() + pad, b'x');
    out.push(b'"');
}

/// Smallest payload that fits the index and time stamp.
pub const MIN_PAYLOAD: usize = 34;

/// (index, send time) from a payload made by [`payload`].
pub fn parse_payload(data: &[u8]) -> Option<(u64, u64)> {
    let d = data.get(1..32)?;
    let index = digits(&d[..10])?;
    let sent = digits(&d[11..31])?;
    Some((index, sent))
}

fn digits(b: &[u8]) -> Option<u64> {
    b.iter().try_fold(0u64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u64::from(c - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_has_the_size() {
        let mut p = Vec::new();
        payload(64, 42, 123_456_789, &mut p);
        assert_eq!(p.len(), 64);
        assert!(serde_json::from_slice::<String>(&p).is_ok());
        assert_eq!(parse_payload(&p), Some((42, 123_456_789)));
        payload(1024, 7, 1, &mut p);
        assert_eq!(p.len(), 1024);
    }
}
