//! The position's unit tests: layout, residues, the older forms.

use super::*;

/// A clock in µs of late 2026, when seqs are about 1.8 × 10^15.
const NOW: u64 = 1_796_000_000_000_000;

fn header_safe(token: &str) -> bool {
    token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_~.".contains(&b))
}

#[test]
fn round_trips_and_is_header_safe() {
    let list = ["doc:1", "a.b@c=d-e_f", "doc:3"];
    let mut p = Position::new(&list);
    p.set("doc:1", NOW + 1188);
    p.set("a.b@c=d-e_f", NOW - 5);
    p.set("doc:1", NOW + 1189);
    p.set("not:mine", 5);
    let token = p.encode().to_owned();
    assert!(token.starts_with(COMPACT_PREFIX) && header_safe(&token));
    assert_eq!(token.len(), 9 + 8 * list.len());
    let back = Position::resume(&list, &token).unwrap();
    assert_eq!(back, p);
    assert_eq!(back.get("doc:1", NOW), Some(NOW + 1189));
    assert_eq!(back.get("a.b@c=d-e_f", NOW), Some(NOW - 5));
    assert_eq!(back.get("not:mine", NOW), None);
    let seqs: Vec<_> = back.seqs(NOW).collect();
    assert_eq!(
        seqs,
        [
            ("doc:1", Some(NOW + 1189)),
            ("a.b@c=d-e_f", Some(NOW - 5)),
            ("doc:3", None)
        ]
    );
    assert_eq!(Position::resume(&list, "").unwrap(), Position::new(&list));
}

#[test]
fn residues_reconstruct_at_the_windows_edges() {
    let round = |seq: u64, now: u64| reconstruct(residue(Some(seq)), now);
    let top = NOW + SLACK;
    // Just under and at the window's top: a channel 12.7 days ahead.
    for seq in [top, top - 1, NOW, NOW + 1] {
        assert_eq!(round(seq, NOW), Some(seq), "{seq}");
    }
    // Eight years old, and the oldest the window holds (8.9 years).
    let eight_years = 8 * 365 * 86_400 * 1_000_000;
    let bottom = top - MODULUS + 1;
    for seq in [NOW - eight_years, bottom, bottom + 1] {
        assert_eq!(round(seq, NOW), Some(seq), "{seq}");
    }
    const { assert!((MODULUS - SLACK) / (365 * 86_400 * 1_000_000) == 8) };
    // Past either edge, another member of the class.
    assert_eq!(round(top + 1, NOW), Some(top + 1 - MODULUS));
    assert_eq!(round(bottom - 1, NOW), Some(bottom - 1 + MODULUS));
    // The residue's own edges: 0 and M − 1 (fields 1 and M).
    let zero = MODULUS * (NOW / MODULUS);
    assert_eq!(residue(Some(zero)), 1);
    assert_eq!(round(zero, NOW), Some(zero));
    assert_eq!(residue(Some(zero - 1)), MODULUS, "the largest field");
    assert_eq!(round(zero - 1, NOW), Some(zero - 1));
    // Seqs 0 and 1 round trip under a clock whose window holds them
    // (the hub never issues them: its seqs start at the clock floor).
    assert_eq!(round(0, 0), Some(0));
    assert_eq!(round(1, 0), Some(1));
    assert_eq!(round(1, SLACK), Some(1));
    assert_eq!(reconstruct(0, NOW), None, "zero is no seq");
    // Values above 48 bits never come from a field; still no panic.
    assert!(reconstruct(u64::MAX, u64::MAX).is_some());
}

#[test]
fn the_layout_is_the_documented_one() {
    // What the SDK's tests check too (sse-parser.ts): the list's hash
    // and the fields, `(seq mod M) + 1`, all-`A` for no seq.
    assert_eq!(list_hash(&["doc:1", "doc:2"]), 0x921d_6466);
    let mut p = Position::new(&["doc:1", "doc:2"]);
    p.set("doc:1", 42);
    assert_eq!(p.encode(), "~2.CSHWRmAAAAAAArAAAAAAAA");
    p.set("doc:1", MODULUS + 42);
    assert_eq!(p.encode(), "~2.CSHWRmAAAAAAArAAAAAAAA", "mod M");
    let mut sole = String::new();
    Position::sole_token("doc:1", 0, &mut sole);
    assert_eq!(sole, "~2.AomIAqAAAAAAAB");
}

#[test]
fn the_unreleased_first_form_still_resumes() {
    // `~1.`: nine digits of `seq + 1`, rewritten as residues.
    let v1 = "~1.CSHWRmAAAAAAAArAAAAAAAAA";
    let p = Position::resume(&["doc:1", "doc:2"], v1).unwrap();
    assert_eq!(p.encode(), "~2.CSHWRmAAAAAAArAAAAAAAA");
    let whole = format!("~1.CSHWRm{}AAAAAAAAA", {
        let mut d = [0u8; V1_DIGITS];
        put_digits(NOW + 1, &mut d);
        String::from_utf8(d.to_vec()).unwrap()
    });
    let p = Position::resume(&["doc:1", "doc:2"], &whole).unwrap();
    let seqs: Vec<_> = p.seqs(NOW).collect();
    assert_eq!(seqs, [("doc:1", Some(NOW)), ("doc:2", None)]);
    assert_eq!(
        Position::resume(&["doc:2", "doc:1"], v1),
        Err(PositionError::OtherChannels)
    );
    assert_eq!(
        Position::resume(&["doc:1", "doc:2"], &v1[..v1.len() - 1]),
        Err(PositionError::Malformed)
    );
}

