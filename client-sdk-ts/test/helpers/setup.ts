import WebSocket from "ws";
import { TidegateClient } from "../../src/client.js";
import type { ClientOptions, Limits } from "../../src/types.js";
import { FakeClock } from "./fake-clock.js";
import { FakeServer, type FakeConn } from "./fake-server.js";

export interface Rig {
  server: FakeServer;
  clock: FakeClock;
  client: TidegateClient;
  /** The first connection (after `connect`). */
  conn: FakeConn;
  /** Round trip to the fake server: every frame sent before it has arrived. */
  sync(): Promise<void>;
  cleanup(): Promise<void>;
}

/** A client on a fake clock, connected to a fresh fake server. */
export async function connectedRig(
  options: Partial<ClientOptions> = {},
  limits: Partial<Limits> = {},
): Promise<Rig> {
  const server = await FakeServer.start();
  server.limits = { ...server.limits, ...limits };
  const clock = new FakeClock();
  const client = new TidegateClient({
    transport: "websocket",
    url: server.url,
    token: "tok",
    WebSocket,
    clock,
    random: () => 0.5,
    ...options,
  });
  await client.connect();
  const conn = await server.connection(1);
  return {
    server,
    clock,
    client,
    conn,
    sync: async () => {
      await client.requestBudget();
    },
    cleanup: async () => {
      client.close();
      await server.stop();
    },
  };
}

export { FakeClock, FakeServer };
