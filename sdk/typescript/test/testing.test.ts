// The public test harness (@stepgate/sdk/testing): runs, retries, the virtual clock,
// deliveries, child runs, crashes; and the SDK's example functions tested with it.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createFunction, NonRetryableError, TimedOutError } from "../src/index.js";
import * as testing from "../src/testing.js";
import { awaitPayment, checkout, flaky, parent } from "../examples/functions.js";

test("a run's steps run once each and are journaled; the output completes it", async () => {
  const calls: string[] = [];
  const fn = createFunction({ name: "t.steps" }, async ({ input, step }) => {
    const a = await step.run("a", () => (calls.push("a"), (input as { n: number }).n + 1));
    const b = await step.run("b", () => (calls.push("b"), a * 2));
    return { b };
  });
  const run = testing.harness(fn).start({ n: 1 });
  assert.deepEqual(await run.result(), { status: "completed", output: { b: 4 } });
  assert.deepEqual(calls, ["a", "b"]);
  assert.deepEqual(run.journal.map((e) => [e.seq, e.kind, e.name, e.output]), [[1, "step", "a", 2], [2, "step", "b", 4]]);
});

test("a failing step is retried up to its retries, then fails the run; a non-retryable error fails it at once", async () => {
  let tries = 0;
  const fn = createFunction({ name: "t.retry" }, async ({ step }) => {
    await step.run("boom", () => {
      tries++;
      throw new Error("down");
    }, { retries: 2 });
  });
  const out = await testing.harness(fn).start().result();
  assert.equal(out.status, "failed");
  assert.equal(tries, 3);

  let once = 0;
  const fatal = createFunction({ name: "t.fatal" }, async ({ step }) => {
    await step.run("x", () => {
      once++;
      throw new NonRetryableError("no");
    }, { retries: 5 });
  });
  const f = await testing.harness(fatal).start().result();
  assert.equal(f.status, "failed");
  assert.equal(once, 1);
});

test("an invocation that keeps failing fails the run after invocationAttempts", async () => {
  let n = 0;
  const fn = createFunction({ name: "t.inv", invocationAttempts: 2 }, () => {
    n++;
    throw new Error("bug");
  });
  const out = await testing.harness(fn).start().result();
  assert.deepEqual(out, { status: "failed", error: { type: "error", message: "bug (attempt 2 of 2; giving up)", retryable: false } });
  assert.equal(n, 2);
});

test("a week's sleep suspends until advance moves the virtual clock past it", async () => {
  const fn = createFunction({ name: "t.week" }, async ({ step }) => {
    await step.sleep("week", "168h");
    return step.run("after", () => "woke");
  });
  const h = testing.harness(fn, { now: new Date("2026-01-01T00:00:00Z") });
  const run = h.start();
  const s = await run.result();
  assert.equal(s.status, "suspended");
  assert.equal(s.status === "suspended" && s.await.type, "sleep");
  await h.advance("6d");
  assert.equal((await run.result()).status, "suspended");
  await h.advance("1d");
  assert.deepEqual(await run.result(), { status: "completed", output: "woke" });
  assert.equal(run.journal[0]!.until, "2026-01-08T00:00:00Z"); // as the gateway writes a time
  assert.equal(h.now.toISOString(), "2026-01-08T00:00:00.000Z");
});

test("daily sleeps wake in order within one advance", async () => {
  const fn = createFunction({ name: "t.daily" }, async ({ step }) => {
    for (let i = 0; i < 7; i++) await step.sleep(`day-${i}`, "24h");
    return "done";
  });
  const h = testing.harness(fn);
  const run = h.start();
  await run.result();
  await h.advance("7d");
  assert.deepEqual(await run.result(), { status: "completed", output: "done" });
});

