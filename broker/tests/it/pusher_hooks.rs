//! §15's hooks on the Pusher front (§16) against a real broker and a real
//! backend (`hooks_backend.rs`, which verifies every request's Standard
//! Webhooks signature): `subscribe` allowing, refusing (403, 429 with
//! `retryAfterMs`) and told who asks (`transport`, `connId`, the signed-in
//! `sub`, the app in `info`); `publish` of client events refusing (4301,
//! kept open), rewriting `data` and keeping a connection's order; the
//! hook's own budget exhausted refusing without a call; a backend that is
//! down under `allow` and `deny`; two apps never sharing a cached
//! answer; a dry-run hook compared while the app's checks decide; and an
//! unsubscribe sent while the hook is asked winning over its answer.

use std::net::TcpListener;

use serde_json::{Value, json};

use crate::common::{Broker, Client};
use crate::hooks_backend::{Backend, Reply, SECRET as HOOK_SECRET};
use crate::pusher_api::{KEY, SECRET};
use crate::pusher_users::signin;
use crate::pusher_ws::{auth, connected, subscribe, sync};

/// Subscribes `channel` (signed for this socket when private).
async fn sub(c: &mut Client, id: &str, channel: &str) -> Value {
    let signed = channel
        .starts_with("private-")
        .then(|| auth(KEY, SECRET, id, channel));
    subscribe(c, channel, signed.as_deref()).await
}

/// A `pusher:subscription_error`'s data.
fn refusal(frame: &Value) -> Value {
    assert_eq!(frame["event"], "pusher:subscription_error", "{frame}");
    serde_json::from_str(frame["data"].as_str().unwrap()).unwrap()
}

fn succeeded(frame: &Value) {
    assert_eq!(
        frame["event"], "pusher_internal:subscription_succeeded",
        "{frame}"
    );
}

fn hooked(backend: &Backend, events: &str, extra: &str) -> Broker {
    Broker::start(&backend.hook(&format!(
        "events = [{events}]\nchannels = [\"private-doc-*\", \"doc-*\"]\n{extra}"
    )))
}

#[tokio::test]
async fn the_subscribe_hook_decides_the_pusher_channels_it_covers() {
    let mut backend = Backend::start(|_| Reply::ok());
    let b = hooked(&backend, "\"subscribe\"", "timeout_ms = 500");
    let (mut c, id) = connected(&b, KEY).await;
    succeeded(&sub(&mut c, &id, "private-doc-1").await);
    let call = backend.call().await;
    assert_eq!(
        (
            &call["event"],
            &call["channel"],
            &call["client"]["transport"]
        ),
        (
            &json!("subscribe"),
            &json!("private-doc-1"),
            &json!("pusher")
        ),
        "the globs and the backend see the name the app gave: {call}"
    );
    assert_eq!(call["client"]["connId"], json!(id));
    assert_eq!(call["client"]["info"], json!({"app": "1234"}));
    assert!(call["client"].get("sub").is_none(), "signed out: {call}");

    backend.answer(|_| Reply::error("not_member"));
    let r = refusal(&sub(&mut c, &id, "doc-2").await);
    assert_eq!(
        (r["status"].clone(), r["error"].clone()),
        (json!(403), json!("not_member"))
    );
    backend.call().await;
    backend.answer(|_| {
        Reply::Json(json!({"error": {"code": "slow_down", "message": "m", "retryAfterMs": 900}}))
    });
    let r = refusal(&sub(&mut c, &id, "doc-3").await);
    assert_eq!(
        (r["status"].clone(), r["error"].clone()),
        (json!(429), json!("slow_down"))
    );
    backend.call().await;

    // A channel no hook covers: the app's signature alone, no call.
    let before = backend.calls();
    succeeded(&sub(&mut c, &id, "private-chat").await);
    assert_eq!(backend.calls(), before);

    // Signed in: `client.sub` is the user.
    assert_eq!(
        signin(&mut c, &id, "ann").await["event"],
        "pusher:signin_success"
    );
    backend.answer(|_| Reply::ok());
    succeeded(&sub(&mut c, &id, "doc-4").await);
    assert_eq!(backend.call().await["client"]["sub"], "ann");

    // A refused subscription was not made: an event to it never comes.
    assert_eq!(b.node.metrics.hooks.calls("app", "subscribe", "refused"), 2);
    backend.answer(|_| Reply::disconnect(4403));
    c.send(json!({"event":"pusher:subscribe","data":{"channel":"doc-5"}}))
        .await;
    let err = c.next_json().await;
    assert_eq!(
        (err["event"].clone(), err["data"]["code"].clone()),
        (json!("pusher:error"), json!(4403))
    );
    assert_eq!(c.closed().await, Some(4403));
}

