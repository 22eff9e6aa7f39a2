// Streams, patches, compensations and nested steps, as the Go SDK has them.
import assert from "node:assert/strict";
import { after, beforeEach, describe, test } from "node:test";
import { createFunction, NonRetryableError, serve, StepError, StreamRefusedError, type FetchHandler } from "../src/index.js";
import { fetchPoster } from "../src/invocation.js";
import type { JournalEntry } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("9000");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate" });
}

const kinds = (j: JournalEntry[]) => j.map((e) => `${e.seq} ${e.kind} ${e.name}`);
/** An answer without the steps it carries (with lazy checkpoints, the last step rides with the answer). */
const outcome = ({ steps: _, ...a }: { steps?: JournalEntry[] }) => a;
/** The steps an answer carries. */
const rides = (a: { steps?: JournalEntry[] }) => (a.steps ?? []).map((e) => `${e.seq} ${e.kind} ${e.name}`);

describe("streams", () => {
  test("chunks are placed by seq, attempt and index: a replay writes nothing twice, a retried step writes anew", async () => {
    const fn = createFunction({ name: "streamer" }, async ({ step }) => {
      const w = step.stream("out");
      await w.write("a");
      await step.run("s", async (ctx) => {
        await step.stream("out").write(`in-${ctx.attempt}`); // placed in the step by AsyncLocalStorage
        await ctx.stream("out").send({ n: ctx.attempt });
        if (ctx.attempt === 1) throw new Error("again");
      }, { retries: 1 });
      await step.sleep("nap", 1);
      await w.write("b");
      await w.close();
      return "ok";
    });
    const id = runId();
    gw.streamWrites = [];
    const r = await gw.run(app(fn), APP, id, "streamer", null);
    assert.deepEqual(r.answer, { status: "completed", output: "ok" });
    assert.deepEqual(gw.stream(id, "out"), ["a", "in-1", { n: 1 }, "in-2", { n: 2 }, "b"]);
    assert.deepEqual(gw.streamWrites.slice(0, 4), [
      { key: "out", seq: 1, chunks: ["a"] },
      { key: "out", seq: 1, attempt: 1, chunks: ["in-1"] },
      { key: "out", seq: 1, attempt: 1, index: 1, chunks: [{ n: 1 }] },
      { key: "out", seq: 1, chunks: ["a"] },
    ]);
    assert.deepEqual(gw.streamWrites.at(-1), { key: "out", seq: 3, index: 1, chunks: [], close: true });
    assert.deepEqual(kinds(gw.journal(id)), ["1 step s", "2 sleep nap"]);
  });

  test("writes of one writer keep their call order, awaited or not", async () => {
    let slow = true;
    gw.streamHook = (_id, w) => {
      if (slow && w.chunks[0] === 0) {
        slow = false;
        return [503, JSON.stringify({ detail: "restarting" })];
      }
      return undefined;
    };
    const fn = createFunction({ name: "order" }, async ({ step }) => {
      const w = step.stream("nums");
      await Promise.all([0, 1, 2, 3].map((i) => w.send(i)));
      return "ok";
    });
    const id = runId();
    await gw.run(app(fn), APP, id, "order", null);
    assert.deepEqual(gw.stream(id, "nums"), [0, 1, 2, 3]);
  });

  test("a refused write throws a StreamRefusedError and the run goes on; a 409 superseded stops it", async () => {
    gw.streamHook = () => [409, JSON.stringify({ type: "https://stepgate.dev/problems/limit_exceeded", detail: "the stream holds 3 chunks, at most 3" })];
    const fn = createFunction({ name: "refused" }, async ({ step }) => {
      try {
        await step.stream("s").write("x");
      } catch (e) {
        assert.ok(e instanceof StreamRefusedError && e instanceof NonRetryableError);
        return [e.type, e.message];
      }
      return "unreachable";
    });
    let r = await gw.invoke(app(fn), APP, gw.request(runId(), "refused", null));
    assert.deepEqual(r.body, { status: "completed", output: ["limit_exceeded", 'step: stream write refused: stream "s": the stream holds 3 chunks, at most 3'] });

    gw.streamHook = () => [409, JSON.stringify({ type: "superseded", detail: "another attempt owns the run" })];
    let after = false;
    const gone = createFunction({ name: "gone" }, async ({ step }) => {
      await step.stream("s").write("x").catch(() => {});
      after = true;
      return step.run("next", () => 1);
    });
    r = await gw.invoke(app(gone), APP, gw.request(runId(), "gone", null));
    assert.deepEqual(r.body, { status: "failed", error: { type: "superseded", message: 'stream "s": another attempt owns the run', retryable: false } });
    assert.ok(after, "code that catches the write goes on, but its steps stop");
  });

  test("a stream key that is not one is a NonRetryableError", async () => {
    const fn = createFunction({ name: "badkey" }, async ({ step }) => step.stream("no spaces"));
    const r = await gw.invoke(app(fn), APP, gw.request(runId(), "badkey", null));
    assert.deepEqual(r.body.error, {
      type: "non_retryable",
      message: `step: stream key "no spaces" is invalid: use 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit`,
      retryable: false,
    });
  });
});

