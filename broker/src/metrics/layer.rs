//! The layers of the ladder a refusal is counted under
//! (`tidegate_rejections_total{layer}`).

/// Where a refusal happened (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Handshake,
    Connection,
    Account,
    Rule,
    Outbound,
    Http,
    Grpc,
    Graphql,
    /// A backend hook's refusal (§15).
    Hook,
}

impl Layer {
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::Handshake => "handshake",
            Layer::Connection => "connection",
            Layer::Account => "account",
            Layer::Rule => "rule",
            Layer::Outbound => "outbound",
            Layer::Http => "http",
            Layer::Grpc => "grpc",
            Layer::Graphql => "graphql",
            Layer::Hook => "hook",
        }
    }
}
