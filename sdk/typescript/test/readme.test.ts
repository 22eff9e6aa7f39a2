import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

// The package README's tour is examples/tour.ts, which the end-to-end test runs on a
// real gateway: the two must not drift apart.
test("the README's tour is examples/tour.ts", () => {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const block = /in `server\.ts`:\n\n```ts\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, "the README has the tour's server.ts");
  const tour = readFileSync(new URL("../../examples/tour.ts", import.meta.url), "utf8")
    .replace('from "../src/index.js"', 'from "@stepgate/sdk"')
    .replace('from "../src/node.js"', 'from "@stepgate/sdk/node"');
  assert.equal(block[1], tour);
});
