// The example functions of the TypeScript SDK, served by node-server.ts and worker.ts.
// Their names start with "ts." so that they sit beside the Go examples in one tenant.
import { createFunction, NonRetryableError, TimedOutError, type StandardSchemaV1 } from "../src/index.js";

/** ts.hello greets input.name. No steps. */
export const hello = createFunction<{ name?: string }, { greeting: string }>({ name: "ts.hello" }, ({ input }) => ({
  greeting: `Hello, ${input?.name || "World"}!`,
}));

export interface CheckoutInput {
  item: string;
  /** How long to cool off between charging and shipping, in milliseconds; 1000 by default. */
  sleep_ms?: number;
}

/** A hand-written Standard Schema (Zod, Valibot and ArkType make these for you). */
const checkoutInput: StandardSchemaV1<unknown, CheckoutInput> = {
  "~standard": {
    version: 1,
    vendor: "example",
    validate(value) {
      const v = value as Partial<CheckoutInput> | null;
      if (!v || typeof v.item !== "string" || v.item === "") return { issues: [{ message: "item is required", path: ["item"] }] };
      if (v.sleep_ms !== undefined && (typeof v.sleep_ms !== "number" || v.sleep_ms < 0)) {
        return { issues: [{ message: "sleep_ms must be a number, 0 or more", path: ["sleep_ms"] }] };
      }
      return { value: v as CheckoutInput };
    },
  },
};

/** ts.checkout: three steps and a sleep, the five-minute tour's function. */
export const checkout = createFunction(
  { name: "ts.checkout", input: checkoutInput, invocationTimeout: "30s" },
  async ({ input, step }) => {
    const order = await step.run("reserve", () => ({ orderId: `o-${input.item}`, item: input.item }));
    const charge = await step.run("charge", () => ({ amount: 42, orderId: order.orderId }));
    await step.sleep("cool-off", input.sleep_ms ?? 1000);
    const tracking = await step.run("ship", () => `TRACK-${order.orderId}`);
    return { orderId: order.orderId, charged: charge.amount, tracking };
  },
);

/** ts.flaky: a step that fails on its first attempt and succeeds on its second. */
export const flaky = createFunction({ name: "ts.flaky" }, async ({ step }) => {
  const attempt = await step.run(
    "call-partner",
    ({ attempt }) => {
      if (attempt < 2) throw new Error(`the partner is down (attempt ${attempt})`);
      return attempt;
    },
    { retries: 3, backoff: { initial: "10ms", max: "100ms" } },
  );
  return { succeededOnAttempt: attempt };
});

/** ts.double: a child run's function, doubling input.n. */
export const double = createFunction<{ n: number }>({ name: "ts.double" }, async ({ input, step }) => {
  if (typeof input?.n !== "number") throw new NonRetryableError("input.n must be a number");
  return step.run("double", () => input.n * 2);
});

/** ts.parent: invokes ts.double as a child run and publishes the result. */
export const parent = createFunction<{ n: number }>({ name: "ts.parent" }, async ({ input, step }) => {
  const doubled = await step.invoke<number>("double", { function: "ts.double", input: { n: input.n } });
  await step.sendEvent("ts.doubled", { n: input.n, doubled });
  return { doubled };
});

/** ts.whoami: who started the run, and deterministic values. */
export const whoami = createFunction({ name: "ts.whoami" }, async ({ identity, step, run }) => {
  const [at, id] = await Promise.all([step.now("at"), step.uuid("id")]);
  return { subject: identity.subject, tenant: identity.tenant, roles: identity.roles, runId: run.id, at: at.toISOString(), id };
});

/** ts.parallel: three steps at once, and a step after them. */
export const parallel = createFunction({ name: "ts.parallel" }, async ({ step }) => {
  const parts = await Promise.all(
    ["a", "b", "c"].map((p, i) => step.run(`part-${p}`, async () => {
      await new Promise((r) => setTimeout(r, 30 - 10 * i)); // finish in reverse order
      return p.toUpperCase();
    })),
  );
  return step.run("join", () => parts.join(""));
});

/** ts.chain: n steps in a row (default 10), the Go example chain's twin, for benchmarks. */
export const chain = createFunction<{ steps?: number }>({ name: "ts.chain" }, async ({ input, step }) => {
  const n = input?.steps ?? 10;
  if (!Number.isInteger(n) || n < 0 || n > 1000) throw new NonRetryableError(`steps must be between 0 and 1000, not ${n}`);
  let sum = 0;
  for (let i = 1; i <= n; i++) sum += await step.run(`step-${i}`, () => i);
  return { sum };
});

/** ts.long: steps of input.step_ms each under a 1s maxInvocationDuration, so the run continues in new invocations. */
export const long = createFunction<{ steps?: number; step_ms?: number }>(
  { name: "ts.long", maxInvocationDuration: "1s" },
  async ({ input, step, run }) => {
    const attempts: number[] = [];
    for (let i = 1; i <= (input?.steps ?? 4); i++) {
      attempts.push(await step.run(`work-${i}`, async () => {
        await new Promise((r) => setTimeout(r, input?.step_ms ?? 500));
        return run.attempt;
      }));
    }
    return { steps: attempts.length };
  },
);

/** ts.await_payment: waits up to a minute for the event ts.payment of its order. */
export const awaitPayment = createFunction<{ order_id: string }>({ name: "ts.await_payment" }, async ({ input, step }) => {
  try {
    const paid = await step.waitForEvent<{ amount: number }>("payment", {
      event: "ts.payment",
      match: { "data.order_id": input.order_id },
      timeout: "1m",
    });
    return { paid: paid.data.amount, by: paid.sender.subject };
  } catch (e) {
    if (e instanceof TimedOutError) return { paid: null };
    throw e;
  }
});

