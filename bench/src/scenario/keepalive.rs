//! The broker's side of a storm, read over HTTP connections kept open
//! from before it (so they never wait in the accept queue the storm
//! fills): [`Publisher`], one kept-alive HTTP/1.1 connection, and the
//! accept counter sampled through it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::report::round2;
use crate::target::Target;

/// The sample key of the shipped config (account `acme`, 100 msg/s).
const SAMPLE_KEY: &str = "tidegate-sample-publish-key";

/// One kept-alive HTTP/1.1 connection to the broker.
pub struct Publisher {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Publisher {
    pub async fn connect(target: &Target) -> Result<Publisher> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        Ok(Publisher {
            stream,
            buf: Vec::new(),
        })
    }

    /// `POST path` with the sample key; the answer's status.
    pub async fn post(&mut self, path: &str, body: &str) -> Result<u16> {
        let req = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {SAMPLE_KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.write_all(req.as_bytes()).await?;
        Ok(self.answer().await?.0)
    }

    /// `GET path`; the answer's body.
    pub async fn get(&mut self, path: &str) -> Result<String> {
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        self.stream.write_all(req.as_bytes()).await?;
        let (status, body) = self.answer().await?;
        if status != 200 {
            bail!("GET {path}: {status}");
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Reads one answer with a `content-length` (what actix sends for
    /// these routes).
    async fn answer(&mut self) -> Result<(u16, Vec<u8>)> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("connection closed");
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_ascii_lowercase();
        let status = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("no status line"))?;
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow!("no content-length"))?;
        while self.buf.len() < head_end + len {
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("connection closed");
            }
        }
        let body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        Ok((status, body))
    }
}

/// Samples `tidegate_connections_opened_total` every `every` on its own
/// kept-alive connection until stopped: (when the answer came, count).
pub async fn sample_accepts(
    mut conn: Publisher,
    every: Duration,
    stop: Rc<Cell<bool>>,
) -> Vec<(Instant, f64)> {
    let mut tick = tokio::time::interval(every);
    let mut out = Vec::new();
    while !stop.get() {
        tick.tick().await;
        let Ok(text) = conn.get("/metrics").await else {
            break;
        };
        let at = Instant::now();
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix("tidegate_connections_opened_total "))
            .and_then(|v| v.trim().parse().ok());
        if let Some(c) = count {
            out.push((at, c));
        }
    }
    out
}

/// The broker's accepts per second from counter samples: the peak over
/// any window of at least one second, and the mean from the first sample
/// to the one where the count stopped rising.
#[derive(Debug, Clone, Serialize)]
pub struct BrokerAccepts {
    pub samples: usize,
    pub sample_ms: u64,
    pub accepted: f64,
    pub peak_per_sec: f64,
    pub mean_per_sec: f64,
    /// Accepts per sampling interval, as (seconds from the storm's start,
    /// accepts since the previous sample).
    pub series: Vec<(f64, f64)>,
}

pub fn broker_accepts(samples: &[(f64, f64)], sample_ms: u64) -> BrokerAccepts {
    // From the last sample before the storm.
    let start = samples.iter().rposition(|&(t, _)| t <= 0.0).unwrap_or(0);
    let samples = &samples[start..];
    let mut peak = 0.0f64;
    for (i, &(t, c)) in samples.iter().enumerate() {
        if let Some(&(t2, c2)) = samples[i..].iter().find(|&&(t2, _)| t2 - t >= 1.0) {
            peak = peak.max((c2 - c) / (t2 - t));
        }
    }
    let first = samples.first().copied().unwrap_or((0.0, 0.0));
    let last = samples.last().copied().unwrap_or(first);
    // The first sample at the final count: when the last accept happened.
    let done = samples
        .iter()
        .find(|&&(_, c)| c >= last.1)
        .copied()
        .unwrap_or(last);
    let accepted = last.1 - first.1;
    let series = samples
        .windows(2)
        .map(|w| (round2(w[1].0), w[1].1 - w[0].1))
        .collect();
    BrokerAccepts {
        samples: samples.len(),
        sample_ms,
        accepted,
        peak_per_sec: peak.round(),
        mean_per_sec: if done.0 > first.0 {
            (accepted / (done.0 - first.0)).round()
        } else {
            0.0
        },
        series,
    }
}