describe("patches", () => {
  const newCode = (seen: boolean[]) => createFunction({ name: "patched" }, async ({ step }) => {
    const p = await step.patched("fix-rounding");
    seen.push(p);
    const total = p ? await step.run("total-v2", () => 10) : await step.run("total", () => 9.99);
    await step.sleep("nap", 1);
    return total;
  });

  test("a new run journals the marker and takes the patched path, on replay too", async () => {
    const seen: boolean[] = [];
    const id = runId();
    const r = await gw.run(app(newCode(seen)), APP, id, "patched", null);
    assert.deepEqual(r.answer, { status: "completed", output: 10 });
    assert.deepEqual(seen, [true, true]);
    assert.deepEqual(kinds(gw.journal(id)), ["1 patch fix-rounding", "2 step total-v2", "3 sleep nap"]);
  });

  test("a run of the old code replays the old path, taking no seq", async () => {
    const seen: boolean[] = [];
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "step", name: "total", output: 9.99 }, { seq: 2, kind: "sleep", name: "nap" });
    const r = await gw.invoke(app(newCode(seen)), APP, gw.request(id, "patched", null));
    assert.deepEqual(r.body, { status: "completed", output: 9.99 });
    assert.deepEqual(seen, [false]);
  });

  test("deprecatePatch consumes a marker, and journals nothing without one", async () => {
    const fn = createFunction({ name: "deprecated" }, async ({ step }) => {
      await step.deprecatePatch("fix-rounding");
      return step.run("total-v2", () => 10);
    });
    const marked = runId();
    gw.journal(marked).push({ seq: 1, kind: "patch", name: "fix-rounding" }, { seq: 2, kind: "step", name: "total-v2", output: 10 });
    let r = await gw.invoke(app(fn), APP, gw.request(marked, "deprecated", null));
    assert.deepEqual(r.body, { status: "completed", output: 10 });
    const fresh = runId();
    r = await gw.invoke(app(fn), APP, gw.request(fresh, "deprecated", null));
    assert.deepEqual(outcome(r.body), { status: "completed", output: 10 });
    assert.deepEqual(rides(r.body), []);
    assert.deepEqual(kinds(gw.journal(fresh)), ["1 step total-v2"]);
  });
});

