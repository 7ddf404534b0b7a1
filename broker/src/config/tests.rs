use super::*;

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
