/**
 * What a test with a slow reader needs: a broker whose outbound mark is
 * small and whose history holds every message the test publishes, and
 * a fast way to publish many messages (HTTP batches).
 */
import type { Broker } from "./broker.js";
import { PUBLISH_KEY } from "./broker.js";

/** Config for slow-reader tests (merged over `TEST_BASE`). */
export const SLOW_READER: Record<string, Record<string, string | number | boolean>> = {
  "plans.free": {
    outbound_high_water_bytes: 16384,
    outbound_grace_ms: 60000,
    account_messages_per_sec: 100000,
    account_burst: 100000,
  },
  socket: { send_buffer_bytes: 4096 },
  history: { size: 5000 },
};

/** Publishes `n` messages with `data(i)` in batches of 100, in order. */
export async function publishBatches(
  broker: Broker,
  channel: string,
  n: number,
  data: (i: number) => unknown,
): Promise<void> {
  for (let start = 0; start < n; start += 100) {
    const messages = [];
    for (let i = start; i < Math.min(n, start + 100); i++) messages.push({ channel, data: data(i) });
    const res = await fetch(`${broker.httpUrl}/v1/publish/batch`, {
      method: "POST",
      headers: { authorization: `Bearer ${PUBLISH_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ messages }),
    });
    if (res.status !== 200) throw new Error(`batch publish: ${res.status} ${await res.text()}`);
  }
}
