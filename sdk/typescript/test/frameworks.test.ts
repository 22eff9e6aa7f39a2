// The README's Hono app and Next.js route handler (examples/hono.ts, examples/next-route.ts,
// which must equal the README's blocks but for their imports) answer a signed manifest
// request and a signed invocation as the gateway sends them.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import type { Manifest } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const runId = useGateway("f1a0");
const BASE = "http://app.test/api/stepgate";

/** The README block after heading, with the example's header comment and imports as the README has them. */
function readmeBlock(heading: string): string {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const at = readme.indexOf(heading);
  assert.ok(at >= 0, `the README has the section ${heading}`);
  const m = /```ts\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(m, `the README's ${heading} has a ts block`);
  return m[1]!;
}

function example(file: string): string {
  return readFileSync(new URL(`../../examples/${file}`, import.meta.url), "utf8")
    .replace(/^\/\/ .*\n/, "")
    .replaceAll('from "../src/index.js"', 'from "@stepgate/sdk"');
}

/** Asks handle for the manifest, then invokes hello once, both signed as the gateway signs them. */
async function manifestAndInvocation(handle: (req: Request) => Promise<Response>) {
  const manifest = await handle(new Request(BASE, { headers: { "Stepgate-Signature": gw.sign("", BASE) } }));
  assert.equal(manifest.status, 200);
  const m = (await manifest.json()) as Manifest;
  assert.deepEqual(m.functions.map((f) => f.name), ["hello"]);

  const body = JSON.stringify(gw.request(runId(), "hello", { name: "Ada" }));
  const url = `${BASE}/hello`;
  const resp = await handle(new Request(url, { method: "POST", headers: { "Content-Type": "application/json", "Stepgate-Signature": gw.sign(body, url) }, body }));
  assert.equal(resp.status, 200);
  const answer = (await resp.json()) as { status: string; await?: { type: string } };
  assert.equal(answer.status, "suspended", JSON.stringify(answer)); // its greet step ran, then the sleep
  assert.equal(answer.await?.type, "sleep");

  const unsigned = await handle(new Request(url, { method: "POST", headers: { "Content-Type": "application/json" }, body }));
  assert.equal(unsigned.status, 401, "a request the gateway did not sign is refused");
}

describe("frameworks", () => {
  test("the Hono app is the README's, and serves the manifest and the functions", async () => {
    assert.equal(example("hono.ts"), readmeBlock("### Hono\n"));
    process.env.STEPGATE_PUBLIC_KEYS = gw.publicKey;
    const { default: app } = await import("../examples/hono.js");
    await manifestAndInvocation((req) => Promise.resolve(app.fetch(req)));
  });

  test("the Next.js route handler is the README's, and serves the manifest and the functions", async () => {
    assert.equal(example("next-route.ts"), readmeBlock("### Next.js (App Router)\n"));
    process.env.STEPGATE_PUBLIC_KEYS = gw.publicKey;
    const route = await import("../examples/next-route.js");
    await manifestAndInvocation((req) => (req.method === "GET" ? route.GET(req) : route.POST(req)));
  });
});
