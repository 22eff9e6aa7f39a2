// step.waitFirst of several deadlines (timers, waits with their own timeout) and of
// receives of one topic, against the test gateway and the testing harness: the earliest
// deadline is the wait_any's timeout, and a replay of a timed-out wait chooses from values
// fixed in the code or journaled, never from the clock.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, serve, TimedOutError, type Context, type FetchHandler, type Step } from "../src/index.js";
import type { Await, JournalEntry } from "../src/protocol.js";
import * as testing from "../src/testing.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("b0f0");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate" });
}

const kinds = (j: JournalEntry[]) => j.map((e) => `${e.seq} ${e.kind} ${e.name}`);

/** What a wait's await gives: its outcome, or the error it rejects with. */
async function outcome(w: PromiseLike<unknown>): Promise<unknown> {
  try {
    const v = await w;
    return (v as { data?: unknown } | undefined)?.data ?? "timer";
  } catch (e) {
    return e instanceof TimedOutError ? `timed out: ${e.message}` : String(e);
  }
}

/**
 * A function called name that hands the waits waits makes to waitFirst "first", and
 * answers the index chosen and that wait's outcome; and an invoke of it on run id with
 * the journal so far, which checks that every invocation answers the same.
 */
function first(name: string, waits: (step: Step) => PromiseLike<unknown>[]) {
  const f = createFunction({ name }, async ({ step }: Context<unknown>) => {
    const ws = waits(step);
    const i = await step.waitFirst("first", ...ws);
    return [i, await outcome(ws[i]!)];
  });
  return async (id: string, times = 1) => {
    const r = await gw.invoke(app(f), APP, gw.request(id, name, null));
    for (let k = 1; k < times; k++) {
      const again = await gw.invoke(app(f), APP, gw.request(id, name, null));
      assert.deepEqual(again.body, r.body, "every invocation answers the same");
    }
    return r;
  };
}

const timedOut = (seq: number): JournalEntry => ({ seq, kind: "wait_any", name: "first", output: { timed_out: true } });
const ms = (timeout: string | undefined) => Number(/^(\d+)ms$/.exec(timeout ?? "")?.[1]);

