//! What cluster mode asks of `[cluster]` besides a URL: the secret that
//! signs the nodes' control messages, and the files of a `rediss://`
//! connection.
//!
//! The secret is required whenever the node talks to Redis: without it
//! anyone allowed to `PUBLISH` there could ban or disconnect any client
//! (docs/operating.md, "Security"). There is no default and no sample: a
//! node refuses to start in cluster mode until it is given one.

use super::ClusterSection;
use super::report::mask_url_password;
use super::secret::{ClusterSecrets, MIN_SECRET_BYTES, Secret};

/// The secrets `[cluster]` gives, with a problem for each that is missing
/// or too short.
pub(super) fn secrets(cluster: &ClusterSection, problems: &mut Vec<String>) -> ClusterSecrets {
    let mut check = |path: String, s: &str| {
        if s.len() < MIN_SECRET_BYTES {
            problems.push(format!("{path}: must be at least {MIN_SECRET_BYTES} bytes"));
        }
    };
    if !cluster.secret.is_empty() {
        check("cluster.secret".into(), &cluster.secret);
    }
    for (i, s) in cluster.accept_secrets.iter().enumerate() {
        check(format!("cluster.accept_secrets[{i}]"), s);
    }
    if cluster.mode.uses_redis() && cluster.secret.is_empty() {
        problems.push(
            "cluster.secret: cluster mode needs a secret shared by every node, which signs the control messages (bans, disconnects, account breaches) they send each other through Redis: set TIDEGATE_CLUSTER_SECRET (at least 16 random bytes, the same on every node)".into(),
        );
    }
    ClusterSecrets {
        sign: (!cluster.secret.is_empty()).then(|| Secret(cluster.secret.clone().into_bytes())),
        accept: cluster
            .accept_secrets
            .iter()
            .map(|s| Secret(s.clone().into_bytes()))
            .collect(),
    }
}

/// The URL's scheme and the `rediss://` files.
pub(super) fn redis_problems(cluster: &ClusterSection, problems: &mut Vec<String>) {
    if !cluster.mode.uses_redis() {
        return;
    }
    let url = &cluster.redis_url;
    let tls = url.starts_with("rediss://");
    if !(tls || url.starts_with("redis://") || url.starts_with("unix://")) {
        problems.push(format!(
            "cluster.redis_url: {:?} is not a redis:// or rediss:// URL",
            mask_url_password(url)
        ));
    }
    let files = [
        ("redis_ca_file", &cluster.redis_ca_file),
        ("redis_cert_file", &cluster.redis_cert_file),
        ("redis_key_file", &cluster.redis_key_file),
    ];
    for (key, value) in files {
        if !value.is_empty() && !tls {
            problems.push(format!(
                "cluster.{key}: only used with a rediss:// URL (TLS); redis_url is {:?}",
                mask_url_password(url)
            ));
        }
    }
    if cluster.redis_cert_file.is_empty() != cluster.redis_key_file.is_empty() {
        problems.push(
            "cluster.redis_cert_file: give both redis_cert_file and redis_key_file (a client certificate and its key), or neither".into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn problems(cluster: &str) -> Vec<String> {
        let text = format!("[plans.free]\n[cluster]\n{cluster}");
        match Config::from_toml(&text, &|_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    const SECRET: &str = "secret = \"a-cluster-secret-0123\"\n";

    /// Fails unless some problem contains `needle`.
    fn assert_has(problems: &[String], needle: &str) {
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "missing {needle:?} in {problems:?}"
        );
    }

    #[test]
    fn cluster_mode_needs_a_secret() {
        let missing = problems("mode = \"redis\"\n");
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains("TIDEGATE_CLUSTER_SECRET"),
            "{missing:?}"
        );
        assert!(problems(&format!("mode = \"redis\"\n{SECRET}")).is_empty());
        assert!(
            problems("mode = \"memory\"\n").is_empty(),
            "one node has no peers"
        );
        let short =
            problems("mode = \"redis\"\nsecret = \"short\"\naccept_secrets = [\"also-short\"]\n");
        assert_has(&short, "cluster.secret: must be");
        assert_has(&short, "cluster.accept_secrets[0]");
    }

    #[test]
    fn the_secret_comes_from_the_environment_too() {
        let env =
            |k: &str| (k == "TIDEGATE_CLUSTER_SECRET").then(|| "from-env-0123456789".to_string());
        let config =
            Config::from_toml("[plans.free]\n[cluster]\nmode = \"redis\"\n", &env).unwrap();
        assert_eq!(
            config.cluster_secrets.sign.unwrap().0,
            b"from-env-0123456789"
        );
    }

    #[test]
    fn rediss_urls_and_their_files() {
        assert!(problems(&format!("mode = \"redis\"\n{SECRET}redis_url = \"rediss://db:6380/\"\nredis_ca_file = \"/ca.pem\"\n")).is_empty());
        let plain = problems(&format!(
            "mode = \"redis\"\n{SECRET}redis_url = \"redis://:pw@db/\"\nredis_ca_file = \"/ca.pem\"\nredis_cert_file = \"/c.pem\"\n"
        ));
        assert_has(&plain, "cluster.redis_ca_file: only used with a rediss://");
        assert_has(&plain, "give both redis_cert_file and redis_key_file");
        assert!(
            plain.iter().all(|p| !p.contains(":pw@")),
            "the password is masked: {plain:?}"
        );
        let bad = problems(&format!(
            "mode = \"redis\"\n{SECRET}redis_url = \"http://:hunter2@db/\"\n"
        ));
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].contains("http://:********@db/"), "{bad:?}");
    }
}