#[tokio::test]
async fn the_publish_hook_refuses_and_rewrites_client_events_in_order() {
    let mut backend = Backend::start(|call| {
        let who = call["data"]["who"].as_str().unwrap_or("");
        match who {
            "no" => Reply::error("not_yours"),
            "rewrite" => Reply::result(json!({"data": {"who": "the backend"}})),
            _ => Reply::ok(),
        }
    });
    let b = hooked(&backend, "\"publish\"", "timeout_ms = 1000");
    let ch = "private-doc-1";
    let (mut a, ida) = connected(&b, KEY).await;
    let (mut r, idr) = connected(&b, KEY).await;
    succeeded(&sub(&mut a, &ida, ch).await);
    succeeded(&sub(&mut r, &idr, ch).await);
    assert_eq!(backend.calls(), 0, "publish only");

    a.send(json!({"event":"client-typing","channel":ch,"data":{"who":"rewrite"}}))
        .await;
    let call = backend.call().await;
    assert_eq!(
        (
            &call["event"],
            &call["channel"],
            &call["data"],
            &call["client"]["connId"]
        ),
        (
            &json!("publish"),
            &json!(ch),
            &json!({"who":"rewrite"}),
            &json!(ida)
        )
    );
    let got = r.next_json().await;
    assert_eq!(got["event"], "client-typing");
    let data: Value = serde_json::from_str(got["data"].as_str().unwrap()).unwrap();
    assert_eq!(
        data,
        json!({"who": "the backend"}),
        "a data string, as pusher-js reads it"
    );

    a.send(json!({"event":"client-typing","channel":ch,"data":{"who":"no"}}))
        .await;
    let err = a.next_json().await;
    assert_eq!(
        (err["event"].clone(), err["data"]["code"].clone()),
        (json!("pusher:error"), json!(4301))
    );
    assert!(
        err["data"]["message"]
            .as_str()
            .unwrap()
            .contains("not_yours"),
        "{err}"
    );
    assert_eq!(
        sync(&mut r).await["event"],
        "pusher:pong",
        "a refused event is not sent on"
    );
    assert_eq!(
        sync(&mut a).await["event"],
        "pusher:pong",
        "the connection stays open"
    );

    // Answers held and released at once apply in the order sent.
    backend.close_gate();
    for n in 0..5 {
        a.send(json!({"event":"client-n","channel":ch,"data":{"who":"ok","n":n}}))
            .await;
    }
    for _ in 0..5 {
        backend.call().await;
    }
    backend.open();
    for n in 0..5 {
        let got = r.next_json().await;
        let data: Value = serde_json::from_str(got["data"].as_str().unwrap()).unwrap();
        assert_eq!(data["n"], n, "{got}");
    }
}

#[tokio::test]
async fn an_exhausted_hook_budget_refuses_without_a_call() {
    let backend = Backend::start(|_| Reply::ok());
    let b = hooked(
        &backend,
        "\"subscribe\"",
        "burst = 1\nrate_per_sec = 0.001\ntimeout_ms = 200\nbreaker_failures = 100",
    );
    let (mut c, id) = connected(&b, KEY).await;
    succeeded(&sub(&mut c, &id, "doc-1").await);
    let r = refusal(&sub(&mut c, &id, "doc-2").await);
    assert_eq!(
        (r["status"].clone(), r["error"].clone()),
        (json!(429), json!("hook_unavailable"))
    );
    assert_eq!(backend.calls(), 1, "the second call was never made");
    assert_eq!(b.node.metrics.hooks.calls("app", "subscribe", "shed"), 1);
}

#[tokio::test]
async fn a_backend_that_is_down_answers_on_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hook = |id: &str, glob: &str, on_error: &str| {
        format!(
            "[[hooks]]\nid = \"{id}\"\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret = \"{HOOK_SECRET}\"\nevents = [\"subscribe\", \"publish\"]\nchannels = [\"{glob}\"]\non_error = \"{on_error}\"\ntimeout_ms = 500\n"
        )
    };
    let b = Broker::start(&format!(
        "{}{}",
        hook("open", "private-open-*", "allow"),
        hook("shut", "private-shut-*", "deny")
    ));
    let (mut a, ida) = connected(&b, KEY).await;
    let (mut r, idr) = connected(&b, KEY).await;
    let ch = "private-open-1";
    succeeded(&sub(&mut a, &ida, ch).await);
    succeeded(&sub(&mut r, &idr, ch).await);
    a.send(json!({"event":"client-hi","channel":ch,"data":{"x":1}}))
        .await;
    let got = r.next_json().await;
    assert_eq!(
        (got["event"].clone(), got["data"].clone()),
        (json!("client-hi"), json!("{\"x\":1}"))
    );
    let r = refusal(&sub(&mut a, &ida, "private-shut-1").await);
    assert_eq!(
        (r["status"].clone(), r["error"].clone()),
        (json!(429), json!("hook_unavailable"))
    );
    assert!(b.node.metrics.hooks.calls("open", "subscribe", "failed") >= 2);
}