describe("waitFirst of deadlines", () => {
  test("the earliest duration is the timeout; a wait's own timeout wins a tie by coming first, and rejects", async () => {
    const id = runId();
    const invoke = first("durations", (step) => [
      step.waitForEvent("paid", { event: "order.paid" }),
      step.sleep("late", "2h"),
      step.receive("t", { timeout: "30m" }),
      step.sleep("soon", "30m"),
    ]);
    let r = await invoke(id);
    const aw = r.body.await as Await;
    assert.equal(aw.type, "wait_any");
    assert.equal(aw.seq, 1, "no other seq taken");
    assert.equal(aw.timeout, "1800000ms");
    assert.deepEqual(aw.of, [
      { type: "wait_event", seq: 1, name: "first", event: "order.paid", match: {} },
      { type: "receive", seq: 1, name: "first", topic: "t" },
    ], "the timers are the timeout; an alternative has no timeout of its own");
    gw.journal(id).push(timedOut(1));
    r = await invoke(id, 3);
    assert.deepEqual(r.body, { status: "completed", output: [2, 'timed out: step 1 "first": timed out'] });
  });

  test("times compare alike, with no time journaled", async () => {
    const id = runId();
    const base = Date.now();
    const invoke = first("times", (step) => [
      step.receive("t"),
      step.sleepUntil("later", new Date(base + 2 * 3_600_000)),
      step.sleepUntil("sooner", new Date(base + 3_600_000)),
    ]);
    let r = await invoke(id);
    const aw = r.body.await as Await;
    assert.equal(aw.seq, 1);
    assert.ok(ms(aw.timeout) > 59 * 60_000 && ms(aw.timeout) <= 3_600_000, aw.timeout);
    gw.journal(id).push(timedOut(1));
    r = await invoke(id, 3);
    assert.deepEqual(r.body, { status: "completed", output: [2, "timer"] });
  });

  test("durations and times: the time they count from is journaled first, as a step riding with the answer", async () => {
    const id = runId();
    const before = Date.now();
    const invoke = first("mixed", (step) => [step.receive("t"), step.sleepUntil("deadline", new Date(before + 2 * 3_600_000)), step.sleep("hour", "1h")]);
    let r = await invoke(id);
    assert.equal(r.body.status, "suspended");
    assert.deepEqual(kinds(gw.journal(id)), ["1 step first"]);
    const from = Date.parse(gw.journal(id)[0]!.output as string);
    assert.ok(from >= before && from <= Date.now(), "the time it waits from");
    const aw = r.body.await as Await;
    assert.equal(aw.seq, 2);
    assert.ok(ms(aw.timeout) > 59 * 60_000 && ms(aw.timeout) <= 3_600_000, `the hour's, sooner than the deadline: ${aw.timeout}`);
    gw.journal(id).push(timedOut(2));
    r = await invoke(id, 3);
    assert.deepEqual(r.body, { status: "completed", output: [2, "timer"] });
  });

  test("a replay compares from the journaled time, not the clock", async () => {
    // Waited for from 2020-01-01: the hour passes at 01:00, before a deadline at 02:00
    // and after one at 00:30. By the clock of any replay both are long past, which
    // would make the deadline the first in order.
    for (const [deadline, want] of [["2020-01-01T02:00:00Z", 2], ["2020-01-01T00:30:00Z", 1], ["2020-01-01T01:00:00Z", 1]] as const) {
      const id = runId();
      gw.journal(id).push({ seq: 1, kind: "step", name: "first", output: "2020-01-01T00:00:00.000Z" }, timedOut(2));
      const r = await first(`replay-${want}-${deadline.slice(11, 13)}`, (step) => [step.receive("t"), step.sleepUntil("deadline", deadline), step.sleep("hour", "1h")])(id, 3);
      assert.deepEqual(r.body, { status: "completed", output: [want, "timer"] }, deadline);
    }
  });

  test("a wait's own timeout against a time", async () => {
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "step", name: "first", output: "2020-01-01T00:00:00.000Z" }, timedOut(2));
    const r = await first("own-vs-time", (step) => [step.sleepUntil("deadline", "2020-01-01T02:00:00Z"), step.waitForEvent("paid", { event: "order.paid", timeout: "90m" })])(id, 3);
    assert.deepEqual(r.body, { status: "completed", output: [1, 'timed out: step 2 "first": timed out'] });
  });

  test("timers alone: the earliest's sleep", async () => {
    const id = runId();
    const invoke = first("timers", (step) => [step.sleep("a", "2h"), step.sleep("b", "1h"), step.sleep("c", "1h")]);
    let r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "sleep", seq: 1, name: "b", duration: "1h" });
    gw.journal(id).push({ seq: 1, kind: "sleep", name: "b", until: new Date().toISOString() });
    r = await invoke(id, 2);
    assert.deepEqual(r.body, { status: "completed", output: [1, "timer"] });
  });
});

