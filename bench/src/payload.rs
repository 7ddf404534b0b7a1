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

/// Decimal digits to a number, eight at a time: every subscriber does
/// this for every message, and a digit-by-digit loop (a chain of 30
/// dependent multiplies) took 10–15 % of the load generator's core in
/// fan-out.
fn digits(b: &[u8]) -> Option<u64> {
    let mut chunks = b.chunks_exact(8);
    let mut acc = 0u64;
    for chunk in &mut chunks {
        let eight = eight_digits(chunk.try_into().ok()?)?;
        acc = acc.wrapping_mul(100_000_000).wrapping_add(eight);
    }
    chunks.remainder().iter().try_fold(acc, |acc, &c| {
        c.is_ascii_digit()
            .then(|| acc.wrapping_mul(10) + u64::from(c - b'0'))
    })
}

/// Eight ASCII digits (the first the most significant) in one word:
/// pairs, then fours, then the eight combined by three multiplies.
fn eight_digits(chunk: [u8; 8]) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let v = u64::from_le_bytes(chunk);
    // Each byte is 0x30..=0x39: high nibble 3, and still 3 after adding 6.
    if v & HIGH != ZEROS || v.wrapping_add(0x0606_0606_0606_0606) & HIGH != ZEROS {
        return None;
    }
    let d = v - ZEROS;
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((d.wrapping_mul(10_000) + (d >> 32)) & 0xFFFF_FFFF)
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

    #[test]
    fn digits_agree_with_the_number_and_refuse_non_digits() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for width in [1, 7, 8, 9, 10, 16, 19, 20] {
            for _ in 0..200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let n = x % 10u64.pow(width.min(19));
                let text = format!("{n:0w$}", w = width as usize);
                assert_eq!(digits(text.as_bytes()), Some(n), "{text}");
                for bad in [b'/', b':', b'a', b' ', 0x80 | b'0'] {
                    let mut t = text.clone().into_bytes();
                    let at = (x as usize) % t.len();
                    t[at] = bad;
                    assert_eq!(digits(&t), None, "{t:?}");
                }
            }
        }
    }
}
