/**
 * A TCP proxy on 127.0.0.1:0 in front of the broker, so a test can cut
 * every connection (a network drop: close 1006 after open) and refuse new
 * ones for a while, or stop reading from the broker (a client that is slow
 * on purpose, in Node or in a browser alike), without touching the broker.
 */
import { createServer, connect, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";

export class DropProxy {
  private readonly sockets = new Set<Socket>();
  /** Each connection's broker side and client side. */
  private readonly pairs = new Map<Socket, Socket>();
  /** While true, new connections are cut at once (the client sees 1006 before open). */
  refuse = false;
  port = 0;
  private constructor(private readonly server: Server) {}

  static async start(targetPort: number): Promise<DropProxy> {
    const proxy: DropProxy = new DropProxy(
      createServer((client) => {
        if (proxy.refuse) return client.destroy();
        const upstream = connect(targetPort, "127.0.0.1");
        for (const s of [client, upstream]) {
          proxy.sockets.add(s);
          s.on("close", () => proxy.sockets.delete(s));
          s.on("error", () => undefined);
        }
        client.pipe(upstream).pipe(client);
        proxy.pairs.set(upstream, client);
        upstream.on("close", () => proxy.pairs.delete(upstream));
        client.on("close", () => upstream.destroy());
        upstream.on("close", () => client.destroy());
      }),
    );
    await new Promise<void>((r) => proxy.server.listen(0, "127.0.0.1", r));
    proxy.port = (proxy.server.address() as AddressInfo).port;
    return proxy;
  }

  /** Sockets open through the proxy (both sides of each connection). */
  get open(): number {
    return this.sockets.size;
  }

  get wsUrl(): string {
    return `ws://127.0.0.1:${this.port}/v1/ws`;
  }

  /**
   * Stops reading what the broker sends on every open connection: its
   * socket buffers fill and its outbound queue grows, as for a client that
   * stopped reading.
   */
  pauseDownstream(): void {
    for (const [upstream, client] of this.pairs) {
      upstream.unpipe(client);
      upstream.pause();
    }
  }

  /** Reads and forwards again. */
  resumeDownstream(): void {
    for (const [upstream, client] of this.pairs) upstream.pipe(client);
  }

  /** Cuts every open connection. */
  dropAll(): void {
    for (const s of this.sockets) s.destroy();
  }

  async stop(): Promise<void> {
    this.dropAll();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