describe("waitFirst of receives of one topic", () => {
  const msg = (data: string) => ({ message: { id: "m-1", topic: "t", data, identity: { subject: "ann", tenant: "acme", roles: [] }, sent_at: "2026-12-01T00:00:00Z" } });
  const topic = createFunction({ name: "topic" }, async ({ step }) => {
    const a = step.receive<string>("t");
    const b = step.receive<string>("t", { timeout: "1h" });
    const ws = [a, step.waitForEvent("paid", { event: "order.paid" }), b];
    const i = await step.waitFirst("first", ...ws);
    return i === 0 ? [i, await outcome(a), await outcome(b)] : [i, await outcome(ws[i]!)];
  });
  const invoke = (id: string) => gw.invoke(app(topic), APP, gw.request(id, "topic", null));

  test("one alternative; a message ends the first of them, and the other waits anew", async () => {
    const id = runId();
    let r = await invoke(id);
    assert.deepEqual((r.body.await as Await).of, [
      { type: "receive", seq: 1, name: "first", topic: "t" },
      { type: "wait_event", seq: 1, name: "first", event: "order.paid", match: {} },
    ]);
    assert.equal((r.body.await as Await).timeout, "3600000ms", "the second receive's own timeout");
    gw.journal(id).push({ seq: 1, kind: "wait_any", name: "first", output: { index: 0, kind: "receive", output: msg("one") } });
    r = await invoke(id);
    assert.deepEqual(r.body.await, { type: "receive", seq: 2, name: "t", topic: "t", timeout: "1h" }, "alone, with its own timeout");
    gw.journal(id).push({ seq: 2, kind: "receive", name: "t", output: msg("two") });
    r = await invoke(id);
    assert.deepEqual(r.body, { status: "completed", output: [0, "one", "two"] });
  });

  test("the event is the alternative after the topic's; the second receive's timeout ends it", async () => {
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "wait_any", name: "first", output: { index: 1, kind: "wait_event", output: { event: { id: "e", name: "order.paid", data: "paid", identity: {}, created_at: "2026-12-01T00:00:00Z" } } } });
    assert.deepEqual((await invoke(id)).body, { status: "completed", output: [1, "paid"] });
    const late = runId();
    gw.journal(late).push(timedOut(1));
    assert.deepEqual((await invoke(late)).body, { status: "completed", output: [2, 'timed out: step 1 "first": timed out'] });
  });
});

describe("waitFirst of deadlines in the testing harness", () => {
  test("durations and times on the virtual clock: the journaled time, the earliest wins, a replay picks the same", async () => {
    const seen: number[] = [];
    const fn = createFunction<{ deadline: number }>({ name: "t.mixed" }, async ({ step, input }) => {
      const ws = [step.receive("cancel"), step.sleepUntil("deadline", new Date(input.deadline)), step.sleep("hour", "1h")];
      const i = await step.waitFirst("first", ...ws);
      seen.push(i);
      await step.run("after", () => "done");
      return i;
    });
    const h = testing.harness(fn);
    const run = h.start({ deadline: Date.now() + 30 * 60_000 });
    await run.result();
    await h.advance("30m");
    assert.deepEqual(await run.result(), { status: "completed", output: 1 });
    assert.deepEqual(run.journal.map((e) => `${e.kind} ${e.name}`), ["step first", "wait_any first", "step after"]);
    assert.ok(seen.every((i) => i === 1) && seen.length >= 1, String(seen));
  });

  test("a wait's own timeout passes first: waitFirst resolves with its index, and it rejects", async () => {
    const fn = createFunction({ name: "t.own" }, async ({ step }) => {
      const ws = [step.sleep("late", "1h"), step.receive("cancel", { timeout: "10m" })];
      const i = await step.waitFirst("first", ...ws);
      return [i, await outcome(ws[i]!)];
    });
    const h = testing.harness(fn);
    const run = h.start();
    await run.result();
    await h.advance("10m");
    assert.deepEqual(await run.result(), { status: "completed", output: [1, 'timed out: step 1 "first": timed out'] });
  });

  test("a message ends the first receive of its topic", async () => {
    const fn = createFunction({ name: "t.topic" }, async ({ step }) => {
      const a = step.receive<string>("t");
      const b = step.receive<string>("t");
      const i = await step.waitFirst("first", a, b, step.sleep("late", "1h"));
      return [i, (await a).data, (await b).data];
    });
    const run = testing.harness(fn).start();
    assert.equal((await run.sendMessage("t", "one")).status, "suspended", "the second waits anew");
    assert.deepEqual(await run.sendMessage("t", "two"), { status: "completed", output: [0, "one", "two"] });
  });
});