test("a wait's timeout passes on the virtual clock (TimedOutError)", async () => {
  const fn = createFunction({ name: "t.timeout" }, async ({ step }) => {
    try {
      await step.waitForEvent("ev", { event: "x", timeout: "1h" });
      return "got";
    } catch (e) {
      return e instanceof TimedOutError ? "timed out" : "other";
    }
  });
  const h = testing.harness(fn);
  const run = h.start();
  await run.result();
  await h.advance("59m");
  assert.equal((await run.result()).status, "suspended");
  await h.advance("1m");
  assert.deepEqual(await run.result(), { status: "completed", output: "timed out" });
});

test("sendEvent resumes a matching wait; sendMessage fills the mailbox; resolveCallback resolves a callback", async () => {
  const fn = createFunction({ name: "t.deliver" }, async ({ step }) => {
    const ev = await step.waitForEvent<{ order: string }>("paid", { event: "pay", match: { "data.order": "o-1" } });
    const m = await step.receive<number>("nums");
    const cb = await step.callback<string>("approve");
    const ok = await cb.result();
    return { order: ev.data.order, m: m.data, ok };
  });
  const run = testing.harness(fn).start();
  assert.equal((await run.result()).status, "suspended");
  assert.equal((await run.sendEvent("pay", { order: "o-2" })).status, "suspended", "an event that does not match leaves the run waiting");
  await run.sendEvent("pay", { order: "o-1" });
  await run.sendMessage("nums", 7);
  assert.deepEqual(await run.resolveCallback("approve", "yes"), { status: "completed", output: { order: "o-1", m: 7, ok: "yes" } });
});

test("sendRequest returns the run's reply", async () => {
  const fn = createFunction({ name: "t.req" }, async ({ step }) => {
    for (let i = 0; i < 2; i++) {
      const r = await step.receiveRequest<{ q: number }>("square");
      await step.reply(r.id, r.data.q * r.data.q);
    }
    return "served";
  });
  const run = testing.harness(fn).start();
  assert.equal(await run.sendRequest("square", { q: 3 }), 9);
  assert.equal(await run.sendRequest("square", { q: 4 }), 16);
  assert.deepEqual(await run.result(), { status: "completed", output: "served" });
});

test("waitFirst takes the first alternative delivered, or its timer", async () => {
  const fn = createFunction({ name: "t.first" }, async ({ step }) => {
    const ev = step.waitForEvent("ev", { event: "go" });
    const msg = step.receive<string>("chat");
    const i = await step.waitFirst("first", ev, msg, step.sleep("timer", "1h"));
    return i === 1 ? (await msg).data : i;
  });
  const h = testing.harness(fn);
  const run = h.start();
  assert.deepEqual(await run.sendMessage("chat", "hi"), { status: "completed", output: "hi" });
  const late = h.start();
  await late.result();
  await h.advance("1h");
  assert.deepEqual(await late.result(), { status: "completed", output: 2 });
});

test("child runs are answered by stubs or run in the harness; sent events and messages are recorded", async () => {
  const child = createFunction<{ n: number }>({ name: "t.child" }, ({ input }) => input.n + 100);
  const fn = createFunction({ name: "t.parent" }, async ({ step, run }) => {
    const a = await step.invoke<number>("one", { function: "t.stubbed", input: { n: 1 } });
    const [b, c] = await step.waitAll(
      step.invoke<number>("two", { function: "t.child", input: { n: 2 } }),
      step.invoke<number>("three", { function: "t.stubbed", input: { n: 3 } }),
    );
    await step.sendEvent("done", { a, b, c });
    await step.send("note", run.id, "self");
    return [a, b, c];
  });
  const h = testing.harness([fn, child]).stub("t.stubbed", (input: { n: number }) => input.n * 10);
  const run = h.start(null, { function: "t.parent" });
  assert.deepEqual(await run.result(), { status: "completed", output: [10, 102, 30] });
  assert.deepEqual(h.children.map((c) => [c.function, c.input]), [["t.stubbed", { n: 1 }], ["t.child", { n: 2 }], ["t.stubbed", { n: 3 }]]);
  assert.deepEqual(h.events, [{ runId: run.id, name: "done", data: { a: 10, b: 102, c: 30 } }]);
  assert.deepEqual(h.messages, [{ runId: run.id, to: run.id, topic: "note", data: "self" }]);
});

