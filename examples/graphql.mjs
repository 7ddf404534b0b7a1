// Subscribe to a channel over GraphQL (graphql-transport-ws, with the
// `graphql-ws` client) and publish into it with the `publish` mutation on
// the same socket; print what arrives, then exit.
//   cd examples && npm install && node graphql.mjs [credential] [channel] [http://127.0.0.1:8080]
// The credential is an API key (the sample one by default) or a token.
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [credential = "tidegate-sample-publish-key", channel = "doc:42", base = "http://127.0.0.1:8080"] =
  process.argv.slice(2);

const client = createClient({
  url: `${base.replace(/^http/, "ws")}/v1/graphql`,
  webSocketImpl: WebSocket,
  connectionParams: { authorization: `Bearer ${credential}` },
  retryAttempts: 0,
});

/** One query or mutation's result. */
async function run(query, variables) {
  const it = client.iterate({ query, variables });
  const { value } = await it.next();
  await it.return?.();
  return value;
}

const PUBLISH = "mutation($c: String!, $d: JSON!) { publish(channel: $c, data: $d) { seq } }";
try {
  // Publish once to learn the channel's position, then subscribe from it:
  // nothing published after it can be missed (§2's `since`).
  const first = await run(PUBLISH, { c: channel, d: { text: "hello" } });
  if (first.errors) throw first.errors;
  const since = first.data.publish.seq;
  console.log(`published seq ${since}, cost ${first.extensions.rateLimit.cost}`);
  const messages = client.iterate({
    query: "subscription($c: String!, $s: Seq) { messages(channel: $c, since: $s) { seq data } }",
    variables: { c: channel, s: since },
  });
  const second = await run(PUBLISH, { c: channel, d: { text: "world" } });
  console.log(`published seq ${second.data.publish.seq}`);
  for await (const { data, errors, extensions } of messages) {
    if (errors) throw errors;
    console.log(JSON.stringify({ seq: data.messages.seq, data: data.messages.data, extensions }));
    break;
  }
} catch (e) {
  // An `error` message's payload (RATE_LIMITED, QUERY_TOO_EXPENSIVE,
  // FORBIDDEN, TOO_MANY_SUBSCRIPTIONS, SLOW_CONSUMER with lastSeq) or a
  // close (4403: the credential was refused).
  console.error("refused:", JSON.stringify(e?.reason ?? e));
  process.exitCode = 1;
} finally {
  await client.dispose();
}
