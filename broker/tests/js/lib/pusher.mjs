// pusher-js and the `pusher` server library pointed at a broker this test
// process started (lib/broker.mjs): the Pusher suites (§16) share how a
// client reaches 127.0.0.1, how it is authorized and how a subscription is
// awaited, so each suite says only what its own test is about.
import PusherJsModule from "pusher-js";
import PusherServer from "pusher";

export const PusherJs = PusherJsModule.default ?? PusherJsModule;

/** The shipped config's sample app (`[[pusher.apps]]` in config.toml). */
export const SAMPLE_APP = { appId: "1234", key: "app-key", secret: "tidegate-sample-pusher-secret" };

/** The `pusher` server library for `app` on the broker at `port` (signing with `secret`, the app's own by default). */
export const pusherServer = (app, port, secret = app.secret) =>
  new PusherServer({ ...app, secret, host: "127.0.0.1", port: String(port), useTLS: false });

/**
 * pusher-js options that authorize every channel with `server` (a `pusher`
 * library), as user `member(channelName)` where that gives one (presence).
 */
export const authorizedBy = (server, member = () => undefined) => ({
  channelAuthorization: {
    customHandler: ({ socketId, channelName }, callback) =>
      callback(null, server.authorizeChannel(socketId, channelName, member(channelName))),
  },
});

/** pusher-js's options for the broker at `port`: plain WebSocket to 127.0.0.1, no stats. */
export const wire = (port) => ({
  cluster: "mt1",
  wsHost: "127.0.0.1",
  wsPort: port,
  forceTLS: false,
  enabledTransports: ["ws"],
  disableStats: true,
});

/**
 * A pusher-js client of `app` on the broker at `port`, over WebSocket only
 * and without stats, with `options` (its authorizers) added; resolved once
 * connected and kept in `clients` for the suite's `after` to disconnect.
 */
export async function connected(app, port, clients, options = {}) {
  const c = new PusherJs(app.key, { ...wire(port), ...options });
  clients.push(c);
  await new Promise((ok, fail) => {
    c.connection.bind("connected", ok);
    c.connection.bind("failed", () => fail(new Error("pusher-js could not connect")));
  });
  return c;
}

/** Subscribes `c` to `name`; resolves with the channel once subscribed, rejects on `subscription_error`. */
export function subscribed(c, name) {
  const ch = c.subscribe(name);
  return new Promise((ok, fail) => {
    ch.bind("pusher:subscription_succeeded", () => ok(ch));
    ch.bind("pusher:subscription_error", (e) => fail(new Error(`subscription refused: ${JSON.stringify(e)}`)));
  });
}

/** The next `event` on `ch`. */
export const next = (ch, event) => new Promise((ok) => ch.bind(event, ok));
