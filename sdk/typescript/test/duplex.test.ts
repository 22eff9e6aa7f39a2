// The duplex mode on serveNode (docs/protocol.md, "The duplex mode"), against a test
// that plays the gateway's side of the exchange by hand: frames on the response, acks on
// the request's body, the claim's proof checked with the tenant's keys.
import assert from "node:assert/strict";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { createFunction } from "../src/index.js";
import { serveNode } from "../src/node.js";
import { Gateway } from "./gateway.js";

const gw = new Gateway();
let server: Server;
let appUrl = "";
const ran: string[] = [];

before(async () => {
  const pay = createFunction({ name: "pay" }, async ({ step }) => {
    const a = await step.run("a", () => (ran.push("a"), 1));
    const b = await step.run("b", () => (ran.push("b"), 2));
    return a + b;
  });
  server = createServer(serveNode({ functions: [pay], signingKeys: gw.publicKey }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  appUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** Sends a duplex invocation of pay, answers its frames with ack, and returns the answer frame and the frames' ops. */
async function exchange(runId: string, ack: (op: string, body: any) => { status: number; body: unknown }): Promise<{ answer: any; ops: string[] }> {
  const req = gw.request(runId, "pay", {}, { mode: "duplex", checkpoint: { url: "http://gateway.test/checkpoint", token: "duplex" } });
  const first = JSON.stringify(req);
  return new Promise((resolve, reject) => {
    const r = request(`${appUrl}/pay`, {
      method: "POST",
      headers: { "Content-Type": "application/x-ndjson", "Stepgate-Signature": gw.sign(first, `${appUrl}/pay`) },
    });
    r.on("error", reject);
    r.on("response", (resp) => {
      assert.equal(resp.statusCode, 200);
      assert.equal(resp.headers["content-type"], "application/x-ndjson");
      const ops: string[] = [];
      let buf = "";
      resp.on("data", (d: Buffer) => {
        buf += d.toString();
        for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
          const f = JSON.parse(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          ops.push(f.op);
          if (f.op === "answer") {
            r.end();
            resolve({ answer: f, ops });
            return;
          }
          r.write(JSON.stringify({ id: f.id, ...ack(f.op, f.body) }) + "\n");
        }
      });
    });
    r.write(first + "\n");
  });
}

test("the manifest lists the duplex mode", async () => {
  const resp = await fetch(`${appUrl}/`, { headers: { "Stepgate-Signature": gw.sign("", `${appUrl}/`) } });
  const m = (await resp.json()) as { functions: { config: { modes: string[] } }[] };
  assert.deepEqual(m.functions[0]?.config.modes, ["request", "duplex"]);
});

test("a duplex invocation claims with a verified proof, checkpoints as frames, and answers last", async () => {
  ran.length = 0;
  const { answer, ops } = await exchange("run-1", (op, body) =>
    op === "current" ? { status: 200, body: { run_id: "run-1", proof: gw.signClaim("run-1", 1, body.nonce) } } : { status: 200, body: { seq: body.seq } },
  );
  assert.deepEqual(ops, ["current", "checkpoint", "checkpoint", "answer"]);
  assert.equal(answer.status, 200);
  assert.deepEqual(answer.body, { status: "completed", output: 3 });
  assert.deepEqual(ran, ["a", "b"]);
});

test("a claim whose proof is not the tenant's runs no step body", async () => {
  ran.length = 0;
  const other = new Gateway(); // another key
  const { answer, ops } = await exchange("run-2", (op, body) =>
    op === "current" ? { status: 200, body: { run_id: "run-2", proof: other.signClaim("run-2", 1, body.nonce) } } : { status: 200, body: { seq: body.seq } },
  );
  assert.deepEqual(ops, ["current", "answer"]);
  assert.equal(answer.body.status, "failed");
  assert.equal(answer.body.error.type, "superseded");
  assert.match(answer.body.error.message, /not the gateway's/);
  assert.deepEqual(ran, []);
});
