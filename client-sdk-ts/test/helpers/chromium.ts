/**
 * What the browser tests share: Debian's chromium driven by
 * playwright-core (browser downloads do not work here), and a blank page
 * beside the SDK bundle for tests that run the SDK in a page.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { SDK_ROOT } from "./broker.js";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/**
 * Fails (never skips) without chromium or the bundle; writes
 * test-results/`name`.html and returns its path with the bundle's.
 */
export function blankPage(name: string): { page: string; bundle: string } {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium is missing at ${CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install -y chromium)`);
  }
  const bundle = join(SDK_ROOT, "dist", "tidegate.js");
  if (!existsSync(bundle)) throw new Error("dist/tidegate.js is missing: run `npm run build`");
  const dir = join(SDK_ROOT, "test-results");
  mkdirSync(dir, { recursive: true });
  const page = join(dir, `${name}.html`);
  writeFileSync(page, `<!doctype html><title>${name}</title><p>${name}</p>`);
  return { page, bundle };
}

/** A headless chromium with a fresh temporary profile of its own. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"],
  });
}
