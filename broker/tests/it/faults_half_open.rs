//! Half-open TCP (issue 15): a peer gone without a FIN — it neither reads
//! nor answers pings, and its connection stays established. The heartbeat
//! reaps it and gives back everything it held: the node's socket count,
//! its IP's open-socket slot and its account's connection slot.

use serde_json::json;

use crate::common::{Broker, small_window, upgrade_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_reaped_and_its_counts_given_back() {
    // One socket per IP and per account, so a slot not given back shows as
    // a refusal below.
    let b = Broker::start(
        "[socket]\nheartbeat_interval_ms = 50\nclient_timeout_ms = 200\nclose_timeout_ms = 100\n\
         [handshake]\nip_max_open = 1\n[plans.free]\nmax_connections = 1\n",
    );
    // A small receive window that is never read: the server's pings and its
    // close frame stay unread; nothing comes back, not even a FIN.
    let gone = upgrade_on(small_window(b.addr).await, b.addr, &b.token("acme")).await;
    b.wait_sockets(1).await;
    // While it is held, the IP and the account are at their caps.
    let refused = b
        .try_connect(&b.token("acme"))
        .await
        .err()
        .expect("at the cap");
    assert_eq!(refused.0, 429, "{refused:?}");

    // The heartbeat reaps it, though the peer never closes its end.
    b.wait_sockets(0).await;
    assert_eq!(
        b.metric("tidegate_rejections_total{layer=\"connection\",reason=\"heartbeat_timeout\"}")
            .await,
        1.0
    );
    // Its slots are free again: the same IP and account connect.
    let mut back = b.client("acme").await;
    let ack = back
        .call(json!({"type":"subscribe","channel":"doc:1"}), 1)
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    drop(gone);
}
