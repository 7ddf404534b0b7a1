//! The fuzz targets (`fuzz/`, long runs with `cargo fuzz` on nightly), run
//! for a bounded number of cases on stable: every file of the checked-in
//! corpus, then generated inputs — corpus entries mutated (bytes flipped,
//! inserted, removed, spliced) and plain random bytes — through the same
//! `tidegate::fuzzing` entry points. A panic anywhere fails the test; the
//! inputs that once crashed are kept in the corpus as regressions.

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tidegate::fuzzing;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<_> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "no corpus for {target}");
    seeds
}

/// One edit of a seed: (kind, position, byte).
type Edit = (u8, usize, u8);

fn mutate(seed: &[u8], other: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for &(kind, pos, byte) in edits {
        let at = if out.is_empty() {
            0
        } else {
            pos % (out.len() + 1)
        };
        match kind % 6 {
            0 if at < out.len() => out[at] ^= byte | 1,
            1 => out.insert(at, byte),
            2 if at < out.len() => {
                out.remove(at);
            }
            3 => out.truncate(at),
            // Splice in a piece of another seed.
            4 => {
                let from = pos % (other.len() + 1);
                let piece = &other[from..(from + usize::from(byte)).min(other.len())];
                out.splice(at..at, piece.iter().copied());
            }
            // Structural bytes JSON, TOML and WebSocket parsers trip on.
            _ => {
                const TRICKY: &[u8] = b"{}[]\",:\\\n=.0\x80\xff";
                out.insert(at, TRICKY[usize::from(byte) % TRICKY.len()]);
            }
        }
    }
    out
}

/// Runs `target` over the corpus, then `cases` generated inputs.
fn bounded(name: &str, cases: u32, target: fn(&[u8])) {
    let seeds = corpus(name);
    for s in &seeds {
        target(s);
    }
    let n = seeds.len();
    let input = prop_oneof![
        4 => (0..n, 0..n, prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..12))
            .prop_map(move |(a, b, edits)| (a, b, edits, None)),
        1 => prop::collection::vec(any::<u8>(), 0..512).prop_map(|bytes| (0, 0, vec![], Some(bytes))),
    ];
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&input, |(a, b, edits, raw)| {
            let bytes = raw.unwrap_or_else(|| mutate(&seeds[a], &seeds[b], &edits));
            target(&bytes);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

#[test]
fn graphql_documents() {
    bounded("graphql_document", 20_000, |d| {
        fuzzing::graphql_document(d);
    });
}

#[test]
fn client_frames() {
    bounded("client_frame", 40_000, |d| {
        fuzzing::client_frame(d);
    });
}

#[test]
fn websocket_framing_and_reassembly() {
    bounded("websocket", 40_000, |d| {
        fuzzing::websocket(d);
    });
}

#[test]
fn tokens() {
    bounded("token", 20_000, |d| {
        fuzzing::token(d);
    });
}

#[test]
fn token_claims() {
    bounded("claims", 20_000, |d| {
        fuzzing::claims(d);
    });
}

#[test]
fn http_publish_and_batch_bodies() {
    bounded("http_body", 40_000, |d| {
        fuzzing::http_body(d);
    });
}

#[test]
fn config_files_through_check_config() {
    bounded("config", 15_000, |d| {
        fuzzing::config(d);
    });
}

#[test]
fn grpc_request_messages() {
    bounded("grpc_request", 40_000, |d| {
        fuzzing::grpc_request(d);
    });
}

#[test]
fn webhook_answers_and_retry_after() {
    bounded("webhook_answer", 40_000, |d| {
        fuzzing::webhook_answers(d);
    });
}

/// The seeds do reach the interesting paths (a target that rejects all of
/// its corpus would fuzz nothing).
#[test]
fn the_corpus_reaches_past_the_parsers() {
    let parsed = |name: &str, f: fn(&[u8]) -> bool| corpus(name).iter().filter(|s| f(s)).count();
    assert!(parsed("client_frame", fuzzing::client_frame) >= 4);
    assert!(
        parsed("token", fuzzing::token) == 1,
        "only the valid token verifies"
    );
    assert!(parsed("claims", fuzzing::claims) >= 2);
    assert!(parsed("config", fuzzing::config) >= 2);
    let ws: usize = corpus("websocket")
        .iter()
        .map(|s| fuzzing::websocket(s))
        .sum();
    assert!(ws >= 5, "{ws} messages out of the websocket corpus");
    let http: usize = corpus("http_body")
        .iter()
        .map(|s| fuzzing::http_body(s))
        .sum();
    assert!(http >= 1);
    let grpc = corpus("grpc_request")
        .iter()
        .filter(|s| fuzzing::grpc_request(s).is_some())
        .count();
    assert!(grpc >= 4, "{grpc} gRPC requests passed");
    let answers: usize = corpus("webhook_answer")
        .iter()
        .map(|s| fuzzing::webhook_answers(s))
        .sum();
    assert!(answers >= 20, "{answers} webhook answers read");
}
