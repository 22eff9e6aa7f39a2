import { createServer } from "node:http";
import { serveNode } from "@stepgate/sdk/node";
import { functions } from "./functions.js";

// The gateway signs every request it sends here; the app checks the signature with the
// gateway's public keys (`npm run gateway` prints them: copy them into .env).
const signingKeys = process.env.STEPGATE_PUBLIC_KEYS;
if (!signingKeys) {
  console.warn("STEPGATE_PUBLIC_KEYS is empty: the app refuses the gateway's requests until you set it in .env");
}

const port = Number(process.env.PORT ?? 3000);
createServer(serveNode({ functions, signingKeys })).listen(port, "127.0.0.1", () => {
  console.log(`functions served at http://127.0.0.1:${port}/ (register them: npm run sync)`);
});
