import { BodyTooLarge, readBody } from "./body.js";
import { CONTENT_TYPE_FRAMES, Duplex, isFrames, LineReader } from "./duplex.js";
import { InputError, messageOf, NonRetryableError, StepError } from "./errors.js";
import type { Context, RunInfo, StepgateFunction } from "./function.js";
import { fetchPoster, Invocation, type Poster, type Stop } from "./invocation.js";
import type { ErrorInfo, InvocationAnswer, InvocationRequest, Manifest } from "./protocol.js";
import { checkKeys, importKeys, ReplayCache, SIGNATURE_HEADER, SignatureError, verifySignature, type VerifyKeys } from "./signature.js";
import { IncompleteCompensation, Step } from "./step.js";
import { checkGatewayVersion, PROTOCOL_HEADER, PROTOCOL_VERSION, SDK_NAME } from "./version.js";

/** A Fetch API handler: what Deno, Bun, Cloudflare Workers and Vercel serve. */
export type FetchHandler = (request: Request) => Promise<Response>;

export interface ServeOptions {
  /** The functions the app serves. */
  functions: StepgateFunction<any, any>[];
  /**
   * Your tenant's Ed25519 public keys, as `stepgate keys` prints them
   * (STEPGATE_PUBLIC_KEYS: base64url, comma-separated, or an array). A request whose
   * signature verifies with any of them is accepted; during a key rotation give both.
   */
  signingKeys?: string | string[];
  /** HMAC secrets (`stepgate keys secrets`), the weaker v1 scheme; prefer signingKeys. */
  hmacSecrets?: string | string[];
  /** When set, requests signed for any other tenant are refused. */
  tenant?: string;
  /** Accept requests whatever their signature: for a test of the function alone, never where the app can be reached. */
  insecureSkipVerify?: boolean;
  /**
   * The path the app is served at (e.g. "/api/stepgate"): GET <basePath> answers the
   * manifest and POST <basePath>/<name> invokes a function. Without it, the last
   * segment of the path names the function, and any other GET answers the manifest.
   */
  basePath?: string;
  /**
   * Bounds a request's body; larger ones get 413 (type "too_large"), answered as soon as
   * the count passes the bound (or the Content-Length does), without reading or buffering
   * the rest. Default 32 MiB.
   */
  maxBodyBytes?: number;
  /** Accepted signatures remembered to refuse replays. Default 100,000. */
  replayCacheSize?: number;
  /** Makes the checkpoint calls. Default: the platform's fetch. */
  fetch?: typeof fetch;
  /** Makes the checkpoint calls instead of fetch (the Node adapter's leaner client). */
  post?: Poster;
  /**
   * Serve the duplex mode too (docs/protocol.md, "The duplex mode"), and list it in the
   * manifest: for a server that streams a response while it reads the request, as
   * serveNode does (its default). A Fetch platform that buffers bodies (Cloudflare
   * Workers, AWS Lambda) must not set it.
   */
  duplex?: boolean;
  /** Told of invocations that answer HTTP 500. Default: console.warn. */
  onError?: (info: { runId: string; function: string; attempt: number; type: string; message: string }) => void;
}

// Every answer says the protocol version this SDK speaks.
const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", [PROTOCOL_HEADER]: PROTOCOL_VERSION, ...headers } });
const problem = (status: number, type: string, message: string, headers?: Record<string, string>) =>
  json(status, { type, message } satisfies ErrorInfo, headers);

