// The front door's attacks of bench/bounds-attacks.mjs (issue 38: nothing
// before the credential is free). Each reports what one address made the
// broker hold (descriptors, RSS, CPU) and how many real clients from
// other addresses got answers meanwhile.
//
//   slow-body  300 `POST /v1/admin/ban` (no [admin], no key) from one
//              address and 300 `POST /v1/publish` with the sample key from
//              another, each declaring 262,000 bytes and sending 7: what
//              is held 2 s in and 13 s in (past the body deadline, 10 s)
//   tls-silent a TLS listener; 1,200 TCP connections from one address that
//              never start their handshake; 20 HTTPS clients from other
//              addresses, each `GET /healthz`: how many were answered
//              within 10 s and how fast, what the silent ones hold
//   sse-query  8 loops from one address for 5 s of `GET /v1/sse` with
//              3,800 channels (a 63 KB query, about the most a request
//              line may hold) and no token: the broker's
//              CPU per request, the answers by status
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as tlsConnect } from "node:tls";

import { fds, median, rssKiB, sleep, startBroker, statusCounts, stop } from "./harness.mjs";

const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

/** The process's CPU time so far, in ms (/proc/PID/stat utime + stime). */
function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}

const mib = (kib) => +(kib / 1024).toFixed(1);

/** A connection from `localAddress` that writes `text` once connected;
 * resolves with the socket (and what it read, on `got`). */
function opened(port, localAddress, text) {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port, localAddress });
    s.got = "";
    s.ended = false;
    s.on("error", () => {});
    s.on("data", (d) => (s.got += d.toString("latin1")));
    s.on("close", () => {
      s.ended = true;
      resolve(s);
    });
    s.on("connect", () => {
      if (text) s.write(text);
      resolve(s);
    });
  });
}

/** `GET /healthz` from `localAddress` over plain TCP: the status (0: none within 10 s). */
function healthz(port, localAddress) {
  return get(port, localAddress, "/healthz");
}

export async function slowBody() {
  const b = await startBroker();
  const conns = [];
  try {
    await sleep(200);
    const fdsBefore = fds(b.child.pid);
    const rssBefore = rssKiB(b.child.pid);
    const started = Date.now();
    const head = (path, auth) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${auth}Content-Length: 262000\r\n\r\n{"ip":"`;
    for (let i = 0; i < 300; i++) {
      conns.push(await opened(b.port, "127.0.0.8", head("/v1/admin/ban", "")));
      conns.push(await opened(b.port, "127.0.0.9", head("/v1/publish", "Authorization: Bearer tidegate-sample-publish-key\r\n")));
    }
    await sleep(Math.max(0, 2000 - (Date.now() - started)));
    const held2s = {
      brokerFds: fds(b.child.pid) - fdsBefore,
      rssMiB: mib(rssKiB(b.child.pid) - rssBefore),
      attackersOpen: conns.filter((s) => !s.ended).length,
    };
    const real = await Promise.all(Array.from({ length: 20 }, (_, i) => healthz(b.port, `127.0.0.${20 + i}`)));
    await sleep(Math.max(0, 13000 - (Date.now() - started)));
    const held13s = {
      brokerFds: fds(b.child.pid) - fdsBefore,
      rssMiB: mib(rssKiB(b.child.pid) - rssBefore),
      attackersOpen: conns.filter((s) => !s.ended).length,
    };
    return {
      attackers: conns.length,
      adminAnswers: statusCounts(conns.filter((_, i) => i % 2 === 0).map((s) => Number(s.got.match(/^HTTP\/1\.1 (\d{3})/)?.[1] ?? 0))),
      held2s,
      held13s,
      realClients: real.length,
      realAnswered: real.filter((s) => s === 200).length,
    };
  } finally {
    for (const s of conns) s.destroy();
    stop(b);
  }
}

/** A self-signed certificate for localhost (openssl), in a temp dir. */
function selfSigned() {
  const dir = mkdtempSync(join(tmpdir(), "tidegate-door-"));
  const cert = join(dir, "cert.pem");
  const key = join(dir, "key.pem");
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
  ], { stdio: "ignore" });
  return { cert, key };
}

