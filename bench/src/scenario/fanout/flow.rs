//! The fan-out loop both `fanout` and `slow` run: subscribers counting
//! what arrives (and its latency), publishers paced or closed-loop.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use tokio::sync::Notify;

use super::Rate;
use crate::report;
use crate::scenario::Tally;
use crate::target::{self, Conn, Event};
use crate::ws::Flow;

pub(in crate::scenario) struct Shared {
    pub(in crate::scenario) base: Instant,
    pub(in crate::scenario) subscribers: u64,
    pub(in crate::scenario) received: Cell<u64>,
    pub(in crate::scenario) in_window: Cell<u64>,
    pub(in crate::scenario) measuring: Cell<bool>,
    pub(in crate::scenario) published: Cell<u64>,
    pub(in crate::scenario) published_in_window: Cell<u64>,
    /// Deliveries written off by a stalled gate (a message that will
    /// never arrive must not hold the publisher forever).
    pub(in crate::scenario) forgiven: Cell<u64>,
    pub(in crate::scenario) wake_at: Cell<u64>,
    pub(in crate::scenario) wake: Notify,
    pub(in crate::scenario) acks: Cell<u64>,
    pub(in crate::scenario) closes: Cell<u64>,
    pub(in crate::scenario) stalls: Cell<u64>,
    pub(in crate::scenario) stop: Cell<bool>,
    pub(in crate::scenario) hist: RefCell<Histogram<u64>>,
    pub(in crate::scenario) errors: RefCell<Tally>,
}

impl Shared {
    pub(in crate::scenario) fn new(base: Instant, subscribers: usize) -> Rc<Shared> {
        Rc::new(Shared {
            base,
            subscribers: subscribers.max(1) as u64,
            received: Cell::new(0),
            in_window: Cell::new(0),
            measuring: Cell::new(false),
            published: Cell::new(0),
            published_in_window: Cell::new(0),
            forgiven: Cell::new(0),
            wake_at: Cell::new(u64::MAX),
            wake: Notify::new(),
            acks: Cell::new(0),
            closes: Cell::new(0),
            stalls: Cell::new(0),
            stop: Cell::new(false),
            hist: RefCell::new(report::histogram()),
            errors: RefCell::new(Tally::default()),
        })
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Messages every subscriber has, on average.
    fn delivered_msgs(&self) -> u64 {
        (self.received.get() + self.forgiven.get()) / self.subscribers
    }
}

pub(in crate::scenario) async fn subscriber(mut conn: Conn, sh: Rc<Shared>) {
    loop {
        let mut now_ns = 0u64;
        let mut closed = false;
        let r = conn
            .recv(|e| {
                match e {
                    Event::Message { data } => {
                        if now_ns == 0 {
                            now_ns = sh.now_ns();
                        }
                        sh.received.set(sh.received.get() + 1);
                        if sh.measuring.get() {
                            sh.in_window.set(sh.in_window.get() + 1);
                            if let Some((_, sent)) = target::parse_payload(data) {
                                let us = now_ns.saturating_sub(sent) / 1000;
                                let _ = sh.hist.borrow_mut().record(us.max(1));
                            }
                        }
                    }
                    Event::Closed { code } => {
                        sh.errors
                            .borrow_mut()
                            .add(format!("close {}", code.unwrap_or(0)), 1);
                        closed = true;
                    }
                    Event::Error { code, .. } => sh.errors.borrow_mut().add(code, 1),
                    _ => {}
                }
                Flow::Continue
            })
            .await;
        if sh.received.get() >= sh.wake_at.get() {
            sh.wake_at.set(u64::MAX);
            // Single-threaded: every waiting publisher is registered.
            sh.wake.notify_waiters();
        }
        if r.is_err() || closed {
            sh.closes.set(sh.closes.get() + 1);
            return;
        }
    }
}

/// What the publisher loop waits for next.
enum Next {
    Acks(Result<()>),
    Send(u64),
}

pub(in crate::scenario) async fn publisher(
    mut conn: Conn,
    sh: Rc<Shared>,
    topic: String,
    payload_bytes: usize,
    rate: Rate,
    window: u64,
    per_publisher_rate: f64,
) -> Result<()> {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut data = Vec::with_capacity(payload_bytes);
    let start = Instant::now();
    let mut sent_here = 0u64;
    while !sh.stop.get() {
        let next = {
            let gate = async {
                match rate {
                    Rate::Max => loop {
                        let published = sh.published.get();
                        let delivered = sh.delivered_msgs();
                        if published < delivered + window {
                            return (delivered + window - published).min(32);
                        }
                        // Wake when the oldest in-flight message is in.
                        let need = (published + 1 - window) * sh.subscribers;
                        let at = need.saturating_sub(sh.forgiven.get());
                        sh.wake_at.set(sh.wake_at.get().min(at));
                        if tokio::time::timeout(Duration::from_millis(500), sh.wake.notified())
                            .await
                            .is_err()
                        {
                            // Something was lost: write it off so the
                            // publisher goes on (the loss is still counted).
                            sh.stalls.set(sh.stalls.get() + 1);
                            let got = sh.received.get() + sh.forgiven.get();
                            sh.forgiven
                                .set(sh.forgiven.get() + need.saturating_sub(got));
                        }
                    },
                    Rate::PerSec(_) => {
                        let period = Duration::from_secs_f64(1.0 / per_publisher_rate);
                        let due = start + period.mul_f64(sent_here as f64);
                        tokio::time::sleep_until(due.into()).await;
                        // Everything due by now goes out (catch-up).
                        let elapsed = start.elapsed().as_secs_f64();
                        let due_total = (elapsed * per_publisher_rate) as u64 + 1;
                        due_total.saturating_sub(sent_here).clamp(1, 64)
                    }
                }
            };
            tokio::select! {
                biased;
                r = conn.recv(|e| {
                    if let Event::Ack = e {
                        sh.acks.set(sh.acks.get() + 1);
                    }
                    Flow::Continue
                }) => Next::Acks(r),
                n = gate => Next::Send(n),
            }
        };
        match next {
            Next::Acks(r) => r?,
            Next::Send(n) => {
                out.clear();
                for _ in 0..n {
                    let index = sh.published.get();
                    sh.published.set(index + 1);
                    if sh.measuring.get() {
                        sh.published_in_window.set(sh.published_in_window.get() + 1);
                    }
                    let sent_ns = match rate {
                        // The time the message was due, not when it left.
                        Rate::PerSec(_) => {
                            let due = start
                                + Duration::from_secs_f64(sent_here as f64 / per_publisher_rate);
                            due.saturating_duration_since(sh.base).as_nanos() as u64
                        }
                        Rate::Max => sh.now_ns(),
                    };
                    sent_here += 1;
                    target::payload(payload_bytes, index, sent_ns, &mut data);
                    conn.publish_frame(&topic, &data, index, &mut out);
                }
                conn.ws.write_raw(&out).await?;
            }
        }
    }
    Ok(())
}
