//! What is alive in the process beside memory and descriptors: tokio tasks
//! on each runtime the node runs on, and actix actors by kind
//! (`tidegate_runtime_alive_tasks{runtime}`, `tidegate_actors{kind}`). A
//! leak of either shows as a count that keeps climbing under steady churn
//! (the soak charts both).
//!
//! Tasks: tokio's `RuntimeMetrics::num_alive_tasks` of every runtime that
//! registered here: each actix worker's and the main thread's (one
//! current-thread runtime each, summed under `actix`), the gRPC server's
//! and the webhooks' (started with their first endpoint). It counts tasks
//! spawned with `tokio::spawn`; what actix spawns lives in each worker's
//! `LocalSet`, which tokio does not count, so the actors are counted here
//! themselves, each from its creation to its drop.

use std::thread::ThreadId;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::runtime::Handle;

/// The kinds of actor counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    /// One per WebSocket.
    Socket,
    /// One per account with a socket on this node.
    AccountSupervisor,
}

impl ActorKind {
    const fn as_str(self) -> &'static str {
        match self {
            ActorKind::Socket => "socket",
            ActorKind::AccountSupervisor => "account_supervisor",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuntimeLabels {
    runtime: &'static str,
}

/// A registered runtime: its name and, for a current-thread runtime, the
/// thread that runs it (so a worker registering twice counts once).
struct Registered {
    name: &'static str,
    thread: Option<ThreadId>,
    handle: Handle,
}

/// The node's live tasks and actors.
#[derive(Default)]
pub struct Alive {
    runtimes: Mutex<Vec<Registered>>,
    tasks: Family<RuntimeLabels, Gauge>,
    actors: Family<KindLabels, Gauge>,
}

impl std::fmt::Debug for Alive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Alive({} runtimes)", self.runtimes.lock().len())
    }
}

impl Alive {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "runtime_alive_tasks",
            "Tokio tasks alive, by runtime (sampled at scrape; actix actors are in tidegate_actors)",
            self.tasks.clone(),
        );
        registry.register(
            "actors",
            "Actix actors alive, by kind (from creation to drop)",
            self.actors.clone(),
        );
    }

    /// Counts `handle`'s tasks under `name` from now on. A current-thread
    /// runtime is registered once per thread; any other once per name.
    pub fn runtime(&self, name: &'static str, handle: Handle, current_thread: bool) {
        let thread = current_thread.then(|| std::thread::current().id());
        let mut all = self.runtimes.lock();
        if all.iter().any(|r| r.name == name && r.thread == thread) {
            return;
        }
        all.push(Registered {
            name,
            thread,
            handle,
        });
    }

    /// Registers the runtime of the calling thread, if it has one.
    pub fn this_runtime(&self, name: &'static str) {
        if let Ok(handle) = Handle::try_current() {
            self.runtime(name, handle, true);
        }
    }

    /// Sets the task gauges from the runtimes (at scrape).
    pub fn refresh(&self) {
        let all = self.runtimes.lock();
        let mut sums: Vec<(&'static str, usize)> = Vec::new();
        for r in all.iter() {
            let n = r.handle.metrics().num_alive_tasks();
            match sums.iter_mut().find(|(name, _)| *name == r.name) {
                Some((_, sum)) => *sum += n,
                None => sums.push((r.name, n)),
            }
        }
        for (runtime, n) in sums {
            self.tasks
                .get_or_create(&RuntimeLabels { runtime })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// One actor of `kind`, counted while the returned guard lives (keep
    /// it in the actor's struct).
    pub fn actor(&self, kind: ActorKind) -> ActorGuard {
        let gauge = self
            .actors
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .clone();
        gauge.inc();
        ActorGuard(gauge)
    }
}

/// Counts one actor in `tidegate_actors` until dropped.
#[derive(Debug)]
pub struct ActorGuard(Gauge);

impl Drop for ActorGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
