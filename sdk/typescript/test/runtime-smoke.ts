// The Fetch handler on another runtime than Node (Bun or Deno), with Web APIs only: the
// app and a checkpoint endpoint are served by the runtime's own HTTP server, invocations
// are signed with Web Crypto's Ed25519 and sent with fetch. test.sh runs it with Bun
// when Bun installs from npm:
//
//   bun dist/test/runtime-smoke.js        (or: deno run -A dist/test/runtime-smoke.js)
//
// It prints "N passed, M failed" and exits non-zero on a failure.
import { createFunction, serve } from "../src/index.js";
import type { InvocationRequest, JournalEntry, StreamWrite } from "../src/protocol.js";

type Serve = (handler: (r: Request) => Response | Promise<Response>) => { url: string; stop: () => void };
const g = globalThis as unknown as {
  Bun?: { serve(o: { port: number; hostname: string; fetch: (r: Request) => Response | Promise<Response> }): { port: number; stop(force?: boolean): void }; version: string };
  Deno?: { serve(o: { port: number; hostname: string; onListen?: () => void }, h: (r: Request) => Response | Promise<Response>): { addr: { port: number }; shutdown(): Promise<void> }; version: { deno: string }; exit(code: number): never };
  process?: { exit(code: number): never };
};
// What the runtime warns about (Deno.serve warns once a handler has read request.signal,
// which the SDK reads only when it must wait): the smoke test expects nothing.
const warnings: unknown[][] = [];
const warn = console.warn;
console.warn = (...args: unknown[]) => {
  warnings.push(args);
  warn(...args);
};

let runtime: string;
let listen: Serve;
if (g.Bun) {
  runtime = `bun ${g.Bun.version}`;
  listen = (fetch) => {
    const s = g.Bun!.serve({ port: 0, hostname: "127.0.0.1", fetch });
    return { url: `http://127.0.0.1:${s.port}`, stop: () => s.stop(true) };
  };
} else if (g.Deno) {
  runtime = `deno ${g.Deno.version.deno}`;
  listen = (fetch) => {
    const s = g.Deno!.serve({ port: 0, hostname: "127.0.0.1", onListen: () => {} }, fetch);
    return { url: `http://127.0.0.1:${s.addr.port}`, stop: () => void s.shutdown() };
  };
} else {
  throw new Error("runtime-smoke runs on Bun or Deno (node has its own tests: npm test)");
}

