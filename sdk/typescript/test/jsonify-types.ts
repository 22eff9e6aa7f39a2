// Type-level tests of step.run's return type (Jsonify): npm test compiles this file, and
// each @ts-expect-error line fails the build if what it expects stops being an error.
import { createFunction, type Jsonify } from "../src/index.js";

/** Compiles only when A and B are the same type. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const same = <A, B>(_: Equal<A, B>) => {};

same<Jsonify<string>, string>(true);
same<Jsonify<number | boolean | null>, number | boolean | null>(true);
same<Jsonify<Date>, string>(true);
same<Jsonify<undefined>, null>(true);
same<Jsonify<void>, null>(true);
same<Jsonify<string | undefined>, string | null>(true);
same<Jsonify<() => void>, null>(true);
same<Jsonify<Map<string, number>>, Record<string, never>>(true);
same<Jsonify<Set<number>>, Record<string, never>>(true);
same<Jsonify<bigint>, never>(true);
same<Jsonify<any>, any>(true);
same<Jsonify<unknown>, unknown>(true);
same<Jsonify<(Date | undefined)[]>, (string | null)[]>(true);
same<Jsonify<[Date, number]>, [string, number]>(true);
same<Jsonify<{ at: Date; note?: string; gone: undefined; maybe: number | undefined; fn: () => void; nested: { when: Date }[] }>, {
  at: string;
  note?: string;
  maybe?: number;
  nested: { when: string }[];
}>(true);
same<Jsonify<Record<string, Date>>, Record<string, string>>(true);
// @ts-expect-error a Date is not kept as a Date
same<Jsonify<Date>, Date>(true);
// @ts-expect-error undefined alone becomes null
same<Jsonify<undefined>, undefined>(true);

export const typed = createFunction({ name: "typed" }, async ({ step }) => {
  const when = await step.run("when", () => new Date());
  const s: string = when;
  // @ts-expect-error step.run gives the JSON form: the Date is a string
  when.getTime();
  const order = await step.run("order", () => ({ id: "o-1", placed: new Date(), coupon: undefined as string | undefined }));
  const id: string = order.id;
  const placed: string = order.placed;
  // @ts-expect-error coupon may be left out of the JSON: optional, so possibly undefined
  const coupon: string = order.coupon;
  const counts = await step.run("counts", () => new Map([["a", 1]]));
  // @ts-expect-error a Map's JSON form is an empty object, with no get
  counts.get("a");
  const nothing = await step.run("nothing", () => {});
  const n: null = nothing;
  return { s, id, placed, coupon, n };
});