/**
 * Returns a Fetch handler serving functions and their manifest, for `stepgate apps sync
 * <app url>`:
 *
 *     GET  <app url>          the manifest (signed like an invocation)
 *     POST <app url>/<name>   one invocation of the function name (function protocol 1)
 *
 * Both verify the gateway's Stepgate-Signature (Ed25519, with Web Crypto) with
 * signingKeys; an invocation accepted before is refused as a replay. A signing key that
 * is not one (not 32 bytes of base64url) throws here. An app with no keys
 * refuses every request unless insecureSkipVerify says otherwise. Errors other than the
 * function's own outcome are JSON bodies {type, message}: 401 (type "signature"), 400
 * ("protocol_version": the request's Stepgate-Protocol header names a gateway of another
 * major protocol version, or is not a version; the message names both versions), 400
 * ("malformed"), 404, 405 and 413.
 *
 * The app speaks the function protocol's version PROTOCOL_VERSION: its manifest says it
 * (`protocol_version`, with `sdk` "stepgate-ts/<SDK_VERSION>"), and so does every answer,
 * in the header Stepgate-Protocol. A request without that header is served.
 */
export function serve(opts: ServeOptions): FetchHandler {
  const byName = new Map<string, StepgateFunction<any, any>>();
  for (const f of opts.functions) {
    if (byName.has(f.name)) throw new Error(`stepgate: function ${JSON.stringify(f.name)} given twice`);
    byName.set(f.name, f);
  }
  const verify = !opts.insecureSkipVerify;
  let keys: Promise<VerifyKeys> | undefined;
  if (verify) {
    checkKeys(opts.signingKeys, opts.hmacSecrets); // a key that is not one throws now, as configuring is setup
    keys = importKeys(opts.signingKeys, opts.hmacSecrets);
    keys.catch(() => {}); // reported on each request
  }
  const replays = new ReplayCache(opts.replayCacheSize);
  const maxBody = opts.maxBodyBytes ?? 32 << 20;
  const post = opts.post ?? fetchPoster(opts.fetch ?? ((...args: Parameters<typeof fetch>) => fetch(...args)));
  const onError = opts.onError ?? ((i) => console.warn(`stepgate: invocation of ${i.function} (run ${i.runId}, attempt ${i.attempt}) failed: ${i.type}: ${i.message}`));
  const base = opts.basePath?.replace(/\/+$/, "");

  return async (request) => {
    const url = new URL(request.url);
    let name: string;
    if (base !== undefined) {
      if (url.pathname !== base && !url.pathname.startsWith(base + "/")) return problem(404, "not_found", `no route ${url.pathname}`);
      name = url.pathname.slice(base.length).replace(/^\/+/, "");
    } else {
      const last = url.pathname.split("/").pop() ?? "";
      name = byName.has(last) ? last : "";
    }
    let fn: StepgateFunction<any, any> | undefined;
    if (name === "") {
      if (request.method !== "GET" && request.method !== "HEAD") {
        return problem(405, "method", "the manifest answers GET", { Allow: "GET, HEAD" });
      }
    } else {
      fn = byName.get(name);
      if (!fn) return problem(404, "not_found", `no function ${JSON.stringify(name)}`);
      if (request.method !== "POST") return problem(405, "method", "functions answer POST", { Allow: "POST" });
    }

    // A duplex invocation's body is the invocation on its first line, then the gateway's
    // acknowledgements.
    const duplex = fn !== undefined && opts.duplex === true && isFrames(request.headers.get("Content-Type"));
    let acks: LineReader | undefined;
    let body: Uint8Array<ArrayBuffer>;
    try {
      if (duplex && request.body) {
        acks = new LineReader(request.body.getReader());
        const line = await acks.next(maxBody);
        body = new Uint8Array(line ?? new Uint8Array(0));
      } else {
        body = await readBody(request, maxBody);
      }
    } catch (e) {
      if (e instanceof BodyTooLarge) return problem(413, "too_large", e.message);
      return problem(400, "malformed", "read body: " + messageOf(e));
    }

    let tenant: string | undefined;
    if (keys) {
      try {
        const k = await keys.catch((e) => {
          throw new SignatureError(messageOf(e));
        });
        if (k.ed25519.length + k.hmac.length === 0) {
          throw new SignatureError("signature: this app has no keys to verify the gateway's requests: set signingKeys (STEPGATE_PUBLIC_KEYS, as `stepgate keys` prints them)");
        }
        // The signature binds the method and the path the gateway requested, so a request
        // signed for another function (another path) is refused.
        const method = request.method === "HEAD" ? "GET" : request.method;
        const { parsed, message } = await verifySignature(request.headers.get(SIGNATURE_HEADER), { method, path: url.pathname, body }, k);
        // The manifest changes nothing, so a repeat of its request is harmless.
        if (fn && !(await replays.accept(message, parsed.t))) {
          throw new SignatureError("signature: already accepted once; a replayed request is refused");
        }
        tenant = parsed.tenant;
        if (opts.tenant !== undefined && tenant !== opts.tenant) {
          throw new SignatureError(`signature: the request is for tenant ${JSON.stringify(tenant)}; this app serves ${JSON.stringify(opts.tenant)}`);
        }
      } catch (e) {
        return problem(401, "signature", messageOf(e));
      }
    }

    if (!fn) return json(200, manifest(byName, url.pathname, opts.duplex === true));
    // Before the body is decoded: another major's body may not read as this one's.
    const gateway = request.headers.get(PROTOCOL_HEADER);
    if (gateway) {
      const refused = checkGatewayVersion(gateway);
      if (refused) return problem(400, "protocol_version", refused);
    }

    let req: InvocationRequest;
    try {
      req = JSON.parse(new TextDecoder().decode(body));
    } catch (e) {
      return problem(400, "malformed", "decode invocation: " + messageOf(e));
    }
    const bad = invalid(req);
    if (bad) return problem(400, "malformed", "invalid invocation: " + bad);
    if (tenant !== undefined && req.identity.tenant !== tenant) {
      return problem(401, "signature", `signature: the request is signed for tenant ${JSON.stringify(tenant)}, but its run's identity is of tenant ${JSON.stringify(req.identity.tenant)}`);
    }
    if (keys && req.run.function !== fn.name) {
      // The signed body names the function: another function's request is refused, even
      // at a path the signature covers.
      return problem(
        401,
        "signature",
        `signature: the request is for function ${JSON.stringify(req.run.function)}; this path serves ${JSON.stringify(fn.name)} (register it under the name it is served as: stepgate apps sync does)`,
      );
    }
    if ((req.mode === "duplex") !== duplex) {
      // The mode is signed, its transport is not: a copy of a duplex invocation sent
      // whole would otherwise run with no claim the gateway answers.
      return problem(400, "malformed", `invalid invocation: its mode is ${req.mode ?? "request"} but it came ${duplex ? "as frames (application/x-ndjson)" : "whole"}`);
    }
    if (duplex && acks) {
      const verifyKeys = keys;
      const run = req.run;
      const identityTenant = req.identity.tenant;
      const verifyProof = verifyKeys
        ? async (nonce: string, proof: string) => {
            const { parsed } = await verifySignature(proof, { method: "CLAIM", path: `/runs/${run.id}/${run.attempt}`, body: new TextEncoder().encode(nonce) }, await verifyKeys);
            if (parsed.tenant !== identityTenant) throw new Error(`signed for tenant ${JSON.stringify(parsed.tenant)}, not ${JSON.stringify(identityTenant)}`);
          }
        : undefined;
      const frames = new TransformStream<Uint8Array, Uint8Array>();
      const d = new Duplex(frames.writable.getWriter(), acks, verifyProof);
      const signal = AbortSignal.any([request.signal, d.signal]);
      const f = fn;
      void (async () => {
        const [code, answer] = await invoke(f, req, () => signal, d.poster());
        if (code !== 200) {
          const e = answer as ErrorInfo;
          onError({ runId: req.run.id, function: req.run.function, attempt: req.run.attempt, type: e.type, message: e.message });
        }
        await d.answer(code, answer);
      })();
      return new Response(frames.readable, { status: 200, headers: { "Content-Type": CONTENT_TYPE_FRAMES, [PROTOCOL_HEADER]: PROTOCOL_VERSION } });
    }
    const [code, answer] = await invoke(fn, req, () => request.signal, post);
    if (code !== 200) {
      const e = answer as ErrorInfo;
      onError({ runId: req.run.id, function: req.run.function, attempt: req.run.attempt, type: e.type, message: e.message });
    }
    return json(code, answer);
  };
}

