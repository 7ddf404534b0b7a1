//! Wiring: routes, the HTTP server, and the `run(listener, config,
//! shutdown)` entry point that both the binary and the tests use.

use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_http::{HttpService, Protocol, Request, h1};
use actix_service::{
    IntoServiceFactory, ServiceFactory, ServiceFactoryExt, fn_factory, fn_service, map_config,
};
use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::dev::{AppConfig, Service};
use actix_web::rt::net::TcpStream;
use actix_web::{App, web};

use crate::config::Config;
use crate::http;
use crate::node::Node;
use crate::socket;
use crate::unfinished::{self, Watched, WatchedStream};

/// How often idle channels are forgotten.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

pub fn routes(cfg: &mut web::ServiceConfig) {
    // Upgrade requests are taken before the router (`serve_with_grpc`).
    cfg.service(
        resource(socket::handshake::PATH).route(web::get().to(socket::handshake::not_upgraded)),
    )
    .service(resource(socket::sse::PATH).route(web::get().to(socket::sse::stream)))
    .service(
        resource(http::client_publish::PATH).route(web::post().to(http::client_publish::publish)),
    )
    .service(resource("/v1/publish").route(web::post().to(http::publish::publish)))
    .service(resource("/v1/publish/batch").route(web::post().to(http::publish::publish_batch)))
    .service(resource("/v1/presence").route(web::get().to(http::presence::get)))
    .service(
        resource(crate::graphql::PATH)
            .route(web::post().to(crate::graphql::over_http::post))
            .route(web::get().to(crate::graphql::over_http::get)),
    )
    .service(resource(crate::graphql::SCHEMA_PATH).route(web::get().to(crate::graphql::schema_sdl)))
    .service(resource(crate::graphql::PRICES_PATH).route(web::get().to(crate::graphql::prices)))
    .service(resource("/healthz").route(web::get().to(http::ops::healthz)))
    .service(resource("/readyz").route(web::get().to(http::ops::readyz)))
    .service(resource("/metrics").route(web::get().to(http::ops::metrics)));
    crate::admin::routes(cfg);
    crate::pusher::api::routes(cfg);
    cfg.default_service(web::to(|| async { not_found() }));
}

pub use crate::refusal::{method_not_allowed, not_found, resource};

/// Serves `config` on `listener` until `shutdown` completes. Must run
/// inside an actix system (`actix_rt::System`).
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let node = Node::new(config).map_err(io::Error::other)?;
    serve(listener, node, shutdown).await
}

/// [`run`] for a node the caller already built (to keep a handle on it).
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_with_grpc(listener, None, node, shutdown).await
}