#[test]
fn no_seq_and_seq_zero_differ() {
    let mut p = Position::new(&["a", "b"]);
    assert_eq!(p.get("a", 0), None);
    p.set("a", 0);
    let back = Position::resume(&["a", "b"], p.encode()).unwrap();
    assert_eq!((back.get("a", 0), back.get("b", 0)), (Some(0), None));
    p.set("b", u64::MAX);
    assert!(p.get("b", NOW).is_some(), "any u64 has a residue");
}

#[test]
fn the_worst_case_of_every_plan_fits() {
    // Names cost nothing: the longest names, any seqs.
    let names: Vec<String> = (0..MAX_CHANNELS)
        .map(|i| format!("{i:0>width$}", width = channel::MAX_CHANNEL_LEN))
        .collect();
    let mut p = Position::new(&names);
    for n in &names {
        p.set(n, u64::MAX);
    }
    assert_eq!(MAX_CHANNELS, 510);
    assert_eq!(p.token_len(), 9 + 8 * 510);
    assert!(p.token_len() <= MAX_POSITION_BYTES);
    // The shipped plans' largest cap (pro: 500) fits, and the default's.
    let plan = crate::config::Limits::default().max_subscriptions as usize;
    assert!(plan <= MAX_CHANNELS, "{plan}");
    const { assert!(500 <= MAX_CHANNELS) };
}

#[test]
fn sole_tokens_are_what_set_sole_leaves() {
    let mut p = Position::new(&["doc:s"]);
    assert!(!p.set_sole("doc:t", 3), "not the stream's channel");
    for seq in [0, 7, NOW, u64::MAX] {
        assert!(p.set_sole("doc:s", seq));
        let mut sole = String::new();
        Position::sole_token("doc:s", seq, &mut sole);
        assert_eq!(p.encode(), sole);
        let mut out = BytesMut::new();
        p.encode_into(&mut out);
        assert_eq!(out, sole.as_bytes());
    }
    let mut two = Position::new(&["doc:s", "doc:t"]);
    assert!(!two.set_sole("doc:s", 1), "two channels");
    assert_eq!(two.get("doc:s", NOW), None);
}

#[test]
fn the_named_form_still_resumes() {
    let token = Position::named_token([("doc:1", NOW), ("gone:1", 5), ("doc:2", NOW + 7)]);
    let p = Position::resume(&["doc:2", "doc:1", "doc:3"], &token).unwrap();
    let seqs: Vec<_> = p.seqs(NOW).collect();
    assert_eq!(
        seqs,
        [
            ("doc:2", Some(NOW + 7)),
            ("doc:1", Some(NOW)),
            ("doc:3", None)
        ]
    );
    // Pairs padded with leading zeros (the previous build's writer).
    let padded = URL_SAFE_NO_PAD.encode("doc:1 042,doc:22 7");
    let p = Position::resume(&["doc:1", "doc:22"], &padded).unwrap();
    assert_eq!((p.get("doc:1", 0), p.get("doc:22", 0)), (Some(42), Some(7)));
    // What it resumes to is written in the compact form.
    assert!(p.encode().starts_with(COMPACT_PREFIX));
}

#[test]
fn malformed_tokens_are_named() {
    let list = ["doc:1"];
    let resume = |t: &str| Position::resume(&list, t);
    let enc = |t: &str| URL_SAFE_NO_PAD.encode(t);
    assert_eq!(resume("*!"), Err(PositionError::NotBase64));
    assert_eq!(resume(&enc("doc:1")), Err(PositionError::Malformed));
    assert_eq!(resume(&enc("doc:1 x")), Err(PositionError::Malformed));
    assert!(matches!(
        resume(&enc("bad channel 1")),
        Err(PositionError::Malformed | PositionError::BadChannel(_))
    ));
    assert!(matches!(
        resume(&enc("doc/1 1")),
        Err(PositionError::BadChannel(_))
    ));
    assert_eq!(
        resume(&"A".repeat(MAX_POSITION_BYTES + 1)),
        Err(PositionError::TooLong)
    );
    let good = Position::new(&list).encode().to_owned();
    assert!(resume(&good).is_ok());
    for bad in [
        "~",
        "~2.",
        "~2.AAA",
        "~1.AAA",
        "~3.AAAAAAAAAAAAAA",
        &good[..good.len() - 1],
        &format!("{good}A"),
        &good.replace("AAAAAAAA", "AAA*AAAA"),
    ] {
        assert_eq!(resume(bad), Err(PositionError::Malformed), "{bad}");
    }
}

#[test]
fn a_token_of_another_list_is_refused() {
    let mut p = Position::new(&["doc:1", "doc:2"]);
    p.set("doc:1", 3);
    let token = p.encode();
    for other in [
        &["doc:2", "doc:1"][..],
        &["doc:1"],
        &["doc:1", "doc:2", "doc:3"],
        &["doc:1", "doc:x"],
    ] {
        assert_eq!(
            Position::resume(other, token),
            Err(PositionError::OtherChannels),
            "{other:?}"
        );
    }
}