/** The manifest, with each function's path relative to the app URL at appPath. */
function manifest(byName: Map<string, StepgateFunction<any, any>>, appPath: string, duplex: boolean): Manifest {
  // The gateway resolves each path against the app URL, as a browser resolves a link:
  // under /api/stepgate, "stepgate/hello" is /api/stepgate/hello.
  const dir = appPath.endsWith("/") ? "" : (appPath.split("/").pop() ?? "") + "/";
  // The SDK answers replay-only invocations (Invocation.replayOnly).
  const m: Manifest = { protocol: 1, protocol_version: PROTOCOL_VERSION, sdk: SDK_NAME, replay_only: true, functions: [] };
  for (const name of [...byName.keys()].sort()) {
    const f = byName.get(name)!;
    const config = duplex ? { ...f.config, modes: ["request" as const, "duplex" as const] } : f.config;
    m.functions.push(Object.keys(config).length > 0 ? { name, path: dir + name, config } : { name, path: dir + name });
  }
  return m;
}

function invalid(req: InvocationRequest): string {
  if (typeof req !== "object" || req === null) return "not an object";
  if (req.protocol !== 1) return `protocol ${JSON.stringify(req.protocol)} is not supported (want 1)`;
  if (!req.run?.id) return "run.id is missing";
  if (!req.checkpoint?.url || !req.checkpoint?.token) return "checkpoint.url or checkpoint.token is missing";
  if (!req.identity || typeof req.identity.tenant !== "string") return "identity is missing";
  if (!Array.isArray(req.journal)) return "journal is missing";
  // Refused rather than read as false, which would run steps the gateway asked not to.
  if (req.replay_only !== undefined && typeof req.replay_only !== "boolean") return `replay_only ${JSON.stringify(req.replay_only)} is not a boolean`;
  return "";
}

