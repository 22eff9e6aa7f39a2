// A wait that changes shape (docs/versioning.md): a run suspended on code that waited for
// a callback alone resumes on code that waits for the first of the callback and a day,
// behind step.patched; without the patch it fails with nondeterminism.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, serve, type Context } from "../src/index.js";
import type { JournalEntry } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("5a00");

function fn(handler: (ctx: Context<unknown>) => unknown) {
  const f = createFunction({ name: "refunds.approve" }, handler);
  // gw starts before the tests, after this file's top level.
  return (id: string) => gw.invoke(serve({ functions: [f], signingKeys: gw.publicKey, basePath: "/api/stepgate" }), APP, gw.request(id, "refunds.approve", null));
}

/** The new code: a reminder after a day, behind a patch; runs of the old code wait for the approval alone. */
const patched = fn(async ({ step }) => {
  const cb = await step.callback<{ approved: boolean }>("approval", { timeout: "72h" });
  await step.run("ask", () => cb.url);
  if (await step.patched("remind-after-a-day")) {
    const first = await step.waitFirst("approval-or-a-day", cb.result(), step.sleep("a-day", "24h"));
    if (first === 1) await step.run("remind", () => cb.url);
  }
  return (await cb.result()).approved;
});

/** The same change without the patch. */
const unpatched = fn(async ({ step }) => {
  const cb = await step.callback<{ approved: boolean }>("approval", { timeout: "72h" });
  await step.run("ask", () => cb.url);
  const first = await step.waitFirst("approval-or-a-day", cb.result(), step.sleep("a-day", "24h"));
  if (first === 1) await step.run("remind", () => cb.url);
  return (await cb.result()).approved;
});

/** The journal of a run of the old code (await cb.result() right after "ask"), resumed by its approval. */
const oldJournal = (): JournalEntry[] => [
  { seq: 1, kind: "callback", name: "approval", output: { url: "https://gw.test/v1/callbacks/t", token: "t", expires_at: "2030-01-01T00:00:00Z" } },
  { seq: 2, kind: "step", name: "ask", output: "https://gw.test/v1/callbacks/t" },
  { seq: 3, kind: "await_callback", name: "approval", output: { data: { approved: true }, resolver: "token", resolved_at: "2026-12-07T10:00:00Z" } },
];

describe("a wait that changes shape", () => {
  test("a run suspended on the old code's callback wait completes on the patched code", async () => {
    const id = runId();
    gw.journal(id).push(...oldJournal());
    const r = await patched(id);
    assert.deepEqual(r.body, { status: "completed", output: true });
    assert.deepEqual(gw.journal(id).map((e) => `${e.seq} ${e.kind} ${e.name}`), ["1 callback approval", "2 step ask", "3 await_callback approval"]);
  });

  test("without the patch it fails with nondeterminism", async () => {
    const id = runId();
    gw.journal(id).push(...oldJournal());
    const r = await unpatched(id);
    assert.equal(r.body.status, "failed");
    assert.equal((r.body.error as { type: string }).type, "nondeterminism");
  });

  test("a new run journals the marker and waits for the first", async () => {
    const id = runId();
    gw.journal(id).push(...oldJournal().slice(0, 2));
    const r = await patched(id);
    assert.equal((r.body.await as { type: string; seq: number }).type, "wait_any");
    assert.equal((r.body.await as { seq: number }).seq, 4);
    assert.deepEqual(gw.journal(id).map((e) => `${e.seq} ${e.kind} ${e.name}`), ["1 callback approval", "2 step ask", "3 patch remind-after-a-day"]);
  });
});
