// When a step's result is journaled. By default (eager checkpoints) before step.run
// resolves. With lazy checkpoints (lazyCheckpoints, or a step's lazy option), as the Go
// SDK's (functions/defer_test.go): the last step rides with the answer, a step's entry is
// checkpointed before the function takes its next seq (or decides a patch, or writes to a
// stream), or sent in the answer's steps when the function answers first.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, NonRetryableError, serve, type FetchHandler, type Step } from "../src/index.js";
import type { JournalEntry } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("a000");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate", onError: () => {} });
}

const kinds = (j: JournalEntry[]) => j.map((e) => `${e.seq} ${e.kind} ${e.name}`);
/** An answer without the steps it carries. */
const outcome = ({ steps: _, ...a }: { steps?: JournalEntry[] }) => a;

/** Records the run's checkpoints, as "checkpoint <seq> <name>" (with their window, if any), in events. */
function recordCheckpoints(id: string, events: string[]) {
  gw.hook = (runId, e) => {
    if (runId === id) events.push(`checkpoint ${e.seq} ${e.name}${e.window ? ` window ${e.window}` : ""}`);
    return undefined;
  };
}

describe("eager checkpoints, the default", () => {
  test("step.run resolves only once the gateway has journaled the step; nothing rides with the answer", async () => {
    const id = runId();
    const events: string[] = [];
    const fn = createFunction({ name: "eager" }, async ({ step }) => {
      for (const name of ["a", "b"]) {
        await step.run(name, () => name);
        events.push(`${name} resolved, journal ${kinds(gw.journal(id)).join(", ")}`);
      }
      return "ok";
    });
    recordCheckpoints(id, events);
    const r = await gw.invoke(app(fn), APP, gw.request(id, "eager", null));
    assert.deepEqual(r.body, { status: "completed", output: "ok" }, "the answer carries no steps");
    assert.deepEqual(events, [
      "checkpoint 1 a",
      "a resolved, journal 1 step a",
      "checkpoint 2 b",
      "b resolved, journal 1 step a, 2 step b",
    ]);
  });

  test("every kind of step is journaled before it resolves, and the step before an await before the suspension", async () => {
    const awaits: Record<string, (step: Step) => PromiseLike<unknown>> = {
      sleep: (step) => step.sleep("nap", "1h"),
      wait_event: (step) => step.waitForEvent("paid", { event: "payment" }),
      wait_any: (step) => step.waitFirst("either", step.waitForEvent("paid", { event: "payment" }), step.receive("cancel")),
      receive: (step) => step.receive("inbox"),
      invoke: (step) => step.invoke("child", { function: "one" }),
      invoke_all: (step) => step.waitAll(step.invoke("child", { function: "one" }), step.invoke("child", { function: "one" })),
    };
    for (const [kind, wait] of Object.entries(awaits)) {
      const id = runId();
      const events: string[] = [];
      const fn = createFunction({ name: `eager-${kind}` }, async ({ step }) => {
        await step.now("now");
        await step.uuid("uuid");
        await step.random("random");
        await step.setValue("progress", 1);
        await step.run("charge", () => 1);
        events.push(`before the await, journal ${kinds(gw.journal(id)).join(", ")}`);
        return wait(step);
      });
      const r = await gw.invoke(app(fn), APP, gw.request(id, `eager-${kind}`, null));
      assert.equal(r.body.status, "suspended", kind);
      assert.equal(r.body.await.seq, 6, kind);
      assert.equal(r.body.steps, undefined, `${kind}: the suspended answer carries no steps`);
      assert.deepEqual(events, ["before the await, journal 1 step now, 2 step uuid, 3 step random, 4 value progress, 5 step charge"], kind);
    }
  });

  test("a step's lazy option holds its result for the answer; lazy: false journals it in a lazy function", async () => {
    const lazyStep = createFunction({ name: "lazy-step" }, async ({ step }) => step.run("last", () => 1, { lazy: true }));
    const eagerStep = createFunction({ name: "eager-step", lazyCheckpoints: true }, async ({ step }) => step.run("last", () => 2, { lazy: false }));
    for (const [fn, held] of [[lazyStep, true], [eagerStep, false]] as const) {
      const id = runId();
      const events: string[] = [];
      recordCheckpoints(id, events);
      const r = await gw.invoke(app(fn), APP, gw.request(id, fn.name, null));
      assert.equal(r.body.status, "completed", fn.name);
      assert.deepEqual(events, held ? [] : ["checkpoint 1 last"], fn.name);
      assert.deepEqual(kinds(r.body.steps ?? []), held ? ["1 step last"] : [], fn.name);
    }
  });
});

