//! The webhooks' own thread and Tokio runtime. Requests to receivers, their
//! timeouts and retries all run here, so a slow receiver can never hold an
//! actix worker (which serve the sockets) for a moment; the broker's side
//! only pushes to queues.

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Runs until dropped.
#[derive(Debug)]
pub struct Runtime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl Runtime {
    pub fn start() -> std::io::Result<Runtime> {
        Runtime::start_named("tidegate-webhooks")
    }

    /// A runtime on a thread of this name (the hooks have their own).
    pub fn start_named(name: &str) -> std::io::Result<Runtime> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stop_rx.await;
                });
                // Dropping the runtime cancels every endpoint's task and
                // request still in flight.
            })?;
        let handle = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("webhook runtime thread ended at start"))??;
        Ok(Runtime {
            handle,
            stop: Some(stop_tx),
        })
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
