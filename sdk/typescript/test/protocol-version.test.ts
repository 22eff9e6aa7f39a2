// The function protocol's version: the app says the version it speaks in its manifest
// and on every answer, serves a gateway of its major (or one that says nothing), and
// refuses one of another major, or a header that is not a version, before the function
// runs, naming both versions.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, serve, type FetchHandler } from "../src/index.js";
import { checkGatewayVersion, MAX_VERSION_LENGTH, parseVersion, PROTOCOL_VERSION, SDK_VERSION } from "../src/version.js";
import type { Manifest } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("e000");
const SDK = `stepgate-ts/${SDK_VERSION}`;

let ran = 0;
const fn = createFunction({ name: "counted" }, () => ++ran);
const app = (): FetchHandler => serve({ functions: [fn], signingKeys: gw.publicKey, basePath: "/api/stepgate" });

/** Sends one signed invocation of a new run, with the Stepgate-Protocol header v (none when undefined). */
async function invoke(h: FetchHandler, v?: string): Promise<Response> {
  const body = JSON.stringify(gw.request(runId(), "counted", null));
  const headers: Record<string, string> = { "Content-Type": "application/json", "Stepgate-Signature": gw.sign(body, `${APP}/counted`) };
  if (v !== undefined) headers["Stepgate-Protocol"] = v;
  return h(new Request(`${APP}/counted`, { method: "POST", headers, body }));
}

describe("protocol version", () => {
  test("the manifest says the protocol version and the SDK, and so does its header", async () => {
    const resp = await app()(new Request(APP, { headers: { "Stepgate-Signature": gw.sign("", APP), "Stepgate-Protocol": PROTOCOL_VERSION } }));
    assert.equal(resp.status, 200);
    assert.equal(resp.headers.get("Stepgate-Protocol"), PROTOCOL_VERSION);
    const m = (await resp.json()) as Manifest;
    assert.equal(m.protocol, 1);
    assert.equal(m.protocol_version, PROTOCOL_VERSION);
    assert.equal(m.sdk, SDK);
  });

  test("a gateway of the SDK's major, or one that says nothing, is served, and each answer says the SDK's version", async () => {
    const h = app();
    for (const v of [undefined, PROTOCOL_VERSION, "1.9.3"]) {
      const before = ran;
      const resp = await invoke(h, v);
      assert.equal(resp.status, 200, `gateway ${v}`);
      assert.equal(resp.headers.get("Stepgate-Protocol"), PROTOCOL_VERSION, `gateway ${v}`);
      assert.deepEqual(await resp.json(), { status: "completed", output: before + 1 });
    }
  });

  test("a gateway of another major, or a header that is not a version, is refused with a 400 naming both, running nothing", async () => {
    const h = app();
    const cases: [string, string][] = [
      ["2.0.0", `the gateway speaks function protocol 2.0.0; this SDK (${SDK}) speaks 1.0.0 and serves gateways of protocol 1.x only`],
      ["0.3.1", `the gateway speaks function protocol 0.3.1; this SDK (${SDK}) speaks 1.0.0 and serves gateways of protocol 1.x only`],
      ["1.0", `the gateway's Stepgate-Protocol header "1.0" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (${SDK}) speaks 1.0.0`],
      ["9".repeat(4000), `the gateway's Stepgate-Protocol header "${"9".repeat(MAX_VERSION_LENGTH)}"… is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (${SDK}) speaks 1.0.0`],
    ];
    const before = ran;
    for (const [v, message] of cases) {
      const resp = await invoke(h, v);
      assert.equal(resp.status, 400, v);
      assert.equal(resp.headers.get("Stepgate-Protocol"), PROTOCOL_VERSION);
      assert.deepEqual(await resp.json(), { type: "protocol_version", message });
    }
    assert.equal(ran, before, "a refused invocation runs nothing");
  });

  test("parseVersion reads MAJOR.MINOR.PATCH only", () => {
    assert.deepEqual(parseVersion("1.0.0"), [1, 0, 0]);
    assert.deepEqual(parseVersion("2147483647.20.3"), [2147483647, 20, 3]);
    for (const v of ["", "1", "1.0", "1.0.0.0", "01.0.0", "1.0.00", "v1.0.0", "1.0.0-rc.1", " 1.0.0", "1..0", "-1.0.0", "2147483648.0.0", "1".repeat(40)]) {
      assert.equal(parseVersion(v), undefined, JSON.stringify(v));
    }
    assert.equal(checkGatewayVersion("1.4.0"), "");
  });
});
