// A Cloudflare-Workers-style module: the same functions behind a Fetch handler. The same
// shape serves on Deno (Deno.serve(handler)), Bun (Bun.serve({ fetch: handler })) and
// Vercel (export const POST = handler, GET = handler). Set STEPGATE_PUBLIC_KEYS as a secret:
//
//   wrangler secret put STEPGATE_PUBLIC_KEYS
//   stepgate apps sync https://<your worker>/
import { serve, type FetchHandler } from "../src/index.js";
import { all } from "./functions.js";

let handler: FetchHandler | undefined;

export default {
  fetch(request: Request, env: { STEPGATE_PUBLIC_KEYS?: string }): Promise<Response> {
    handler ??= serve({ functions: all, signingKeys: env.STEPGATE_PUBLIC_KEYS });
    return handler(request);
  },
};