describe("compensations", () => {
  const checkout = (undone: string[], opts: { failShip?: boolean; failRefund?: boolean; rollback?: boolean; transient?: boolean } = {}) =>
    createFunction({ name: "saga" }, async ({ step }) => {
      const res = await step.run("reserve", () => "r-1");
      step.compensate("release", () => void undone.push(`release ${res}`));
      const ch = await step.run("charge", () => "c-1");
      step.compensate("refund", () => {
        if (opts.failRefund) throw new NonRetryableError("the bank is closed");
        undone.push(`refund ${ch}`);
      });
      if (opts.transient) throw new Error("transient");
      if (opts.rollback) throw await step.rollback(new Error("the customer cancelled"));
      await step.run("ship", () => {
        if (opts.failShip) throw new NonRetryableError("no courier");
        return "shipped";
      });
      return "done";
    });

  test("a run that fails for good runs its undos newest first, as steps, then fails with the original error", async () => {
    const undone: string[] = [];
    const id = runId();
    const r = await gw.run(app(checkout(undone, { failShip: true })), APP, id, "saga", null);
    assert.deepEqual(outcome(r.answer), { status: "failed", error: { type: "non_retryable", message: "no courier", retryable: false } });
    assert.deepEqual(rides(r.answer), [], "the last undo is checkpointed, not carried by the failure");
    assert.deepEqual(undone, ["refund c-1", "release r-1"]);
    assert.deepEqual(kinds(gw.journal(id)), ["1 step reserve", "2 step charge", "3 step ship", "4 step compensate refund", "5 step compensate release"]);
    assert.deepEqual(gw.journal(id)[3]!.output, {});
    // A replay of the failed run runs no undo twice.
    const again = await gw.invoke(app(checkout(undone, { failShip: true })), APP, gw.request(id, "saga", null));
    assert.equal(again.body.status, "failed");
    assert.deepEqual(undone, ["refund c-1", "release r-1"]);
  });

  test("an undo that fails for good: the others run, the error says the compensation is incomplete", async () => {
    const undone: string[] = [];
    const r = await gw.run(app(checkout(undone, { failShip: true, failRefund: true })), APP, runId(), "saga", null);
    assert.deepEqual(r.answer.error, { type: "non_retryable", message: "no courier (compensation incomplete: refund failed)", retryable: false });
    assert.deepEqual(undone, ["release r-1"]);
  });

  test("rollback runs the undos and gives the error to fail with; a retryable error undoes nothing", async () => {
    let undone: string[] = [];
    let r = await gw.run(app(checkout(undone, { rollback: true })), APP, runId(), "saga", null);
    assert.deepEqual(r.answer.error, { type: "non_retryable", message: "the customer cancelled", retryable: false });
    assert.deepEqual(undone, ["refund c-1", "release r-1"]);
    undone = [];
    r = await gw.run(app(checkout(undone, { transient: true })), APP, runId(), "saga", null);
    assert.equal(r.status, 500);
    assert.deepEqual(undone, []);
  });

  test("an undo that fails with attempts left is retried in a new invocation; the others are not run twice", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "sagaretry" }, async ({ step }) => {
      await step.run("reserve", () => 1);
      step.compensate("release", () => void ran.push("release"));
      await step.run("charge", () => 2);
      step.compensate("refund", ({ attempt }) => {
        ran.push(`refund#${attempt}`);
        if (attempt === 1) throw new Error("the bank is slow");
      });
      throw new NonRetryableError("no courier");
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "sagaretry", null);
    assert.deepEqual(outcome(r.answer), { status: "failed", error: { type: "non_retryable", message: "no courier", retryable: false } });
    assert.equal(r.awaits[0]!.type, "retry");
    assert.equal(r.awaits[0]!.name, "compensate refund");
    assert.deepEqual(ran, ["refund#1", "refund#2", "release"]);
    assert.deepEqual(kinds(gw.journal(id)), ["1 step reserve", "2 step charge", "3 step compensate refund", "4 step compensate release"]);
    assert.equal(gw.journal(id)[2]!.attempt, 2);
  });

  test("a compensation name longer than 244 bytes is refused", async () => {
    const fn = createFunction({ name: "longname" }, ({ step }) => step.compensate("x".repeat(245), () => {}));
    const r = await gw.invoke(app(fn), APP, gw.request(runId(), "longname", null));
    assert.equal(r.body.error.message, `step: compensation name "${"x".repeat(245)}" is not 1 to 244 bytes`);
  });
});

describe("nested steps", () => {
  test("a step started inside a step's function is a NonRetryableError, failing the outer step", async () => {
    let inner: unknown;
    const fn = createFunction({ name: "nested" }, async ({ step }) => {
      try {
        await step.run("outer", async () => {
          try {
            await step.run("inner", () => 1);
          } catch (e) {
            inner = e;
            throw e;
          }
        });
      } catch (e) {
        assert.ok(e instanceof StepError);
        return [e.type, e.message];
      }
    });
    const id = runId();
    const r = await gw.invoke(app(fn), APP, gw.request(id, "nested", null));
    const msg = `step "inner", inside the function of step 1: step: a step cannot start inside another step's function`;
    assert.ok(inner instanceof NonRetryableError);
    assert.deepEqual(r.body, { status: "completed", output: ["non_retryable", msg] });
    assert.deepEqual(kinds(gw.journal(id)), ["1 step outer"]);
  });

  test("steps after a step, and in parallel, are not nested", async () => {
    const fn = createFunction({ name: "notnested" }, async ({ step }) => {
      const a = await step.run("a", () => 1);
      const [b, c] = await Promise.all([step.run("b", async () => a + 1), step.run("c", async () => a + 2)]);
      return step.run("d", () => a + b + c);
    });
    const r = await gw.run(app(fn), APP, runId(), "notnested", null);
    assert.deepEqual(outcome(r.answer), { status: "completed", output: 6 });
  });
});

