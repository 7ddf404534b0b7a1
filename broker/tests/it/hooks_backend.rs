//! A real backend for hook tests: an actix-web server on a free port, in
//! its own thread, that verifies each request's Standard Webhooks
//! signature (HMAC-SHA256 written here, not the broker's), records it,
//! and answers as the test's script says. A gate can hold every answer
//! until the test opens it (single flight), never a sleep.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::sync::{Semaphore, mpsc};

use crate::common::PATIENCE;

/// The secret every hook test configures (raw text: its bytes are the key).
pub const SECRET: &str = "hook-secret-0123456789abcdefghij";

/// How the backend answers one call.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this JSON.
    Json(Value),
    /// This status with `{"result":{}}` (so only the status is wrong).
    Status(u16),
    /// 200 with a body that is not JSON.
    Junk,
    /// Never answer (the broker's timeout decides).
    Hang,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Json(serde_json::json!({"result": {}}))
    }

    pub fn result(v: Value) -> Reply {
        Reply::Json(serde_json::json!({ "result": v }))
    }

    pub fn error(code: &str) -> Reply {
        Reply::Json(serde_json::json!({"error": {"code": code, "message": "the backend says no"}}))
    }

    pub fn disconnect(code: u16) -> Reply {
        Reply::Json(serde_json::json!({"disconnect": {"code": code, "reason": "go away"}}))
    }
}

/// One call as the backend saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub body: Value,
    /// The signature verified with [`SECRET`].
    pub verified: bool,
}

type Script = Box<dyn FnMut(&Value) -> Reply + Send>;

struct Shared {
    script: Mutex<Script>,
    tx: mpsc::UnboundedSender<Call>,
    calls: AtomicUsize,
    /// `Some`: answers wait for a permit.
    gate: Mutex<Option<Arc<Semaphore>>>,
}

pub struct Backend {
    pub url: String,
    rx: mpsc::UnboundedReceiver<Call>,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
}

/// What a Standard Webhooks verifier checks: `v1,<base64 HMAC-SHA256 of
/// "id.timestamp.body">` among the space-separated signatures.
fn verify(secret: &[u8], id: &str, ts: &str, sig: &str, body: &[u8]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    !id.is_empty() && !ts.is_empty() && sig.split(' ').any(|s| s == expected)
}

async fn handle(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Arc<Shared>>,
) -> HttpResponse {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let verified = verify(
        SECRET.as_bytes(),
        &header("webhook-id"),
        &header("webhook-timestamp"),
        &header("webhook-signature"),
        &body,
    ) && header("content-type") == "application/json";
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = (shared.script.lock().unwrap())(&value);
    shared.calls.fetch_add(1, Ordering::SeqCst);
    let _ = shared.tx.send(Call {
        body: value,
        verified,
    });
    let gate = shared.gate.lock().unwrap().clone();
    if let Some(gate) = gate {
        gate.acquire().await.unwrap().forget();
    }
    match reply {
        Reply::Json(v) => HttpResponse::Ok().json(v),
        Reply::Status(code) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap())
                .json(serde_json::json!({"result": {}}))
        }
        Reply::Junk => HttpResponse::Ok().body("<html>not json</html>"),
        Reply::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
    }
}

impl Backend {
    pub fn start(script: impl FnMut(&Value) -> Reply + Send + 'static) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            script: Mutex::new(Box::new(script)),
            tx,
            calls: AtomicUsize::new(0),
            gate: Mutex::new(None),
        });
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let data = shared.clone();
        std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(web::Data::new(data.clone()))
                        .default_service(web::to(handle))
                })
                .workers(1)
                .disable_signals()
                .shutdown_timeout(0)
                .listen(listener)
                .unwrap()
                .run();
                handle_tx.send(server.handle()).unwrap();
                let _ = server.await;
            });
        });
        Backend {
            url: format!("http://127.0.0.1:{port}/tidegate/hook"),
            rx,
            shared,
            handle: handle_rx.recv().unwrap(),
        }
    }

    /// Replaces the script.
    pub fn answer(&self, script: impl FnMut(&Value) -> Reply + Send + 'static) {
        *self.shared.script.lock().unwrap() = Box::new(script);
    }

    /// Holds every answer until [`Backend::open`].
    pub fn close_gate(&self) {
        *self.shared.gate.lock().unwrap() = Some(Arc::new(Semaphore::new(0)));
    }

    pub fn open(&self) {
        if let Some(g) = self.shared.gate.lock().unwrap().take() {
            g.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    /// The next call (signature verified, or the test fails).
    pub async fn call(&mut self) -> Value {
        let call = tokio::time::timeout(PATIENCE, self.rx.recv())
            .await
            .expect("the backend was not called in time")
            .unwrap();
        assert!(
            call.verified,
            "a hook request without a valid signature: {:?}",
            call.body
        );
        call.body
    }

    /// Calls received so far.
    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// The `[[hooks]]` table for this backend.
    pub fn hook(&self, extra: &str) -> String {
        format!(
            "[[hooks]]\nid = \"app\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\n{extra}\n",
            self.url
        )
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.open();
        // The stop command is sent at once; its completion is not awaited.
        drop(self.handle.stop(false));
    }
}
