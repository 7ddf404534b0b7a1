//! A connection's activity clock (§16): a client silent for the app's
//! `activity_timeout_s` is sent `pusher:ping`; one silent past
//! `pong_timeout_s` after it too is closed 4201.

use std::any::Any;
use std::time::{Duration, Instant};

use super::frames::{self, code};
use crate::config::PusherApp;
use crate::dialect::Link;
use crate::exceeded::Exceeded;
use crate::metrics::Layer;
use crate::node::Node;

/// The activity clock rang.
pub(super) struct Activity;
/// The pong timeout rang.
pub(super) struct PongDue;

pub(super) struct Clock {
    last_heard: Instant,
    /// A `pusher:ping` is out and unanswered.
    pinged: bool,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            last_heard: Instant::now(),
            pinged: false,
        }
    }

    /// The connection opened: the clock starts.
    pub fn start(&mut self, link: &mut dyn Link, app: &PusherApp) {
        self.last_heard = Instant::now();
        arm(link, Duration::from_secs(app.activity_timeout_s));
    }

    /// The client said something: it is alive.
    pub fn heard(&mut self) {
        self.last_heard = Instant::now();
        self.pinged = false;
    }

    /// The clock rang: a client silent for the timeout is pinged, and the
    /// pong timeout starts.
    pub fn tick(&mut self, link: &mut dyn Link, app: &PusherApp) {
        let timeout = Duration::from_secs(app.activity_timeout_s);
        let silent = self.last_heard.elapsed();
        if silent < timeout {
            return arm(link, timeout - silent);
        }
        if !self.pinged {
            self.pinged = true;
            link.send(&frames::event("pusher:ping", None, "{}"));
            let pong = Duration::from_secs(app.pong_timeout_s);
            link.spawn(Box::pin(async move {
                actix_rt::time::sleep(pong).await;
                Box::new(PongDue) as Box<dyn Any>
            }));
        }
    }

    /// The pong timeout rang: still silent is 4201.
    pub fn pong_due(&mut self, link: &mut dyn Link, node: &Node, app: &PusherApp) {
        if self.pinged {
            Exceeded::new(Layer::Connection, "heartbeat_timeout", &app.account)
                .conn(link.label())
                .emit(&node.metrics);
            link.close(code::PONG_TIMEOUT, "Pong reply not received");
        } else {
            self.tick(link, app);
        }
    }
}

fn arm(link: &mut dyn Link, after: Duration) {
    link.spawn(Box::pin(async move {
        actix_rt::time::sleep(after).await;
        Box::new(Activity) as Box<dyn Any>
    }));
}
