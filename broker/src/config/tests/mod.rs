use super::*;

mod pusher;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, &|_| None)
}

#[test]
fn shipped_file_is_valid_and_matches_the_contract_defaults() {
    let config = Config::embedded();
    let free = config.limits_for("someone", None).unwrap();
    assert_eq!(
        *free,
        Limits::default(),
        "config.toml's free plan must be §0"
    );
    assert_eq!(config.node.listen.to_string(), "127.0.0.1:8080");
}

#[test]
fn reports_every_problem_with_its_path() {
    let err = parse(
        r#"
        bogus = 1
        [node]
        listn = "x"
        [plans.free]
        mesages_per_sec = 3
        burst = 0
        [plans.other]
        burst = "many"
        [accounts.acme]
        plan = "gold"
        "#,
    )
    .unwrap_err();
    let all = err.problems.join("\n");
    for needle in [
        "bogus: unknown key",
        "node.listn: unknown key",
        "plans.free.mesages_per_sec: unknown key",
        "plans.free.burst: must be at least 1",
        "plans.other.burst:",
        "accounts.acme.plan: plan \"gold\" is not defined",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
}

#[test]
fn account_overrides_apply_over_the_selected_plan() {
    let config = parse(
        r#"
        [plans.free]
        [plans.pro]
        burst = 100
        messages_per_sec = 50
        [plans.pro.costs]
        max_single = 50
        [accounts.acme]
        burst = 5
        costs = { max_single = 5 }
        "#,
    )
    .unwrap();
    let free = config.limits_for("acme", None).unwrap();
    assert_eq!((free.burst, free.messages_per_sec), (5, 20.0));
    let pro = config.limits_for("acme", Some("pro")).unwrap();
    assert_eq!(
        (pro.burst, pro.messages_per_sec, pro.costs.max_single),
        (5, 50.0, 5)
    );
    assert_eq!(
        pro.costs.publish, 1,
        "untouched cost keys keep their defaults"
    );
    assert_eq!(
        config.limits_for("acme", Some("gold")).unwrap_err(),
        UnknownPlan("gold".into())
    );
}

#[test]
fn sample_secret_is_refused_off_loopback_unless_overridden() {
    let text = "[node]\nlisten = \"0.0.0.0:8080\"\n[plans.free]\n";
    let err = parse(text).unwrap_err();
    assert!(
        err.problems
            .iter()
            .any(|p| p.starts_with("auth.jwt_secret"))
    );
    let env = |k: &str| {
        (k == "TIDEGATE_JWT_SECRET").then(|| "a-real-secret-of-enough-length".to_string())
    };
    assert!(Config::from_toml(text, &env).is_ok());
}

#[test]
fn api_key_from_environment() {
    let text = "[[api_keys]]\nkey_env = \"PUB_KEY\"\naccount = \"a\"\n[plans.free]\n";
    assert!(parse(text).unwrap_err().problems[0].contains("PUB_KEY is not set"));
    let env = |k: &str| (k == "PUB_KEY").then(|| "0123456789abcdef0123".to_string());
    let config = Config::from_toml(text, &env).unwrap();
    assert_eq!(config.api_keys[0].key, "0123456789abcdef0123");
}

#[test]
fn syntax_errors_are_reported() {
    let err = parse("[node\nid=1").unwrap_err();
    assert!(err.problems[0].starts_with("not valid TOML"));
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

#[test]
fn every_node_wide_key_can_come_from_the_environment() {
    let env = env_of(&[
        ("TIDEGATE_NODE_LISTEN", "0.0.0.0:9000"),
        ("TIDEGATE_NODE_ID", "edge-7"),
        ("TIDEGATE_NODE_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.7"),
        ("TIDEGATE_AUTH_JWT_SECRET", "a-real-secret-of-enough-length"),
        ("TIDEGATE_HANDSHAKE_IP_HANDSHAKES_PER_SEC", "2.5"),
        ("TIDEGATE_CLUSTER_REDIS_URL", "redis://:pw@db:6379/0"),
        ("TIDEGATE_HISTORY_SIZE", "7"),
        ("TIDEGATE_API_KEYS_0_KEY", "first-key-0123456789"),
        ("TIDEGATE_API_KEYS_1_KEY", "second-key-0123456789"),
        ("TIDEGATE_API_KEYS_1_ACCOUNT", "globex"),
        ("TIDEGATE_API_KEYS_1_PUB_CHANNELS", "news:*,alerts"),
    ]);
    let file = "[node]\nid = \"from-file\"\nworkers = 2\n[[api_keys]]\nkey_env = \"UNSET\"\naccount = \"acme\"\n[plans.free]\n";
    let config = Config::from_toml(file, &env).unwrap();
    assert_eq!(config.node.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(
        config.node.id, "edge-7",
        "the environment wins over the file"
    );
    assert_eq!(config.node.workers, 2);
    assert_eq!(
        config.node.trusted_proxies,
        ["10.0.0.0/8", "192.168.1.7"].map(|s| s.parse::<ProxyRange>().unwrap())
    );
    assert_eq!(config.auth.jwt_secret, "a-real-secret-of-enough-length");
    assert_eq!(config.handshake.ip_handshakes_per_sec, 2.5);
    assert_eq!(config.cluster.redis_url, "redis://:pw@db:6379/0");
    assert_eq!(config.history.size, 7);
    let keys: Vec<_> = config
        .api_keys
        .iter()
        .map(|k| (k.key.as_str(), k.account.as_str(), k.pub_channels.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("first-key-0123456789", "acme", vec!["*".to_owned()]),
            (
                "second-key-0123456789",
                "globex",
                vec!["news:*".to_owned(), "alerts".to_owned()]
            ),
        ]
    );
    let src = |p: &str| config.sources.get(p).to_string();
    assert_eq!(src("node.id"), "env TIDEGATE_NODE_ID");
    assert_eq!(src("node.workers"), "file");
    assert_eq!(src("socket.client_timeout_ms"), "default");
    assert_eq!(
        src("api_keys[1].account"),
        "env TIDEGATE_API_KEYS_1_ACCOUNT"
    );
    let report = config.report().join("\n");
    assert!(!report.contains("pw@"), "{report}");
    assert!(!report.contains("a-real-secret"), "{report}");
    assert!(
        report.contains(
            "cluster.redis_url = \"redis://:********@db:6379/0\"  (env TIDEGATE_CLUSTER_REDIS_URL)"
        ),
        "{report}"
    );
}

#[test]
fn the_short_secret_name_is_an_alias_and_the_long_one_wins() {
    let short = env_of(&[("TIDEGATE_JWT_SECRET", "short-name-secret-0123")]);
    let config = Config::from_toml("[plans.free]\n", &short).unwrap();
    assert_eq!(config.auth.jwt_secret, "short-name-secret-0123");
    assert_eq!(
        config.sources.get("auth.jwt_secret"),
        Source::Env("TIDEGATE_JWT_SECRET".into())
    );
    let both = env_of(&[
        ("TIDEGATE_JWT_SECRET", "short-name-secret-0123"),
        ("TIDEGATE_AUTH_JWT_SECRET", "long-name-secret-0123"),
    ]);
    let config = Config::from_toml("[plans.free]\n", &both).unwrap();
    assert_eq!(config.auth.jwt_secret, "long-name-secret-0123");
}

#[test]
fn a_bad_environment_value_names_its_variable() {
    let env = env_of(&[
        ("TIDEGATE_SOCKET_CLIENT_TIMEOUT_MS", "soon"),
        ("TIDEGATE_NODE_TRUSTED_PROXIES", "10.0.0.0/40"),
        ("TIDEGATE_CLUSTER_REDIS_URL", "redis://db/"),
        ("TIDEGATE_CLUSTER_MODE", "carrier-pigeon"),
    ]);
    let all = Config::from_toml("[plans.free]\n", &env)
        .unwrap_err()
        .problems
        .join("\n");
    for needle in [
        "socket.client_timeout_ms: TIDEGATE_SOCKET_CLIENT_TIMEOUT_MS must be a number, got \"soon\"",
        "\"10.0.0.0/40\" is neither an IP address nor a CIDR range (from TIDEGATE_NODE_TRUSTED_PROXIES)",
        "carrier-pigeon",
        "(from TIDEGATE_CLUSTER_MODE)",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
}

#[test]
fn the_shipped_file_lists_every_node_wide_key_so_each_has_a_variable() {
    let sections = Config::embedded().node_wide_tables();
    assert_eq!(
        sections.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        env::ENV_SECTIONS
    );
    for (name, fields) in sections {
        let toml::Value::Table(shipped) = &DEFAULT_TABLE[name] else {
            panic!("config.toml has no [{name}]")
        };
        for key in fields.keys() {
            assert!(
                shipped.contains_key(key),
                "config.toml does not list {name}.{key}, so {} would be ignored",
                var_name(name, key)
            );
        }
    }
}

#[test]
fn the_embedded_default_retires_the_sample_key_off_loopback() {
    let mut config = Config::parse(
        DEFAULT_TOML,
        &env_of(&[("TIDEGATE_JWT_SECRET", "a-real-secret-of-enough-length")]),
        false,
    )
    .unwrap();
    config
        .apply_flags(Some("0.0.0.0:8080".parse().unwrap()), None)
        .unwrap();
    assert!(config.api_keys.is_empty());
    assert!(config.warnings[0].contains("TIDEGATE_API_KEYS_0_KEY"));
    // An operator's own file with the sample key is refused instead.
    let mut config = Config::from_toml(
        DEFAULT_TOML,
        &env_of(&[("TIDEGATE_JWT_SECRET", "a-real-secret-of-enough-length")]),
    )
    .unwrap();
    let err = config
        .apply_flags(Some("0.0.0.0:8080".parse().unwrap()), None)
        .unwrap_err();
    assert!(err.problems[0].contains("sample API key"), "{err}");
}

#[test]
fn the_sample_secret_and_key_are_refused_behind_a_proxy_even_on_loopback() {
    let text = "[node]\ntrusted_proxies = [\"127.0.0.1\"]\n[plans.free]\n";
    let err = parse(text).unwrap_err();
    assert!(
        err.problems
            .iter()
            .any(|p| p.starts_with("auth.jwt_secret") && p.contains("trusted_proxies")),
        "{:?}",
        err.problems
    );
    // The same sample secret as an [[auth.keys]] entry is refused too.
    let listed = "[node]\nlisten = \"0.0.0.0:8080\"\n[auth]\njwt_secret = \"\"\n[[auth.keys]]\nkid = \"k\"\nalg = \"HS256\"\nsecret = \"tidegate-sample-secret-do-not-use-in-production\"\n[plans.free]\n";
    assert!(
        parse(listed)
            .unwrap_err()
            .problems
            .iter()
            .any(|p| p.starts_with("auth.jwt_secret: the sample secret"))
    );
    // The embedded default behind a proxy: the sample API key is retired.
    let env = env_of(&[
        ("TIDEGATE_NODE_TRUSTED_PROXIES", "127.0.0.1"),
        ("TIDEGATE_JWT_SECRET", "a-real-secret-of-enough-length"),
    ]);
    let config = Config::parse(DEFAULT_TOML, &env, false).unwrap();
    assert!(config.api_keys.is_empty());
    assert!(
        config.warnings[0].contains("trusted_proxies"),
        "{:?}",
        config.warnings
    );
}

#[test]
fn check_config_masks_every_new_secret() {
    let text = "[auth]\nfingerprint_secret = \"fingerprints-of-keys-0123\"\n\
        [[auth.keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"an-hs-key-secret-0123\"\n\
        [[auth.keys]]\nkid = \"k2\"\nalg = \"RS256\"\npublic_key_file = \"/idp.pem\"\n\
        [cluster]\nsecret = \"cluster-secret-0123456\"\naccept_secrets = [\"old-cluster-secret-0123\"]\n[plans.free]\n";
    let report = parse(text).unwrap().report().join("\n");
    for secret in [
        "fingerprints-of-keys-0123",
        "an-hs-key-secret-0123",
        "cluster-secret-0123456",
        "old-cluster-secret-0123",
    ] {
        assert!(!report.contains(secret), "{secret} shown in:\n{report}");
    }
    for line in [
        "auth.keys[0] = { kid = \"k1\", alg = \"HS256\", secret = \"********\" (21 bytes) }",
        "auth.keys[1] = { kid = \"k2\", alg = \"RS256\", public_key_file = \"/idp.pem\" }",
        "cluster.accept_secrets = [\"********\"]",
        "cluster.secret = \"********\" (22 bytes)",
        "auth.issuer = \"\"",
    ] {
        assert!(report.contains(line), "missing {line:?} in:\n{report}");
    }
}

#[test]
fn publish_keys_are_checked_with_their_range() {
    let cfg = Config::from_toml("[plans.free]\n", &|_| None).unwrap();
    assert_eq!(cfg.publish.idempotency_window_ms, 300_000);
    let all = Config::from_toml(
        "[plans.free]\n[publish]\nidempotency_window_ms = 0\nidempotency_max_keys = 0\n",
        &|_| None,
    )
    .unwrap_err()
    .problems;
    assert!(
        all.contains(
            &"publish.idempotency_window_ms: must be from 1 to 86400000 (a day), not 0".to_string()
        ),
        "{all:?}"
    );
    assert!(
        all.contains(
            &"publish.idempotency_max_keys: must be from 1 to 10000000, not 0".to_string()
        ),
        "{all:?}"
    );
    let env = env_of(&[("TIDEGATE_PUBLISH_IDEMPOTENCY_WINDOW_MS", "2500")]);
    let cfg = Config::from_toml("[plans.free]\n", &env).unwrap();
    assert_eq!(cfg.publish.idempotency_window_ms, 2500);
}

#[test]
fn a_plan_over_what_an_sse_position_holds_is_warned_about() {
    // The shipped plans fit (pro: 500 of 510).
    let shipped = Config::embedded();
    assert!(
        !shipped.warnings.iter().any(|w| w.contains("SSE")),
        "{:?}",
        shipped.warnings
    );
    let config = parse("[plans.free]\n[plans.huge]\nmax_subscriptions = 600\n").unwrap();
    let warned: Vec<_> = config
        .warnings
        .iter()
        .filter(|w| w.contains("SSE"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", config.warnings);
    assert!(
        warned[0].starts_with("plans.huge.max_subscriptions is 600")
            && warned[0].contains("capped at 510"),
        "{}",
        warned[0]
    );
}