test("a stub that throws fails the child: step.invoke rejects", async () => {
  const fn = createFunction({ name: "t.childfail" }, async ({ step }) => {
    try {
      await step.invoke("c", { function: "t.bad" });
      return "ok";
    } catch (e) {
      return (e as Error).message.replace(/^.*: /, "");
    }
  });
  const h = testing.harness(fn).stub("t.bad", () => {
    throw new NonRetryableError("child broke");
  });
  assert.deepEqual(await h.start().result(), { status: "completed", output: "child broke" });
  const run = h.start();
  await run.result();
  assert.deepEqual(run.journal[0]!.error, { type: "non_retryable", message: "child broke", retryable: false }); // as the gateway journals a child's error
  const none = testing.harness(createFunction({ name: "t.orphan" }, ({ step }) => step.invoke("c", { function: "t.missing" })));
  const o = await none.start().result();
  assert.equal(o.status === "failed" && o.error.type, "not_found");
});

test("crashAfter stops the invocation once the step is journaled; the replay runs each step body once", async () => {
  const calls: string[] = [];
  const fn = createFunction({ name: "t.crash" }, async ({ step, run }) => {
    const a = await step.run("a", () => (calls.push("a"), 1));
    const b = await step.run("b", () => (calls.push("b"), a + 1));
    calls.push(`after b, attempt ${run.attempt}`);
    return step.run("c", () => (calls.push("c"), [b + 1, run.attempt]));
  });
  const run = testing.harness(fn).start().crashAfter(2);
  assert.deepEqual(await run.result(), { status: "completed", output: [3, 2] });
  // The crashed invocation ran nothing after step 2; the replay ran no step body again.
  calls.splice(calls.indexOf("after b, attempt 2"), 1);
  assert.deepEqual(calls, ["a", "b", "c"]);
  assert.deepEqual(run.journal.map((e) => e.name), ["a", "b", "c"]);
});

test("examples: ts.checkout reserves, charges, cools off on the virtual clock and ships", async () => {
  const h = testing.harness(checkout);
  const run = h.start({ item: "book", sleep_ms: 3_600_000 });
  const s = await run.result();
  assert.equal(s.status === "suspended" && s.await.name, "cool-off");
  await h.advance("1h");
  assert.deepEqual(await run.result(), { status: "completed", output: { orderId: "o-book", charged: 42, tracking: "TRACK-o-book" } });
  assert.deepEqual(run.journal.map((e) => e.name), ["reserve", "charge", "cool-off", "ship"]);
});

test("examples: ts.checkout refuses an input without an item", async () => {
  const out = await testing.harness(checkout).start({}).result();
  assert.equal(out.status === "failed" && out.error.type, "input");
});

test("examples: ts.flaky succeeds on its second attempt", async () => {
  assert.deepEqual(await testing.harness(flaky).start().result(), { status: "completed", output: { succeededOnAttempt: 2 } });
});

test("examples: ts.parent with ts.double stubbed publishes the doubled number", async () => {
  const h = testing.harness(parent).stub("ts.double", (input: { n: number }) => input.n * 2);
  assert.deepEqual(await h.start({ n: 21 }).result(), { status: "completed", output: { doubled: 42 } });
  assert.deepEqual(h.events.map((e) => [e.name, e.data]), [["ts.doubled", { n: 21, doubled: 42 }]]);
});

test("examples: ts.await_payment takes a matching payment", async () => {
  const run = testing.harness(awaitPayment).start({ order_id: "o-9" });
  await run.result();
  const out = await run.sendEvent("ts.payment", { order_id: "o-9", amount: 5 });
  assert.equal(out.status, "completed");
});