#[tokio::test]
async fn two_apps_never_share_a_cached_answer() {
    let mut backend = Backend::start(|call| match call["client"]["info"]["app"].as_str() {
        Some("1") => Reply::error("not_in_app_one"),
        _ => Reply::ok(),
    });
    let apps = r#"
        [[pusher.apps]]
        id = "1"
        key = "one"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        [[pusher.apps]]
        id = "2"
        key = "two"
        secret = "a-secret-of-16-bytes"
        account = "acme"
        "#;
    let b = Broker::start(&format!(
        "{}{apps}",
        backend.hook("events = [\"subscribe\"]\nchannels = [\"doc-*\"]\ncache_ms = 60000")
    ));
    let (mut one, _) = connected(&b, "one").await;
    let (mut two, _) = connected(&b, "two").await;
    assert_eq!(
        refusal(&subscribe(&mut one, "doc-1", None).await)["status"],
        403
    );
    succeeded(&subscribe(&mut two, "doc-1", None).await);
    let apps: Vec<Value> = vec![backend.call().await, backend.call().await]
        .into_iter()
        .map(|c| c["client"]["info"]["app"].clone())
        .collect();
    assert_eq!(apps, vec![json!("1"), json!("2")]);
    // The same app again: the cached answer, no call.
    let (mut again, _) = connected(&b, "one").await;
    assert_eq!(
        refusal(&subscribe(&mut again, "doc-1", None).await)["status"],
        403
    );
    assert_eq!(backend.calls(), 2);
}

#[tokio::test]
async fn a_dry_run_hook_is_compared_and_the_apps_checks_enforced() {
    let mut backend = Backend::start(|_| Reply::error("no"));
    let b = hooked(&backend, "\"subscribe\", \"publish\"", "dry_run = true");
    let ch = "private-doc-1";
    let (mut a, ida) = connected(&b, KEY).await;
    let (mut r, idr) = connected(&b, KEY).await;
    succeeded(&sub(&mut a, &ida, ch).await);
    succeeded(&sub(&mut r, &idr, ch).await);
    a.send(json!({"event":"client-hi","channel":ch,"data":"1"}))
        .await;
    assert_eq!(
        r.next_json().await["event"],
        "client-hi",
        "sent as the app allows"
    );
    // Two signed-out sockets of one app and IP ask the same question:
    // their calls may be shared, so count disagreements, not calls.
    backend.call().await;
    for event in ["subscribe", "publish"] {
        let series = format!("tidegate_hook_disagreements_total{{hook=\"app\",event=\"{event}\"}}");
        let deadline = std::time::Instant::now() + crate::common::PATIENCE;
        while b.metric(&series).await < 1.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no {event} disagreement counted"
            );
            tokio::task::yield_now().await;
        }
    }
}

#[tokio::test]
async fn an_unsubscribe_while_the_hook_is_asked_wins() {
    let mut backend = Backend::start(|_| Reply::ok());
    let b = hooked(&backend, "\"subscribe\"", "timeout_ms = 2000");
    let (mut c, _) = connected(&b, KEY).await;
    backend.close_gate();
    let ch = "doc-1";
    c.send(json!({"event":"pusher:subscribe","data":{"channel":ch}}))
        .await;
    backend.call().await;
    c.send(json!({"event":"pusher:unsubscribe","data":{"channel":ch}}))
        .await;
    assert_eq!(
        sync(&mut c).await["event"],
        "pusher:pong",
        "the unsubscribe was read"
    );
    backend.open();
    // The allowed answer came after the unsubscribe: nothing is joined,
    // so an event to the channel never reaches this socket.
    let (mut other, other_id) = connected(&b, KEY).await;
    succeeded(&sub(&mut other, &other_id, ch).await);
    let ev = json!({"name":"e","channel":ch,"data":"x"});
    let resp = crate::pusher_api::call(&b, "POST", "/apps/1234/events", &[], Some(&ev)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(other.next_json().await["event"], "e");
    assert_eq!(
        sync(&mut c).await["event"],
        "pusher:pong",
        "no subscription_succeeded, no event"
    );
}
