// Builds the browser bundles with esbuild and, with --size, prints the size
// of the minified ESM bundle gzipped at level 9 (what a browser downloads).
//
//   dist/tidegate.js      one ESM file, readable (the example page loads it)
//   dist/tidegate.min.js  the same, minified
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { writeFileSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const common = {
  entryPoints: [`${root}src/index.ts`],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2020",
  write: false,
  logLevel: "warning",
};

const [plain, min] = await Promise.all([
  build({ ...common, sourcemap: "inline" }),
  build({ ...common, minify: true }),
]);
mkdirSync(`${root}dist`, { recursive: true });
writeFileSync(`${root}dist/tidegate.js`, plain.outputFiles[0].contents);
const minified = min.outputFiles[0].contents;
writeFileSync(`${root}dist/tidegate.min.js`, minified);

if (process.argv.includes("--size")) {
  const gz = gzipSync(minified, { level: 9 }).length;
  console.log(`tidegate.min.js: ${minified.length} bytes minified, ${gz} bytes min+gzip (-9)`);
}
