#!/usr/bin/env node
// A tiny static server for the examples: serves this folder at / and the
// SDK's browser bundle (client-sdk-ts/dist) at /sdk/. Loopback only.
//
//   node examples/serve.mjs [--port 8000]
//
// The SDK's browser test imports startStaticServer() from here.
import { createServer } from "node:http";
import { readFile, stat } from "node:fs/promises";
import { extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const ROOTS = {
  "/sdk/": resolve(here, "../client-sdk-ts/dist"),
  "/": resolve(here),
};
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json",
  ".md": "text/plain; charset=utf-8",
};

async function resolveFile(urlPath) {
  for (const [prefix, root] of Object.entries(ROOTS)) {
    if (!urlPath.startsWith(prefix)) continue;
    let file = normalize(join(root, decodeURIComponent(urlPath.slice(prefix.length))));
    if (file !== root && !file.startsWith(root + sep)) return undefined; // no ../ escapes
    const info = await stat(file).catch(() => undefined);
    if (info?.isDirectory()) file = join(file, "index.html");
    return file;
  }
  return undefined;
}

/** Starts the server; resolves with its base URL and a stop function. */
export function startStaticServer({ port = 0, host = "127.0.0.1" } = {}) {
  const server = createServer(async (req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    const file = await resolveFile(path);
    const body = file && (await readFile(file).catch(() => undefined));
    if (!body) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    res
      .writeHead(200, {
        "content-type": TYPES[extname(file)] ?? "application/octet-stream",
        "cache-control": "no-store",
      })
      .end(body);
  });
  return new Promise((resolvePromise) => {
    server.listen(port, host, () => {
      const { port: actual } = server.address();
      resolvePromise({
        url: `http://${host}:${actual}`,
        stop: () => new Promise((done) => server.close(() => done())),
      });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--port");
  const port = i > 0 ? Number(process.argv[i + 1]) : 8000;
  const { url } = await startStaticServer({ port });
  console.log(`examples on ${url}/collab-note/  (SDK bundle at ${url}/sdk/tidegate.js)`);
}
