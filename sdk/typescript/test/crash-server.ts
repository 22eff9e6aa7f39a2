// An app whose process dies after a step returned and before the next step starts, for
// the end-to-end test of the promise that a step's result is durable before step.run
// resolves (cmd/stepgate/typescript_e2e_test.go). It serves two functions that differ
// only in lazyCheckpoints; each step "charge" appends a line to a file named after the
// run in STEPGATE_CRASH_DIR, so the test counts how often its body ran.
//
//   STEPGATE_PUBLIC_KEYS=... STEPGATE_CRASH_DIR=... PORT=3000 node dist/test/crash-server.js
//
// The process started is a supervisor: it forks the app, forks it again on the same port
// whenever it dies, and prints "crash functions served at <url>" once the first is ready.
import { fork } from "node:child_process";
import { appendFileSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createFunction } from "../src/index.js";
import { serveNode } from "../src/node.js";

const port = Number(process.env.PORT ?? 3000);

if (!process.env.STEPGATE_CRASH_APP) {
  let stopping = false;
  let announced = false;
  const start = () => {
    const app = fork(fileURLToPath(import.meta.url), { env: { ...process.env, STEPGATE_CRASH_APP: "1" } });
    app.on("message", () => {
      if (!announced) console.log(`crash functions served at http://127.0.0.1:${port}/api/stepgate`);
      announced = true;
    });
    app.on("exit", () => (stopping ? process.exit(0) : start()));
    for (const sig of ["SIGINT", "SIGTERM"] as const) {
      process.removeAllListeners(sig);
      process.on(sig, () => {
        stopping = true;
        app.kill("SIGTERM");
      });
    }
  };
  start();
} else {
  const dir = process.env.STEPGATE_CRASH_DIR ?? ".";
  const charge = (lazyCheckpoints: boolean) =>
    createFunction(
      { name: lazyCheckpoints ? "crash.lazy" : "crash.eager", lazyCheckpoints, invocationAttempts: 10, invocationBackoff: { initial: "300ms", max: "1s" } },
      async ({ step, run }) => {
        const counter = join(dir, run.id);
        const charged = await step.run("charge", () => (appendFileSync(counter, "charge\n"), 42));
        // The process dies after charge returned and before ship starts, on the first
        // invocation: the gateway sees the connection end, and retries the run.
        if (run.attempt === 1) process.exit(1);
        const shipped = await step.run("ship", () => "shipped");
        return { charged, shipped, charges: readFileSync(counter, "utf8").split("\n").filter(Boolean).length };
      },
    );
  const server = createServer(
    serveNode({ functions: [charge(false), charge(true)], signingKeys: process.env.STEPGATE_PUBLIC_KEYS, basePath: "/api/stepgate" }),
  );
  server.listen(port, "127.0.0.1", () => process.send?.("ready"));
  process.on("SIGTERM", () => process.exit(0));
}
