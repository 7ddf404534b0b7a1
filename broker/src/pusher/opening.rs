//! What `/app/{key}?protocol=..` must say before the connection is served:
//! a known app key and a protocol version this front speaks. A refusal is
//! told once the socket is open (`pusher:error`, then the close with the
//! same code), which is how pusher-js learns not to retry.

use super::frames::{self, code};
use crate::config::PusherApp;
use crate::dialect::Link;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;

/// Protocol versions spoken (pusher-js 8 speaks 7).
pub const PROTOCOLS: std::ops::RangeInclusive<u32> = 5..=7;

/// The close code and message for a connection that may not be served
/// (`None`: it may). `app_known`: the key names an app.
pub fn refusal(app_known: bool, key: &str, query: &str) -> Option<(u16, String)> {
    let protocol = query.split('&').find_map(|kv| kv.strip_prefix("protocol="));
    match (app_known, protocol) {
        (false, _) => Some((
            code::APP_UNKNOWN,
            format!("App key {key} not in this cluster. Did you forget to specify the cluster?"),
        )),
        (_, None) => Some((code::NO_PROTOCOL, "No protocol version supplied".to_owned())),
        (_, Some(p)) if !p.parse().is_ok_and(|v: u32| PROTOCOLS.contains(&v)) => Some((
            code::UNSUPPORTED_PROTOCOL,
            format!("Unsupported protocol version {p}"),
        )),
        _ => None,
    }
}

/// Tells the refusal and closes, counted as a refused handshake (as a bad
/// token is on `/v1/ws`): an unknown key `unauthorized`, a protocol
/// version `bad_request` (charged to the app's account).
pub fn refuse(node: &Node, app: Option<&PusherApp>, link: &mut dyn Link, code: u16, message: &str) {
    let (reason, account) = match app {
        None => ("unauthorized", ""),
        Some(app) => ("bad_request", app.account.as_str()),
    };
    Exceeded::new(Layer::Handshake, reason, account)
        .conn(link.label())
        .emit(&node.metrics);
    link.send(&frames::error(Some(code), message));
    link.close(code, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_versions_are_refused_with_pushers_codes() {
        assert_eq!(
            refusal(false, "k", "protocol=7").unwrap().0,
            code::APP_UNKNOWN
        );
        assert_eq!(
            refusal(true, "k", "client=js").unwrap().0,
            code::NO_PROTOCOL
        );
        assert_eq!(
            refusal(true, "k", "protocol=8").unwrap().0,
            code::UNSUPPORTED_PROTOCOL
        );
        assert_eq!(refusal(true, "k", "client=js&protocol=5"), None);
    }
}
