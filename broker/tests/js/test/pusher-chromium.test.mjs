// examples/pusher's chat page in a real browser (Debian's chromium driven
// by playwright-core, as the SDK's browser tests do: browser downloads do
// not work here): laravel-echo and pusher-js's browser build, loaded from
// the packages examples/ installs, against the release broker and the
// shipped config's sample app. Two windows with their own cookie jars join
// presence-chat, see each other, one's typing shows in the other (a
// whisper: client-typing), a message goes through the example server's
// trigger to both, and a closed window leaves.
// (scripts/ensure-deps installs chromium; scripts/test the examples' packages.)
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { REPO_ROOT, startBroker } from "../lib/broker.mjs";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const WAIT = { timeout: 10_000 };
let broker;
let server;
let browser;

before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`chromium is missing at ${CHROMIUM}: run scripts/ensure-deps (apt-get install -y chromium)`);
  }
  const { startServer } = await import(join(REPO_ROOT, "examples", "pusher", "server.mjs"));
  broker = await startBroker();
  server = await startServer({ port: 0, broker: broker.url });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"],
  });
});
after(async () => {
  await browser?.close();
  await server?.stop();
  await broker?.stop();
});

/** A window of its own (its own cookie jar) that joined the chat as `name`. */
async function joinChat(name, errors) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(`${name}: ${e.message}`));
  await page.goto(server.url);
  await page.fill("#name", name);
  await page.click("#login button");
  await logged(page, "here: ");
  return page;
}

/** Waits until the page's log has a line containing `text`; fails with the log. */
async function logged(page, text) {
  try {
    await page.waitForFunction((t) => window.app.log().includes(t), text, WAIT);
  } catch (e) {
    const log = await page.evaluate(() => window.app.log()).catch(() => "(no page)");
    throw new Error(`${e.message}: no ${JSON.stringify(text)} in the page's log:\n${log}`);
  }
}

test("in Chromium, two windows of the chat: both members, a whisper, a message, a leave", async () => {
  const errors = [];
  const ann = await joinChat("ann", errors);
  await logged(ann, "here: ann\n");
  const bob = await joinChat("bob", errors);
  await logged(bob, "here: ann, bob\n");
  await logged(ann, "bob joined");
  for (const page of [ann, bob]) {
    assert.deepEqual(await page.evaluate(() => window.app.members()), ["ann", "bob"]);
  }
  assert.match(await ann.textContent("#members"), /ann \(you\)/);

  // Typing in bob's window whispers client-typing; ann's window shows it.
  await bob.type("#text", "hi ann");
  await ann.waitForFunction(() => window.app.typing() === "bob is typing…", null, WAIT);
  assert.equal(await bob.evaluate(() => window.app.typing()), "", "the broker does not echo a whisper to its sender");

  // The message goes to the example server, which triggers it with the pusher library.
  await bob.press("#text", "Enter");
  for (const page of [ann, bob]) {
    await page.waitForFunction(() => window.app.messages().includes("bob: hi ann"), null, WAIT);
  }
  assert.equal(await ann.evaluate(() => window.app.typing()), "", "a message ends its sender's typing");

  await bob.context().close();
  await logged(ann, "bob left");
  assert.deepEqual(await ann.evaluate(() => window.app.members()), ["ann"]);
  assert.doesNotMatch(await ann.evaluate(() => window.app.log()), /refused/);
  assert.deepEqual(errors, []);
});
