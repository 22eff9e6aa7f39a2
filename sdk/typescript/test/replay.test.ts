// Replaying a run exported from a gateway (@stepgate/sdk/testing's replay and
// replayExport) against the function's code in the test's process: the fixtures under
// test/fixtures are exports as `stepgate runs export` writes them.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";
import { createFunction, StepError, type Context } from "../src/index.js";
import { EXPORT_FORMAT, replay, ReplayDivergenceError, replayExport, type RunExport } from "../src/testing.js";

/** The path of fixture name (the tests run from dist/test). */
const fixture = (name: string) => fileURLToPath(new URL(`../../test/fixtures/${name}`, import.meta.url));
/** A run suspended in its sleep "cool off" at seq 3, after steps reserve and charge. */
const SUSPENDED = fixture("checkout-suspended.run.json");
/** A run suspended for the retry of step charge (seq 2, its attempt 2 next), after step reserve. */
const RETRYING = fixture("checkout-retrying.run.json");
/** A run that completed with "shipped book": reserve, charge, the sleep "cool off", ship. */
const COMPLETED = fixture("checkout-completed.run.json");

/** Counts the step bodies that ran. */
interface Ran {
  n: number;
}

/**
 * The checkout function: steps a and b, in that order, a sleep "cool off" of an hour
 * (unless sleep is false), then step ship ("shipped <item>"), and returns ship's output
 * with suffix. Each step body adds one to ran.n; seen gets each context the function is
 * called with.
 */
function checkout(a: string, b: string, ran: Ran, opts: { sleep?: boolean; suffix?: string; seen?: Context<unknown>[] } = {}) {
  return createFunction({ name: "checkout" }, async (ctx) => {
    opts.seen?.push(ctx);
    const { item } = ctx.input as { item: string };
    for (const s of [a, b]) await ctx.step.run(s, () => (ran.n++, `${s[0]}-${item}`));
    if (opts.sleep ?? true) await ctx.step.sleep("cool off", "1h");
    const shipped = await ctx.step.run("ship", () => (ran.n++, `shipped ${item}`));
    return shipped + (opts.suffix ?? "");
  });
}

