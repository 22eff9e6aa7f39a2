// Waits (Wait<T>), step.waitFirst and step.waitAll against the test gateway; the
// end-to-end test (cmd/stepgate/typescript_e2e_test.go, TestTypeScriptSDK/Waits) runs
// them on a real gateway.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, NonRetryableError, serve, StepError, TimedOutError, type Context, type FetchHandler } from "../src/index.js";
import type { JournalEntry } from "../src/protocol.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("b000");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate" });
}

const kinds = (j: JournalEntry[]) => j.map((e) => `${e.seq} ${e.kind} ${e.name}`);

/** A function called name whose handler is fn, and an invoke of it on run id with the journal so far. */
function fn(name: string, handler: (ctx: Context<unknown>) => unknown) {
  const f = createFunction({ name }, handler);
  return (id: string) => gw.invoke(app(f), APP, gw.request(id, name, null));
}

const paid = { event: { id: "ev-1", name: "order.paid", data: { amount: 5 }, identity: { subject: "ann", tenant: "acme", roles: [] }, created_at: "2026-12-01T00:00:00Z" } };
const cancel = { message: { id: "m-1", topic: "cancel", data: { why: "changed my mind" }, identity: { subject: "bob", tenant: "acme", roles: [] }, sent_at: "2026-12-01T00:00:00Z" } };

describe("waits", () => {
  test("a wait is lazy: it takes its seq when awaited, and once it has its outcome, awaiting again takes none", async () => {
    const id = runId();
    const seen: unknown[] = [];
    const invoke = fn("lazy", async ({ step }) => {
      const nap = step.sleep("nap", "1h"); // takes no seq
      await step.run("first", () => 1);
      await nap;
      await nap;
      seen.push("woke");
      return step.run("after", () => 2);
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "sleep", seq: 2, name: "nap", duration: "1h" });
    gw.journal(id).push({ seq: 2, kind: "sleep", name: "nap", until: new Date().toISOString() });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: 2 });
    assert.deepEqual(kinds(gw.journal(id)), ["1 step first", "2 sleep nap", "3 step after"]);
    assert.deepEqual(seen, ["woke"]);
  });

  test("a look-back rides with the wait, alone and in waitFirst; a bad one fails before taking a seq", async () => {
    const id = runId();
    const invoke = fn("lookback", async ({ step }) => {
      await step.waitForEvent("paid", { event: "order.paid", since: "start" });
      await step.waitFirst("either", step.waitForEvent("shipped", { event: "order.shipped", since: new Date("2026-12-01T00:00:00Z") }), step.sleep("late", "1h"));
      return "done";
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "wait_event", seq: 1, name: "paid", event: "order.paid", match: {}, since_start: true });
    gw.journal(id).push({ seq: 1, kind: "wait_event", name: "paid", output: paid });
    r = await invoke(id);
    const of = (r.body.await as { of: { since?: string }[] }).of;
    assert.equal(of[0]?.since, "2026-12-01T00:00:00.000Z");

    const bad = runId();
    const refuse = fn("lookback-bad", async ({ step }) => step.waitForEvent("paid", { event: "order.paid", since: "yesterday" }));
    r = await refuse(bad);
    assert.equal(r.body.status, "failed");
    assert.match(String((r.body.error as { message: string }).message), /since "yesterday" is not "start" or a time/);
    assert.deepEqual(gw.journal(bad), []);
  });

  test("a timeout rejects with a TimedOutError, a StepError of type timed_out, the same when awaited again", async () => {
    const id = runId();
    const invoke = fn("timeouts", async ({ step }) => {
      const w = step.waitForEvent("paid", { event: "order.paid", timeout: "1m" });
      const errs: unknown[] = [];
      for (const wait of [w, w, step.receive("inbox", { timeout: "1m" })]) {
        try {
          await wait;
        } catch (e) {
          errs.push(e);
        }
      }
      return errs.map((e) => [e instanceof TimedOutError, e instanceof StepError, (e as StepError).type, (e as StepError).seq, (e as Error).message]);
    });
    gw.journal(id).push({ seq: 1, kind: "wait_event", name: "paid", output: { timed_out: true } }, { seq: 2, kind: "receive", name: "inbox", output: { timed_out: true } });
    const r = await invoke(id);
    assert.deepEqual(r.body, {
      status: "completed",
      output: [[true, true, "timed_out", 1, 'step 1 "paid": timed out'], [true, true, "timed_out", 1, 'step 1 "paid": timed out'], [true, true, "timed_out", 2, 'step 2 "inbox": timed out']],
    });
  });

  test("an unhandled TimedOutError fails the run", async () => {
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "receive", name: "inbox", output: { timed_out: true } });
    const r = await fn("unhandled", async ({ step }) => step.receive("inbox", { timeout: "1m" }))(id);
    assert.deepEqual(r.body, { status: "failed", error: { type: "timed_out", message: 'step 1 "inbox": timed out', retryable: false } });
  });

  test("a callback's result is its data; a rejection rejects with a StepError", async () => {
    const id = runId();
    const invoke = fn("callbacks", async ({ step }) => {
      const yes = await step.callback<{ ok: boolean }>("approve", { timeout: "1h" });
      const no = await step.callback("veto");
      assert.equal(yes.result(), yes.result(), "one wait per callback");
      const got = await yes.result();
      try {
        await no.result();
      } catch (e) {
        return [got, e instanceof StepError && e.type, (e as Error).message];
      }
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "await_callback", seq: 3, name: "approve", callback_seq: 1 });
    assert.deepEqual(gw.journal(id)[0]!.output, { url: `${gw.url}/v1/callbacks/tok-1`, token: "tok-1", expires_at: "2030-01-01T00:00:00Z" });
    gw.journal(id).push(
      { seq: 3, kind: "await_callback", name: "approve", output: { data: { ok: true }, resolver: "token" } },
      { seq: 4, kind: "await_callback", name: "veto", output: { error: { type: "rejected", message: "no budget" } } },
    );
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: [{ ok: true }, "rejected", "no budget"] });
  });
});

