// The `close-unread` attack of bench/bounds-attacks.mjs (stop 36): sockets
// that stop reading, then end (their own close frame, or the broker's
// 4008), and never read again. What it measures is whether the broker
// still holds their connections once every socket has ended.
import { fds, openSocket, publishHistory, rssKiB, sleep, startBroker, stop } from "./harness.mjs";

/** The broker's open sockets (`tidegate_connections`, every transport). */
async function openConnections(http) {
  const text = await (await fetch(`${http}/metrics`)).text();
  return [...text.matchAll(/^tidegate_connections\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
}

/** A masked client close frame (1000), written past `ws`, which would
 * otherwise start its own timer and end the connection itself. */
const CLOSE_FRAME = Buffer.from([0x88, 0x82, 1, 2, 3, 4, 0x03 ^ 1, 0xe8 ^ 2]);

export async function closeUnread() {
  // The per-IP handshake rate (5/s) would only slow the rounds down: what
  // one ended connection leaves behind is measured, not how fast an
  // address may make them.
  const b = await startBroker((c) =>
    c
      .replace("account_messages_per_sec = 100\n", "account_messages_per_sec = 100000\n")
      .replace("account_burst = 200\n", "account_burst = 100000\n")
      .replace("ip_handshakes_per_sec = 5\n", "ip_handshakes_per_sec = 1000\n")
      .replace("ip_handshake_burst = 20\n", "ip_handshake_burst = 1000\n")
      // A fixed send buffer: with the kernel's autotuning each socket
      // would first absorb up to tcp_wmem's 4 MiB before the broker holds
      // anything.
      .replace("send_buffer_bytes = 0\n", "send_buffer_bytes = 65536\n"),
  );
  const sockets = [];
  try {
    await sleep(200);
    const fdsBefore = fds(b.child.pid);
    const rssBefore = rssKiB(b.child.pid);
    let rssPeak = rssBefore;
    const data = "x".repeat(60 * 1024);
    const rounds = 3;
    const perRound = 40;
    const started = Date.now();
    for (let r = 0; r < rounds; r++) {
      const round = [];
      const acks = [];
      for (let i = 0; i < perRound; i++) {
        const ws = await openSocket(b.ws, `unread${r}_${i}`);
        acks.push(new Promise((res) => ws.once("message", res)));
        ws.send(JSON.stringify({ type: "subscribe", id: 1, channel: "doc:unread" }));
        round.push(ws);
      }
      // Every socket has its ack before it stops reading.
      await Promise.all(acks);
      for (const ws of round) ws._socket.pause();
      await publishHistory(b.http, "doc:unread", 40, data);
      // Half close (and read neither the rest nor the answer); the other
      // half wait for the broker's 4008.
      round.forEach((ws, i) => i % 2 === 0 && ws._socket.write(CLOSE_FRAME));
      sockets.push(...round);
      // Every socket of the round has ended (its slots are free again).
      const until = Date.now() + 30000;
      while ((await openConnections(b.http)) > 0) {
        if (Date.now() > until) throw new Error(`round ${r}: sockets never ended`);
        rssPeak = Math.max(rssPeak, rssKiB(b.child.pid));
        await sleep(100);
      }
    }
    // The close timeout (1 s) twice over, and then some.
    await sleep(3000);
    rssPeak = Math.max(rssPeak, rssKiB(b.child.pid));
    const rssAfter = rssKiB(b.child.pid);
    const fdsAfter = fds(b.child.pid);
    return {
      sockets: rounds * perRound,
      seconds: Math.round((Date.now() - started) / 1000),
      fdsBefore,
      fdsAfter,
      // One of them is this script's own keep-alive HTTP connection
      // (publishes and /metrics), opened after `fdsBefore`.
      descriptorsStillHeld: fdsAfter - fdsBefore,
      rssBeforeMiB: +(rssBefore / 1024).toFixed(1),
      rssPeakMiB: +(rssPeak / 1024).toFixed(1),
      rssAfterMiB: +(rssAfter / 1024).toFixed(1),
    };
  } finally {
    for (const ws of sockets) ws.terminate();
    stop(b);
  }
}

