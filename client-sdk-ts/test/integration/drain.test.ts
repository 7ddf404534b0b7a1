/**
 * A node draining for shutdown (SIGTERM, PROTOCOL.md §7) closes its sockets
 * with 1012 in staggered batches (1001 for any left at the end) and refuses
 * new handshakes with 503 `draining` + Retry-After: the SDK reconnects with
 * jitter and honours Retry-After.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import type { CloseEvent } from "../../src/types.js";
import { brokerConfig, merge, startBroker, TEST_BASE } from "../helpers/broker.js";
import { nextEvent } from "../helpers/events.js";

test("on SIGTERM the SDK sees 1012 (or 1001) and reconnects with jitter", async () => {
  const broker = await startBroker(brokerConfig(merge(TEST_BASE, { cluster: { drain_ms: 1500 } })));
  const c = new TidegateClient({
    url: broker.wsUrl,
    token: await broker.token({}),
    WebSocket,
    minReconnectDelayMs: 1000,
    maxReconnectDelayMs: 8000,
  });
  try {
    await c.connect();
    const closed = nextEvent(c, "close", () => true, 10_000);
    const exit = broker.terminate();
    const close: CloseEvent = await closed;
    assert.ok(
      close.code === 1012 || close.code === 1001,
      `a draining broker should close with 1012 (or 1001 at the end of the window), got ${close.code} "${close.reason}"`,
    );
    assert.ok(close.wasOpen);
    assert.ok(close.reconnect && close.reconnect.delayMs < 1000, "jittered from the minimum window");
    assert.equal(await exit, 0, "the broker exits 0 after draining");
  } finally {
    c.close();
    await broker.stop();
  }
});