describe("replay of a run suspended in a sleep", () => {
  test("the same code replays cleanly and would wait for the sleep, running no step body", async () => {
    const ran = { n: 0 };
    const r = await replay(checkout("reserve", "charge", ran), SUSPENDED);
    assert.equal(r.clean, true, String(r));
    assert.equal(r.divergence, undefined);
    assert.deepEqual(r.next, { kind: "wait", seq: 3, step: { kind: "sleep", name: "cool off" } });
    assert.equal(String(r.next), `would wait for sleep "cool off" at seq 3`);
    assert.equal(String(r), `replays cleanly; would wait for sleep "cool off" at seq 3`);
    assert.equal(ran.n, 0, "no step body ran");
  });

  test("the function is called with the export's run, input and identity", async () => {
    const seen: Context<unknown>[] = [];
    await replay(checkout("reserve", "charge", { n: 0 }, { seen }), SUSPENDED);
    assert.ok(seen.length >= 1);
    const ctx = seen[0]!;
    assert.deepEqual(ctx.input, { item: "book" });
    assert.equal(ctx.run.id, "0193a3b0-7c1e-7000-8000-00000000a001");
    assert.equal(ctx.run.function, "checkout");
    assert.equal(ctx.run.revision, 4);
    assert.equal(ctx.run.attempt, 3, "the next invocation's: the run's invocations plus one");
    assert.equal(ctx.run.createdAt.toISOString(), "2026-12-01T10:00:00.118Z");
    assert.deepEqual(ctx.identity, { subject: "alice", tenant: "acme", roles: ["developer"], claims: { team: "shop" } });
  });

  test("steps reordered diverge at seq 1, naming what the journal holds and what the code asks for", async () => {
    const ran = { n: 0 };
    const r = await replayExport(checkout("charge", "reserve", ran), SUSPENDED);
    assert.equal(r.clean, false);
    assert.ok(r.divergence, String(r));
    assert.deepEqual(r.divergence, { seq: 1, journal: { kind: "step", name: "reserve" }, asked: { kind: "step", name: "charge" } });
    assert.equal(String(r.divergence), `seq 1: the journal holds step "reserve" but the code asks for step "charge"`);
    assert.equal(String(r), `diverges at seq 1: the journal holds step "reserve" but the code asks for step "charge"`);
    assert.equal(ran.n, 0);
  });

  test("replay throws at a divergence, naming it", async () => {
    const ran = { n: 0 };
    const err = await replay(checkout("reserve", "refund", ran), SUSPENDED).then(
      () => assert.fail("replay resolved"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ReplayDivergenceError, String(err));
    assert.match(err.message, /the code diverges from the run at seq 2: the journal holds step "charge" but the code asks for step "refund"$/);
    assert.deepEqual(err.divergence, { seq: 2, journal: { kind: "step", name: "charge" }, asked: { kind: "step", name: "refund" } });
    assert.equal(ran.n, 0);
  });

  test("code that no longer sleeps diverges at the sleep the run waits for, and ship does not run", async () => {
    const ran = { n: 0 };
    const r = await replayExport(checkout("reserve", "charge", ran, { sleep: false }), SUSPENDED);
    assert.equal(String(r), `diverges at seq 3: the journal holds sleep "cool off" but the code asks for step "ship"`);
    assert.equal(ran.n, 0, "ship did not run");
  });
});

describe("replay of a run waiting for a step's retry", () => {
  test("the same code replays cleanly and names the step it would run next, without running it", async () => {
    const ran = { n: 0 };
    const r = await replay(checkout("reserve", "charge", ran), RETRYING);
    assert.deepEqual(r.next, { kind: "step", seq: 2, step: { kind: "step", name: "charge" } });
    assert.equal(String(r.next), `would run step "charge" at seq 2`);
    assert.equal(ran.n, 0, "charge did not run");
  });

  test("a new entry past the journal is named, not journaled", async () => {
    const ran = { n: 0 };
    const fn = createFunction({ name: "checkout" }, async ({ step }) => {
      await step.run("reserve", () => ran.n++);
      await step.sendEvent("order.reserved", { ok: true });
      return "done";
    });
    const r = await replay(fn, RETRYING);
    assert.deepEqual(r.next, { kind: "checkpoint", seq: 2, step: { kind: "event", name: "order.reserved" } });
    assert.equal(String(r.next), `would journal event "order.reserved" at seq 2`);
    assert.equal(ran.n, 0);
  });
});

describe("replay of a run that completed", () => {
  test("the same code replays to the run's end, running no step body", async () => {
    const ran = { n: 0 };
    const r = await replay(checkout("reserve", "charge", ran), COMPLETED);
    assert.deepEqual(r.next, { kind: "completed", seq: 5 });
    assert.equal(String(r), "replays cleanly; would end completed");
    assert.equal(r.answer.output, "shipped book");
    assert.equal(ran.n, 0);
  });

  test("another output is the divergence", async () => {
    const ran = { n: 0 };
    const r = await replayExport(checkout("reserve", "charge", ran, { suffix: " (v2)" }), COMPLETED);
    assert.equal(String(r.divergence), `seq 5: the journal holds completed with "shipped book" but the code asks for completed with "shipped book (v2)"`);
    assert.equal(ran.n, 0);
  });

  test("code that ends where the journal goes on diverges there", async () => {
    const ran = { n: 0 };
    const fn = createFunction({ name: "checkout" }, async ({ step }) => step.run("reserve", () => (ran.n++, "r-book")));
    const r = await replayExport(fn, COMPLETED);
    assert.deepEqual(r.divergence, { seq: 2, journal: { kind: "step", name: "charge" }, asked: { kind: "completed", name: "" } });
    assert.equal(String(r.divergence), `seq 2: the journal holds step "charge" but the code asks for completed`);
    assert.equal(ran.n, 0);
  });

  test("a step the code takes only when run again past the replay is refused, and its body does not run", async () => {
    // The code ends on the replay-only invocation, and asks for a new step on the one
    // that follows it (for its output): the harness refuses the claim, as a backstop.
    const ran = { n: 0 };
    let calls = 0;
    const fn = createFunction({ name: "checkout" }, async ({ step }) => {
      const again = ++calls > 1;
      for (const s of ["reserve", "charge"]) await step.run(s, () => ran.n++);
      await step.sleep("cool off", "1h");
      const out = await step.run("ship", () => (ran.n++, "shipped book"));
      if (again) await step.run("audit", () => ran.n++);
      return out;
    });
    const r = await replayExport(fn, COMPLETED);
    assert.equal(calls, 2);
    assert.equal(String(r.divergence), `seq 5: the journal holds completed with "shipped book" but the code asks for step`);
    assert.equal(r.answer.error?.type, "superseded", "the claim was refused");
    assert.equal(ran.n, 0, "audit did not run");
  });
});

describe("a run's end", () => {
  /** The completed fixture's run, with output instead, and a journal of one step "a" (output 1). */
  const ended = (run: Partial<RunExport["run"]>): RunExport => {
    const x = JSON.parse(readFileSync(COMPLETED, "utf8")) as RunExport;
    delete x.run.output;
    return { ...x, run: { ...x.run, ...run }, journal: [{ seq: 1, kind: "step", name: "a", output: 1, attempt: 1 }] };
  };

  test("an output that differs only in its keys' order is the run's", async () => {
    const fn = createFunction({ name: "checkout" }, async ({ step }) => {
      const a = await step.run("a", () => 0);
      return { a, nested: { y: [1, { q: 1, p: 2 }], x: null }, b: "two" };
    });
    const r = await replay(fn, ended({ output: { b: "two", nested: { x: null, y: [1, { p: 2, q: 1 }] }, a: 1 } }));
    assert.deepEqual(r.next, { kind: "completed", seq: 2 });
  });

  test("a failed run replays to its failure, of the same error type", async () => {
    const fn = (type: string) =>
      createFunction({ name: "checkout" }, async ({ step }) => {
        await step.run("a", () => 0);
        throw new StepError(0, "checkout", type, "card declined");
      });
    const x = ended({ status: "failed", error: { type: "card_declined", message: "card declined" } });
    const r = await replay(fn("card_declined"), x);
    assert.deepEqual(r.next, { kind: "failed", seq: 2 });
    assert.equal(String(r), "replays cleanly; would end failed");
    const other = await replayExport(fn("fraud"), x);
    assert.equal(String(other.divergence), "seq 2: the journal holds failed with card_declined but the code asks for failed with fraud");
  });
});

describe("the export", () => {
  test("a parsed export replays as its file does", async () => {
    const x = JSON.parse(readFileSync(SUSPENDED, "utf8")) as RunExport;
    const r = await replay([checkout("reserve", "charge", { n: 0 }), createFunction({ name: "other" }, async () => 1)], x);
    assert.equal(String(r), `replays cleanly; would wait for sleep "cool off" at seq 3`);
  });

  test("another format is refused, with a clear error", async () => {
    const fn = checkout("reserve", "charge", { n: 0 });
    await assert.rejects(replayExport(fn, fixture("not-an-export.json")), { message: `stepgate/testing: the export's format is "stepgate.run/2", not "${EXPORT_FORMAT}"` });
    await assert.rejects(replay(fn, { format: "stepgate.run/0" } as RunExport), /format is "stepgate.run\/0", not "stepgate.run\/1"/);
    await assert.rejects(replay(fn, fixture("no-such.run.json")), /ENOENT/);
  });
});
