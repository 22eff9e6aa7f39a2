// Replay-only invocations (InvocationRequest.replay_only): the function replays its
// journal and says what its code asks for next, running no step body and journaling,
// claiming and sending nothing.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, NonRetryableError, serve, type FetchHandler, type Step } from "../src/index.js";
import type { JournalEntry } from "../src/protocol.js";
import { PROTOCOL_VERSION, SDK_VERSION } from "../src/version.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("d000");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate" });
}

/** A step entry journaled at seq, named name, with output. */
const stepAt = (seq: number, name: string, output: unknown = null): JournalEntry => ({ seq, kind: "step", name, attempt: 1, output });

/** Journals entries as the run's journal, as a gateway that ran it before would hold them. */
function journal(id: string, ...entries: JournalEntry[]) {
  gw.journal(id).push(...entries);
}

/** What the gateway received since mark (checkpoints, stream writes) and from run id (claims, to checkpoint.url + "/current"). */
function sent(id: string) {
  return {
    checkpoints: gw.checkpoints.length - sentBefore.checkpoints,
    claims: gw.currentChecks.get(id) ?? 0,
    streams: gw.streamWrites.length - sentBefore.streams,
  };
}
let sentBefore = { checkpoints: 0, streams: 0 };
/** Remembers what the gateway received so far, so that sent counts only what comes after. */
function mark() {
  sentBefore = { checkpoints: gw.checkpoints.length, streams: gw.streamWrites.length };
}
const nothingSent = { checkpoints: 0, claims: 0, streams: 0 };

/** Sends run id's replay-only invocation of fn to h and returns its HTTP status and body. */
async function replayOnly(h: FetchHandler, id: string, fn: string, input: unknown = null) {
  mark();
  return gw.invoke(h, APP, gw.request(id, fn, input, { replay_only: true }));
}

