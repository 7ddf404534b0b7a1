/**
 * An HTTP proxy in front of the broker that forwards every plain request
 * (streaming the answer as it comes, so `GET /v1/sse` works through it)
 * and refuses every WebSocket upgrade with a plain-text 403, as a
 * corporate proxy that blocks WebSockets does. It can also serve a few
 * static files, so a browser page is same-origin with the broker's HTTP.
 */
import { createServer, request, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { readFileSync } from "node:fs";

export class NoUpgradeProxy {
  /** Upgrades refused so far. */
  upgradesRefused = 0;
  /** Plain requests forwarded so far, by path without the query. */
  readonly forwarded: string[] = [];
  port = 0;
  private readonly sockets = new Set<Socket>();
  private constructor(private readonly server: Server) {}

  /** `files`: path → [content type, file on disk] served by the proxy itself. */
  static async start(targetPort: number, files: Record<string, [string, string]> = {}): Promise<NoUpgradeProxy> {
    const server = createServer((req, res) => {
      const path = (req.url ?? "/").split("?")[0]!;
      const file = files[path];
      if (file) {
        res.writeHead(200, { "content-type": file[0], "cache-control": "no-store" });
        res.end(readFileSync(file[1]));
        return;
      }
      proxy.forwarded.push(path);
      const upstream = request(
        { host: "127.0.0.1", port: targetPort, method: req.method, path: req.url, headers: req.headers },
        (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          res.flushHeaders();
          up.pipe(res);
        },
      );
      upstream.on("error", () => res.destroy());
      res.on("close", () => upstream.destroy());
      req.pipe(upstream);
    });
    const proxy: NoUpgradeProxy = new NoUpgradeProxy(server);
    server.on("connection", (s) => {
      proxy.sockets.add(s);
      s.on("close", () => proxy.sockets.delete(s));
    });
    server.on("upgrade", (_req, socket) => {
      proxy.upgradesRefused += 1;
      const body = "websockets are blocked";
      socket.end(
        `HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    proxy.port = (server.address() as AddressInfo).port;
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get wsUrl(): string {
    return `ws://127.0.0.1:${this.port}/v1/ws`;
  }

  /** Cuts every open connection (streams and requests in flight): a network drop. */
  dropAll(): void {
    for (const s of this.sockets) s.destroy();
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
