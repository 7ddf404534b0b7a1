//! A real HTTP receiver for webhook tests: an actix-web server on a free
//! port, in its own thread, answering each request as its script says and
//! reporting every request (headers, body, arrival time) to the test.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::common::PATIENCE;

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Got {
    pub at: Instant,
    pub id: String,
    pub timestamp: u64,
    pub signature: String,
    /// Pusher's scheme (§16): `X-Pusher-Key` and `X-Pusher-Signature`.
    pub pusher_key: String,
    pub pusher_signature: String,
    pub raw: Vec<u8>,
    pub body: Value,
}

/// How to answer one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status with headers and an empty body.
    Status(u16, Vec<(&'static str, String)>),
    /// Never answer.
    Hang,
    /// 200 with a streamed body of this many bytes.
    Huge(usize),
    /// 200 after this long.
    Slow(std::time::Duration),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status(200, Vec::new())
    }

    pub fn status(code: u16) -> Reply {
        Reply::Status(code, Vec::new())
    }
}

type Script = Box<dyn FnMut(&Got) -> Reply + Send>;

struct Shared {
    script: Mutex<Script>,
    tx: mpsc::UnboundedSender<Got>,
    /// Bytes of `Huge` bodies produced so far.
    produced: Arc<AtomicUsize>,
    /// Ids being answered now, and how often one arrived while in flight.
    in_flight: Mutex<std::collections::HashSet<String>>,
    overlaps: AtomicUsize,
}

pub struct Receiver {
    pub url: String,
    rx: mpsc::UnboundedReceiver<Got>,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
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
    let got = Got {
        at: Instant::now(),
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp").parse().unwrap_or(0),
        signature: header("webhook-signature"),
        pusher_key: header("x-pusher-key"),
        pusher_signature: header("x-pusher-signature"),
        raw: body.to_vec(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let reply = (shared.script.lock().unwrap())(&got);
    let id = got.id.clone();
    let _ = shared.tx.send(got);
    match reply {
        Reply::Status(code, headers) => {
            let mut r = HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap());
            for (k, v) in headers {
                r.insert_header((k, v));
            }
            r.finish()
        }
        Reply::Slow(wait) => {
            if !shared.in_flight.lock().unwrap().insert(id.clone()) {
                shared.overlaps.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(wait).await;
            shared.in_flight.lock().unwrap().remove(&id);
            HttpResponse::Ok().finish()
        }
        Reply::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Reply::Huge(total) => {
            let produced = shared.produced.clone();
            let chunk = web::Bytes::from(vec![b'x'; 64 * 1024]);
            let stream = futures_util::stream::unfold(0usize, move |sent| {
                let chunk = chunk.clone();
                let produced = produced.clone();
                async move {
                    (sent < total).then(|| {
                        produced.fetch_add(chunk.len(), Ordering::Relaxed);
                        (Ok::<_, actix_web::Error>(chunk.clone()), sent + chunk.len())
                    })
                }
            });
            HttpResponse::Ok().streaming(stream)
        }
    }
}

impl Receiver {
    pub fn start(script: impl FnMut(&Got) -> Reply + Send + 'static) -> Receiver {
        Receiver::serve(script, None)
    }

    /// An https receiver presenting `tls`'s certificate (for `localhost`).
    pub fn start_tls(
        script: impl FnMut(&Got) -> Reply + Send + 'static,
        tls: rustls::ServerConfig,
    ) -> Receiver {
        Receiver::serve(script, Some(tls))
    }

    fn serve(
        script: impl FnMut(&Got) -> Reply + Send + 'static,
        tls: Option<rustls::ServerConfig>,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = match tls {
            None => format!("http://127.0.0.1:{port}/hook"),
            Some(_) => format!("https://localhost:{port}/hook"),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            script: Mutex::new(Box::new(script)),
            tx,
            produced: Arc::new(AtomicUsize::new(0)),
            in_flight: Mutex::new(Default::default()),
            overlaps: AtomicUsize::new(0),
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
                .shutdown_timeout(0);
                let server = match tls {
                    None => server.listen(listener),
                    Some(tls) => server.listen_rustls_0_23(listener, tls),
                }
                .unwrap()
                .run();
                handle_tx.send(server.handle()).unwrap();
                let _ = server.await;
            });
        });
        Receiver {
            url,
            rx,
            shared,
            handle: handle_rx.recv().unwrap(),
        }
    }

    /// A receiver that accepts everything.
    pub fn accepting() -> Receiver {
        Receiver::start(|_| Reply::ok())
    }

    /// Replaces the script.
    pub fn answer(&self, script: impl FnMut(&Got) -> Reply + Send + 'static) {
        *self.shared.script.lock().unwrap() = Box::new(script);
    }

    /// The next request (fails the test after [`PATIENCE`]).
    pub async fn next(&mut self) -> Got {
        tokio::time::timeout(PATIENCE, self.rx.recv())
            .await
            .expect("the receiver got no request in time")
            .expect("receiver stopped")
    }

    /// Requests already received and not yet read, without waiting.
    pub fn drain(&mut self) -> Vec<Got> {
        let mut out = Vec::new();
        while let Ok(g) = self.rx.try_recv() {
            out.push(g);
        }
        out
    }

    /// How often an event id arrived while a request with the same id was
    /// still being answered (`Slow` replies).
    pub fn overlaps(&self) -> usize {
        self.shared.overlaps.load(Ordering::Relaxed)
    }

    pub fn produced(&self) -> usize {
        self.shared.produced.load(Ordering::Relaxed)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // The stop command is sent at once; its completion is not awaited.
        drop(self.handle.stop(false));
    }
}
