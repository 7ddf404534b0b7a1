//! `[[pusher.apps]]` (§16): the shipped sample app and the problems told.

use super::*;

#[test]
fn the_shipped_sample_pusher_app_is_served_on_loopback() {
    let config = Config::embedded();
    let app = &config.pusher_apps[0];
    assert_eq!((app.id.as_str(), app.key.as_str()), ("1234", "app-key"));
    assert_eq!(app.account, "acme");
    assert!(app.client_events);
    assert_eq!(app.activity_timeout_s, 120);
}

#[test]
fn pusher_apps_report_every_problem_with_its_path() {
    let err = parse(
        r#"
        [plans.free]
        [[pusher.apps]]
        id = "1"
        key = "k"
        secret = "short"
        account = "nobody"
        [[pusher.apps]]
        id = "1"
        key = "k"
        secret = "a-secret-of-16-bytes"
        account = "new"
        plan = "gold"
        [[pusher.apps]]
        id = "x/y"
        key = "k2"
        secret_env = "MISSING_SECRET"
        account = "new2"
        plan = "free"
        webhooks = [{ url = "http://127.0.0.1:9/x", events = ["channel.occupied"], secret = "s" }]
        bogus = 1
        "#,
    )
    .unwrap_err();
    let all = err.problems.join("\n");
    for needle in [
        "pusher.apps[0].secret: must be at least 16 bytes (this one has 5)",
        "pusher.apps[0].account: \"nobody\" is not defined under [accounts]",
        "pusher.apps[1].plan: plan \"gold\" is not defined under [plans]",
        "pusher.apps[2].id: 1-64 characters",
        "pusher.apps[2].secret_env: environment variable MISSING_SECRET is not set",
        "pusher.apps[2].bogus: unknown key",
        "pusher.apps[2].webhooks[0].secret: not taken here",
        "pusher.apps[2].webhooks[0].events: unknown event \"channel.occupied\"",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
}

#[test]
fn pusher_app_ids_and_keys_are_unique_and_plan_creates_the_account() {
    let two = |id2: &str, key2: &str| {
        parse(&format!(
            r#"
            [plans.free]
            [plans.pro]
            burst = 100
            messages_per_sec = 50
            [[pusher.apps]]
            id = "1"
            key = "k1"
            secret = "a-secret-of-16-bytes"
            account = "team"
            plan = "pro"
            [[pusher.apps]]
            id = "{id2}"
            key = "{key2}"
            secret = "another-secret-of-16"
            account = "other"
            plan = "free"
            webhooks = [{{ url = "http://127.0.0.1:9/x" }}]
            "#
        ))
    };
    let err = two("1", "k2").unwrap_err().problems.join("\n");
    assert!(
        err.contains("pusher.apps[1].id: \"1\" is used by another app"),
        "{err}"
    );
    let err = two("2", "k1").unwrap_err().problems.join("\n");
    assert!(
        err.contains("pusher.apps[1].key: \"k1\" is used by another app"),
        "{err}"
    );
    let config = Config::from_toml(
        r#"
            [plans.free]
            [plans.pro]
            burst = 100
            messages_per_sec = 50
            [[pusher.apps]]
            id = "1"
            key = "k1"
            secret = "a-secret-of-16-bytes"
            account = "team"
            plan = "pro"
            "#,
        &|_| None,
    )
    .unwrap();
    assert_eq!(config.limits_for("team", None).unwrap().burst, 100);
    let ok = Config::from_toml(
        r#"
        [plans.free]
        [accounts.team]
        [[pusher.apps]]
        id = "1"
        key = "k1"
        secret_env = "APP_SECRET"
        account = "team"
        webhooks = [{ url = "http://127.0.0.1:9/x", rate_per_sec = 5.0 }]
        "#,
        &|k| (k == "APP_SECRET").then(|| "from-the-environment".to_owned()),
    )
    .unwrap();
    let app = &ok.pusher_apps[0];
    assert_eq!(app.secret, b"from-the-environment");
    assert_eq!(app.webhooks[0].events.len(), PUSHER_EVENT_TYPES.len());
    assert_eq!(
        app.webhooks[0].secrets,
        vec![b"from-the-environment".to_vec()]
    );
    assert_eq!(app.webhooks[0].pacing.rate_per_sec, 5.0);
    // The app's channels, but never a signed-in user's.
    assert!(app.webhooks[0].covers("pusher|1|doc"));
    assert!(!app.webhooks[0].covers("pusher|1|#server-to-user-u1"));
}

#[test]
fn the_sample_pusher_app_is_not_served_off_loopback() {
    let config = parse(&format!(
        r#"
        [node]
        listen = "0.0.0.0:8080"
        [auth]
        jwt_secret = "a-real-secret-that-is-long-enough-for-hs256"
        [plans.free]
        [accounts.acme]
        [[pusher.apps]]
        id = "1"
        key = "k1"
        secret = "{SAMPLE_PUSHER_SECRET}"
        account = "acme"
        [[pusher.apps]]
        id = "2"
        key = "k2"
        secret = "an-operators-own-secret"
        account = "acme"
        "#
    ))
    .unwrap();
    let ids: Vec<&str> = config.pusher_apps.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["2"]);
    let warned = config.warnings.join("\n");
    assert!(warned.contains("the sample app is not served"), "{warned}");
}

#[test]
fn a_tidegate_webhook_never_covers_a_pusher_apps_channel() {
    let config = parse(
        r#"
        [plans.free]
        [[webhooks]]
        id = "all"
        url = "http://127.0.0.1:9/x"
        secret = "a-webhook-secret-of-24-bytes"
        channels = ["*"]
        "#,
    )
    .unwrap();
    let ep = &config.webhooks[0];
    assert!(ep.covers("doc:1"));
    assert!(!ep.covers("pusher|1234|doc"));
}