/**
 * ts.pay_or_expire: the first of the event ts.payment of its order and a deadline of
 * input.timeout_ms (default a minute): the payment, or that it expired.
 */
export const payOrExpire = createFunction<{ order_id: string; timeout_ms?: number }>({ name: "ts.pay_or_expire" }, async ({ input, step }) => {
  const payment = step.waitForEvent<{ amount: number }>("payment", { event: "ts.payment", match: { "data.order_id": input.order_id } });
  const deadline = step.sleep("deadline", input.timeout_ms ?? 60_000);
  if ((await step.waitFirst("paid-or-expired", payment, deadline)) === 1) return { expired: true };
  const paid = await payment; // chosen: at once
  return { paid: paid.data.amount, by: paid.sender.subject };
});

/**
 * ts.approval: a callback (its URL published as the value "callback") against a message
 * of topic "cancel": whichever comes first.
 */
export const approval = createFunction({ name: "ts.approval" }, async ({ step }) => {
  const cb = await step.callback<{ ok: boolean }>("approve", { timeout: "1h" });
  await step.setValue("callback", cb.url);
  const cancel = step.receive<{ why: string }>("cancel");
  const first = await step.waitFirst("approve-or-cancel", cb.result(), cancel);
  return first === 0 ? { approved: (await cb.result()).ok } : { cancelled: (await cancel).data.why };
});

/** ts.fanout: two child runs of ts.double, started at once (waitAll). */
export const fanout = createFunction<{ a: number; b: number }>({ name: "ts.fanout" }, async ({ input, step }) => {
  const [a, b] = await step.waitAll(
    step.invoke<number>("double-a", { function: "ts.double", input: { n: input.a } }),
    step.invoke<number>("double-b", { function: "ts.double", input: { n: input.b } }),
  );
  return { a, b };
});

/**
 * ts.race: two steps in parallel; the first to finish is picked (waitFirst), journaled
 * as the step "pick", which the invocation after the sleep replays.
 */
export const race = createFunction({ name: "ts.race" }, async ({ step }) => {
  const slow = step.run("slow", async () => {
    await new Promise((r) => setTimeout(r, 300));
    return "slow";
  });
  const fast = step.run("fast", () => "fast");
  const first = await step.waitFirst("pick", slow, fast);
  await step.sleep("settle", 10);
  return { first, winner: await [slow, fast][first] };
});

/**
 * ts.counter: takes input.n requests "add" (POST /v1/runs/{id}/requests), each with a
 * number, and replies the running total to each; a negative number gets an error reply.
 */
export const counter = createFunction<{ n: number }>({ name: "ts.counter" }, async ({ input, step }) => {
  let total = 0;
  for (let i = 0; i < input.n; i++) {
    const req = await step.receiveRequest<{ add: number }>("add", { timeout: "1h" });
    if (req.data.add < 0) {
      await step.replyError(req.id, new Error("cannot add a negative number"));
      continue;
    }
    total += req.data.add;
    await step.reply(req.id, { total, from: req.sender.subject });
  }
  return total;
});

/**
 * ts.tokens: writes an answer to the run's stream "tokens" (read it live with GET
 * /v1/runs/{id}/streams/tokens), between steps and inside a step whose first attempt
 * fails: readers see the failed attempt's words, then the retry's, and nothing twice.
 */
export const tokens = createFunction<{ words?: string[] }>({ name: "ts.tokens" }, async ({ input, step }) => {
  const out = step.stream("tokens");
  await out.write("thinking");
  const words = await step.run("answer", async ({ attempt, stream }) => {
    const w = stream("tokens");
    const ws = input?.words ?? ["Hel", "lo"];
    for (const word of ws) await w.write(word);
    if (attempt === 1) throw new Error("the model timed out");
    return ws.length;
  }, { retries: 1, backoff: { initial: "10ms", max: "10ms" } });
  await out.write("!");
  await out.close();
  return { words };
});

/** ts.saga: reserves and charges, then ships; when shipping fails for good, refunds and releases (compensations). */
export const saga = createFunction<{ fail_ship?: boolean }>({ name: "ts.saga" }, async ({ input, step }) => {
  const reservation = await step.run("reserve", () => "r-1");
  step.compensate("release", () => ({ released: reservation }));
  const charged = await step.run("charge", () => 42);
  step.compensate("refund", () => ({ refunded: charged }));
  return step.run("ship", () => {
    if (input?.fail_ship) throw new NonRetryableError("no courier");
    return { tracking: "TRACK-1" };
  });
});

/** ts.patched: a patch, as the code of a function whose step "total" became "total-v2". */
export const patched = createFunction({ name: "ts.patched" }, async ({ step }) => {
  const total = (await step.patched("fix-rounding")) ? await step.run("total-v2", () => 10) : await step.run("total", () => 9.99);
  return { total };
});

/** ts.nap: a short sleep waited out in the function's process (sleepInProcess), in the invocation that reached it. */
export const nap = createFunction<{ sleep_ms?: number }>({ name: "ts.nap", sleepInProcess: "30s" }, async ({ input, step, run }) => {
  const before = await step.run("before", () => run.attempt);
  await step.sleep("nap", input?.sleep_ms ?? 300);
  const after = await step.run("after", () => run.attempt);
  return { before, after };
});

export const all = [hello, checkout, flaky, double, parent, whoami, parallel, chain, long, awaitPayment, tokens, saga, patched, nap, payOrExpire, approval, fanout, race, counter];