/// [`serve`], plus the gRPC API (§8) on `grpc` when given: it runs on its
/// own runtime and joins the drain (streams end within the window).
pub async fn serve_with_grpc(
    listener: TcpListener,
    grpc: Option<TcpListener>,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let config = node.config.load_full();
    let grpc = grpc
        .map(|l| crate::grpc::start(node.clone(), l))
        .transpose()?;
    let workers = match config.node.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let send_buffer = config.socket.send_buffer_bytes;
    let data = web::Data::new(node.clone());
    listener.set_nonblocking(true)?;
    let accepted = node.clone();
    // The main thread's runtime (sweeper, admin, bridge) and, as each
    // builds its app, every worker's: their tasks in /metrics.
    node.metrics.alive.this_runtime("actix");
    // GraphQL operations run on their own runtime, off the workers.
    crate::graphql::executor::start(&node);
    let workers_node = node.clone();
    let request_timeout = Duration::from_millis(config.handshake.request_timeout_ms);
    let disconnect_timeout = Duration::from_millis(config.socket.close_timeout_ms);
    let local = listener.local_addr()?;
    // One worker's HTTP service over connections of type `$io` (plain TCP
    // or TLS); a macro because the two differ only in that type.
    macro_rules! http_service {
        ($io:ty) => {{
            let node = workers_node.clone();
            node.metrics.alive.this_runtime("actix");
            let app = App::new()
                .app_data(data.clone())
                .configure(routes)
                // Cross-origin pages for the SSE stream and client
                // publish (§14, `[http] cors_origins`).
                .wrap(actix_web::middleware::from_fn(crate::cors::middleware))
                // Outermost, so it sees every request (a preflight the
                // CORS layer answers too): the head arrived whole; the
                // connection stays an unfinished one until the body is
                // whole too, then until it is answered and the next head
                // starts (see `unfinished`).
                .wrap(actix_web::middleware::from_fn(crate::unfinished::middleware))
                .into_factory()
                .map_err(|e: actix_web::Error| e.as_response_error().error_response());
            let accepted = accepted.clone();
            let upgrades = node.clone();
            HttpService::build()
                // Slowloris: the head must be whole this long after the
                // accept.
                .client_request_timeout(request_timeout)
                // How long a finished connection waits for the client to
                // stop sending (a response whose request body was not
                // read); WebSockets own their connection and linger
                // themselves (`socket::Transport`).
                .client_disconnect_timeout(disconnect_timeout)
                // A client's end of file ends its connection: an SSE
                // stream's reader that went away frees its places at once
                // instead of at the next write (`socket/sse/`).
                .h1_allow_half_closed(false)
                // Realtime frames must not wait for Nagle's algorithm:
                // without this, a small frame written while an earlier one
                // is unacked waits for the peer's delayed ACK (up to 40 ms
                // on Linux).
                .tcp_nodelay(true)
                .local_addr(local)
                .on_connect_ext(move |io: &$io, ext| {
                    let tcp = WatchedStream::tcp(io);
                    if send_buffer > 0 {
                        // Best effort: the OS may round or cap the size.
                        let _ = socket2::SockRef::from(tcp).set_send_buffer_size(send_buffer);
                    }
                    crate::unfinished::on_connect(&accepted, io.watch(), tcp, ext);
                })
                // Every upgrade request, with its connection: the socket
                // takes the TCP stream out of the h1 dispatcher and its
                // buffers (`socket/transport.rs`).
                .upgrade(fn_service(
                    move |(req, framed): (Request, actix_codec::Framed<$io, h1::Codec>)| {
                        let node = upgrades.clone();
                        async move {
                            // A peer gone mid-handshake is routine, not
                            // an error worth actix's error log.
                            let routes = &[crate::graphql::ws::ROUTE, crate::pusher::ROUTE];
                            if let Err(e) =
                                socket::handshake::upgrade(node, req, framed, routes).await
                            {
                                tracing::debug!(error = %e, "upgrade connection ended");
                            }
                            Ok::<(), actix_web::Error>(())
                        }
                    },
                ))
                .finish(map_config(app, |()| AppConfig::default()))
        }};
    }
    let builder = actix_server::Server::build()
        .workers(workers)
        .disable_signals()
        .shutdown_timeout(1);
    // Each connection's stream is `Watched`: request heads after the first
    // have a deadline too (`unfinished`).
    let server = match &node.tls.http {
        // A stream that is a connection's first request takes it whole
        // (`socket/sse/tcp.rs`); the rest goes to the HTTP service.
        None => {
            let node = node.clone();
            builder.listen("tidegate", listener, move || {
                let http = http_service!(Watched<TcpStream>);
                let node = node.clone();
                fn_factory(move || {
                    let http = http.new_service(());
                    let node = node.clone();
                    async move {
                        let http = Rc::new(http.await?);
                        // actix-http's defaults, as `HttpService::build`.
                        let codec = actix_http::ServiceConfig::new(
                            actix_http::KeepAlive::default(),
                            request_timeout,
                            disconnect_timeout,
                            false,
                            Some(local),
                        );
                        let taker = socket::sse::Taker::new(node, codec, crate::cors::decorate);
                        Ok::<_, ()>(fn_service(move |io: TcpStream| {
                            let (http, taker) = (http.clone(), taker.clone());
                            async move {
                                let _ = io.set_nodelay(true);
                                let peer = io.peer_addr().ok();
                                match taker.first(io).await {
                                    Some(io) => http.call((io, Protocol::Http1, peer)).await,
                                    None => Ok(()),
                                }
                            }
                        }))
                    }
                })
            })?
        }
        // TLS (`[node] tls_cert_file`): the certificate comes from the
        // node's store on every handshake, so SIGHUP swaps it. The
        // handshake is part of the unfinished request: counted per
        // address from the accept, under the head's deadline
        // (`unfinished/tls.rs`).
        Some(store) => {
            let tls = Arc::new(crate::tls::server_config(store.clone(), &[b"http/1.1"]));
            let node = node.clone();
            builder.listen("tidegate", listener, move || {
                let http = http_service!(TlsStream<Watched<TcpStream>>);
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
                let node = node.clone();
                fn_factory(move || {
                    let http = http.new_service(());
                    let (node, acceptor) = (node.clone(), acceptor.clone());
                    async move {
                        let http = Rc::new(http.await?);
                        Ok::<_, ()>(fn_service(move |io: TcpStream| {
                            let (http, node, acceptor) =
                                (http.clone(), node.clone(), acceptor.clone());
                            async move {
                                let Some(io) =
                                    unfinished::tls::handshake(&node, &acceptor, io).await
                                else {
                                    return Ok(());
                                };
                                let peer = io.tcp().peer_addr().ok();
                                http.call((io, Protocol::Http1, peer)).await
                            }
                        }))
                    }
                })
            })?
        }
    }
    .run();
    let handle = server.handle();
    let sweeper = {
        let node = node.clone();
        actix_rt::spawn(async move {
            let mut tick = actix_rt::time::interval(SWEEP_INTERVAL);
            loop {
                tick.tick().await;
                let now = std::time::Instant::now();
                node.hub.sweep();
                node.idempotency.sweep(now);
                node.gate.sweep(now);
                node.rules.sweep(now);
                node.admin.sweep(now);
            }
        })
    };
    // Ready once listening and, in a cluster, once the bridge first
    // connected or 5 s passed (§7): a node without Redis still serves.
    let connected = node.bridge.clone().start();
    node.presence.start();
    crate::admin::spawn(node.clone());
    {
        let node = node.clone();
        actix_rt::spawn(async move {
            let _ = actix_rt::time::timeout(Duration::from_secs(5), connected).await;
            node.set_ready(true);
        });
    }
    tracing::info!(node = %config.node.id, workers, "serving");

    let mut server = std::pin::pin!(server);
    let result = tokio::select! {
        r = &mut server => r,
        () = shutdown => {
            // Keep serving (handshakes get 503 draining) while sockets are
            // closed in batches; the server future must go on being polled.
            let window = Duration::from_millis(config.cluster.drain_ms);
            let deadline = std::time::Instant::now() + window;
            if let Some(g) = &grpc {
                g.drain(window.mul_f64(crate::drain::SPREAD));
            }
            let drained = async {
                crate::drain::drain(&node, window).await;
                if let Some(g) = &grpc {
                    g.until_idle(deadline).await;
                }
            };
            tokio::select! {
                r = &mut server => r,
                () = drained => {
                    // The command is sent now; the server carries it out.
                    let _stopped = handle.stop(true);
                    server.await
                }
            }
        }
    };
    sweeper.abort();
    if let Some(g) = grpc {
        g.stop().await;
    }
    result
}