describe("waitFirst", () => {
  const eventOrTimer = (seen: unknown[]) =>
    fn("first", async ({ step }) => {
      const payment = step.waitForEvent<{ amount: number }>("payment", { event: "order.paid", match: { "data.id": 7 } });
      const deadline = step.sleep("deadline", "1m");
      const first = await step.waitFirst("paid-or-late", payment, deadline);
      seen.push(first);
      if (first === 0) {
        const ev = await payment; // chosen: at once, no seq
        await deadline; // not chosen: waits anew, at the next seq
        return { first, amount: ev.data.amount, by: ev.sender.subject };
      }
      await deadline; // chosen: at once
      return { first, next: await step.run("next", () => "late") };
    });

  test("an event against a timer: one wait_any at one seq, the timer its timeout; the event comes first", async () => {
    const id = runId();
    const seen: unknown[] = [];
    const invoke = eventOrTimer(seen);
    let r = await invoke(id);
    assert.deepEqual(r.body.await, {
      type: "wait_any", seq: 1, name: "paid-or-late", timeout: "60000ms",
      of: [{ type: "wait_event", seq: 1, name: "paid-or-late", event: "order.paid", match: { "data.id": 7 } }],
    });
    gw.journal(id).push({ seq: 1, kind: "wait_any", name: "paid-or-late", output: { index: 0, kind: "wait_event", output: paid } });
    r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "sleep", seq: 2, name: "deadline", duration: "1m" }, "the timer not chosen is awaited anew");
    gw.journal(id).push({ seq: 2, kind: "sleep", name: "deadline", until: new Date().toISOString() });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: { first: 0, amount: 5, by: "ann" } });
    assert.deepEqual(seen, [0, 0], "a replay picks the same");
  });

  test("the timer wins when it passes: the wait_any timed out", async () => {
    const id = runId();
    const seen: unknown[] = [];
    gw.journal(id).push({ seq: 1, kind: "wait_any", name: "paid-or-late", output: { timed_out: true } });
    const r = await eventOrTimer(seen)(id);
    assert.deepEqual(r.body, { status: "completed", output: { first: 1, next: "late" } });
    assert.deepEqual(kinds(gw.journal(id)), ["1 wait_any paid-or-late", "2 step next"], "the chosen timer took no seq");
  });

  test("a message against a callback, without a timer: the longest timeout; the message not chosen is not taken", async () => {
    const id = runId();
    const invoke = fn("approval", async ({ step }) => {
      const cb = await step.callback<string>("approve");
      const cancelled = step.receive<{ why: string }>("cancel");
      const first = await step.waitFirst("approve-or-cancel", cb.result(), cancelled);
      if (first === 0) return { approved: await cb.result(), then: (await cancelled).data.why };
      return { cancelled: (await cancelled).data.why };
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, {
      type: "wait_any", seq: 2, name: "approve-or-cancel", timeout: "87600h",
      of: [
        { type: "await_callback", seq: 2, name: "approve-or-cancel", callback_seq: 1 },
        { type: "receive", seq: 2, name: "approve-or-cancel", topic: "cancel" },
      ],
    });
    gw.journal(id).push({ seq: 2, kind: "wait_any", name: "approve-or-cancel", output: { index: 0, kind: "await_callback", output: { data: "yes", resolver: "token" } } });
    r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "receive", seq: 3, name: "cancel", topic: "cancel" });
    gw.journal(id).push({ seq: 3, kind: "receive", name: "cancel", output: cancel });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: { approved: "yes", then: "changed my mind" } });
  });

  test("a replay picks the index the journal holds, and checks it is the wait the code gives", async () => {
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "callback", name: "approve", output: { url: "u", token: "t", expires_at: "2030-01-01T00:00:00Z" } });
    gw.journal(id).push({ seq: 2, kind: "wait_any", name: "approve-or-cancel", output: { index: 1, kind: "receive", output: cancel } });
    const code = (swap: boolean) =>
      fn("replayed", async ({ step }) => {
        const cb = await step.callback("approve");
        const waits = [cb.result(), step.receive<{ why: string }>("cancel")] as const;
        const first = await step.waitFirst("approve-or-cancel", ...(swap ? [waits[1], waits[0]] : waits));
        return [first, await (swap ? waits[1] : waits[1])];
      });
    let r = await code(false)(id);
    assert.equal(r.body.status, "completed");
    assert.deepEqual(r.body.output[0], 1);
    assert.equal(r.body.output[1].data.why, "changed my mind");
    r = await code(true)(id);
    assert.deepEqual(r.body.error, {
      type: "nondeterminism",
      message: 'step 2: code waits for the first of 2 waits in wait_any "approve-or-cancel" but the journal holds alternative 1 (receive)',
      retryable: false,
    });
  });

  test("promises of parallel steps: the first to settle, journaled as a step; a replay picks the same", async () => {
    const id = runId();
    let release!: () => void;
    const slowGate = new Promise<void>((r) => (release = r));
    const seen: number[] = [];
    const invoke = fn("race", async ({ step }) => {
      const slow = step.run("slow", async () => {
        await slowGate;
        return "slow";
      });
      const fast = step.run("fast", () => "fast");
      const first = await step.waitFirst("pick", slow, fast);
      seen.push(first);
      release();
      return [first, await [slow, fast][first]];
    });
    let r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: [1, "fast"] });
    assert.deepEqual(kinds(gw.journal(id)), ["1 step slow", "2 step fast", "3 step pick"]);
    assert.equal(gw.journal(id)[2]!.output, 1);
    // A replay whose steps finish in the other order still picks the journaled index.
    gw.journal(id)[2]!.output = 0;
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: [0, "slow"] });
    assert.deepEqual(seen, [1, 0]);
  });

  test("a wait that has its outcome already is chosen at once, taking no seq; a timer alone is a sleep", async () => {
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "receive", name: "inbox", output: cancel });
    const invoke = fn("had", async ({ step }) => {
      const inbox = step.receive("inbox");
      await inbox;
      const first = await step.waitFirst("w", step.sleep("t", "1m"), inbox);
      await step.waitFirst("alone", step.sleep("nap", "1h"));
      return first;
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "sleep", seq: 2, name: "nap", duration: "1h" });
    gw.journal(id).push({ seq: 2, kind: "sleep", name: "nap", until: new Date().toISOString() });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: 1 });
  });

  test("a wait being awaited is the first once it comes, taking no seq", async () => {
    const id = runId();
    const invoke = fn("awaiting", async ({ step }) => {
      const inbox = step.receive<{ why: string }>("inbox");
      void inbox.then(() => {});
      const first = await step.waitFirst("w", step.sleep("t", "1m"), inbox);
      return [first, (await inbox).data.why, await step.run("after", () => 1)];
    });
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "receive", seq: 1, name: "inbox", topic: "inbox" });
    gw.journal(id).push({ seq: 1, kind: "receive", name: "inbox", output: cancel });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: [1, "changed my mind", 1] });
    assert.deepEqual(kinds(gw.journal(id)), ["1 receive inbox", "2 step after"]);
  });

  test("bad combinations fail the run with a NonRetryableError saying why", async () => {
    const cases: [string, (ctx: Context<unknown>) => unknown, string][] = [
      ["child", ({ step }) => step.waitFirst("w", step.invoke("c", { function: "child" }), step.sleep("t", "1m")),
        'step: waitFirst "w": waits[0] is a child run (invoke "c"): the gateway cannot wait for the first of a child run and other waits; await it alone or with waitAll'],
      ["mixed", ({ step }) => step.waitFirst("w", step.receive("inbox"), step.run("s", () => 1)),
        'step: waitFirst "w": waits[1] is a promise (a step running in this process) and waits[0] a wait the gateway keeps (a sleep, an event, a message, a callback): one waitFirst cannot take the first of both, as the gateway resumes the run for its waits only after the invocation has answered: await the steps first'],
      ["many", ({ step }) => step.waitFirst("w", step.sleep("t", "1m"), ...Array.from({ length: 9 }, (_, i) => step.receive(`t${i}`)), step.receive("t0")),
        'step: waitFirst "w": 9 waits besides timers (receives of one topic counted once), more than the gateway\'s limit of 8'],
      ["none", ({ step }) => step.waitFirst("w"), 'step: waitFirst "w": no waits: give it 1 or more'],
    ];
    for (const [what, handler, message] of cases) {
      const id = runId();
      let thrown: unknown;
      const r = await fn(`bad-${what}`, async (ctx) => {
        try {
          return await handler(ctx);
        } catch (e) {
          thrown = e;
          throw e;
        }
      })(id);
      assert.ok(thrown instanceof NonRetryableError, what);
      assert.deepEqual(r.body, { status: "failed", error: { type: "non_retryable", message, retryable: false } }, what);
      assert.deepEqual(kinds(gw.journal(id)).filter((k) => !k.includes(" step s")), [], `${what}: nothing waited`);
    }
  });
});

