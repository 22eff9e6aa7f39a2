import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { createFunction, NonRetryableError, serve, StepError, type FetchHandler, type Step } from "../src/index.js";
import { toLambdaHandler } from "../src/lambda.js";
import { serveNode, toNodeListener } from "../src/node.js";
import type { JournalEntry } from "../src/protocol.js";
import { PROTOCOL_VERSION, SDK_VERSION } from "../src/version.js";
import { Gateway, TENANT } from "./gateway.js";
import { gw, useGateway } from "./harness.js";

const APP = "http://app.test/api/stepgate";
const runId = useGateway("8000");

function app(...functions: Parameters<typeof serve>[0]["functions"]): FetchHandler {
  return serve({ functions, signingKeys: gw.publicKey, basePath: "/api/stepgate" });
}

const kinds = (j: JournalEntry[]) => j.map((e) => `${e.seq} ${e.kind} ${e.name}`);
/** An answer without the steps it carries (with lazy checkpoints, the last step rides with the answer). */
const outcome = ({ steps: _, ...a }: { steps?: JournalEntry[] }) => a;
/** The steps an answer carries. */
const rides = (a: { steps?: JournalEntry[] }) => (a.steps ?? []).map((e) => `${e.seq} ${e.kind} ${e.name}`);

describe("steps", () => {
  test("a duration that is not one fails the run at once, as an invalid step name does", async () => {
    const cases: [string, (step: Step) => PromiseLike<unknown>, string][] = [
      ["sleep", (step) => step.sleep("nap", "ten minutes"), `step: sleep "nap": duration "ten minutes" is not a duration: use milliseconds or a string such as "1.5s", "10m" or "1h30m"`],
      ["negative", (step) => step.sleep("nap", -5), `step: sleep "nap": duration -5 is not a duration (milliseconds, 0 or more)`],
      ["timeout", (step) => step.waitForEvent("paid", { event: "payment", timeout: "1 day" }), `step: wait "paid": timeout "1 day" is not a duration: use milliseconds or a string such as "1.5s", "10m" or "1h30m"`],
      ["backoff", (step) => step.run("x", () => 1, { backoff: { initial: "soon" } }), `step: step "x": backoff.initial "soon" is not a duration: use milliseconds or a string such as "1.5s", "10m" or "1h30m"`],
      ["name", (step) => step.sleep("", "1s"), `step: step name "" must be 1 to 255 bytes`],
    ];
    for (const [what, call, message] of cases) {
      const id = runId();
      const fn = createFunction({ name: `bad-${what}` }, async ({ step }) => call(step));
      const r = await gw.invoke(app(fn), APP, gw.request(id, `bad-${what}`, null));
      assert.equal(r.status, 200, `${what}: not an HTTP 500, which the gateway retries`);
      assert.deepEqual(r.body, { status: "failed", error: { type: "non_retryable", message, retryable: false } }, what);
      assert.deepEqual(gw.journal(id), [], `${what}: nothing journaled`);
    }
  });

  test("a step object used after its invocation answered throws and runs nothing", async () => {
    let kept: Step | undefined;
    const fn = createFunction({ name: "keeper" }, async ({ step }) => {
      kept = step;
      await step.run("first", () => 1);
      return "answered";
    });
    const id = runId();
    const r = await gw.invoke(app(fn), APP, gw.request(id, "keeper", null));
    assert.deepEqual(r.body, { status: "completed", output: "answered" });
    let ran = 0;
    const calls: [string, () => PromiseLike<unknown>][] = [
      ["step", () => kept!.run("late", () => ++ran)],
      ["step", () => kept!.run("late", () => ++ran)], // a second call is refused just the same
      ["sleep", () => kept!.sleep("nap", "1s")],
      ["value", () => kept!.setValue("late", 1)],
      ["step", () => kept!.now("when")],
      ["patch", () => kept!.patched("fix")],
      ["stream", () => kept!.stream("out").write("late")],
    ];
    for (const [kind, call] of calls) {
      await assert.rejects(Promise.resolve(call()), (e: unknown) => {
        assert.ok(e instanceof NonRetryableError, kind);
        assert.match(e.message, new RegExp(`^${kind} "[a-z]+": the invocation of run ${id} \\(attempt 1\\) has answered, so its step object cannot run or journal anything`));
        return true;
      });
    }
    assert.equal(ran, 0, "the step's function never ran");
    assert.deepEqual(kinds(gw.journal(id)), ["1 step first"], "nothing more was journaled");
  });

  test("three steps and a sleep: each step runs once, the journal holds them in order", async () => {
    const calls: string[] = [];
    const fn = createFunction<{ item: string }>({ name: "checkout" }, async ({ input, step }) => {
      const a = await step.run("reserve", () => (calls.push("reserve"), { id: `o-${input.item}` }));
      await step.sleep("cool-off", "1s");
      const b = await step.run("charge", () => (calls.push("charge"), 42));
      const c = await step.run("ship", () => (calls.push("ship"), `T-${a.id}`));
      return { a, b, c };
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "checkout", { item: "book" });
    assert.deepEqual(outcome(r.answer), { status: "completed", output: { a: { id: "o-book" }, b: 42, c: "T-o-book" } });
    assert.deepEqual(rides(r.answer), [], "the last step is checkpointed before run resolves, not carried by the answer");
    assert.equal(r.invocations, 2);
    assert.deepEqual(calls, ["reserve", "charge", "ship"], "a replay does not run a journaled step again");
    assert.deepEqual(kinds(gw.journal(id)), ["1 step reserve", "2 sleep cool-off", "3 step charge", "4 step ship"]);
    assert.deepEqual(r.awaits[0], { type: "sleep", seq: 2, name: "cool-off", duration: "1s" });
    assert.equal(gw.journal(id)[0]!.attempt, 1);
    assert.ok(gw.checkpoints.filter((e) => e.name === "reserve").every((e) => e.window === undefined), "sequential steps declare no window");
  });

  test("a failed step is retried with the next attempt, and its final failure is a StepError", async () => {
    const fn = createFunction({ name: "flaky" }, async ({ step }) => {
      const ok = await step.run("partner", ({ attempt }) => {
        if (attempt < 2) throw new Error(`down ${attempt}`);
        return attempt;
      }, { retries: 1, backoff: { initial: 10, max: "1s" } });
      try {
        await step.run("always", () => { throw new Error("broken"); }, { retries: 1 });
      } catch (e) {
        assert.ok(e instanceof StepError);
        return { ok, type: e.type, message: e.message, seq: e.seq };
      }
      return "unreachable";
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "flaky", null);
    assert.deepEqual(r.answer, { status: "completed", output: { ok: 2, type: "step_failed", message: "broken", seq: 2 } });
    assert.deepEqual(r.awaits[0], {
      type: "retry", seq: 1, name: "partner", attempt: 1,
      error: { type: "step_failed", message: "down 1", retryable: true },
      retry: { max_attempts: 2, initial_interval: "10ms", max_interval: "1s" },
    });
    assert.deepEqual(gw.journal(id)[1]!.error, { type: "step_failed", message: "broken", retryable: false });
    assert.equal(gw.journal(id)[1]!.attempt, 2);
  });

  test("a NonRetryableError fails the step at once; out of the function, it fails the run", async () => {
    const fn = createFunction({ name: "nr" }, async ({ step }) => {
      await step.run("s", () => { throw new NonRetryableError("card declined"); });
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "nr", null);
    assert.deepEqual(r.answer, { status: "failed", error: { type: "non_retryable", message: "card declined", retryable: false } });
    assert.equal(r.invocations, 1);
    assert.deepEqual(gw.journal(id)[0]!.error, { type: "non_retryable", message: "card declined", retryable: false });
  });

  test("any other error answers HTTP 500, so the gateway retries the invocation", async () => {
    const fn = createFunction({ name: "boom" }, () => { throw new Error("oops"); });
    const warnings: string[] = [];
    const h = serve({ functions: [fn], signingKeys: gw.publicKey, onError: (i) => warnings.push(i.message) });
    const r = await gw.invoke(h, APP, gw.request(runId(), "boom", null));
    assert.equal(r.status, 500);
    assert.deepEqual(r.body, { type: "error", message: "oops" });
    assert.deepEqual(warnings, ["oops"]);
  });

  test("nondeterminism: the code asks for another step than the journal holds", async () => {
    const fn = createFunction({ name: "nd" }, async ({ step }) => step.run("b", () => 1));
    const id = runId();
    gw.journal(id).push({ seq: 1, kind: "step", name: "a", output: 1 });
    const r = await gw.invoke(app(fn), APP, gw.request(id, "nd", null));
    assert.deepEqual(r.body, {
      status: "failed",
      error: { type: "nondeterminism", message: 'step 1: code asks for step "b" but the journal holds step "a"', retryable: false },
    });
  });

  test("a 409 from the checkpoint stops the invocation: superseded, or nondeterminism", async () => {
    let second = 0;
    const fn = createFunction({ name: "c409" }, async ({ step }) => {
      await step.run("one", () => 1); // checkpointed when step two starts
      return step.run("two", () => (second++, 2));
    });
    gw.hook = () => [409, JSON.stringify({ type: "superseded", detail: "another attempt owns the run" })];
    let r = await gw.invoke(app(fn), APP, gw.request(runId(), "c409", null));
    assert.deepEqual(r.body.error, { type: "superseded", message: 'checkpoint step 1 "one": another attempt owns the run', retryable: false });
    gw.hook = () => [409, JSON.stringify({ type: "https://stepgate.dev/problems/nondeterminism", detail: "the journal holds step x" })];
    r = await gw.invoke(app(fn), APP, gw.request(runId(), "c409", null));
    assert.deepEqual(r.body.error, { type: "nondeterminism", message: 'step 1 "one": the journal holds step x', retryable: false });
    assert.equal(second, 0, "no step runs after a failed checkpoint");
  });

  test("a checkpoint answered 503 is tried again until it is journaled", async () => {
    let tries = 0;
    gw.hook = () => (++tries <= 2 ? [503, JSON.stringify({ detail: "restarting" })] : undefined);
    const fn = createFunction({ name: "c503" }, async ({ step }) => {
      await step.run("one", () => 1);
      return step.run("two", () => 2);
    });
    const id = runId();
    const r = await gw.invoke(app(fn), APP, gw.request(id, "c503", null));
    assert.deepEqual(outcome(r.body), { status: "completed", output: 2 });
    assert.equal(tries, 4, "one is tried until the gateway takes it, then two");
    assert.deepEqual(kinds(gw.journal(id)), ["1 step one", "2 step two"]);
  });

  test("parallel steps take their seqs in call order and checkpoint with a window as they finish", async () => {
    const fn = createFunction({ name: "par" }, async ({ step }) => {
      const parts = await Promise.all([30, 15, 0].map((ms, i) => step.run(`p${i}`, async () => {
        await new Promise((r) => setTimeout(r, ms));
        return i;
      })));
      return step.run("after", () => parts);
    });
    const id = runId();
    gw.checkpoints = [];
    const r = await gw.run(app(fn), APP, id, "par", null);
    assert.deepEqual(outcome(r.answer), { status: "completed", output: [0, 1, 2] });
    assert.deepEqual(kinds(gw.journal(id)), ["1 step p0", "2 step p1", "3 step p2", "4 step after"]);
    assert.deepEqual(gw.checkpoints.map((e) => [e.seq, e.window]), [[3, 3], [2, 2], [1, 2], [4, undefined]], "each parallel step as it finishes");
    assert.deepEqual(rides(r.answer), []);
  });

  test("a parallel step with attempts left: the others are journaled, the run waits for its retry", async () => {
    const ran: string[] = [];
    const fn = createFunction({ name: "parretry" }, async ({ step }) => {
      return Promise.all([
        step.run("ok-slow", async () => (ran.push("ok-slow"), await new Promise((r) => setTimeout(r, 20)), "a")),
        step.run("fails-once", ({ attempt }) => {
          ran.push(`fails-once#${attempt}`);
          if (attempt === 1) throw new Error("transient");
          return "b";
        }),
        step.run("ok", () => (ran.push("ok"), "c")),
      ]);
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "parretry", null);
    assert.deepEqual(r.answer, { status: "completed", output: ["a", "b", "c"] });
    assert.equal(r.awaits[0]!.type, "retry");
    assert.equal(r.awaits[0]!.seq, 2);
    assert.deepEqual(ran, ["ok-slow", "fails-once#1", "ok", "fails-once#2"], "finished steps are not run again");
  });

  test("maxInvocationDuration ends an invocation at a step boundary with a continue", async () => {
    const fn = createFunction({ name: "long", maxInvocationDuration: 200 }, async ({ step }) => {
      for (let i = 1; i <= 4; i++) await step.run(`w${i}`, () => new Promise((r) => setTimeout(() => r(i), 100)));
      return "done";
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "long", null);
    assert.deepEqual(outcome(r.answer), { status: "completed", output: "done" });
    assert.ok(r.awaits.length >= 1 && r.awaits.every((a) => a.type === "continue" && a.name === "continue"));
    assert.deepEqual(kinds(gw.journal(id)), ["1 step w1", "2 step w2", "3 step w3", "4 step w4"]);
  });

  test("invoke suspends for a child run and returns its output; its failure is a StepError", async () => {
    const fn = createFunction({ name: "parent" }, async ({ step }) => {
      const out = await step.invoke<number>("child", { function: "double", input: { n: 2 }, detached: true });
      try {
        await step.invoke("missing", { function: "nope" });
      } catch (e) {
        return { out, err: e instanceof StepError ? e.type : "?" };
      }
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "parent", null, {
      children: (aw) => (aw.function === "double" ? { output: 4 } : { error: { type: "not_found", message: "function nope is not registered" } }),
    });
    assert.deepEqual(r.answer, { status: "completed", output: { out: 4, err: "not_found" } });
    assert.deepEqual(r.awaits[0], { type: "invoke", seq: 1, name: "child", function: "double", input: { n: 2 }, detached: true });
  });

  test("now, uuid and random are journaled once and replayed", async () => {
    const seen: unknown[] = [];
    const fn = createFunction({ name: "det" }, async ({ step }) => {
      const v = [(await step.now("now")).toISOString(), await step.uuid("uuid"), await step.random("random")];
      seen.push(v);
      await step.sleep("nap", 1);
      return v;
    });
    const id = runId();
    const r = await gw.run(app(fn), APP, id, "det", null);
    assert.equal(seen.length, 2);
    assert.deepEqual(seen[0], seen[1]);
    assert.match((seen[0] as string[])[1]!, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.deepEqual(r.answer.output, seen[0]);
  });

  test("events, values and callbacks are checkpointed; waits suspend with their awaits", async () => {
    const fn = createFunction({ name: "waits" }, async ({ step, run }) => {
      await step.sendEvent("order.placed", { id: 7 });
      await step.setValue("progress", 0.5);
      const cb = await step.callback("approve", { timeout: "1h" });
      await step.waitForEvent("paid", { event: "order.paid", match: { "data.id": 7 }, timeout: "10m" });
      return [run.id, cb];
    });
    const id = runId();
    const r = await gw.invoke(app(fn), APP, gw.request(id, "waits", null));
    const j = gw.journal(id);
    assert.deepEqual(kinds(j), ["1 event order.placed", "2 value progress", "3 callback approve"]);
    assert.deepEqual(j[0]!.output, { name: "order.placed", data: { id: 7 }, id: `${id}:1` });
    assert.equal(j[1]!.output, 0.5);
    assert.deepEqual(r.body, {
      status: "suspended",
      await: { type: "wait_event", seq: 4, name: "paid", event: "order.paid", match: { "data.id": 7 }, timeout: "10m" },
    });
  });

  test("identity and run are given to the function; an input schema refuses bad input", async () => {
    const fn = createFunction<{ n: number }>({
      name: "who",
      input: {
        "~standard": {
          version: 1, vendor: "test",
          validate: (v) => (typeof (v as { n?: unknown })?.n === "number" ? { value: v as { n: number } } : { issues: [{ message: "must be a number", path: ["n"] }] }),
        },
      },
    }, ({ identity, run, input }) => ({ identity, run: run.function, n: input.n }));
    let r = await gw.invoke(app(fn), APP, gw.request(runId(), "who", { n: 1 }));
    assert.deepEqual(r.body.output, { identity: { subject: "ann", tenant: TENANT, roles: ["developer"], claims: { plan: "pro" } }, run: "who", n: 1 });
    r = await gw.invoke(app(fn), APP, gw.request(runId(), "who", { n: "x" }));
    assert.deepEqual(r.body.error, { type: "input", message: "the input does not match the function's schema: n: must be a number", retryable: false });
  });
});

describe("serve", () => {
  const fn = createFunction({ name: "hello", maxInvocationDuration: "10s", onEvent: ["user.created"], concurrency: [{ limit: 2, key: "input.id" }] }, () => "hi");

  test("the manifest lists the functions with paths relative to the app URL", async () => {
    for (const [url, path] of [[APP, "stepgate/hello"], [APP + "/", "hello"]] as const) {
      const resp = await app(fn)(new Request(url, { headers: { "Stepgate-Signature": gw.sign("", url) } }));
      assert.equal(resp.status, 200);
      assert.deepEqual(await resp.json(), {
        protocol: 1,
        protocol_version: PROTOCOL_VERSION,
        sdk: `stepgate-ts/${SDK_VERSION}`,
        replay_only: true,
        functions: [{ name: "hello", path, config: { max_invocation_duration: "10s", triggers: [{ event: "user.created" }], concurrency: [{ limit: 2, key: "input.id" }] } }],
      });
    }
  });

  test("invocationAttempts and invocationBackoff are the manifest's retries (of invocations, not steps)", () => {
    const retried = createFunction({ name: "retried", invocationAttempts: 5, invocationBackoff: { initial: 1500, max: "1m" } }, () => "hi");
    assert.deepEqual(retried.config, { retries: { max_attempts: 5, initial_interval: "1500ms", max_interval: "1m" } });
  });

  test("unsigned, forged, expired, replayed and other-tenant requests get 401", async () => {
    const h = app(fn);
    const body = JSON.stringify(gw.request(runId(), "hello", null));
    const post = (sig?: string, b = body) => h(new Request(`${APP}/hello`, { method: "POST", body: b, headers: sig ? { "Stepgate-Signature": sig } : {} }));
    const other = new Gateway();
    const cases: [string, string | undefined, RegExp][] = [
      ["unsigned", undefined, /missing Stepgate-Signature/],
      ["forged", other.sign(body, `${APP}/hello`), /no signature matches/],
      ["expired", gw.sign(body, `${APP}/hello`, TENANT, Math.floor(Date.now() / 1000) - 600), /outside the allowed window/],
      // Version 2 binds the method and path: another function's request, or an older
      // gateway's signature that bound neither, is refused.
      ["another function's", gw.sign(body, `${APP}/other`), /no signature matches/],
      ["version 1", gw.sign(body, `${APP}/hello`).replace("v=2,", ""), /not a version 2 signature.*upgrade the gateway/],
      ["garbled", "t=1,tenant=acme,ed25519=@@", /malformed/],
    ];
    for (const [what, sig, want] of cases) {
      const resp = await post(sig);
      assert.equal(resp.status, 401, what);
      const b = (await resp.json()) as any;
      assert.equal(b.type, "signature");
      assert.match(b.message, want, what);
    }
    const sig = gw.sign(body, `${APP}/hello`);
    assert.equal((await post(sig)).status, 200);
    const replay = await post(sig);
    assert.equal(replay.status, 401);
    assert.match(((await replay.json()) as any).message, /replayed/);
    const mismatch = await post(gw.sign(body, `${APP}/hello`, "globex"));
    assert.match(((await mismatch.json()) as any).message, /signed for tenant "globex", but its run's identity is of tenant "acme"/);
    const nokeys = await serve({ functions: [fn] })(new Request(APP, { headers: { "Stepgate-Signature": gw.sign("", APP) } }));
    assert.equal(nokeys.status, 401);
  });

  test("a captured invocation sent again to a fresh process runs no step once its run moved on", async () => {
    let charges = 0;
    const charge = createFunction({ name: "charge" }, async ({ step }) => {
      const a = await step.run("charge", () => ++charges);
      const b = await step.run("receipt", () => "sent");
      return { a, b };
    });
    const refund = createFunction({ name: "refund" }, ({ step }) => step.run("refund", () => "refunded"));
    const id = runId();
    const body = JSON.stringify(gw.request(id, "charge", null));
    const sig = gw.sign(body, `${APP}/charge`);
    // Each call of app is a new process of the app: an empty replay memory.
    const send = async (path: string) => {
      const resp = await app(charge, refund)(new Request(`${APP}/${path}`, { method: "POST", body, headers: { "Stepgate-Signature": sig } }));
      return { status: resp.status, body: (await resp.json()) as any };
    };
    assert.deepEqual(await send("charge"), { status: 200, body: { status: "completed", output: { a: 1, b: "sent" } } });
    assert.equal(gw.currentChecks.get(id), 1, "one question per invocation, before its first step");

    gw.stale.add(id); // the run finished: its invocation owns it no more
    const again = await send("charge");
    assert.equal(again.body.status, "failed", JSON.stringify(again));
    assert.equal(again.body.error.type, "superseded");
    assert.equal(charges, 1, "the charge ran once");

    // Another function of the app: the signature binds the path.
    const other = await send("refund");
    assert.equal(other.status, 401);
    assert.match(other.body.message, /no signature matches/);
    // Signed for refund's path, but the body is charge's run.
    const named = await app(charge, refund)(
      new Request(`${APP}/refund`, { method: "POST", body, headers: { "Stepgate-Signature": gw.sign(body, `${APP}/refund`) } }),
    );
    assert.equal(named.status, 401);
    assert.match(((await named.json()) as any).message, /the request is for function "charge"; this path serves "refund"/);
  });

  test("the run is claimed before the first step body even after a checkpoint of the invocation", async () => {
    // A checkpoint the gateway took proves nothing about this process: a copy of the
    // invocation request checkpoints under the same token. When another process claimed
    // the invocation (the question answers 409, checkpoints are taken), the step body
    // does not run, though a value was checkpointed first.
    let charges = 0;
    const valued = createFunction({ name: "valued" }, async ({ step }) => {
      await step.setValue("phase", "charging");
      return step.run("charge", () => ++charges);
    });
    const id = runId();
    gw.stale.add(id);
    const r = await gw.invoke(app(valued), APP, gw.request(id, "valued", null));
    assert.equal(r.body.status, "failed", JSON.stringify(r.body));
    assert.equal(r.body.error.type, "superseded");
    assert.deepEqual(kinds(gw.journal(id)), ["1 value phase"], "the value was checkpointed");
    assert.equal(gw.currentChecks.get(id), 1, "the question was asked after the checkpoint");
    assert.equal(charges, 0, "the step body did not run");
  });

  test("the README's test vector verifies", async () => {
    const h = serve({ functions: [fn], signingKeys: "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg", tenant: "acme corp" });
    const { verifySignature, importKeys } = await import("../src/signature.js");
    const header = "v=2,t=1800000000,tenant=acme%20corp,ed25519=evnoDiEslI2RfcREEsJq2yEcntaPhhFYBKL0fnCCU6hMpTFCn-GaJLFw1CutvPsFSrogIxfSgE_OaHKvn6RnBg,v1=25d454568c11a777ee015247e48e93d416090a3bdfccf4226c160ace0b1f30d9";
    const req = { method: "POST", path: "/orders.checkout", body: new TextEncoder().encode('{"protocol":1}') };
    const ed = await verifySignature(header.replace(/,v1=.*/, ""), req, await importKeys("A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"), 1800000000);
    assert.equal(ed.parsed.tenant, "acme corp");
    const secret = Buffer.from(Array.from({ length: 32 }, (_, i) => 0x20 + i)).toString("base64url");
    const mac = await verifySignature(header.replace(/ed25519=[^,]*,/, ""), req, await importKeys(undefined, secret), 1800000000);
    assert.equal(mac.parsed.t, 1800000000);
    await assert.rejects(verifySignature(header, { ...req, body: new TextEncoder().encode('{"protocol":2}') }, await importKeys("A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"), 1800000000), /no signature matches/);
    await assert.rejects(verifySignature(header, { ...req, path: "/orders.refund" }, await importKeys("A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"), 1800000000), /no signature matches/);
    assert.ok(h);
  });

  test("bad requests: 404, 405, 400 and 413", async () => {
    const h = serve({ functions: [fn], insecureSkipVerify: true, basePath: "/api/stepgate", maxBodyBytes: 1000 });
    assert.equal((await h(new Request(`${APP}/nope`, { method: "POST", body: "{}" }))).status, 404);
    assert.equal((await h(new Request(`${APP}/hello`))).status, 405);
    assert.equal((await h(new Request(APP, { method: "POST", body: "{}" }))).status, 405);
    const bad = await h(new Request(`${APP}/hello`, { method: "POST", body: '{"protocol":2}' }));
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as any).message, /protocol 2 is not supported/);
    assert.equal((await h(new Request(`${APP}/hello`, { method: "POST", body: "x".repeat(2000) }))).status, 413);
    assert.throws(() => createFunction({ name: "bad name" }, () => 1), /invalid function name/);
    assert.throws(() => serve({ functions: [fn], signingKeys: `${gw.publicKey},abc` }), /signing key 2 is not an Ed25519 public key/);
    assert.throws(() => serve({ functions: [fn], hmacSecrets: "c2hvcnQ" }), /HMAC secret 1 is not a secret/);
    assert.throws(() => createFunction({ name: "x", maxInvocationDuration: "soon" }, () => 1), /not a duration/);
  });

  test("the Node and Lambda adapters carry requests and answers", async () => {
    const h = app(fn);
    const server = createServer(toNodeListener(h));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/stepgate`;
      const req = gw.request(runId(), "hello", null);
      const body = JSON.stringify(req);
      const resp = await fetch(`${base}/hello`, { method: "POST", body, headers: { "Stepgate-Signature": gw.sign(body, `${base}/hello`) } });
      assert.deepEqual(await resp.json(), { status: "completed", output: "hi" });
      const m = await fetch(base, { headers: { "Stepgate-Signature": gw.sign("", base) } });
      assert.equal(((await m.json()) as any).functions[0].path, "stepgate/hello");
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
    // serveNode checkpoints with node:http (nodePost) instead of fetch.
    const stepped = createFunction({ name: "stepped" }, async ({ step }) => {
      await step.run("one", () => "journaled");
      return step.run("two", () => "answered");
    });
    const nodeServer = createServer(serveNode({ functions: [stepped], signingKeys: gw.publicKey }));
    await new Promise<void>((r) => nodeServer.listen(0, "127.0.0.1", r));
    try {
      const id = runId();
      const body = JSON.stringify(gw.request(id, "stepped", null));
      const resp = await fetch(`http://127.0.0.1:${(nodeServer.address() as AddressInfo).port}/stepped`, {
        method: "POST", body, headers: { "Stepgate-Signature": gw.sign(body, "/stepped") },
      });
      const answer = (await resp.json()) as any;
      assert.deepEqual(outcome(answer), { status: "completed", output: "answered" });
      assert.deepEqual(kinds(gw.journal(id)), ["1 step one", "2 step two"], "both checkpointed through node:http");
      assert.deepEqual(rides(answer), []);
    } finally {
      nodeServer.closeAllConnections();
      await new Promise((r) => nodeServer.close(r));
    }
    const lambda = toLambdaHandler(h);
    const body = JSON.stringify(gw.request(runId(), "hello", null));
    const res = await lambda({
      version: "2.0", rawPath: "/api/stepgate/hello", headers: { host: "x.lambda-url.aws", "stepgate-signature": gw.sign(body, "/api/stepgate/hello") },
      body: Buffer.from(body).toString("base64"), isBase64Encoded: true, requestContext: { http: { method: "POST" } },
    });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(JSON.parse(res.body), { status: "completed", output: "hi" });
  });
});
