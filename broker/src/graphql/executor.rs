//! Where GraphQL operations run: a multi-threaded tokio runtime of their
//! own, off the actix workers. An actix worker is one thread that serves
//! every socket and request it accepted; async-graphql validates and
//! executes a document in few polls, so a document that takes long would
//! stall all of them (issue 38: two requests held `/healthz` for 4.5 s).
//! The pricer bounds the work per document (`graphql_max_fields`), and
//! this keeps whatever an admitted document costs off the threads that
//! serve everything else; the handler awaits it without blocking its
//! worker.
//!
//! The runtime is built once per process, at the first serve, with one
//! thread per core (the operating system shares the cores between it and
//! the workers). What it runs is bounded by the requests and `subscribe`
//! messages in flight, each bounded by its connection.

use std::future::Future;
use std::sync::LazyLock;

use crate::node::Node;

static RUNTIME: LazyLock<Option<tokio::runtime::Runtime>> = LazyLock::new(|| {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("tidegate-graphql")
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            tracing::error!(error = %e, "the GraphQL runtime could not start: operations run on the workers");
            None
        }
    }
});

/// Builds the runtime (before the first request, so its threads and
/// descriptors are there from the start) and lists it among the node's
/// runtimes (`tidegate_runtime_alive_tasks{runtime="graphql"}`).
pub fn start(node: &Node) {
    if let Some(rt) = RUNTIME.as_ref() {
        node.metrics
            .alive
            .runtime("graphql", rt.handle().clone(), false);
    }
}

/// Runs `work` on the GraphQL runtime and waits for it without blocking
/// the caller's thread; `None` if it panicked (the caller answers with an
/// internal error).
pub async fn run<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> Option<T> {
    match RUNTIME.as_ref() {
        Some(rt) => match rt.spawn(work).await {
            Ok(out) => Some(out),
            Err(e) => {
                tracing::error!(error = %e, "a GraphQL operation failed");
                None
            }
        },
        None => Some(work.await),
    }
}
