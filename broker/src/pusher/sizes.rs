//! What an idle Pusher connection holds beside a `/v1/ws` socket's
//! (issue 40: within 10 % of one), per part (`--nocapture` prints it).
//! The dialect is one allocation of its own (`Box<dyn Dialect>`), each
//! subscription a set entry and a sink: every byte here is paid by every
//! connection, so the bounds keep a feature's state from growing them
//! unnoticed (box it, create it on first use).

use std::mem::size_of;

use super::activity::Clock;
use super::client_event::Notices;
use super::hooked::PusherHooks;
use super::session::PusherWs;
use super::sink::PusherSink;
use super::subscribe::Sub;
use super::user::User;

#[test]
fn an_idle_pusher_connection_holds_its_parts_within_budget() {
    let parts = [
        ("PusherWs", size_of::<PusherWs>()),
        ("Clock", size_of::<Clock>()),
        ("Notices", size_of::<Notices>()),
        ("User", size_of::<User>()),
        ("PusherHooks", size_of::<PusherHooks>()),
        ("Sub", size_of::<Sub>()),
        ("PusherSink", size_of::<PusherSink>()),
    ];
    for (name, bytes) in parts {
        println!("{name:>24} {bytes:>5} B");
    }
    // x86_64, rustc 1.95, issue 40: the dialect is 160 bytes since the
    // user's signed-in state, the hooks' order and the refusal were
    // boxed; a set entry was 40 bytes with its key a `String` of its own.
    assert!(size_of::<PusherWs>() <= 160, "{}", size_of::<PusherWs>());
    assert!(size_of::<User>() <= 16, "{}", size_of::<User>());
    assert!(
        size_of::<PusherHooks>() <= 8,
        "{}",
        size_of::<PusherHooks>()
    );
    assert!(size_of::<Sub>() <= 16, "{}", size_of::<Sub>());
    // With its reference counts, a 144-byte allocation (jemalloc's 160).
    assert!(
        size_of::<PusherSink>() <= 128,
        "{}",
        size_of::<PusherSink>()
    );
}
