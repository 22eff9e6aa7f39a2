// An app for the end-to-end test of a captured invocation sent again
// (cmd/stepgate/typescript_e2e_test.go): each step appends a line to a file named after
// its function and run in STEPGATE_CAPTURE_DIR, so the test counts how often a step's
// body ran across processes. Each process is a new instance of the app, with an empty
// replay memory, as a new serverless instance or another replica is.
//
//   STEPGATE_PUBLIC_KEYS=... STEPGATE_CAPTURE_DIR=... PORT=3000 node dist/test/capture-server.js
import { appendFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { createFunction } from "../src/index.js";
import { serveNode } from "../src/node.js";

const port = Number(process.env.PORT ?? 3000);
const dir = process.env.STEPGATE_CAPTURE_DIR ?? ".";
const counted = (name: string) =>
  createFunction({ name: `capture.${name}` }, ({ step, run }) =>
    step.run(name, () => (appendFileSync(join(dir, `${name}-${run.id}`), `${name}\n`), name)),
  );
const server = createServer(
  serveNode({ functions: [counted("charge"), counted("refund")], signingKeys: process.env.STEPGATE_PUBLIC_KEYS, basePath: "/api/stepgate" }),
);
server.listen(port, "127.0.0.1", () => console.log(`capture functions served at http://127.0.0.1:${port}/api/stepgate`));
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