describe("sleeps in the process", () => {
  const soon = () => new Date(Date.now() + 60_000).toISOString();
  const napper = (opts: { sleepInProcess?: string; nap?: string }) => {
    const after: number[] = [];
    const fn = createFunction({ name: "napper", ...(opts.sleepInProcess ? { sleepInProcess: opts.sleepInProcess } : {}) }, async ({ step, run }) => {
      const before = await step.run("before", () => run.attempt);
      await step.sleep("nap", opts.nap ?? "20ms");
      after.push(Date.now());
      return { before, after: run.attempt };
    });
    return { fn, after };
  };
  beforeEach(() => {
    gw.deadline = soon;
    gw.sleepAckWithoutUntil = false;
  });
  after(() => {
    gw.deadline = undefined;
  });

  test("a short sleep is checkpointed and waited out until its wake time, in one invocation", async () => {
    const { fn, after: woke } = napper({ sleepInProcess: "1s" });
    const id = runId();
    gw.checkpoints = [];
    const r = await gw.run(app(fn), APP, id, "napper", null);
    assert.deepEqual(r.answer, { status: "completed", output: { before: 1, after: 1 } });
    assert.equal(r.invocations, 1);
    const cp = gw.checkpoints.find((e) => e.kind === "sleep");
    assert.deepEqual(cp, { seq: 2, kind: "sleep", name: "nap", output: { duration: "20ms" } });
    const until = new Date(gw.journal(id)[1]!.until!).getTime();
    assert.ok(woke[0]! >= until - 1, "it goes on at the wake time the gateway answered, not before");
  });

  test("off by default, longer than the limit, or without the gateway's deadline, a sleep suspends the run", async () => {
    for (const [opts, deadline] of [[{}, soon], [{ sleepInProcess: "1s", nap: "2s" }, soon], [{ sleepInProcess: "1s" }, undefined]] as const) {
      gw.deadline = deadline;
      const r = await gw.run(app(napper(opts).fn), APP, runId(), "napper", null);
      assert.equal(r.invocations, 2, JSON.stringify(opts));
      assert.equal(r.awaits[0]!.type, "sleep");
    }
  });

  test("a sleep too close to the gateway's deadline suspends the run", async () => {
    gw.deadline = () => new Date(Date.now() + 2500).toISOString(); // less than the 2s margin plus the sleep
    const r = await gw.run(app(napper({ sleepInProcess: "1s", nap: "900ms" }).fn), APP, runId(), "napper", null);
    assert.equal(r.awaits[0]!.type, "sleep");
  });

  test("a replayed sleep whose wake time has not come is waited out", async () => {
    const { fn, after: woke } = napper({ sleepInProcess: "1s" });
    const id = runId();
    const until = Date.now() + 30;
    gw.journal(id).push({ seq: 1, kind: "step", name: "before", output: 1 }, { seq: 2, kind: "sleep", name: "nap", until: new Date(until).toISOString() });
    const r = await gw.invoke(app(fn), APP, gw.request(id, "napper", null));
    assert.deepEqual(r.body, { status: "completed", output: { before: 1, after: 1 } });
    assert.ok(woke[0]! >= until - 1);
  });

  test("a gateway that answers no wake time fails the run; one that ends the request stops the invocation", async () => {
    gw.sleepAckWithoutUntil = true;
    let r = await gw.invoke(app(napper({ sleepInProcess: "1s" }).fn), APP, gw.request(runId(), "napper", null));
    assert.deepEqual(r.body.error, { type: "protocol", message: 'sleep 2 "nap": the gateway answered its checkpoint without a wake time', retryable: false });
    gw.sleepAckWithoutUntil = false;

    // The gateway ends its request once the sleep is checkpointed (answered).
    const ac = new AbortController();
    const base = fetchPoster(fetch);
    const handler = serve({
      functions: [napper({ sleepInProcess: "1s", nap: "1s" }).fn], signingKeys: gw.publicKey, basePath: "/api/stepgate",
      post: async (url, headers, body, signal) => {
        const resp = await base(url, headers, body, signal);
        if (body.includes('"kind":"sleep"')) ac.abort(new Error("the gateway went away"));
        return resp;
      },
    });
    r = await gw.invoke(handler, APP, gw.request(runId(), "napper", null), ac.signal);
    assert.equal(r.status, 500);
    assert.deepEqual(r.body, { type: "sleep", message: "the gateway ended the invocation during a sleep in its process: Error: the gateway went away" });
  });
});
