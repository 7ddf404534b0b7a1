//! The brokers under test as child processes: Tidegate from its release
//! binary with a bench config, NATS from `nats-server` with its WebSocket
//! listener, each on free loopback ports, optionally pinned to a core.
//!
//! Every child is killed by its PID when its [`Spawned`] is dropped (also
//! when a scenario fails), and is asked by the kernel to die if the load
//! generator dies first (`PR_SET_PDEATHSIG`), so nothing outlives a run.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Which cores the brokers and the load generator run on.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Pinning {
    pub broker_core: Option<usize>,
    pub loadgen_core: Option<usize>,
}

impl Pinning {
    /// Broker on core 0 and load generator on core 1 when there are at
    /// least two cores; nothing pinned otherwise (or when `off`).
    pub fn auto(off: bool) -> Pinning {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if off || cores < 2 {
            Pinning {
                broker_core: None,
                loadgen_core: None,
            }
        } else {
            Pinning {
                broker_core: Some(0),
                loadgen_core: Some(1),
            }
        }
    }
}

/// Pins the calling thread (the load generator's only thread) to `core`.
pub fn pin_current_thread(core: usize) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity(0, ..) applies to
    // the calling thread and reads exactly size_of::<cpu_set_t>() bytes.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        bail!(
            "sched_setaffinity({core}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Raises this process's open-file limit to its hard limit (children
/// inherit it). Returns the new soft limit.
pub fn raise_nofile() -> u64 {
    // SAFETY: getrlimit/setrlimit on a stack struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur
    }
}

/// A broker process this run started.
pub struct Spawned {
    pub name: &'static str,
    pub pid: u32,
    child: Child,
    dir: PathBuf,
}

impl Spawned {
    /// Resident memory now, from `/proc/<pid>/status` (VmRSS).
    pub fn rss_bytes(&self) -> u64 {
        rss_bytes(self.pid).unwrap_or(0)
    }

    /// The last lines the broker wrote to stderr (for error messages).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // SIGTERM to this PID only, so a broker can exit cleanly (and a
        // profiler wrapped around it can write its output); SIGKILL if it
        // is still there after the grace period.
        let grace = std::env::var("TIDEGATE_BENCH_STOP_GRACE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(3), Duration::from_millis);
        if let Ok(pid) = i32::try_from(self.pid) {
            // SAFETY: signalling a child we started and have not reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let start = Instant::now();
        while start.elapsed() < grace {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A fresh private directory for one broker's files.
fn scratch_dir(name: &str) -> Result<PathBuf> {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tidegate-bench-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn prepare(cmd: &mut Command, core: Option<usize>) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(core) = core {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(core, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            Ok(())
        });
    }
}

/// Starts `cmd` (pinned to `core` if given) as the process `name`, its
/// scratch directory `dir` removed when it is dropped; `hint` follows the
/// error when it cannot start (how to get the program).
fn launch(
    name: &'static str,
    mut cmd: Command,
    core: Option<usize>,
    dir: PathBuf,
    hint: &str,
) -> Result<Spawned> {
    prepare(&mut cmd, core);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}{hint}", cmd.get_program().to_string_lossy()))?;
    Ok(Spawned {
        name,
        pid: child.id(),
        child,
        dir,
    })
}

/// Starts `tidegate serve` with the config text `config_toml` on a free
/// loopback port; returns the process and its address.
pub fn start_tidegate(
    bin: &Path,
    config_toml: &str,
    core: Option<usize>,
) -> Result<(Spawned, SocketAddr)> {
    if !bin.exists() {
        bail!(
            "no Tidegate binary at {}: run `cargo build --release -p tidegate` (or pass --tidegate-bin)",
            bin.display()
        );
    }
    let dir = scratch_dir("tidegate")?;
    let config = dir.join("bench.toml");
    std::fs::write(&config, config_toml)?;
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env_remove("TIDEGATE_JWT_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    // The broker prints only its HTTP address: a scenario that calls the
    // gRPC API names a free port in its `[grpc]` layer; the others keep
    // the shipped 8081 and get any free port instead.
    let grpc_listen = config_toml
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("grpc")?.get("listen")?.as_str().map(str::to_owned));
    if grpc_listen.is_none_or(|a| a == "127.0.0.1:8081") {
        cmd.arg("--grpc-listen").arg("127.0.0.1:0");
    }
    let mut spawned = launch("tidegate", cmd, core, dir, "")?;
    let stdout = spawned.child.stdout.take().context("no stdout")?;
    // The first stdout line names the port; read it on a thread so a
    // broker that never prints cannot hang the run.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let Some(addr) = line
        .trim()
        .strip_prefix("tidegate listening on http://")
        .and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        let alive = spawned.alive();
        bail!(
            "tidegate did not report its address (alive: {alive}); stdout: {line:?}; stderr:\n{}",
            spawned.log_tail()
        );
    };
    wait_listening(addr, Duration::from_secs(10))?;
    Ok((spawned, addr))
}

/// Starts `nats-server` with a WebSocket listener (no TLS) and token auth;
/// returns the process and the WebSocket address.
pub fn start_nats(bin: &Path, token: &str, core: Option<usize>) -> Result<(Spawned, SocketAddr)> {
    let dir = scratch_dir("nats")?;
    let client_port = free_port()?;
    let ws_port = free_port()?;
    let conf = format!(
        "# written by tidegate-load; a private server for one benchmark run\n\
         listen: \"127.0.0.1:{client_port}\"\n\
         authorization {{ token: \"{token}\" }}\n\
         websocket {{\n  listen: \"127.0.0.1:{ws_port}\"\n  no_tls: true\n  compression: false\n}}\n"
    );
    let path = dir.join("nats.conf");
    std::fs::write(&path, conf)?;
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let mut cmd = Command::new(bin);
    cmd.arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    if core.is_some() {
        cmd.env("GOMAXPROCS", "1");
    }
    let spawned = launch(
        "nats",
        cmd,
        core,
        dir,
        " (install it with `apt-get install nats-server`, or pass --nats-bin)",
    )?;
    let addr = SocketAddr::from(([127, 0, 0, 1], ws_port));
    listening(spawned, addr, Duration::from_secs(10))
}

/// Starts `tidegate-relay` on a free loopback port; returns the process
/// and its address.
pub fn start_relay(bin: &Path, core: Option<usize>) -> Result<(Spawned, SocketAddr)> {
    if !bin.exists() {
        bail!(
            "no relay binary at {}: run `cargo build --release -p tidegate-bench`",
            bin.display()
        );
    }
    let dir = scratch_dir("relay")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let spawned = launch("relay", cmd, core, dir, "")?;
    listening(spawned, addr, Duration::from_secs(10))
}

/// Starts Sockudo (`bin`) with the bench's config
/// ([`crate::target::sockudo::config`]) on free loopback ports, from a
/// scratch directory (Sockudo also reads `config/config.toml` from its
/// working directory) and with an environment holding only `PATH` and
/// [`crate::target::sockudo::ENV`]; returns the process and its address.
pub fn start_sockudo(bin: &Path, core: Option<usize>) -> Result<(Spawned, SocketAddr)> {
    use crate::target::sockudo;
    if !bin.is_file() {
        bail!(
            "no Sockudo binary at {}: build it (bench/README.md, \"Beside Sockudo\") and pass --sockudo-bin or set SOCKUDO_BIN",
            bin.display()
        );
    }
    let dir = scratch_dir("sockudo")?;
    let ports = sockudo::Ports {
        http: free_port()?,
        metrics: free_port()?,
    };
    let path = dir.join("sockudo.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&sockudo::config(ports))?)?;
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(&path)
        .current_dir(&dir)
        .env_clear()
        .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
        .envs(sockudo::ENV.iter().copied())
        .stdin(Stdio::null())
        // Sockudo logs to stdout: both into the one log file.
        .stdout(stderr.try_clone()?)
        .stderr(stderr);
    let spawned = launch("sockudo", cmd, core, dir, "")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], ports.http));
    listening(spawned, addr, Duration::from_secs(30))
}