/** `GET /healthz` over TLS from `localAddress`: [status, ms] (status 0: none within 10 s). */
function healthzTls(port, localAddress) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const s = tlsConnect({ host: "127.0.0.1", port, localAddress, servername: "localhost", rejectUnauthorized: false });
    let got = "";
    let settled = false;
    const done = (status) => {
      if (settled) return;
      settled = true;
      s.destroy();
      resolve([status, Date.now() - t0]);
    };
    s.on("error", () => done(0));
    s.on("secureConnect", () => s.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
    s.on("data", (d) => {
      got += d.toString();
      const m = got.match(/^HTTP\/1\.1 (\d{3})/);
      if (m) done(Number(m[1]));
    });
    setTimeout(() => done(0), 10000);
  });
}

export async function tlsSilent() {
  const { cert, key } = selfSigned();
  const b = await startBroker((c) =>
    c.replace('tls_cert_file = ""\ntls_key_file = ""', `tls_cert_file = ${JSON.stringify(cert)}\ntls_key_file = ${JSON.stringify(key)}`),
  );
  const silent = [];
  try {
    await sleep(200);
    const fdsBefore = fds(b.child.pid);
    const rssBefore = rssKiB(b.child.pid);
    const started = Date.now();
    for (let i = 0; i < 1200; i++) silent.push(await opened(b.port, "127.0.0.11", ""));
    await sleep(500);
    const fdsHeld = fds(b.child.pid) - fdsBefore;
    const rssHeld = mib(rssKiB(b.child.pid) - rssBefore);
    const silentOpen = silent.filter((s) => !s.ended).length;
    const real = await Promise.all(Array.from({ length: 20 }, (_, i) => healthzTls(b.port, `127.0.0.${40 + i}`)));
    const answered = real.filter(([s]) => s === 200).map(([, ms]) => ms);
    await sleep(Math.max(0, 8000 - (Date.now() - started)));
    return {
      silentConnections: silent.length,
      silentOpenAfterConnect: silentOpen,
      brokerFdsHeld: fdsHeld,
      rssHeldMiB: rssHeld,
      realClients: real.length,
      realAnswered: answered.length,
      answerMedianMs: median(answered),
      answerMaxMs: answered.length ? Math.max(...answered) : null,
      silentOpenAt8s: silent.filter((s) => !s.ended).length,
    };
  } finally {
    for (const s of silent) s.destroy();
    stop(b);
  }
}

/** One `GET` of `path` from `localAddress` over plain TCP: the status (0: none within 10 s). */
function get(port, localAddress, path) {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port, localAddress });
    let got = "";
    const done = (status) => {
      s.destroy();
      resolve(status);
    };
    s.on("error", () => done(0));
    s.on("connect", () => s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`));
    s.on("data", (d) => {
      got += d.toString();
      const m = got.match(/^HTTP\/1\.1 (\d{3})/);
      if (m) done(Number(m[1]));
    });
    s.setTimeout(10000, () => done(0));
  });
}

export async function sseQuery() {
  const b = await startBroker();
  try {
    await sleep(200);
    const query = Array.from({ length: 3800 }, (_, i) => `channel=doc:${i}`).join("&");
    const path = `/v1/sse?${query}`;
    const cpuBefore = cpuMs(b.child.pid);
    const statuses = [];
    const until = Date.now() + 5000;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (Date.now() < until) statuses.push(await get(b.port, "127.0.0.12", path));
      }),
    );
    const cpu = cpuMs(b.child.pid) - cpuBefore;
    const real = await Promise.all(Array.from({ length: 20 }, (_, i) => healthz(b.port, `127.0.0.${60 + i}`)));
    return {
      queryBytes: path.length,
      requests: statuses.length,
      byStatus: statusCounts(statuses),
      brokerCpuMs: Math.round(cpu),
      cpuUsPerRequest: statuses.length ? Math.round((cpu * 1000) / statuses.length) : null,
      realClients: real.length,
      realAnswered: real.filter((s) => s === 200).length,
    };
  } finally {
    stop(b);
  }
}
