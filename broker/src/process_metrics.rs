//! The process's own metrics: the names every Prometheus client library
//! exports (`process_resident_memory_bytes`, `process_open_fds`, ...) under
//! the `tidegate_` prefix the contract gives every metric (§6), for alerts
//! on memory and descriptor exhaustion. Read from Linux's `/proc` at each
//! scrape; elsewhere they stay at 0.

use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Linux reports CPU times in USER_HZ ticks, which the kernel ABI fixes at
/// 100 per second on every architecture.
const TICKS_PER_SEC: f64 = 100.0;

#[derive(Debug, Default)]
pub struct ProcessMetrics {
    resident: Gauge,
    virtual_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    start_time: Gauge<f64, AtomicU64>,
    cpu: Counter<f64, AtomicU64>,
    /// CPU seconds already added to `cpu` (a counter only goes up by deltas).
    cpu_seen: Mutex<f64>,
}

impl ProcessMetrics {
    pub fn register(registry: &mut Registry) -> ProcessMetrics {
        let m = ProcessMetrics::default();
        registry.register_with_unit(
            "process_resident_memory",
            "Resident set size",
            Unit::Bytes,
            m.resident.clone(),
        );
        registry.register_with_unit(
            "process_virtual_memory",
            "Virtual memory size",
            Unit::Bytes,
            m.virtual_bytes.clone(),
        );
        registry.register(
            "process_open_fds",
            "Open file descriptors (sockets included)",
            m.open_fds.clone(),
        );
        registry.register(
            "process_max_fds",
            "The soft limit on open file descriptors",
            m.max_fds.clone(),
        );
        registry.register_with_unit(
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Unit::Seconds,
            m.start_time.clone(),
        );
        registry.register_with_unit(
            "process_cpu",
            "User and system CPU time spent",
            Unit::Seconds,
            m.cpu.clone(),
        );
        m
    }

    /// Re-reads `/proc/self`. Each value that cannot be read keeps its last.
    pub fn refresh(&self) {
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            if let Some(kib) = status_kib(&status, "VmRSS:") {
                self.resident.set(kib * 1024);
            }
            if let Some(kib) = status_kib(&status, "VmSize:") {
                self.virtual_bytes.set(kib * 1024);
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle itself is one of the entries.
            self.open_fds.set(dir.count().saturating_sub(1) as i64);
        }
        if let Some(max) = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| max_open_files(&l))
        {
            self.max_fds.set(max);
        }
        if let Some(stat) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| Stat::parse(&s))
        {
            let cpu = (stat.utime + stat.stime) as f64 / TICKS_PER_SEC;
            let mut seen = self.cpu_seen.lock();
            if cpu > *seen {
                self.cpu.inc_by(cpu - *seen);
                *seen = cpu;
            }
            if let Some(boot) = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| boot_time(&s))
            {
                self.start_time
                    .set(boot as f64 + stat.start_ticks as f64 / TICKS_PER_SEC);
            }
        }
    }
}

fn status_kib(status: &str, field: &str) -> Option<i64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// This process's soft limit on open descriptors (`None`: unlimited or
/// not Linux).
pub fn soft_fd_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    u64::try_from(max_open_files(&text)?).ok()
}

/// Sockets a process with `fd_limit` descriptors may hold and keep enough
/// for everything else: listeners, HTTP requests, connections still
/// sending their upgrade, Redis, webhooks, `/proc` reads. An eighth is kept
/// back (at least 32, at most 1,024; half of a tiny limit).
pub fn socket_capacity(fd_limit: u64) -> u64 {
    let reserve = (fd_limit / 8).clamp(32, 1024).min(fd_limit / 2);
    fd_limit - reserve
}

/// The soft limit from `/proc/self/limits`' "Max open files" line.
fn max_open_files(limits: &str) -> Option<i64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The fields of `/proc/self/stat` used here.
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
}

impl Stat {
    /// Fields are counted after the command name, which is in parentheses
    /// and may itself hold spaces or parentheses.
    fn parse(stat: &str) -> Option<Stat> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state); utime is 14, stime 15,
        // starttime 22.
        let field = |n: usize| fields.get(n - 3)?.parse().ok();
        Some(Stat {
            utime: field(14)?,
            stime: field(15)?,
            start_ticks: field(22)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "1234 (tide gate) (x)) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 9 0 98765 1000 200";
        let s = Stat::parse(stat).unwrap();
        assert_eq!((s.utime, s.stime, s.start_ticks), (250, 75, 98765));
        assert_eq!(
            max_open_files(
                "Limit Soft Limit Hard Limit Units\nMax open files            1024                 524288               files\n"
            ),
            Some(1024)
        );
        assert_eq!(
            status_kib("Name:\tx\nVmRSS:\t  2048 kB\n", "VmRSS:"),
            Some(2048)
        );
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reports_memory_and_descriptors() {
        let mut registry = Registry::default();
        let m = ProcessMetrics::register(&mut registry);
        m.refresh();
        assert!(m.resident.get() > 0);
        assert!(m.open_fds.get() > 0);
        assert!(m.max_fds.get() >= m.open_fds.get());
        assert!(m.start_time.get() > 1.0e9);
    }

    #[test]
    fn a_reserve_of_descriptors_is_kept_back_from_sockets() {
        assert_eq!(super::socket_capacity(1024), 896);
        assert_eq!(super::socket_capacity(100), 68);
        assert_eq!(super::socket_capacity(40), 20);
        assert_eq!(super::socket_capacity(1 << 20), (1 << 20) - 1024);
    }
}