describe("waitAll", () => {
  test("two child runs start at once (one invoke_all), then the other waits in order; the values in order", async () => {
    const id = runId();
    const invoke = createFunction({ name: "fanout" }, async ({ step }) => {
      const a = step.run("a", () => "A");
      return step.waitAll(a, step.invoke<number>("one", { function: "double", input: { n: 1 } }), step.sleep("nap", "1s"), step.invoke<number>("two", { function: "double", input: { n: 2 }, detached: true }));
    });
    const r = await gw.run(app(invoke), APP, id, "fanout", null, { children: (aw) => ({ output: (aw.input as { n: number }).n * 2 }) });
    assert.deepEqual(r.answer, { status: "completed", output: ["A", 2, null, 4] });
    assert.deepEqual(r.awaits.map((a) => a.type), ["invoke_all", "sleep"]);
    assert.deepEqual(r.awaits[0], {
      type: "invoke_all", seq: 2, name: "one",
      calls: [{ function: "double", input: { n: 1 } }, { function: "double", input: { n: 2 }, detached: true }],
    });
    assert.deepEqual(kinds(gw.journal(id)), ["1 step a", "2 invoke one", "3 invoke one", "4 sleep nap"]);
  });

  test("one child run starts before the other waits too", async () => {
    const id = runId();
    const invoke = createFunction({ name: "onechild" }, async ({ step }) => step.waitAll(step.sleep("nap", "1s"), step.invoke<number>("one", { function: "double", input: { n: 3 } })));
    const r = await gw.run(app(invoke), APP, id, "onechild", null, { children: (aw) => ({ output: (aw.input as { n: number }).n * 2 }) });
    assert.deepEqual(r.answer, { status: "completed", output: [null, 6] });
    assert.deepEqual(kinds(gw.journal(id)), ["1 invoke one", "2 sleep nap"]);
  });

  test("rejects with the first error in the order given, once all are done", async () => {
    const id = runId();
    const invoke = createFunction({ name: "fanfail" }, async ({ step }) => {
      try {
        await step.waitAll(step.invoke("one", { function: "ok" }), step.invoke("two", { function: "missing" }), step.invoke("three", { function: "gone" }));
      } catch (e) {
        return [e instanceof StepError && e.type, (e as Error).message];
      }
    });
    const r = await gw.run(app(invoke), APP, id, "fanfail", null, {
      children: (aw) => (aw.function === "ok" ? { output: 1 } : { error: { type: "not_found", message: `function ${aw.function} is not registered` } }),
    });
    assert.deepEqual(r.answer, { status: "completed", output: ["not_found", "function missing is not registered"] });
  });
});