test("an event sent before the invocation that waits does not meet the wait, unless it looks back", async () => {
  const fn = createFunction<{ since?: "start" }>({ name: "t.lookback" }, async ({ input, step }) => {
    await step.sleep("first", "1m");
    const ev = await step.waitForEvent<number>("ev", { event: "early", ...(input.since ? { since: input.since } : {}), timeout: "1h" });
    return ev.data;
  });
  const h = testing.harness(fn);
  const plain = h.start({});
  const back = h.start({ since: "start" });
  await plain.result();
  await back.result();
  await plain.sendEvent("early", 1);
  await back.sendEvent("early", 2);
  await h.advance("1m");
  assert.equal((await plain.result()).status, "suspended");
  assert.deepEqual(await back.result(), { status: "completed", output: 2 });
});

test("h.sendEvent and step.sendEvent reach every run's waits and start the functions they trigger", async () => {
  const waiter = createFunction({ name: "t.waiter" }, async ({ step }) => (await step.waitForEvent<string>("go", { event: "go" })).data);
  const sender = createFunction({ name: "t.sender" }, async ({ step }) => {
    await step.sendEvent("go", "from a run");
    return "sent";
  });
  const triggered = createFunction<string>({ name: "t.triggered", onEvent: ["go"] }, ({ input }) => `started by ${input}`);
  const h = testing.harness([waiter, sender, triggered]);
  const w = h.start(null, { function: "t.waiter" });
  assert.equal((await w.result()).status, "suspended");
  assert.deepEqual(await h.start(null, { function: "t.sender" }).result(), { status: "completed", output: "sent" });
  assert.deepEqual(await w.result(), { status: "completed", output: "from a run" });
  const started = await h.sendEvent("go", "the test");
  assert.equal(started.length, 1);
  assert.deepEqual(await started[0]!.result(), { status: "completed", output: "started by the test" });
});

test("a callback's result times out at its expiry on the virtual clock", async () => {
  const fn = createFunction({ name: "t.cbexpiry" }, async ({ step }) => {
    const cb = await step.callback("approve", { timeout: "2h" });
    try {
      return await cb.result();
    } catch (e) {
      return e instanceof TimedOutError ? "expired" : "other";
    }
  });
  const h = testing.harness(fn);
  const run = h.start();
  await run.result();
  await h.advance("1h");
  assert.equal((await run.result()).status, "suspended");
  await h.advance("1h");
  assert.deepEqual(await run.result(), { status: "completed", output: "expired" });
});

test("a finished run takes no message nor request; a run that never ends fails past maxInvocations", async () => {
  const done = createFunction({ name: "t.done" }, () => 1);
  const run = testing.harness(done).start();
  await run.result();
  await assert.rejects(run.sendMessage("x", 1), /has finished \(completed\): it takes no message "x"/);
  await assert.rejects(run.sendRequest("q", 1), /it takes no request "q"/);

  let n = 0;
  const forever = createFunction({ name: "t.forever", invocationAttempts: 100 }, () => {
    n++;
    throw new Error("again");
  });
  const l = await testing.harness(forever, { maxInvocations: 5 }).start().result();
  assert.equal(n, 5);
  assert.equal(l.status === "failed" && l.error.type, "limit_exceeded");
});

test("invocationAttempts counts the failures in a row: an answer in between starts the count again", async () => {
  let n = 0;
  const fn = createFunction({ name: "t.reset", invocationAttempts: 3 }, async ({ step }) => {
    n++;
    if (n === 1 || n === 2 || n === 4 || n === 5) throw new Error(`invocation ${n} fails`);
    await step.sleep("nap", "1m");
    return n;
  });
  const h = testing.harness(fn);
  const run = h.start();
  assert.equal((await run.result()).status, "suspended");
  await h.advance("1m");
  assert.deepEqual(await run.result(), { status: "completed", output: 6 });
});

