//! What a run records about itself: the machine, latency summaries, and
//! the JSON document each scenario prints.

use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;

use crate::procs::Pinning;

/// The machine a result came from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub nats_version: Option<String>,
    pub tidegate_commit: Option<String>,
    pub pinning: Pinning,
    pub nofile_limit: u64,
}

impl Machine {
    pub fn read(pinning: Pinning, nats_version: Option<String>, nofile_limit: u64) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let tidegate_commit = std::process::Command::new("git")
            .args([
                "-C",
                env!("CARGO_MANIFEST_DIR"),
                "rev-parse",
                "--short",
                "HEAD",
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        Machine {
            cpu_model,
            // Online CPUs, not this thread's affinity (it may be pinned).
            // SAFETY: sysconf has no preconditions.
            cores: usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) })
                .unwrap_or(1)
                .max(1),
            memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel,
            nats_version,
            tidegate_commit,
            pinning,
            nofile_limit,
        }
    }
}

/// A latency histogram in microseconds (1 µs to 60 s, 3 significant
/// digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Percentiles of a latency histogram, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: (h.mean() * 10.0).round() / 10.0,
        }
    }
}

/// (percentile, µs) points for a latency chart.
pub fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    [
        0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0,
    ]
    .iter()
    .map(|&p| (p, h.value_at_quantile(p / 100.0)))
    .collect()
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The document a scenario prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub started_at_unix: u64,
    pub machine: Machine,
    pub params: Value,
    pub results: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
}

impl Report {
    /// Prints the report on stdout and, with `out`, writes it there too.
    pub fn emit(&self, out: Option<&Path>) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        println!("{text}");
        if let Some(path) = out {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, format!("{text}\n"))?;
        }
        Ok(())
    }
}

/// The ratio `a / b`, or None when `b` is zero.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| round2(a / b))
}

/// Microseconds of CPU per operation, to 0.1 µs (0 without operations).
pub fn per_op_us(cpu_secs: f64, ops: u64) -> f64 {
    if ops == 0 {
        return 0.0;
    }
    (cpu_secs * 1e7 / ops as f64).round() / 10.0
}
