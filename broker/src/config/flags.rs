//! What the command line sets over the file and the environment
//! (`--listen`, `--node-id`, `--grpc-listen`), and keeping those values
//! across a reload, so a SIGHUP never undoes a flag.

use super::validate::{NODE_ID_RULE, exposed, node_id_ok, sample_secret_problems};
use super::{Config, ConfigError, ResolvedApiKey, SAMPLE_API_KEY, Source};

impl Config {
    /// Applies the command line's `--listen` and `--node-id` over the file
    /// and the environment.
    pub fn apply_flags(
        &mut self,
        listen: Option<std::net::SocketAddr>,
        node_id: Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(id) = node_id {
            if !node_id_ok(&id) {
                return Err(ConfigError {
                    problems: vec![format!("{NODE_ID_RULE} (--node-id {id:?})")],
                });
            }
            self.node.id = id;
            self.sources
                .set("node.id".into(), Source::Flag("--node-id"));
        }
        if let Some(addr) = listen {
            self.set_listen(addr)?;
            self.sources
                .set("node.listen".into(), Source::Flag("--listen"));
        }
        Ok(())
    }

    /// A reloaded file does not undo the command line: values the running
    /// config took from a flag are kept.
    pub fn keep_flags_from(&mut self, running: &Config) -> Result<(), ConfigError> {
        let flag = |path: &str| matches!(running.sources.get(path), Source::Flag(_));
        let id = flag("node.id").then(|| running.node.id.clone());
        let listen = flag("node.listen").then_some(running.node.listen);
        self.apply_flags(listen, id)?;
        if flag("grpc.listen") {
            self.set_grpc_flag(running.grpc.listen)?;
        }
        Ok(())
    }

    /// Applies the command line's `--grpc-listen` (its variable,
    /// `TIDEGATE_GRPC_LISTEN`, is the config's own `grpc.listen`).
    pub fn set_grpc_flag(&mut self, addr: std::net::SocketAddr) -> Result<(), ConfigError> {
        self.set_grpc_listen(addr)?;
        self.sources
            .set("grpc.listen".into(), Source::Flag("--grpc-listen"));
        Ok(())
    }

    /// Moves the gRPC listener (`--grpc-listen`, or a reload keeping the
    /// running address), re-checking that the sample API key stays on
    /// loopback.
    pub fn set_grpc_listen(&mut self, addr: std::net::SocketAddr) -> Result<(), ConfigError> {
        self.grpc.listen = addr;
        if self.embedded {
            retire_sample_key(grpc_exposed(addr), &mut self.api_keys, &mut self.warnings);
        }
        let mut problems = Vec::new();
        self.grpc.sample_key_problems(&self.api_keys, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }

    /// Moves the listener (`--listen`), re-checking that the sample secrets
    /// stay on loopback.
    pub fn set_listen(&mut self, addr: std::net::SocketAddr) -> Result<(), ConfigError> {
        self.node.listen = addr;
        if self.embedded {
            retire_sample_key(exposed(&self.node), &mut self.api_keys, &mut self.warnings);
        }
        let problems = sample_secret_problems(&self.node, &self.jwt_keys, &self.api_keys);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}

/// Why the gRPC listener is reachable from other machines, if it is.
pub(super) fn grpc_exposed(listen: std::net::SocketAddr) -> Option<String> {
    (!listen.ip().is_loopback()).then(|| format!("grpc.listen is {listen}"))
}

/// The embedded default's sample API key is public: where a listener is
/// `exposed` it is dropped (HTTP publish then needs a key of the
/// operator's) rather than refusing to start a node whose operator gave the
/// JWT secret and meant to add keys later. An operator's own file with the
/// sample key is refused.
pub(super) fn retire_sample_key(
    exposed: Option<String>,
    keys: &mut Vec<ResolvedApiKey>,
    warnings: &mut Vec<String>,
) {
    let Some(why) = exposed else {
        return;
    };
    if !keys.iter().any(|k| k.key == SAMPLE_API_KEY) {
        return;
    }
    keys.retain(|k| k.key != SAMPLE_API_KEY);
    warnings.push(format!(
        "api_keys: the sample API key is not accepted where {why}; HTTP and gRPC publish need a key of yours (TIDEGATE_API_KEYS_0_KEY and TIDEGATE_API_KEYS_0_ACCOUNT)"
    ));
}
