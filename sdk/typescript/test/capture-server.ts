// An app for the end-to-end tests of a captured invocation sent again
// (cmd/stepgate/typescript_e2e_test.go): each step appends a line to a file named after
// its function and run in STEPGATE_CAPTURE_DIR, so the test counts how often a step's
// body ran across processes. Each process is a new instance of the app, with an empty
// replay memory, as a new serverless instance or another replica is.
//
// With STEPGATE_CAPTURE_GATED=<name> it serves only function <name>, one step "charge"
// counted in <name>-<run id>; STEPGATE_CAPTURE_GATES=before and/or inside hold the
// function, before its step or in its step body, until `POST /gate/open` (the process's
// own path, outside /api/stepgate). Reaching a gate creates reached-<where>-<run id>.
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

const gates = new Set((process.env.STEPGATE_CAPTURE_GATES ?? "").split(",").filter(Boolean));
let open!: () => void;
const opened = new Promise<void>((resolve) => (open = resolve));
const gate = async (where: string, runId: string) => {
  if (!gates.has(where)) return;
  appendFileSync(join(dir, `reached-${where}-${runId}`), "");
  await opened;
};
const gatedName = process.env.STEPGATE_CAPTURE_GATED;
const gated = (name: string) =>
  createFunction({ name, invocationBackoff: { initial: "100ms", max: "200ms" } }, async ({ step, run }) => {
    await gate("before", run.id);
    return step.run("charge", async () => {
      appendFileSync(join(dir, `${name}-${run.id}`), "charge\n");
      await gate("inside", run.id);
      return "charge";
    });
  });

const handler = serveNode({
  functions: gatedName ? [gated(gatedName)] : [counted("charge"), counted("refund")],
  signingKeys: process.env.STEPGATE_PUBLIC_KEYS,
  basePath: "/api/stepgate",
  duplex: false, // these tests capture and resend request/response invocations, and their claims
});
const server = createServer((req, res) => {
  if (req.method === "POST" && req.url === "/gate/open") {
    open();
    res.writeHead(204).end();
    return;
  }
  handler(req, res);
});
server.listen(port, "127.0.0.1", () => console.log(`capture functions served at http://127.0.0.1:${port}/api/stepgate`));
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
