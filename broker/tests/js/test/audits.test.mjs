// The GraphQL over HTTP specification's server audits (the `graphql-http`
// package's `serverAudits`) against a real broker: every MUST passes, and
// so does every SHOULD and MAY this broker implements (listed below; the
// rest are choices documented in docs/graphql.md).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { serverAudits } from "graphql-http";
import { API_KEY, startBroker } from "../lib/broker.mjs";

let broker;
before(async () => {
  // A budget the audits (about 40 requests at once) cannot empty.
  broker = await startBroker({ account_burst: 100000, account_messages_per_sec: 100000 });
});
after(async () => broker?.stop());

/** Every audit request carries the API key: identity comes first (§12). */
const fetchFn = (input, init = {}) =>
  fetch(input, {
    ...init,
    headers: { ...(init.headers ?? {}), authorization: `Bearer ${API_KEY}` },
  });

describe("graphql-http server audits", () => {
  const audits = serverAudits({ url: () => `${broker.url}/v1/graphql`, fetchFn });
  for (const audit of audits) {
    test(audit.name, async () => {
      const result = await audit.fn();
      // Every audit this broker meets, MUST, SHOULD and MAY alike: a
      // regression in any of them fails here.
      assert.equal(result.status, "ok", `${audit.name}: ${result.reason ?? ""} ${result.response ? await result.response.text?.().catch(() => "") : ""}`);
    });
  }
});

test("an unauthenticated request is 401 with a GraphQL body", async () => {
  const res = await fetch(`${broker.url}/v1/graphql`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/graphql-response+json" },
    body: JSON.stringify({ query: "{ __typename }" }),
  });
  assert.equal(res.status, 401);
  const body = await res.json();
  assert.equal(body.errors[0].extensions.code, "UNAUTHENTICATED");
});
