// Options objects are checked by name (an old name is refused naming the new one), and
// the deprecated step.awaitCallback and step.invokeAll still work as before 0.1.0.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createFunction, StepError, type Callback, type Context } from "../src/index.js";
import * as testing from "../src/testing.js";

/** The failure a run of handler ends with (it must fail). */
async function failure(handler: (ctx: Context<unknown>) => unknown): Promise<string> {
  const out = await testing.harness(createFunction({ name: "t.opts" }, handler)).start().result();
  assert.equal(out.status, "failed", JSON.stringify(out));
  return out.status === "failed" ? out.error.message : "";
}

describe("options by name", () => {
  test("createFunction refuses the invocation options' old names, naming the new ones", () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ timeout: "1m" }, /unknown option "timeout": write invocationTimeout/],
      [{ maxAttempts: 5 }, /unknown option "maxAttempts": write invocationAttempts/],
      [{ backoff: { initial: "1s" } }, /unknown option "backoff": write invocationBackoff/],
    ];
    for (const [opts, want] of cases) {
      assert.throws(() => createFunction({ name: "t.old", ...opts } as never, () => null), (e: unknown) => {
        assert.ok(e instanceof TypeError);
        assert.match(e.message, /^stepgate: createFunction "t\.old": /);
        assert.match(e.message, want);
        return true;
      });
    }
  });

  test("createFunction refuses any other unknown option, listing those it takes", () => {
    assert.throws(
      () => createFunction({ name: "t.typo", invocationTimout: "1m" } as never, () => null),
      /createFunction "t\.typo": unknown option "invocationTimout": it takes name, input, invocationTimeout, invocationAttempts, invocationBackoff, /,
    );
    assert.throws(
      () => createFunction({ name: "t.nested", invocationBackoff: { initial: "1s", maximum: "1m" } } as never, () => null),
      /invocationBackoff: unknown option "maximum": it takes initial, max/,
    );
    const f = createFunction({ name: "t.ok", invocationTimeout: "1m", invocationAttempts: 2, invocationBackoff: { initial: "1s", max: "1m" } }, () => null);
    assert.deepEqual(f.config, { timeout: "1m", retries: { max_attempts: 2, initial_interval: "1s", max_interval: "1m" } });
  });

  test("a step's, a wait's and an invoke's unknown options fail the run, naming what to write", async () => {
    assert.match(
      await failure(({ step }) => step.run("charge", () => 1, { maxAttempts: 3 } as never)),
      /step: run "charge": unknown option "maxAttempts": write retries \(the attempts after the first: maxAttempts - 1/,
    );
    assert.match(
      await failure(({ step }) => step.run("charge", () => 1, { retries: 1, backoff: { initial: "1s", maximum: "1m" } } as never)),
      /step: run "charge": backoff: unknown option "maximum": it takes initial, max/,
    );
    assert.match(
      await failure(({ step }) => step.waitForEvent("paid", { event: "order.paid", timeOut: "1h" } as never)),
      /step: wait "paid": unknown option "timeOut": it takes event, match, timeout, since/,
    );
    assert.match(await failure(({ step }) => step.receive("t", { timout: "1h" } as never)), /step: receive "t": unknown option "timout": it takes timeout/);
    assert.match(await failure(({ step }) => step.awaitRun("r", crypto.randomUUID(), { wait: "1h" } as never)), /unknown option "wait": it takes timeout/);
    assert.match(await failure(({ step }) => step.callback("cb", { expires: "1h" } as never)), /step: callback "cb": unknown option "expires": it takes timeout/);
    assert.match(
      await failure(({ step }) => step.invoke("child", { function: "t.child", data: 1 } as never)),
      /step: invoke "child": unknown option "data": write input/,
    );
  });
});

describe("deprecated steps from before 0.1.0", () => {
  test("awaitCallback journals the old await (with its timeout) and gives the data and who resolved it", async () => {
    const fn = createFunction({ name: "t.await-callback" }, async ({ step }) => {
      const cb = await step.callback<{ ok: boolean }>("approve");
      const got = await step.awaitCallback<{ ok: boolean }>(cb, { timeout: "1h" });
      return got === null ? "timed out" : { data: got.data, resolver: got.resolver, at: got.resolvedAt instanceof Date };
    });
    const h = testing.harness(fn);
    const run = h.start();
    const waiting = await run.result();
    assert.equal(waiting.status, "suspended");
    await run.resolveCallback("approve", { ok: true });
    assert.deepEqual(await run.result(), { status: "completed", output: { data: { ok: true }, resolver: "token", at: true } });
    assert.deepEqual(run.journal.map((e) => `${e.seq} ${e.kind} ${e.name}`), ["1 callback approve", "2 await_callback approve"]);

    const late = h.start();
    await late.result();
    await h.advance("1h");
    assert.deepEqual(await late.result(), { status: "completed", output: "timed out" }, "the old wait's timeout: null, not an error");
  });

  test("awaitCallback takes a handle of the old shape and rejects a rejection with a StepError", async () => {
    const fn = createFunction({ name: "t.await-rejected" }, async ({ step }) => {
      const cb: Callback = await step.callback("approve");
      const handle = { seq: cb.seq, name: cb.name, url: cb.url, token: cb.token, expiresAt: cb.expiresAt }; // a CallbackHandle
      try {
        await step.awaitCallback(handle);
        return "resolved";
      } catch (e) {
        assert.ok(e instanceof StepError);
        return `${e.type}: ${e.message}`;
      }
    });
    const run = testing.harness(fn).start();
    await run.result();
    await run.resolveCallback("approve", undefined, { type: "rejected", message: "no" });
    assert.deepEqual(await run.result(), { status: "completed", output: "rejected: no" });
  });

  test("invokeAll starts the children at once, named as before, and gives each child's outcome", async () => {
    const fn = createFunction({ name: "t.invoke-all" }, async ({ step }) => {
      const out = await step.invokeAll<number>("kids", [{ function: "t.double", input: 2 }, { function: "t.broken" }]);
      return out.map((o) => (o.ok ? o.output : `${o.error.type}: ${o.error.message}`));
    });
    const h = testing.harness(fn).stub("t.double", (n: number) => n * 2).stub("t.broken", () => {
      throw new StepError(0, "x", "bad_input", "nope");
    });
    const run = h.start();
    assert.deepEqual(await run.result(), { status: "completed", output: [4, "bad_input: nope"] });
    assert.deepEqual(run.journal.map((e) => `${e.seq} ${e.kind} ${e.name}`), ["1 invoke kids", "2 invoke kids"]);
  });
});
