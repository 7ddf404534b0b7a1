/**
 * Outbound webhooks checked by a real Standard Webhooks verifier: the
 * `standardwebhooks` npm package (what receivers install) verifies real
 * deliveries from the broker, with a `whsec_` secret, during a rotation
 * (`secrets = [new, old]`), and with a raw secret (`format: "raw"`).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { brokerConfig, startBroker, TEST_BASE, type Broker } from "../helpers/broker.js";

interface Delivery {
  body: string;
  headers: IncomingHttpHeaders;
}

let receiver: Server;
let port = 0;
/** Each takes a delivery it was waiting for (true) or leaves it (false). */
const waiting: Array<(d: Delivery) => boolean> = [];
const arrived: Delivery[] = [];
let broker: Broker;

/** The next delivery to the receiver's `path`. */
function next(path: string): Promise<Delivery & { path: string }> {
  const found = arrived.findIndex((d) => (d.headers["x-path"] as string) === path);
  if (found >= 0) {
    const [d] = arrived.splice(found, 1);
    return Promise.resolve({ ...d!, path });
  }
  return new Promise((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error(`no delivery to ${path} within 10 s`)), 10_000);
    const w = (d: Delivery) => {
      if ((d.headers["x-path"] as string) !== path) return false;
      clearTimeout(guard);
      resolve({ ...d, path });
      return true;
    };
    waiting.push(w);
  });
}

const NEW = `whsec_${randomBytes(32).toString("base64")}`;
const OLD = `whsec_${randomBytes(32).toString("base64")}`;
const RAW = "a-raw-ascii-secret-of-32-bytes!!";

before(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const d: Delivery = {
        body: Buffer.concat(chunks).toString("utf8"),
        headers: { ...req.headers, "x-path": req.url ?? "" },
      };
      res.writeHead(204).end();
      const i = waiting.findIndex((w) => w(d));
      if (i >= 0) waiting.splice(i, 1);
      else arrived.push(d);
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  port = (receiver.address() as AddressInfo).port;
  const hook = (id: string, secret: string) =>
    `\n[[webhooks]]\nid = "${id}"\nurl = "http://127.0.0.1:${port}/${id}"\n${secret}\nevents = ["message.published"]\nchannels = ["${id}:*"]\n`;
  broker = await startBroker(
    brokerConfig(TEST_BASE) +
      hook("whsec", `secret = "${NEW}"`) +
      hook("rotation", `secrets = ["${NEW}", "${OLD}"]`) +
      hook("raw", `secret = "${RAW}"`),
  );
});

after(async () => {
  await broker?.stop();
  await new Promise((r) => receiver?.close(r));
});

function verify(secret: string | Uint8Array, d: Delivery, raw = false): any {
  const wh = raw ? new Webhook(secret, { format: "raw" }) : new Webhook(secret as string);
  return wh.verify(d.body, d.headers as Record<string, string>);
}

test("the standardwebhooks verifier accepts a delivery signed with a whsec_ secret", async () => {
  const { status } = await broker.publish("whsec:1", { hello: "receiver" });
  assert.equal(status, 200);
  const d = await next("/whsec");
  const payload = verify(NEW, d);
  assert.equal(payload.type, "message.published");
  assert.deepEqual(payload.data.data, { hello: "receiver" });
  assert.equal(payload.data.channel, "whsec:1");
  assert.throws(() => verify(OLD, d), /signature/i, "another secret does not verify");
});

test("during a rotation a receiver with either secret verifies", async () => {
  assert.equal((await broker.publish("rotation:1", 1)).status, 200);
  const d = await next("/rotation");
  assert.equal(String(d.headers["webhook-signature"]).split(" ").length, 2);
  assert.equal(verify(NEW, d).data.channel, "rotation:1");
  assert.equal(verify(OLD, d).data.channel, "rotation:1");
});

test("a raw secret verifies with format: raw", async () => {
  assert.equal((await broker.publish("raw:1", 1)).status, 200);
  const d = await next("/raw");
  assert.equal(verify(RAW, d, true).data.channel, "raw:1");
});
