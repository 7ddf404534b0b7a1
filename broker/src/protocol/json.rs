//! A nesting-depth check that runs before the JSON parser, so a frame like
//! `[[[[…]]]]` is refused with `bad_request` instead of exhausting the
//! parser's recursion budget.

/// Deepest `[`/`{` nesting in `text`, stopping early once past `limit`.
/// Brackets inside strings do not count. Not a validator: malformed input
/// is left for the parser to report.
pub fn depth_exceeds(text: &[u8], limit: u32) -> bool {
    let mut depth: u32 = 0;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_nesting_outside_strings() {
        assert!(!depth_exceeds(br#"{"a":[1,{"b":2}]}"#, 3));
        assert!(depth_exceeds(br#"{"a":[1,{"b":[2]}]}"#, 3));
        assert!(!depth_exceeds(br#"{"a":"[[[[[[[[[[[["}"#, 1));
        assert!(!depth_exceeds(br#"{"a":"\"[[[["}"#, 1));
        let deep = "[".repeat(33) + &"]".repeat(33);
        assert!(depth_exceeds(deep.as_bytes(), 32));
        assert!(!depth_exceeds(&deep.as_bytes()[1..deep.len() - 1], 32));
    }
}