describe("lazy checkpoints: the last step rides with the answer", () => {
  test("a run of three steps makes two checkpoints; the third is in the answer's steps", async () => {
    const fn = createFunction({ lazyCheckpoints: true, name: "three" }, async ({ step }) => {
      let sum = 0;
      for (const name of ["a", "b", "c"]) sum += await step.run(name, () => name.length);
      return sum;
    });
    const id = runId();
    const events: string[] = [];
    recordCheckpoints(id, events);
    const r = await gw.invoke(app(fn), APP, gw.request(id, "three", null));
    assert.equal(r.status, 200);
    assert.deepEqual(outcome(r.body), { status: "completed", output: 3 });
    assert.deepEqual(events, ["checkpoint 1 a", "checkpoint 2 b"], "c is not checkpointed on its own");
    const steps = r.body.steps as JournalEntry[];
    assert.equal(steps.length, 1);
    const { started_at, finished_at, ...c } = steps[0]!;
    assert.deepEqual(c, { seq: 3, kind: "step", name: "c", attempt: 1, output: 1 });
    assert.ok(started_at && finished_at);
    assert.deepEqual(kinds(gw.journal(id)), ["1 step a", "2 step b", "3 step c"], "the gateway journals the answer's step");
  });

  test("each step is journaled before the next step's function starts", async () => {
    const id = runId();
    const events: string[] = [];
    const fn = createFunction({ lazyCheckpoints: true, name: "order" }, async ({ step }) => {
      for (const name of ["a", "b", "c"]) {
        await step.run(name, () => {
          events.push(`run ${name}, journal ${kinds(gw.journal(id)).join(", ") || "empty"}`);
          return name;
        });
      }
      return "ok";
    });
    recordCheckpoints(id, events);
    const r = await gw.invoke(app(fn), APP, gw.request(id, "order", null));
    assert.equal(r.body.status, "completed");
    assert.deepEqual(events, [
      "run a, journal empty",
      "checkpoint 1 a",
      "run b, journal 1 step a",
      "checkpoint 2 b",
      "run c, journal 1 step a, 2 step b",
    ]);
  });

  test("an HTTP 500 answer checkpoints the held step first, and the retry replays it", async () => {
    let charges = 0;
    let calls = 0;
    const fn = createFunction({ lazyCheckpoints: true, name: "charge" }, async ({ step }) => {
      await step.run("charge", () => ++charges);
      if (++calls === 1) throw new Error("after the charge"); // retryable: the invocation is retried
      return "done";
    });
    const id = runId();
    const events: string[] = [];
    recordCheckpoints(id, events);
    let r = await gw.invoke(app(fn), APP, gw.request(id, "charge", null));
    assert.equal(r.status, 500);
    assert.deepEqual(r.body, { type: "error", message: "after the charge" });
    assert.deepEqual(events, ["checkpoint 1 charge"], "a 500 journals nothing, so the step is checkpointed before it");
    assert.deepEqual(kinds(gw.journal(id)), ["1 step charge"]);
    r = await gw.invoke(app(fn), APP, gw.request(id, "charge", null));
    assert.deepEqual(r.body, { status: "completed", output: "done" });
    assert.equal(charges, 1, "the step ran once");
  });

  test("a failure answer carries the held step", async () => {
    const fn = createFunction({ lazyCheckpoints: true, name: "refuse" }, async ({ step }) => {
      await step.run("check", () => "declined");
      throw new NonRetryableError("card declined");
    });
    const id = runId();
    const events: string[] = [];
    recordCheckpoints(id, events);
    const r = await gw.invoke(app(fn), APP, gw.request(id, "refuse", null));
    assert.deepEqual(outcome(r.body), { status: "failed", error: { type: "non_retryable", message: "card declined", retryable: false } });
    assert.deepEqual(events, []);
    assert.deepEqual(kinds(r.body.steps), ["1 step check"]);
  });

  test("an await that suspends carries the held step in the suspended answer, with no checkpoint", async () => {
    // Each await whose fresh path suspends the run: the held step rides in the answer's
    // steps (journaled before the await's entry), as Go's NextAwaitN.
    const awaits: Record<string, (step: Step) => PromiseLike<unknown>> = {
      sleep: (step) => step.sleep("nap", "1h"),
      wait_event: (step) => step.waitForEvent("paid", { event: "payment" }),
      wait_any: (step) => step.waitFirst("either", step.waitForEvent("paid", { event: "payment" }), step.receive("cancel")),
      receive: (step) => step.receive("inbox"),
      invoke: (step) => step.invoke("child", { function: "one" }),
      invoke_all: (step) => step.waitAll(step.invoke("child", { function: "one" }), step.invoke("child", { function: "one" })),
    };
    for (const [kind, wait] of Object.entries(awaits)) {
      let charges = 0;
      const fn = createFunction({ lazyCheckpoints: true, name: `nap-${kind}` }, async ({ step }) => {
        await step.run("charge", () => ++charges);
        await wait(step);
        return charges;
      });
      const id = runId();
      const events: string[] = [];
      recordCheckpoints(id, events);
      const r = await gw.invoke(app(fn), APP, gw.request(id, `nap-${kind}`, null));
      assert.equal(r.body.status, "suspended", kind);
      assert.equal(r.body.await.type, kind);
      assert.equal(r.body.await.seq, 2, kind);
      assert.deepEqual(kinds(r.body.steps), ["1 step charge"], kind);
      assert.deepEqual(events, [], `${kind}: no checkpoint before the suspension`);
      if (kind === "sleep" || kind === "invoke") {
        const done = await gw.run(app(fn), APP, id, `nap-${kind}`, null);
        assert.deepEqual(done.answer, { status: "completed", output: 1 }, kind);
        assert.equal(charges, 1, kind);
      }
    }
  });

  test("a sleep waited out in the process checkpoints the held step first", async () => {
    const fn = createFunction({ lazyCheckpoints: true, name: "napin", sleepInProcess: "1s" }, async ({ step }) => {
      await step.run("charge", () => 1);
      await step.sleep("nap", "1ms");
      return 1;
    });
    const id = runId();
    const events: string[] = [];
    recordCheckpoints(id, events);
    gw.deadline = () => new Date(Date.now() + 60_000).toISOString();
    try {
      const r = await gw.invoke(app(fn), APP, gw.request(id, "napin", null));
      assert.deepEqual(r.body, { status: "completed", output: 1 });
    } finally {
      gw.deadline = undefined;
    }
    assert.deepEqual(events, ["checkpoint 1 charge", "checkpoint 2 nap"]);
  });

  test("a checkpoint of the held step that fails decides the answer, not the sleep after it", async () => {
    const fn = createFunction({ lazyCheckpoints: true, name: "napfail", sleepInProcess: "1s" }, async ({ step }) => {
      await step.run("a", () => 1);
      await step.sleep("nap", "1ms");
    });
    gw.hook = () => [401, JSON.stringify({ detail: "token expired" })];
    gw.deadline = () => new Date(Date.now() + 60_000).toISOString();
    try {
      const r = await gw.invoke(app(fn), APP, gw.request(runId(), "napfail", null));
      assert.equal(r.status, 500, "the sleep's checkpoint would leave a gap in the journal");
      assert.deepEqual(r.body, { type: "checkpoint", message: 'checkpoint step 1 "a": 401 token expired' });
    } finally {
      gw.deadline = undefined;
    }
  });

  test("parallel steps are checkpointed as each finishes, after the step held before them", async () => {
    const id = runId();
    const events: string[] = [];
    let yDone!: () => void;
    const yFinished = new Promise<void>((r) => (yDone = r));
    const fn = createFunction({ lazyCheckpoints: true, name: "par" }, async ({ step }) => {
      await step.run("first", () => 0);
      const [a, b] = await Promise.all([
        step.run("x", async () => {
          events.push(`run x, journal ${kinds(gw.journal(id)).join(", ")}`);
          await yFinished; // x ends alone, after y is journaled: it took seq 2, y seq 3
          return 1;
        }),
        step.run("y", () => (events.push(`run y, journal ${kinds(gw.journal(id)).join(", ")}`), 2)).then((v) => (yDone(), v)),
      ]);
      return a + b;
    });
    recordCheckpoints(id, events);
    const r = await gw.invoke(app(fn), APP, gw.request(id, "par", null));
    assert.deepEqual(r.body, { status: "completed", output: 3 }, "no step rides with the answer");
    assert.deepEqual(events, [
      "checkpoint 1 first",
      "run x, journal 1 step first",
      "run y, journal 1 step first",
      "checkpoint 3 y window 2",
      "checkpoint 2 x window 2",
    ]);
    assert.deepEqual(kinds(gw.journal(id)), ["1 step first", "2 step x", "3 step y"]);
  });

  test("a stream write checkpoints the held step first", async () => {
    const fn = createFunction({ lazyCheckpoints: true, name: "streams" }, async ({ step }) => {
      await step.run("a", () => 1);
      await step.stream("out").write("after a");
      return "ok";
    });
    const id = runId();
    const events: string[] = [];
    recordCheckpoints(id, events);
    gw.streamHook = (runId, w) => {
      if (runId === id) events.push(`write ${JSON.stringify(w.chunks)}, journal ${kinds(gw.journal(id)).join(", ")}`);
      return undefined;
    };
    const r = await gw.invoke(app(fn), APP, gw.request(id, "streams", null));
    assert.deepEqual(r.body, { status: "completed", output: "ok" });
    assert.deepEqual(events, ["checkpoint 1 a", 'write ["after a"], journal 1 step a']);
    assert.deepEqual(gw.stream(id, "out"), ["after a"]);
  });

  test("a patch checkpoints the held step before its marker", async () => {
    const fn = createFunction({ lazyCheckpoints: true, name: "patch" }, async ({ step }) => {
      await step.run("a", () => 1);
      return step.patched("fix");
    });
    const id = runId();
    const events: string[] = [];
    recordCheckpoints(id, events);
    const r = await gw.invoke(app(fn), APP, gw.request(id, "patch", null));
    assert.deepEqual(r.body, { status: "completed", output: true });
    assert.deepEqual(events, ["checkpoint 1 a", "checkpoint 2 fix"]);
  });

  test("an output over 64 KiB of JSON is checkpointed at once; one of 64 KiB rides with the answer", async () => {
    const outputs: Record<string, string> = {
      "64 KiB": "é".repeat(32767), // JSON: 2 quotes and 2 bytes a letter, 65536 bytes
      "64 KiB + 2": "é".repeat(32768),
      "70 KiB": "x".repeat(70 << 10),
    };
    const fn = createFunction<string>({ lazyCheckpoints: true, name: "big" }, async ({ input, step }) => (await step.run("big", () => outputs[input]!)).length);
    for (const [size, riding] of [["64 KiB", true], ["64 KiB + 2", false], ["70 KiB", false]] as const) {
      const id = runId();
      const events: string[] = [];
      recordCheckpoints(id, events);
      const r = await gw.invoke(app(fn), APP, gw.request(id, "big", size));
      assert.deepEqual(outcome(r.body), { status: "completed", output: outputs[size]!.length }, size);
      assert.deepEqual(events, riding ? [] : ["checkpoint 1 big"], size);
      assert.deepEqual(kinds(r.body.steps ?? []), riding ? ["1 step big"] : [], size);
      assert.equal(gw.journal(id)[0]!.output, outputs[size], size);
    }
  });
});
