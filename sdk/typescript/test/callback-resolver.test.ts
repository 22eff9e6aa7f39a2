// A callback tells the function who resolved or rejected it (resolver, resolvedBy,
// resolvedAt), as Go's OpenCallback does: alone, chosen by waitFirst, and rejected.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, serve, StepError, type Callback, type Context } from "../src/index.js";
import * as testing from "../src/testing.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("cb00");

function fn(name: string, handler: (ctx: Context<unknown>) => unknown) {
  const f = createFunction({ name }, handler);
  const app = serve({ functions: [f], signingKeys: gw.publicKey, basePath: "/api/stepgate" });
  return (id: string) => gw.invoke(app, APP, gw.request(id, name, null));
}

/** What the function sees of cb: who resolved it. */
const who = (cb: Callback<unknown>) => ({ resolver: cb.resolver, resolvedBy: cb.resolvedBy ?? null, resolvedAt: cb.resolvedAt?.toISOString() ?? null });

const boss = { subject: "boss", tenant: "acme", roles: ["manager"], claims: { email: "boss@acme.test" } };

describe("who resolved a callback", () => {
  test("resolved by an identity: its resolver, identity and time; nothing before", async () => {
    const id = runId();
    const before: unknown[] = [];
    const invoke = fn("by-identity", async ({ step }) => {
      const cb = await step.callback<{ ok: boolean }>("approve");
      before.push(who(cb));
      const data = await cb.result();
      return { data, ...who(cb) };
    });
    let r = await invoke(id);
    assert.equal(r.body.status, "suspended");
    gw.journal(id).push({
      seq: 2, kind: "await_callback", name: "approve",
      output: { data: { ok: true }, resolver: "identity", resolved_by: boss, resolved_at: "2026-12-07T10:00:00Z" },
    });
    r = await invoke(id);
    assert.deepEqual(r.body, {
      status: "completed",
      output: { data: { ok: true }, resolver: "identity", resolvedBy: boss, resolvedAt: "2026-12-07T10:00:00.000Z" },
    });
    assert.deepEqual(before, [{ resolver: "", resolvedBy: null, resolvedAt: null }, { resolver: "", resolvedBy: null, resolvedAt: null }]);
  });

  test("rejected through its URL, chosen by waitFirst: the token resolver and the time, no identity", async () => {
    const id = runId();
    const invoke = fn("rejected-first", async ({ step }) => {
      const cb = await step.callback("approve");
      const first = await step.waitFirst("approve-or-late", cb.result(), step.sleep("late", "1h"));
      try {
        await cb.result();
        return "resolved";
      } catch (e) {
        assert.ok(e instanceof StepError);
        return { first, type: e.type, ...who(cb) };
      }
    });
    await invoke(id);
    gw.journal(id).push({
      seq: 2, kind: "wait_any", name: "approve-or-late",
      output: { index: 0, kind: "await_callback", output: { error: { type: "rejected", message: "no" }, resolver: "token", resolved_at: "2026-12-07T11:00:00Z" } },
    });
    const r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: { first: 0, type: "rejected", resolver: "token", resolvedBy: null, resolvedAt: "2026-12-07T11:00:00.000Z" } });
  });

  test("in the test harness, a resolution by URL: resolver token, at the virtual clock's time", async () => {
    const f = createFunction({ name: "t.resolver" }, async ({ step }) => {
      const cb = await step.callback<string>("approve");
      const data = await cb.result();
      return { data, resolver: cb.resolver, at: cb.resolvedAt?.toISOString() };
    });
    const h = testing.harness(f);
    const run = h.start();
    await run.result();
    const at = h.now.toISOString();
    await run.resolveCallback("approve", "yes");
    assert.deepEqual(await run.result(), { status: "completed", output: { data: "yes", resolver: "token", at } });
  });
});