describe("replay-only", () => {
  test("a journal of 2 steps, code of 3: next is the third step, and no step body runs", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "three" }, async ({ step }) => {
      const a = await step.run("a", () => (ran.push("a"), 1));
      const b = await step.run("b", () => (ran.push("b"), 2));
      return step.run("c", () => (ran.push("c"), a + b));
    });
    const id = runId();
    journal(id, stepAt(1, "a", 1), stepAt(2, "b", 2));
    const r = await replayOnly(app(fn), id, "three");
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 3, kind: "step", name: "c" } } });
    assert.deepEqual(ran, [], "no step body ran");
    assert.deepEqual(sent(id), nothingSent, "no checkpoint, no claim");
    assert.deepEqual(gw.journal(id).map((e) => e.seq), [1, 2], "nothing journaled");
  });

  test("code that asks for another step than the journal holds: the divergence", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "renamed" }, async ({ step }) => {
      await step.run("b", () => ran.push("b"));
      return step.run("c", () => ran.push("c"));
    });
    const id = runId();
    journal(id, stepAt(1, "a"));
    const r = await replayOnly(app(fn), id, "renamed");
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, {
      status: "replayed",
      replay: { divergence: { seq: 1, journal: { seq: 1, kind: "step", name: "a" }, asked: { seq: 1, kind: "step", name: "b" } } },
    });
    assert.deepEqual(ran, []);
    assert.deepEqual(sent(id), nothingSent);

    // Another kind at the seq diverges too.
    const slept = createFunction({ name: "slept" }, async ({ step }) => {
      await step.sleep("a", "1h");
    });
    const id2 = runId();
    journal(id2, stepAt(1, "a"));
    const r2 = await replayOnly(app(slept), id2, "slept");
    assert.deepEqual(r2.body, {
      status: "replayed",
      replay: { divergence: { seq: 1, journal: { seq: 1, kind: "step", name: "a" }, asked: { seq: 1, kind: "sleep", name: "a" } } },
    });
  });

  test("a wait past the journal is next, and the run is not suspended, nor a sleep waited out", async () => {
    const cases: [string, (step: Step) => PromiseLike<unknown>, { kind: string; name: string }][] = [
      ["sleep", (step) => step.sleep("nap", "1s"), { kind: "sleep", name: "nap" }],
      ["sleep-until", (step) => step.sleepUntil("later", new Date(Date.now() + 500)), { kind: "sleep", name: "later" }],
      ["wait-event", (step) => step.waitForEvent("paid", { event: "payment" }), { kind: "wait_event", name: "paid" }],
      ["receive", (step) => step.receive("orders"), { kind: "receive", name: "orders" }],
      ["request", (step) => step.receiveRequest("approve"), { kind: "receive", name: "request:approve" }],
      ["invoke", (step) => step.invoke("child", { function: "other" }), { kind: "invoke", name: "child" }],
      ["invoke-all", (step) => step.waitAll(step.invoke("kids", { function: "other" }), step.invoke("kid2", { function: "other" })), { kind: "invoke", name: "kids" }],
      ["wait-any", (step) => step.waitFirst("first", step.waitForEvent("paid", { event: "payment" }), step.sleep("timer", "1h")), { kind: "wait_any", name: "first" }],
      ["patch", (step) => step.patched("fix"), { kind: "patch", name: "fix" }],
    ];
    // Sleeps up to 10s may be waited out in the process, and the gateway's deadline leaves time for them.
    gw.deadline = () => new Date(Date.now() + 60_000).toISOString();
    try {
      for (const [what, call, next] of cases) {
        const ran: string[] = [];
        const fn = createFunction({ name: `wait-${what}`, sleepInProcess: "10s" }, async ({ step }) => {
          await step.run("a", () => ran.push("a"));
          await call(step);
          return step.run("after", () => ran.push("after"));
        });
        const id = runId();
        journal(id, stepAt(1, "a"));
        const r = await replayOnly(app(fn), id, `wait-${what}`);
        assert.equal(r.status, 200, what);
        assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 2, ...next } } }, what);
        assert.deepEqual(ran, [], what);
        assert.deepEqual(sent(id), nothingSent, what);
      }
    } finally {
      gw.deadline = undefined;
    }
  });

  test("child runs started at once, some journaled: next is the first child past the journal", async () => {
    const fn = createFunction({ name: "kids" }, async ({ step }) => {
      await step.waitAll(step.invoke("kids", { function: "other" }), step.invoke("kid2", { function: "other" }), step.invoke("kid3", { function: "other" }));
      return step.run("after", () => 1);
    });
    const id = runId();
    journal(id, { seq: 1, kind: "invoke", name: "kids", output: 1 }, { seq: 2, kind: "invoke", name: "kids", output: 2 });
    const r = await replayOnly(app(fn), id, "kids");
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 3, kind: "invoke", name: "kids" } } });
    assert.deepEqual(sent(id), nothingSent);
  });

  test("a journaled sleep that was being waited out in a process is not waited out again", async () => {
    const fn = createFunction({ name: "napped", sleepInProcess: "10s" }, async ({ step }) => {
      await step.sleep("nap", "5s");
      return step.run("after", () => 1);
    });
    gw.deadline = () => new Date(Date.now() + 60_000).toISOString();
    try {
      const id = runId();
      journal(id, { seq: 1, kind: "sleep", name: "nap", until: new Date(Date.now() + 5000).toISOString() });
      // The gateway's request ended already: an invocation that waited out the rest of the
      // sleep would see it and answer HTTP 500.
      const gone = new AbortController();
      gone.abort(new Error("the gateway went away"));
      mark();
      const r = await gw.invoke(app(fn), APP, gw.request(id, "napped", null, { replay_only: true }), gone.signal);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 2, kind: "step", name: "after" } } });
    } finally {
      gw.deadline = undefined;
    }
  });

  test("code that ends right after the journal: next is its end, completed or failed", async () => {
    const done = createFunction({ name: "done" }, async ({ step }) => {
      await step.run("a", () => 1);
      return step.run("b", () => 2);
    });
    const id = runId();
    journal(id, stepAt(1, "a", 1), stepAt(2, "b", 2));
    const r = await replayOnly(app(done), id, "done");
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 3, kind: "end", name: "completed" } } });
    assert.deepEqual(sent(id), nothingSent);

    const ran: string[] = [];
    const fails = createFunction({ name: "fails" }, async ({ step }) => {
      step.compensate("undo", () => void ran.push("undo"));
      await step.run("a", () => ran.push("a"));
      await step.run("b", () => ran.push("b")); // journaled failed: throws its StepError
    });
    const failed = { type: "non_retryable", message: "no", retryable: false };
    // The failure replays its compensation from the journal, then ends.
    const id2 = runId();
    journal(id2, stepAt(1, "a"), { ...stepAt(2, "b"), output: undefined, error: failed }, stepAt(3, "compensate undo", {}));
    const r2 = await replayOnly(app(fails), id2, "fails");
    assert.deepEqual(r2.body, { status: "replayed", replay: { next: { seq: 4, kind: "end", name: "failed" } } });
    // Without its compensation journaled, the compensation is next, and does not run.
    const id3 = runId();
    journal(id3, stepAt(1, "a"), { ...stepAt(2, "b"), output: undefined, error: failed });
    const r3 = await replayOnly(app(fails), id3, "fails");
    assert.deepEqual(r3.body, { status: "replayed", replay: { next: { seq: 3, kind: "step", name: "compensate undo" } } });
    assert.deepEqual(ran, []);
    assert.deepEqual(sent(id3), nothingSent);

    // A NonRetryableError thrown between steps fails the run: its end.
    const thrown = createFunction({ name: "thrown" }, async ({ step }) => {
      await step.run("a", () => 1);
      throw new NonRetryableError("bad");
    });
    const id4 = runId();
    journal(id4, stepAt(1, "a", 1));
    assert.deepEqual((await replayOnly(app(thrown), id4, "thrown")).body, { status: "replayed", replay: { next: { seq: 2, kind: "end", name: "failed" } } });
  });

  test("a wait_any whose journaled choice is not among the code's waits: the divergence", async () => {
    const fn = createFunction({ name: "chooser" }, async ({ step }) => {
      await step.waitFirst("first", step.waitForEvent("paid", { event: "payment" }), step.sleep("timer", "1h"));
      return step.run("after", () => 1);
    });
    const id = runId();
    journal(id, { seq: 1, kind: "wait_any", name: "first", output: { index: 0, kind: "receive", output: {} } });
    const r = await replayOnly(app(fn), id, "chooser");
    assert.deepEqual(r.body, {
      status: "replayed",
      replay: { divergence: { seq: 1, journal: { seq: 1, kind: "receive", name: "first" }, asked: { seq: 1, kind: "wait_event", name: "first" } } },
    });
    assert.deepEqual(sent(id), nothingSent);
  });

  test("code that ends before its journal does: the divergence of its end", async () => {
    const short = createFunction({ name: "short" }, async ({ step }) => step.run("a", () => 1));
    const id = runId();
    journal(id, stepAt(1, "a", 1), stepAt(2, "b", 2));
    const r = await replayOnly(app(short), id, "short");
    assert.deepEqual(r.body, {
      status: "replayed",
      replay: { divergence: { seq: 2, journal: { seq: 2, kind: "step", name: "b" }, asked: { seq: 2, kind: "end", name: "completed" } } },
    });
  });

  test("an event, a message, a value, a callback or a reply past the journal is next, and nothing is sent", async () => {
    const cases: [string, (step: Step) => PromiseLike<unknown>, { kind: string; name: string }][] = [
      ["event", (step) => step.sendEvent("order.paid", { id: 1 }), { kind: "event", name: "order.paid" }],
      ["value", (step) => step.setValue("progress", 50), { kind: "value", name: "progress" }],
      ["callback", (step) => step.callback("approval"), { kind: "callback", name: "approval" }],
      ["send", (step) => step.send("orders", "00000000-0000-4000-8000-000000000001", { id: 1 }), { kind: "send", name: "orders" }],
      ["reply", (step) => step.reply("req-1", "ok"), { kind: "reply", name: "req-1" }],
    ];
    for (const [what, call, next] of cases) {
      const fn = createFunction({ name: `send-${what}` }, async ({ step }) => {
        await step.run("a", () => 1);
        await call(step);
        return "sent";
      });
      const id = runId();
      journal(id, stepAt(1, "a", 1));
      const r = await replayOnly(app(fn), id, `send-${what}`);
      assert.equal(r.status, 200, what);
      assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 2, ...next } } }, what);
      assert.deepEqual(sent(id), nothingSent, what);
      assert.equal(gw.journal(id).length, 1, `${what}: nothing journaled`);
    }
  });

  test("steps started in parallel past the journal: next is the first, and none of their bodies runs", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "fan" }, async ({ step }) => {
      const xs = await Promise.all([step.run("p", () => ran.push("p")), step.run("q", () => ran.push("q")), step.run("r", () => ran.push("r"))]);
      return xs.length;
    });
    const id = runId();
    journal(id, stepAt(1, "p", 1));
    const r = await replayOnly(app(fn), id, "fan");
    assert.deepEqual(r.body, { status: "replayed", replay: { next: { seq: 2, kind: "step", name: "q" } } });
    assert.deepEqual(ran, []);
    assert.deepEqual(sent(id), nothingSent);
  });

  test("every prefix of a run's journal replays to the entry after it, with no step body run and nothing sent", async () => {
    const ran: string[] = [];
    const body = (name: string) => () => (ran.push(name), name);
    const fn = createFunction({ name: "tour" }, async ({ step }) => {
      step.compensate("undo", () => void ran.push("undo"));
      await step.run("a", async (ctx) => {
        ran.push("a");
        await ctx.stream("log").write("in a");
        return 1;
      });
      await step.stream("log").write("between"); // no seq: a replay-only invocation sends nothing
      await step.now("when");
      await step.uuid("id");
      await step.random("dice");
      await step.setValue("progress", 50);
      await step.sendEvent("tour.half", { half: true });
      await step.callback("approval");
      await step.sleep("nap", "1s");
      if (await step.patched("fix")) await step.run("fixed", body("fixed"));
      await step.invoke("child", { function: "other" });
      await Promise.all([step.run("p", body("p")), step.run("q", body("q"))]);
      await step.waitFirst("race", step.run("r", body("r")), step.run("s", body("s")));
      await step.run("boom", () => {
        ran.push("boom");
        throw new NonRetryableError("boom");
      });
    });
    const h = app(fn);
    const id = runId();
    // The run, invoked normally: its bodies run, and it journals and claims.
    const full = await gw.run(h, APP, id, "tour", null);
    assert.equal(full.answer.status, "failed");
    const j = [...gw.journal(id)];
    assert.deepEqual(
      j.map((e) => `${e.seq} ${e.kind} ${e.name}`),
      ["1 step a", "2 step when", "3 step id", "4 step dice", "5 value progress", "6 event tour.half", "7 callback approval", "8 sleep nap", "9 patch fix", "10 step fixed", "11 invoke child", "12 step p", "13 step q", "14 step r", "15 step s", "16 step race", "17 step boom", "18 step compensate undo"],
    );
    assert.ok(ran.includes("a") && ran.includes("undo") && (gw.currentChecks.get(id) ?? 0) > 0 && gw.stream(id, "log").length === 2, "the normal run ran, claimed and wrote");

    for (let k = 0; k <= j.length; k++) {
      ran.length = 0;
      const rid = runId();
      journal(rid, ...structuredClone(j.slice(0, k)));
      const r = await replayOnly(h, rid, "tour");
      assert.equal(r.status, 200, `prefix ${k}`);
      const next = k < j.length ? { seq: k + 1, kind: j[k]!.kind, name: j[k]!.name } : { seq: k + 1, kind: "end", name: "failed" };
      assert.deepEqual(r.body, { status: "replayed", replay: { next } }, `prefix ${k}`);
      assert.deepEqual(ran, [], `prefix ${k}: no step body ran`);
      assert.deepEqual(sent(rid), nothingSent, `prefix ${k}: nothing journaled, claimed or written`);
      assert.equal(gw.journal(rid).length, k, `prefix ${k}`);
    }
  });

  test("a normal invocation, without replay_only, runs and journals as before", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "normal" }, async ({ step }) => {
      await step.run("a", () => ran.push("a"));
      return step.run("b", () => (ran.push("b"), "done"));
    });
    for (const extra of [{}, { replay_only: false }]) {
      ran.length = 0;
      const id = runId();
      journal(id, stepAt(1, "a"));
      const r = await gw.invoke(app(fn), APP, gw.request(id, "normal", null, extra));
      assert.deepEqual(r.body, { status: "completed", output: "done" }, JSON.stringify(extra));
      assert.deepEqual(ran, ["b"], "the step past the journal ran");
      assert.equal(gw.currentChecks.get(id), 1, "the invocation claimed the run");
      assert.deepEqual(gw.journal(id).map((e) => `${e.seq} ${e.name}`), ["1 a", "2 b"], "and journaled its step");
    }
  });

  test("replay_only that is not a boolean is refused (400), running nothing", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "strict" }, async ({ step }) => step.run("a", () => ran.push("a")));
    const id = runId();
    mark();
    const r = await gw.invoke(app(fn), APP, { ...gw.request(id, "strict", null), replay_only: "true" as unknown as boolean });
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { type: "malformed", message: `invalid invocation: replay_only "true" is not a boolean` });
    assert.deepEqual(ran, []);
  });

  test("the manifest says the app answers replay-only invocations", async () => {
    const fn = createFunction({ name: "hello" }, () => "hi");
    const resp = await app(fn)(new Request(APP, { headers: { "Stepgate-Signature": gw.sign("", APP) } }));
    assert.equal(resp.status, 200);
    assert.deepEqual(await resp.json(), {
      protocol: 1, protocol_version: PROTOCOL_VERSION, sdk: `stepgate-ts/${SDK_VERSION}`, replay_only: true, functions: [{ name: "hello", path: "stepgate/hello" }],
    });
  });
});