test("a child run that waits is reached through h.children; its parent resumes when it ends", async () => {
  const child = createFunction({ name: "t.asker" }, async ({ step }) => (await step.receive<string>("answer")).data);
  const fn = createFunction({ name: "t.asking" }, async ({ step }) => `child said ${await step.invoke<string>("ask", { function: "t.asker" })}`);
  const h = testing.harness([fn, child]);
  const run = h.start(null, { function: "t.asking" });
  const s = await run.result();
  assert.equal(s.status === "suspended" && s.await.type, "invoke");
  const kid = h.children[0]!.run!;
  assert.equal(kid.parentId, run.id);
  assert.deepEqual(await kid.sendMessage("answer", "42"), { status: "completed", output: "42" });
  assert.deepEqual(await run.result(), { status: "completed", output: "child said 42" });
});

test("step.awaitRun waits for another run's end: its output, its error, not_found, a timeout, the first of waits; a run may not await itself", async () => {
  const worker = createFunction({ name: "t.worker" }, async ({ step }) => {
    const m = await step.receive<{ fail?: boolean; n?: number }>("go");
    if (m.data.fail) throw new NonRetryableError("asked to fail");
    return m.data.n;
  });
  const watcher = createFunction<{ id: string; timeout?: string }>({ name: "t.watcher" }, async ({ input, step }) => {
    try {
      return { output: await step.awaitRun<number>("worker", input.id, input.timeout ? { timeout: input.timeout } : {}) };
    } catch (e) {
      if (e instanceof TimedOutError) return { timedOut: true };
      return { error: (e as { type?: string }).type };
    }
  });
  const first = createFunction<{ id: string }>({ name: "t.first" }, async ({ input, step }) =>
    step.waitFirst("first", step.awaitRun("worker", input.id), step.receive("stop")),
  );
  const self = createFunction({ name: "t.self" }, async ({ step, run }) => step.awaitRun("me", run.id));
  const h = testing.harness([worker, watcher, first, self]);

  const w = h.start(null, { function: "t.worker" });
  const watching = h.start({ id: w.id }, { function: "t.watcher" });
  assert.equal((await watching.result()).status, "suspended");
  await w.sendMessage("go", { n: 7 });
  assert.deepEqual(await watching.result(), { status: "completed", output: { output: 7 } });
  assert.equal(watching.journal.at(-1)!.kind, "await_run");
  assert.deepEqual(await h.start({ id: w.id }, { function: "t.watcher" }).result(), { status: "completed", output: { output: 7 } }, "an ended run at once");

  const failing = h.start(null, { function: "t.worker" });
  const onFailing = h.start({ id: failing.id }, { function: "t.watcher" });
  await failing.sendMessage("go", { fail: true });
  assert.deepEqual(await onFailing.result(), { status: "completed", output: { error: "non_retryable" } });

  const unknown = h.start({ id: "0190a0c1-0000-7000-8000-000000000000" }, { function: "t.watcher" });
  assert.deepEqual(await unknown.result(), { status: "completed", output: { error: "not_found" } });

  const slow = h.start(null, { function: "t.worker" });
  const late = h.start({ id: slow.id, timeout: "1h" }, { function: "t.watcher" });
  await late.result();
  await h.advance("1h");
  assert.deepEqual(await late.result(), { status: "completed", output: { timedOut: true } });

  const raced = h.start(null, { function: "t.worker" });
  const racing = h.start({ id: raced.id }, { function: "t.first" });
  assert.equal((await racing.result()).status, "suspended");
  await raced.sendMessage("go", { n: 1 });
  assert.deepEqual(await racing.result(), { status: "completed", output: 0 });

  const out = await h.start(null, { function: "t.self" }).result();
  assert.equal(out.status, "failed");
  assert.equal(out.error?.type, "bad_answer");
});
