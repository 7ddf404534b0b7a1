//! The frame layer of the bench client: heads of server frames parsed in
//! place, client frames masked on the way out.

use std::io;

/// One complete frame in the read buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Head {
    pub(super) opcode: u8,
    pub(super) header: usize,
    pub(super) len: usize,
}

pub(super) fn parse_head(b: &[u8]) -> io::Result<Option<Head>> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[1] & 0x80 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "server frame is masked",
        ));
    }
    let (header, len) = match b[1] & 0x7f {
        126 => {
            if b.len() < 4 {
                return Ok(None);
            }
            (4, usize::from(u16::from_be_bytes([b[2], b[3]])))
        }
        127 => {
            if b.len() < 10 {
                return Ok(None);
            }
            let mut n = [0u8; 8];
            n.copy_from_slice(&b[2..10]);
            (10, u64::from_be_bytes(n) as usize)
        }
        n => (2, usize::from(n)),
    };
    Ok(Some(Head {
        opcode: b[0] & 0x0f,
        header,
        len,
    }))
}

/// Appends a masked client frame to `out`.
pub fn encode_frame(opcode: u8, payload: &[u8], mask: u32, out: &mut Vec<u8>) {
    out.push(0x80 | opcode);
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len <= usize::from(u16::MAX) {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let key = mask.to_be_bytes();
    out.extend_from_slice(&key);
    let start = out.len();
    out.extend_from_slice(payload);
    let body = &mut out[start..];
    let word = u32::from_ne_bytes(key);
    let mut chunks = body.chunks_exact_mut(4);
    for c in &mut chunks {
        let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i];
    }
}

/// The close code of a close frame's payload.
pub fn close_code(payload: &[u8]) -> Option<u16> {
    (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::OP_TEXT;

    #[test]
    fn masked_frame_round_trips() {
        let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        encode_frame(OP_TEXT, &payload, 0x1234_5678, &mut out);
        assert_eq!(out[0], 0x81);
        assert_eq!(out[1], 0x80 | 126);
        let key = [0x12, 0x34, 0x56, 0x78];
        let body: Vec<u8> = out[8..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect();
        assert_eq!(body, payload);
    }

    #[test]
    fn parses_unmasked_heads() {
        let h = parse_head(&[0x81, 5]).unwrap().unwrap();
        assert_eq!((h.opcode, h.header, h.len), (OP_TEXT, 2, 5));
        let h = parse_head(&[0x82, 126, 1, 0]).unwrap().unwrap();
        assert_eq!((h.header, h.len), (4, 256));
        assert!(parse_head(&[0x82, 127, 0]).unwrap().is_none());
        assert!(parse_head(&[0x81, 0x85]).is_err());
    }
}
