//! Who is asking (§12 identity): `Authorization: Bearer <api key>` (a
//! backend, charged to the key's bucket that HTTP and gRPC publish share)
//! or `Bearer <JWT>` (a browser, charged to its account's budget,
//! cluster-wide, with the token's plan and globs).

use std::sync::Arc;

use crate::admission::{TokenTimes, Who};
use crate::auth::Grants;
use crate::charge::KeyState;
use crate::config::Limits;
use crate::node::Node;
use crate::protocol::glob::GlobSet;

/// Whose bucket pays.
#[derive(Debug, Clone)]
pub enum Payer {
    /// The API key's bucket (its account plan's burst and rate).
    Key(Arc<KeyState>),
    /// The account's message budget.
    Account,
}

/// Where a caller asks from, as backend hooks are told (§15's `client`).
#[derive(Debug, Clone)]
pub struct Origin {
    /// The socket's label, or one per HTTP request.
    pub conn_id: Arc<str>,
    pub ip: std::net::IpAddr,
    /// `graphql-ws` or `http`.
    pub transport: &'static str,
}

/// An identified caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: String,
    pub plan: String,
    pub limits: Arc<Limits>,
    pub payer: Payer,
    /// A token's globs (an API key's live in its [`KeyState`]).
    grants: Option<Grants>,
    /// A token's claims the socket keeps (`None` for an API key).
    token: Option<Token>,
    /// Set by the front once it knows it; hooks are asked only with it.
    pub origin: Option<Origin>,
}

/// What a WebSocket keeps of a caller's token.
#[derive(Debug, Clone)]
struct Token {
    plan: Option<String>,
    role: Option<String>,
    times: TokenTimes,
    /// The `info` claim as compact JSON: hooks are told it (§15's
    /// `client.info`).
    info: Option<Arc<str>>,
}

/// Why no caller could be identified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unidentified {
    #[error("send `Authorization: Bearer <api key or token>`")]
    Missing,
    #[error("the credential is neither a configured API key nor a valid token: {0}")]
    Invalid(String),
    #[error("the token names a plan that does not exist: {0:?}")]
    UnknownPlan(String),
}

impl Caller {
    /// The caller named by an `Authorization` header value.
    pub fn identify(node: &Node, authorization: Option<&str>) -> Result<Caller, Unidentified> {
        let value = authorization.ok_or(Unidentified::Missing)?;
        let credential = crate::admission::bearer(value).ok_or(Unidentified::Missing)?;
        let config = node.config.load();
        if let Some(key) = node.keys.load().get(credential) {
            return Ok(Caller {
                plan: config.plan_name(&key.account, None).to_owned(),
                limits: config.account_limits(&key.account),
                account: key.account.clone(),
                payer: Payer::Key(key),
                grants: None,
                token: None,
                origin: None,
            });
        }
        let auth = node.auth.load();
        let claims = auth
            .verify(credential)
            .map_err(|e| Unidentified::Invalid(e.to_string()))?;
        let limits = config
            .limits_for(&claims.sub, claims.plan.as_deref())
            .map_err(|e| Unidentified::UnknownPlan(e.0))?;
        Ok(Caller {
            plan: config
                .plan_name(&claims.sub, claims.plan.as_deref())
                .to_owned(),
            limits,
            grants: Some(claims.grants()),
            token: Some(Token {
                plan: claims.plan.clone(),
                role: claims.role.clone(),
                info: claims.info_json(),
                times: TokenTimes {
                    expires_at_ms: claims.expires_at_ms(),
                    deadline: auth.deadline(&claims),
                },
            }),
            account: claims.sub,
            payer: Payer::Account,
            origin: None,
        })
    }

    /// Whom a WebSocket of this caller belongs to, for the §1 layers after
    /// the credential (`admission::Who`, which `dialect::Link::admit` takes).
    pub fn who(&self) -> Who {
        let grants = match (&self.payer, &self.grants) {
            (_, Some(g)) => g.clone(),
            (Payer::Key(k), None) => Grants {
                subscribe: k.subscribe.clone(),
                publish: k.publish.clone(),
            },
            (Payer::Account, None) => Grants {
                subscribe: GlobSet::new::<&str>(&[]),
                publish: GlobSet::new::<&str>(&[]),
            },
        };
        Who {
            account: self.account.clone(),
            plan: self.token.as_ref().and_then(|t| t.plan.clone()),
            role: self.token.as_ref().and_then(|t| t.role.clone()),
            limits: self.limits.clone(),
            grants,
            token: self.token.as_ref().map(|t| t.times),
            info: None,
        }
    }

    /// What a backend hook is told of this caller: a token's only (an API
    /// key is the backend itself and never calls a hook, §15), once the
    /// front set its [`Origin`].
    pub fn hook_client(&self) -> Option<crate::hooks::Client> {
        let token = self.token.as_ref()?;
        let origin = self.origin.as_ref()?;
        Some(crate::hooks::Client {
            conn_id: origin.conn_id.clone(),
            ip: origin.ip,
            transport: origin.transport,
            sub: Some(self.account.as_str().into()),
            plan: token.plan.clone(),
            info: token.info.clone(),
        })
    }

    /// Whether the caller may read `channel` (its `sub_channels`).
    pub fn may_read(&self, channel: &str) -> bool {
        match (&self.payer, &self.grants) {
            (_, Some(g)) => g.subscribe.matches(channel),
            (Payer::Key(k), None) => k.subscribe.matches(channel),
            (Payer::Account, None) => false,
        }
    }

    /// Whether the caller may publish on `channel` (its `pub_channels`).
    pub fn may_publish(&self, channel: &str) -> bool {
        match (&self.payer, &self.grants) {
            (_, Some(g)) => g.publish.matches(channel),
            (Payer::Key(k), None) => k.publish.matches(channel),
            (Payer::Account, None) => false,
        }
    }

    /// The capacity of the bucket this caller is charged from.
    pub fn capacity(&self, share: f64) -> u64 {
        (f64::from(self.limits.account_burst) * share) as u64
    }

    /// The largest price of one operation (`graphql_max_single`, 0: the
    /// capacity of the caller's bucket).
    pub fn max_single(&self, share: f64) -> u64 {
        match self.limits.costs.graphql_max_single {
            0 => self.capacity(share),
            n => u64::from(n).min(self.capacity(share).max(1)),
        }
    }
}