/** Runs fn for req and returns the HTTP status and body to answer. */
async function invoke(
  fn: StepgateFunction<any, any>,
  req: InvocationRequest,
  signal: () => AbortSignal | undefined,
  post: Poster,
): Promise<[number, InvocationAnswer | ErrorInfo]> {
  const st = new Invocation(req, signal, post);
  if (fn.budgetMs > 0) st.setBudget(fn.budgetMs);
  if (fn.sleepMaxMs > 0) st.setSleepInProcess(fn.sleepMaxMs);
  st.lazy = fn.lazyCheckpoints;
  try {
    return await withPending(st, await call(fn, st));
  } finally {
    st.end();
  }
}

/**
 * Journals the step the function finished last without a checkpoint (with lazy
 * checkpoints: see Invocation.defer) with the answer: first in its steps, journaled in
 * the transaction that applies it. An HTTP 500 answer journals nothing, so the step is
 * checkpointed first, and the retried invocation replays it rather than running it again.
 */
async function withPending(st: Invocation, [code, body]: [number, InvocationAnswer | ErrorInfo]): Promise<[number, InvocationAnswer | ErrorInfo]> {
  const e = st.takePending();
  if (!e) return [code, body];
  if (code === 200) {
    const answer = body as InvocationAnswer;
    return [code, { ...answer, steps: [e, ...(answer.steps ?? [])] }];
  }
  await st.checkpoint(e); // when it fails too, the retry runs the step again
  return [code, body];
}