/// Starts a private `redis-server` on a free loopback port, nothing kept
/// on disk, pinned to `core` if given (a bench that measures a broker
/// through Redis keeps Redis off the broker's core, so the broker's share
/// of its core is not what Redis's work took from it); returns the
/// process and its address.
pub fn start_redis(core: Option<usize>) -> Result<(Spawned, SocketAddr)> {
    let dir = scratch_dir("redis")?;
    let port = free_port()?;
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(stderr.try_clone()?)
        .stderr(stderr);
    let spawned = launch("redis", cmd, core, dir, " (apt-get install redis-server)")?;
    listening(
        spawned,
        SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(10),
    )
}

/// `tidegate-relay` next to the running load generator (both are built
/// by `cargo build --release -p tidegate-bench`).
pub fn find_relay_bin() -> PathBuf {
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("tidegate-relay")));
    sibling.filter(|p| p.is_file()).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/tidegate-relay")
    })
}

/// A peer the bench spawned, once it listens on `addr`; if it never does
/// within `patience`, the error says whether it is still alive and ends
/// with its log.
fn listening(
    mut spawned: Spawned,
    addr: SocketAddr,
    patience: Duration,
) -> Result<(Spawned, SocketAddr)> {
    if let Err(e) = wait_listening(addr, patience) {
        let alive = spawned.alive();
        bail!(
            "{e} ({} alive: {alive}); stderr:\n{}",
            spawned.name,
            spawned.log_tail()
        );
    }
    Ok((spawned, addr))
}

fn wait_listening(addr: SocketAddr, patience: Duration) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < patience {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listening on {addr} after {patience:?}")
}

/// The release Tidegate binary: `$TIDEGATE_BIN`, else next to the running
/// executable's build directory (`<target>/release/tidegate`, found from
/// `<target>/{debug,release}/[deps/]this-exe`), else
/// `$CARGO_TARGET_DIR/release/tidegate`, else the workspace's
/// `target/release/tidegate`.
pub fn find_tidegate_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TIDEGATE_BIN") {
        return Some(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(3) {
            candidates.push(dir.join("release").join("tidegate"));
            if dir.file_name().is_some_and(|n| n == "release") {
                candidates.push(dir.join("tidegate"));
            }
        }
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(t).join("release").join("tidegate"));
    }
    candidates.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/tidegate"));
    candidates.into_iter().find(|c| c.is_file())
}

/// `<bin> --version` (nats-server, sockudo), if it runs.
pub fn version_of(bin: &Path) -> Option<String> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Finds `name` on PATH (or returns it unchanged if it is a path).
pub fn which(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.components().count() > 1 {
        return p.exists().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join(name))
        .find(|c| c.is_file())
}
