// Compile-time tests of the client's typing: `npm test` compiles this file with tsc, and
// every `@ts-expect-error` below must meet an error, so a client that lost its typing
// (an input not checked, an output typed any) fails the build. Nothing here runs.
import { Client, createFunction, eventRef, ref, type StartedRun } from "../src/index.js";

/** Holds when A and B are the same type. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(_: T): void {}

const checkout = createFunction({ name: "orders.checkout" }, async ({ input }: { input: { order: string; qty: number } }) => {
  return { order: input.order, total: input.qty * 2, at: new Date() };
});
const priced = ref<{ sku: string }, { price: number }>("prices.get");
const paid = eventRef<{ order: string }>("order.paid");

export async function types(c: Client): Promise<void> {
  // A function object: its input is checked, its output is its return's JSON form.
  const out = await c.run(checkout, { order: "o-1", qty: 2 });
  assertType<Equal<typeof out, { order: string; total: number; at: string }>>(true);
  // @ts-expect-error qty is a number
  await c.run(checkout, { order: "o-1", qty: "2" });
  // @ts-expect-error order is missing
  await c.start(checkout, { qty: 2 });
  // @ts-expect-error the output has no field "missing"
  out.missing;

  // start carries the output type to attach.
  const started = await c.start(checkout, { order: "o-2", qty: 1 }, { idempotencyKey: "k", delay: "1s" });
  assertType<Equal<typeof started, StartedRun<{ order: string; total: number; at: string }>>>(true);
  const attached = await c.attach(started, { wait: "30s" });
  assertType<Equal<typeof attached, { order: string; total: number; at: string }>>(true);

  // A ref: the caller's types.
  const p = await c.startAndWait(priced, { sku: "A-1" }, { wait: 10_000 });
  assertType<Equal<typeof p, { price: number }>>(true);
  // @ts-expect-error sku is a string
  await c.run(priced, { sku: 1 });

  // A bare name: untyped.
  const u = await c.run("anything", 42);
  assertType<Equal<typeof u, unknown>>(true);

  // A typed event.
  await c.sendEvent(paid, { order: "o-1" });
  // @ts-expect-error order is a string
  await c.sendEvent(paid, { order: 1 });
  await c.sendEvent("untyped", { whatever: true });
}
