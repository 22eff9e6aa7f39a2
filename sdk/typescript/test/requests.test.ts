// Requests (step.receiveRequest, step.reply, step.replyError) against the test gateway;
// the end-to-end test (cmd/stepgate/typescript_e2e_test.go, TestTypeScriptSDK/Waits/Requests)
// runs them on a real gateway.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, serve, StepError, type Context, type FetchHandler, type Request } from "../src/index.js";
import type { JournalEntry } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("c000");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate" });
}

/** A function called name whose handler is fn, and an invoke of it on run id with the journal so far. */
function fn(name: string, handler: (ctx: Context<unknown>) => unknown) {
  const f = createFunction({ name }, handler);
  return (id: string) => gw.invoke(app(f), APP, gw.request(id, name, null));
}

const entries = (j: JournalEntry[]) => j.map(({ seq, kind, name, output, error }) => ({ seq, kind, name, output, error }));

const price = {
  message: { id: "rq-1", topic: "request:price", data: { qty: 2 }, identity: { subject: "ops", tenant: "acme", roles: [] }, sent_at: "2026-12-01T01:02:03.500Z" },
};

describe("requests", () => {
  test("receiveRequest is a receive of the request's topic; reply journals a reply named after its id, once", async () => {
    const id = runId();
    let got: Request<{ qty: number }> | undefined;
    const invoke = fn("pricer", async ({ step }) => {
      const r = await step.receiveRequest<{ qty: number }>("price", { timeout: "1h" });
      got = r;
      await step.reply(r.id, { total: 3 * r.data.qty });
      return "replied";
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "receive", seq: 1, name: "request:price", topic: "request:price", timeout: "1h" });
    gw.journal(id).push({ seq: 1, kind: "receive", name: "request:price", output: price });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: "replied" });
    assert.deepEqual(got, { id: "rq-1", name: "price", data: { qty: 2 }, sender: { subject: "ops", tenant: "acme", roles: [], claims: {} }, sentAt: new Date("2026-12-01T01:02:03.500Z") });
    assert.deepEqual(entries(gw.journal(id)).slice(1), [{ seq: 2, kind: "reply", name: "rq-1", output: { total: 6 }, error: undefined }]);

    // Replayed, the reply is not checkpointed again.
    gw.hook = () => [400, JSON.stringify({ detail: "no checkpoint expected" })];
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: "replied" });
  });

  test("replyError sends a StepError's type, or \"error\", and the message", async () => {
    for (const [name, error, want] of [
      ["plain", new Error("out of stock"), { type: "error", message: "out of stock" }],
      ["typed", new StepError(0, "", "sold_out", "sold out"), { type: "sold_out", message: "sold out" }],
    ] as const) {
      const id = runId();
      gw.journal(id).push({ seq: 1, kind: "receive", name: "request:price", output: price });
      const r = await fn(`reply-${name}`, async ({ step }) => {
        const req = await step.receiveRequest("price");
        await step.replyError(req.id, error);
        return "went on";
      })(id);
      assert.deepEqual(r.body, { status: "completed", output: "went on" });
      assert.deepEqual(entries(gw.journal(id)).slice(1), [{ seq: 2, kind: "reply", name: "rq-1", output: undefined, error: want }]);
    }
  });

  test("a reply the gateway refuses fails the run, non-retryable, saying why", async () => {
    const id = runId();
    gw.hook = () => [400, JSON.stringify({ detail: `run ${id} has no request with id "rq-9"` })];
    const r = await fn("stranger", async ({ step }) => {
      await step.reply("rq-9", "hi");
      return "replied";
    })(id);
    assert.equal(r.body.status, "failed");
    const error = r.body.error as { message: string; retryable: boolean };
    assert.equal(error.retryable, false);
    assert.match(error.message, /has no request with id "rq-9"/);
  });

  test("bad arguments take no seq", async () => {
    for (const [name, call, message] of [
      ["empty-name", (ctx: Context<unknown>) => ctx.step.receiveRequest(""), /the request name is empty/],
      ["empty-id", (ctx: Context<unknown>) => ctx.step.reply("", 1), /request id "" must be 1 to 255 bytes/],
      ["no-error", (ctx: Context<unknown>) => ctx.step.replyError("rq-1", undefined), /the error is undefined/],
    ] as const) {
      const id = runId();
      const r = await fn(`bad-${name}`, async (ctx) => call(ctx))(id);
      assert.equal(r.body.status, "failed", name);
      assert.match((r.body.error as { message: string }).message, message);
      assert.deepEqual(gw.journal(id), [], name);
    }
  });

  test("waitFirst takes a request against a timer", async () => {
    const id = runId();
    const invoke = fn("picker", async ({ step }) => {
      const ask = step.receiveRequest<{ qty: number }>("price");
      if ((await step.waitFirst("first", ask, step.sleep("late", "1h"))) !== 0) return "late";
      const req = await ask;
      await step.reply(req.id, req.data.qty);
      return req.name;
    });
    let r = await invoke(id);
    const aw = r.body.await as { type: string; of: { topic?: string }[] };
    assert.equal(aw.type, "wait_any");
    assert.deepEqual(aw.of.map((o) => o.topic), ["request:price"]);
    gw.journal(id).push({ seq: 1, kind: "wait_any", name: "first", output: { index: 0, kind: "receive", output: price } });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: "price" });
    assert.deepEqual(entries(gw.journal(id)).slice(1), [{ seq: 2, kind: "reply", name: "rq-1", output: 2, error: undefined }]);
  });
});
