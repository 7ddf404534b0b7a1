//! The TypeScript SDK's copy of the code table
//! (`client-sdk-ts/src/codes.ts`) must equal `protocol::codes`: same error
//! codes in the same order, same close names and numbers, same temporary
//! set, same reconnect policy per close code. The SDK checks the same from
//! its side (`client-sdk-ts/test/unit/codes.test.ts`); this side fails a
//! broker change that forgets the SDK.

use tidegate::protocol::codes::{CloseCode, ErrorCode, Reconnect};

const TS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../client-sdk-ts/src/codes.ts");

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Result<&'a str, String> {
    let from = text
        .find(start)
        .ok_or_else(|| format!("codes.ts has no `{start}`"))?
        + start.len();
    let len = text[from..]
        .find(end)
        .ok_or_else(|| format!("codes.ts: `{start}` is not closed by `{end}`"))?;
    Ok(&text[from..from + len])
}

/// Every double-quoted string in `text`, in order.
fn quoted(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `NAME: value` lines of an object literal (comments and blanks skipped).
fn entries(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(':')?;
            Some((
                k.trim().to_owned(),
                v.trim().trim_end_matches(',').to_owned(),
            ))
        })
        .collect()
}

fn policy(r: Reconnect) -> &'static str {
    match r {
        Reconnect::Jittered => "\"jittered\"",
        Reconnect::LongBackoff => "\"long_backoff\"",
        Reconnect::Fix => "\"fix\"",
    }
}

/// Every way `ts` (the text of codes.ts) differs from the Rust table.
fn differences(ts: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut check =
        |what: &str, ts_side: Result<Vec<String>, String>, rust: Vec<String>| match ts_side {
            Ok(t) if t == rust => {}
            Ok(t) => found.push(format!("{what}:\n  codes.ts: {t:?}\n  codes.rs: {rust:?}")),
            Err(e) => found.push(e),
        };

    check(
        "ERROR_CODES (ErrorCode::ALL, in order)",
        between(ts, "export const ERROR_CODES = [", "]").map(quoted),
        ErrorCode::ALL
            .iter()
            .map(|c| c.as_str().to_owned())
            .collect(),
    );
    check(
        "CLOSE_CODES (CloseCode::ALL name: code, in order)",
        between(ts, "export const CLOSE_CODES = {", "}").map(|t| {
            entries(t)
                .into_iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect()
        }),
        CloseCode::ALL
            .iter()
            .map(|c| format!("{}: {}", c.name(), c.code()))
            .collect(),
    );
    check(
        "TEMPORARY_ERROR_CODES (ErrorCode::temporary)",
        between(
            ts,
            "TEMPORARY_ERROR_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([",
            "]",
        )
        .map(|t| {
            let mut v = quoted(t);
            v.sort();
            v
        }),
        {
            let mut v: Vec<String> = ErrorCode::ALL
                .iter()
                .filter(|c| c.temporary())
                .map(|c| c.as_str().to_owned())
                .collect();
            v.sort();
            v
        },
    );
    check(
        "CLOSE_POLICY (CloseCode::reconnect)",
        between(
            ts,
            "export const CLOSE_POLICY: Readonly<Record<CloseCode, ReconnectPolicy>> = {",
            "};",
        )
        .map(|t| {
            let mut v: Vec<String> = entries(t)
                .into_iter()
                .map(|(k, v)| {
                    let name = k.trim_start_matches("[CLOSE_CODES.").trim_end_matches(']');
                    format!("{name}: {v}")
                })
                .collect();
            v.sort();
            v
        }),
        {
            let mut v: Vec<String> = CloseCode::ALL
                .iter()
                .map(|c| format!("{}: {}", c.name(), policy(c.reconnect())))
                .collect();
            v.sort();
            v
        },
    );
    found
}

#[test]
fn the_sdk_code_table_equals_the_brokers() {
    let ts = std::fs::read_to_string(TS_PATH).unwrap();
    let found = differences(&ts);
    assert!(
        found.is_empty(),
        "client-sdk-ts/src/codes.ts disagrees with broker/src/protocol/codes.rs:\n{}",
        found.join("\n")
    );
}

#[test]
fn each_kind_of_drift_is_caught() {
    let ts = std::fs::read_to_string(TS_PATH).unwrap();
    for (what, from, to) in [
        ("a missing error code", "  \"forbidden\",\n", ""),
        (
            "two error codes swapped",
            "  \"rate_limited\",\n  \"account_rate_limited\",",
            "  \"account_rate_limited\",\n  \"rate_limited\",",
        ),
        (
            "a renumbered close code",
            "SLOW_CONSUMER: 4008,",
            "SLOW_CONSUMER: 4009,",
        ),
        (
            "an extra close code",
            "CONNECTION_CAP: 4029,",
            "CONNECTION_CAP: 4029,\n  LATE: 4030,",
        ),
        (
            "a code that became temporary",
            "new Set<ErrorCode>([\n",
            "new Set<ErrorCode>([\n  \"forbidden\",\n",
        ),
        (
            "a different reconnect policy",
            "[CLOSE_CODES.POLICY_VIOLATION]: \"long_backoff\",",
            "[CLOSE_CODES.POLICY_VIOLATION]: \"jittered\",",
        ),
    ] {
        assert!(ts.contains(from), "codes.ts changed shape: no {from:?}");
        let drifted = ts.replacen(from, to, 1);
        assert!(!differences(&drifted).is_empty(), "{what} went unnoticed");
    }
}
