// A Node server for the example functions:
//
//   STEPGATE_PUBLIC_KEYS=... PORT=3000 node dist/examples/node-server.js
//   stepgate apps sync http://127.0.0.1:3000/api/stepgate
import { createServer } from "node:http";
import { serveNode } from "../src/node.js";
import { all } from "./functions.js";

const listener = serveNode({
  functions: all,
  signingKeys: process.env.STEPGATE_PUBLIC_KEYS, // as `stepgate keys` prints them
  basePath: "/api/stepgate",
});

const port = Number(process.env.PORT ?? 3000);
const server = createServer(listener);
server.listen(port, process.env.HOST ?? "127.0.0.1", () => {
  console.log(`stepgate functions served at http://127.0.0.1:${port}/api/stepgate`);
});
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    server.close();
    server.closeAllConnections();
  });
}
