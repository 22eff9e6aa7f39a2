// The test harness under Vitest (npm run test:vitest): the example ts.checkout, a week's
// sleep included, in milliseconds.
import { expect, test } from "vitest";
import { checkout } from "../examples/functions.js";
import { harness } from "../src/testing.js";

test("ts.checkout cools off for a week on the virtual clock, then ships", async () => {
  const h = harness(checkout);
  const run = h.start({ item: "lamp", sleep_ms: 7 * 24 * 3_600_000 });
  expect(await run.result()).toMatchObject({ status: "suspended", await: { type: "sleep", name: "cool-off" } });
  await h.advance("7d");
  expect(await run.result()).toEqual({ status: "completed", output: { orderId: "o-lamp", charged: 42, tracking: "TRACK-o-lamp" } });
  expect(run.journal.map((e) => e.name)).toEqual(["reserve", "charge", "cool-off", "ship"]);
});
