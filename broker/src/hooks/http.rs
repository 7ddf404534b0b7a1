//! A [`Decision`] as the HTTP fronts say it (§15's Details): a handshake,
//! an SSE stream and `POST /v1/client/publish` answer a hook's `error`
//! 403 with §1's body and the hook's code, `hook_unavailable` 503 with
//! `Retry-After`, and a `disconnect` 403 `forbidden` (there is no
//! connection yet to close with its code). One wording, so those fronts
//! cannot drift; each only sends the response.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use super::Decision;
use crate::exceeded::Exceeded;
use crate::metrics::hooks::hook_reason;
use crate::metrics::{Layer, Metrics};
use crate::protocol::ErrorCode;

/// What an HTTP front answers for a decision that does not allow.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRefusal {
    pub status: StatusCode,
    /// The hook's own code, or the broker's (`forbidden`, `hook_unavailable`).
    pub code: String,
    pub message: String,
    pub retry_after: Option<Duration>,
    /// The `reason` label under `layer="hook"`.
    pub reason: &'static str,
}

impl HttpRefusal {
    /// Counts the refusal under `layer="hook"` and words it as §1's body.
    pub fn respond(&self, account: &str, metrics: &Metrics) -> HttpResponse {
        let mut e = Exceeded::new(Layer::Hook, self.reason, account);
        if let Some(d) = self.retry_after {
            e = e.reset(d);
        }
        e.emit(metrics);
        crate::refusal::refusal_code(self.status, &self.code, &self.message, self.retry_after)
    }
}

impl Decision {
    /// `None` when it allows; else the refusal. `what` names the operation
    /// in the broker's own messages ("this connection", "this publish").
    pub fn http_refusal(&self, what: &str) -> Option<HttpRefusal> {
        match self {
            Decision::Allowed { .. } => None,
            Decision::Refused {
                code,
                message,
                retry_after_ms,
            } => Some(HttpRefusal {
                status: StatusCode::FORBIDDEN,
                code: code.clone(),
                message: message.clone(),
                retry_after: retry_after_ms.map(Duration::from_millis),
                reason: hook_reason(code),
            }),
            Decision::Disconnect { reason, .. } => Some(HttpRefusal {
                status: StatusCode::FORBIDDEN,
                code: ErrorCode::Forbidden.as_str().to_owned(),
                message: if reason.is_empty() {
                    format!("the backend refused {what}")
                } else {
                    reason.clone()
                },
                retry_after: None,
                reason: "disconnected",
            }),
            Decision::Unavailable { retry_after } => Some(HttpRefusal {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: ErrorCode::HookUnavailable.as_str().to_owned(),
                message: format!("the backend deciding {what} did not answer; try again later"),
                retry_after: Some(*retry_after),
                reason: ErrorCode::HookUnavailable.as_str(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_decision_has_its_status_and_code() {
        let allowed = Decision::Allowed {
            result: Default::default(),
            failed_open: false,
        };
        assert_eq!(allowed.http_refusal("x"), None);
        let refused = Decision::Refused {
            code: "not_member".into(),
            message: "no".into(),
            retry_after_ms: Some(1500),
        }
        .http_refusal("x")
        .unwrap();
        assert_eq!(
            (refused.status, refused.code.as_str(), refused.retry_after),
            (
                StatusCode::FORBIDDEN,
                "not_member",
                Some(Duration::from_millis(1500))
            )
        );
        let gone = Decision::Disconnect {
            code: 4403,
            reason: String::new(),
        }
        .http_refusal("this connection")
        .unwrap();
        assert_eq!(
            (gone.status, gone.code.as_str()),
            (StatusCode::FORBIDDEN, "forbidden")
        );
        assert_eq!(gone.message, "the backend refused this connection");
        let down = Decision::Unavailable {
            retry_after: Duration::from_secs(2),
        }
        .http_refusal("x")
        .unwrap();
        assert_eq!(
            (down.status, down.code.as_str(), down.retry_after),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "hook_unavailable",
                Some(Duration::from_secs(2))
            )
        );
    }
}