const b64url = (b: ArrayBuffer) => btoa(String.fromCharCode(...new Uint8Array(b))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const keys = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as { publicKey: Parameters<typeof crypto.subtle.exportKey>[1]; privateKey: Parameters<typeof crypto.subtle.sign>[1] };
const publicKey = b64url(await crypto.subtle.exportKey("raw", keys.publicKey));
/** Signs body as a request to path (a GET when body is empty, the manifest's; else a POST). */
async function sign(body: string, path: string, tenant = "acme") {
  const t = Math.floor(Date.now() / 1000);
  const method = body === "" ? "GET" : "POST";
  const msg = `v2\n${t}\n${tenant}\n${method}\n${path}\n${body}`;
  const sig = await crypto.subtle.sign({ name: "Ed25519" }, keys.privateKey, new TextEncoder().encode(msg));
  return `v=2,t=${t},tenant=${encodeURIComponent(tenant)},ed25519=${b64url(sig)}`;
}

// The checkpoint endpoint: journals entries in order.
const journal: JournalEntry[] = [];
const streamed: StreamWrite[] = [];
const gateway = listen(async (r) => {
  // Before an invocation's first step the journal does not hold: it owns the run.
  if (new URL(r.url).pathname.endsWith("/current")) return Response.json({ run_id: "run" });
  if (new URL(r.url).pathname.endsWith("/stream")) {
    const w = (await r.json()) as StreamWrite;
    streamed.push(w);
    return Response.json({ key: w.key, length: streamed.length, closed: w.close === true });
  }
  const e = (await r.json()) as JournalEntry;
  if (r.headers.get("Authorization") !== "Bearer tok") return new Response("{}", { status: 401 });
  if (!journal.some((x) => x.seq === e.seq)) journal.push(e);
  return Response.json({ seq: e.seq });
});

const calls: string[] = [];
const tour = createFunction<{ item: string }>({ name: "tour" }, async ({ input, step, identity }) => {
  const a = await step.run("reserve", () => (calls.push("reserve"), `o-${input.item}`));
  await step.sleep("cool-off", "1s");
  const b = await step.run("ship", () => (calls.push("ship"), `T-${a}`));
  return { b, who: identity.subject };
});
// A stream written inside a step, and a step started inside a step's function: both need
// the runtime's AsyncLocalStorage, which the SDK finds through process.getBuiltinModule.
const features = createFunction({ name: "features" }, async ({ step }) =>
  step.run("outer", async () => {
    await step.stream("s").write("in-step");
    try {
      await step.run("inner", () => 1);
      return "not detected";
    } catch (e) {
      return (e as Error).message;
    }
  }),
);
const app = listen(serve({ functions: [tour, features], signingKeys: publicKey }));

let passed = 0;
let failed = 0;
function check(what: string, ok: boolean, detail?: unknown) {
  if (ok) passed++;
  else {
    failed++;
    console.log(`FAIL ${what}: ${JSON.stringify(detail)}`);
  }
}

async function invoke(extra: Partial<InvocationRequest> = {}, signature?: string, fn = "tour") {
  const req: InvocationRequest = {
    protocol: 1,
    run: { id: "00000000-0000-4000-8000-000000000001", function: "tour", revision: 1, attempt: 1, input: { item: "book" }, created_at: new Date().toISOString() },
    identity: { subject: "ann", tenant: "acme", roles: [] },
    journal: [...journal],
    checkpoint: { url: `${gateway.url}/checkpoint`, token: "tok" },
    ...extra,
  };
  const body = JSON.stringify(req);
  const resp = await fetch(`${app.url}/${fn}`, { method: "POST", body, headers: { "Stepgate-Signature": signature ?? (await sign(body, new URL(`${app.url}/${fn}`).pathname)) } });
  return { status: resp.status, body: (await resp.json()) as any };
}

try {
  const m = await fetch(app.url, { headers: { "Stepgate-Signature": await sign("", new URL(app.url).pathname) } });
  check("manifest", m.status === 200 && ((await m.json()) as any).functions.some((f: { name: string }) => f.name === "tour"));
  let r = await invoke();
  check("first invocation sleeps", r.body.status === "suspended" && r.body.await.type === "sleep" && r.body.await.seq === 2, r);
  // Checkpoints are eager: the step before the sleep is journaled before the suspension.
  check("the step before a sleep is checkpointed", !r.body.steps?.length && journal.map((e) => e.name).join(",") === "reserve", { r, journal });
  journal.push({ seq: 2, kind: "sleep", name: "cool-off" });
  r = await invoke();
  check("second invocation completes", r.body.status === "completed" && r.body.output.b === "T-o-book" && r.body.output.who === "ann", r);
  check("the last step is checkpointed before the answer", !r.body.steps?.length, r);
  check("journal", journal.map((e) => e.name).join(",") === "reserve,cool-off,ship", journal);
  check("each step ran once", calls.join(",") === "reserve,ship", calls);
  r = await invoke({}, (await sign("{}", "/tour")).replace(/ed25519=.*/, "ed25519=" + "A".repeat(86)));
  check("forged signature refused", r.status === 401 && r.body.type === "signature", r);
  r = await invoke({ run: { id: "00000000-0000-4000-8000-000000000002", function: "features", revision: 1, attempt: 1, input: null, created_at: new Date().toISOString() }, journal: [] }, undefined, "features");
  check("a nested step is refused", r.body.status === "completed" && r.body.output === `step "inner", inside the function of step 1: step: a step cannot start inside another step's function`, r);
  check("a stream chunk is placed in its step", streamed.length === 1 && streamed[0]!.seq === 1 && streamed[0]!.attempt === 1, streamed);
  // A body over maxBodyBytes is a 413 read only up to the bound: the runtime's Request
  // stream is counted and cancelled, not buffered whole.
  const max = 1 << 20;
  let pulled = 0;
  const big = new ReadableStream<Uint8Array>({
    pull(c) {
      if (pulled >= 64 << 20) return c.close();
      pulled += 64 << 10;
      c.enqueue(new Uint8Array(64 << 10));
    },
  });
  const tooLarge = await serve({ functions: [tour], insecureSkipVerify: true, maxBodyBytes: max })(
    new Request(`${app.url}/tour`, { method: "POST", body: big, duplex: "half" } as RequestInit),
  );
  check("a body over maxBodyBytes is refused 413, read only up to the bound", tooLarge.status === 413 && pulled <= max + (256 << 10), { status: tooLarge.status, pulled });
} catch (e) {
  check("no exception", false, String(e));
} finally {
  app.stop();
  gateway.stop();
}
check("no warning", warnings.length === 0, warnings.map((w) => w.map(String).join(" ")));
console.log(`runtime-smoke on ${runtime}`);
console.log(`${passed} passed, ${failed} failed`);
(g.process ?? g.Deno)!.exit(failed > 0 ? 1 : 0);