/** Runs fn on st and returns the HTTP status and body to answer, but for the step st holds (withPending). */
async function call(fn: StepgateFunction<any, any>, st: Invocation): Promise<[number, InvocationAnswer | ErrorInfo]> {
  const req = st.req;
  const id = req.identity;
  const run: RunInfo = {
    id: req.run.id, function: req.run.function, revision: req.run.revision, attempt: req.run.attempt,
    createdAt: new Date(req.run.created_at),
  };
  if (req.run.parent_id) run.parentId = req.run.parent_id;

  const step = new Step(st);
  // How the code ends: replay-only, the replayed answer naming its end (Invocation.replayEnd).
  const end = (a: InvocationAnswer & { status: "completed" | "failed" }): [number, InvocationAnswer] =>
    st.replayOnly ? [200, { status: "replayed", replay: st.replayEnd(a.status) }] : [200, a];
  type Outcome = { ok: true; out: unknown } | { ok: false; err: unknown };
  const user: Promise<Outcome> = (async () => {
    let input: unknown = req.run.input ?? null;
    if (fn.schema) {
      const r = await fn.schema["~standard"].validate(input);
      if (r.issues) {
        throw new InputError(
          "the input does not match the function's schema: " +
            r.issues.map((i) => (i.path?.length ? i.path.map((p) => String(typeof p === "object" ? p.key : p)).join(".") + ": " : "") + i.message).join("; "),
        );
      }
      input = r.value;
    }
    const ctx: Context<unknown> = {
      input, step, run, signal: st.controller.signal,
      identity: { subject: id.subject, tenant: id.tenant, roles: id.roles ?? [], claims: id.claims ?? {} },
    };
    return fn.handler(ctx);
  })().then(
    (out) => ({ ok: true, out }),
    (err) => ({ ok: false, err }),
  );
  const outcome = await Promise.race([user, st.stopped.then(() => undefined)]);
  // Steps still running in parallel finish (and are journaled) before the answer; one of
  // them may stop the invocation after the function returned.
  await st.drain();
  const stop = st.stoppedWith;
  if (stop) return answerStop(st, stop);
  const o = outcome!;
  if (o.ok) {
    let output: unknown;
    try {
      const s = JSON.stringify(o.out);
      output = s === undefined ? null : JSON.parse(s);
    } catch (e) {
      return end({ status: "failed", error: { type: "output", message: "encode output: " + messageOf(e), retryable: false } });
    }
    return end({ status: "completed", output });
  }
  const err = o.err;
  let type: string | undefined;
  if (err instanceof StepError) type = err.type;
  else if (err instanceof InputError) type = "input";
  else if (err instanceof NonRetryableError) type = "non_retryable";
  if (type) {
    // The run fails for good: undo what it did first (step.compensate).
    let message = messageOf(err);
    const undone = await Promise.race([
      step.runCompensations().then(() => ({ ok: true as const }), (e: unknown) => ({ ok: false as const, e })),
      st.stopped.then(() => undefined),
    ]);
    await st.drain();
    const stop = st.stoppedWith;
    if (stop) return answerStop(st, stop);
    if (undone && !undone.ok) {
      if (!(undone.e instanceof IncompleteCompensation)) return [500, { type: "error", message: "compensation: " + messageOf(undone.e) }];
      message += ` (${undone.e.message})`;
    }
    return end({ status: "failed", error: { type, message, retryable: false } });
  }
  return [500, { type: "error", message: messageOf(err) }];
}

function answerStop(st: Invocation, stop: Stop): [number, InvocationAnswer | ErrorInfo] {
  if (stop.error) return [500, stop.error];
  const answer = { ...stop.answer! };
  if (answer.await) {
    let aw = answer.await;
    if (aw.type === "retry") {
      // Steps run in parallel: the lowest one waiting for its retry, as Go's step.All.
      const low = st.lowestRetry();
      if (low && low.seq < aw.seq) aw = low;
    }
    aw = { ...aw };
    const w = st.window(aw.seq);
    if (w > 1) aw.window = w;
    answer.await = aw;
  }
  return [200, answer];
}
