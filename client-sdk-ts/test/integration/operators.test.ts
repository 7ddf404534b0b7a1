/**
 * Operators (§10) against the real broker: a ban closes the SDK's socket
 * with 4003 `banned`, the SDK surfaces a typed `banned` error, keeps
 * reconnecting with backoff (each handshake answered 403 `banned`), and is
 * back once the ban is lifted; a disconnect is reconnected at once.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { TidegateError } from "../../src/errors.js";
import type { CloseEvent } from "../../src/types.js";
import { brokerConfig, merge, startBroker, TEST_BASE, type Broker, sdkClients } from "../helpers/broker.js";
import { nextEvent } from "../helpers/events.js";

const ADMIN_KEY = "sdk-admin-key-0123456789";
let broker: Broker;
const clients = sdkClients(() => broker.wsUrl);

before(async () => {
  broker = await startBroker(brokerConfig(merge(TEST_BASE, { admin: { key: ADMIN_KEY } })));
});

after(async () => {
  clients.closeAll();
  await broker?.stop();
});

async function admin(method: string, path: string, body: unknown): Promise<any> {
  const res = await fetch(`${broker.httpUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

test("a ban closes with 4003, surfaces banned, is answered at each handshake, and lifting it lets the client back", async () => {
  const token = await broker.token({ account: "to-ban" });
  const c = clients.make({ token });
  await c.connect();
  const errors: TidegateError[] = [];
  const closes: CloseEvent[] = [];
  c.on("error", (e) => errors.push(e));
  c.on("close", (e) => closes.push(e));

  const closed = nextEvent(c, "close");
  await admin("POST", "/v1/admin/ban", { account: "to-ban", ttlMs: 60_000 });
  const first = await closed;
  assert.equal(first.code, 4003);
  assert.equal(first.reason, "banned");
  assert.ok(first.reconnect, "the SDK reconnects after 4003");
  assert.equal(errors[0]?.code, "banned");
  assert.equal(errors[0]?.closeCode, 4003);
  assert.equal(errors[0]?.temporary, true);

  // The next attempt is refused at the handshake, with the ban's time.
  const refused = closes.find((e) => e.refusal) ?? (await nextEvent(c, "close", (e) => Boolean(e.refusal)));
  assert.equal(refused.refusal?.status, 403);
  assert.equal(refused.refusal?.code, "banned");
  assert.ok((refused.refusal?.retryAfterMs ?? 0) > 50_000);
  assert.ok(refused.reconnect, "still reconnecting: a ban can be lifted");
  const typed = errors.find((e) => e.status === 403);
  assert.equal(typed?.code, "banned");

  const welcomed = nextEvent(c, "welcome");
  await admin("DELETE", "/v1/admin/ban", { account: "to-ban" });
  await welcomed;
  assert.equal(c.state, "connected");
});

test("a disconnect closes with 4003 disconnected and the client reconnects without an error", async () => {
  const token = await broker.token({ account: "to-kick" });
  const c = clients.make({ token });
  await c.connect();
  const errors: TidegateError[] = [];
  c.on("error", (e) => errors.push(e));
  const closed = nextEvent(c, "close");
  const back = nextEvent(c, "welcome");
  const answer = await admin("POST", "/v1/admin/disconnect", { account: "to-kick" });
  assert.equal(answer.closed, 1);
  const close = await closed;
  assert.equal(close.code, 4003);
  assert.equal(close.reason, "disconnected");
  await back;
  assert.deepEqual(errors, []);
});
