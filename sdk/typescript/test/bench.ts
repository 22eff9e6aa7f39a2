// The SDK's own cost per step, without a gateway: invocations of a function of ten steps
// whose checkpoints go to a trivial local server, the twin of the Go SDK's
// BenchmarkInvoke (functions/bench_test.go). Not a test:
//
//   node dist/test/bench.js <checkpoint url> [invocations]
import { createFunction, serve } from "../src/index.js";
import { nodePost } from "../src/node.js";
import { Gateway } from "./gateway.js";

const url = process.argv[2];
const n = Number(process.argv[3] ?? 2000);
if (!url) throw new Error("usage: node dist/test/bench.js <checkpoint url> [invocations]");

/** A function of ten steps, its checkpoints eager (the default) or lazy (10 or 9 checkpoints). */
const tenSteps = (lazyCheckpoints: boolean) =>
  createFunction<{ N: number }>({ name: "ten", lazyCheckpoints }, async ({ input, step }) => {
    let sum = 0;
    for (let i = 0; i < 10; i++) sum += await step.run(`step-${i}`, () => input.N + i);
    return sum;
  });
const gw = new Gateway();

const variants = [["global fetch", undefined, false], ["nodePost", nodePost, false], ["nodePost lazy", nodePost, true]] as const;
for (const [label, fetchFn, lazy] of [...variants, ...variants]) {
  const h = serve({ functions: [tenSteps(lazy)], signingKeys: gw.publicKey, ...(fetchFn ? { post: fetchFn } : {}) });
  const requests = Array.from({ length: n + 200 }, (_, i) => {
    const req = gw.request(`run-${label}-${i}`, "ten", { N: 1 });
    req.checkpoint.url = url;
    const body = JSON.stringify(req);
    return { body, sig: gw.sign(body, "/ten") };
  });
  let t0 = 0;
  for (let i = 0; i < requests.length; i++) {
    if (i === 200) t0 = performance.now(); // after a warm-up
    const { body, sig } = requests[i]!;
    const resp = await h(new Request("http://app/ten", { method: "POST", body, headers: { "Stepgate-Signature": sig } }));
    if (resp.status !== 200) throw new Error(`${resp.status} ${await resp.text()}`);
    await resp.arrayBuffer();
  }
  const per = (performance.now() - t0) / n;
  console.log(`${label.padEnd(14)} ${(per * 1000).toFixed(0)} µs per invocation of 10 steps, ${(per * 100).toFixed(0)} µs per step`);
}
