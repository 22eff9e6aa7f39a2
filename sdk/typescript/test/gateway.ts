// A stand-in for the gateway in unit tests, as the Go SDK's gatewaytest: a real HTTP
// checkpoint endpoint that journals entries per run (with the gateway's window rule), and
// a client that signs invocations with Ed25519 and drives a run through its suspensions.
// The end-to-end test (cmd/stepgate/typescript_e2e_test.go) uses the real gateway.
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { appendEntry } from "../src/memjournal.js";
import type { FetchHandler } from "../src/serve.js";
import type { Await, InvocationAnswer, InvocationRequest, JournalEntry, StreamWrite } from "../src/protocol.js";

export const TENANT = "acme";

/** A checkpoint hook: answers [code, body] instead of journaling, or undefined to journal. */
export type Hook = (runId: string, e: JournalEntry) => [number, string] | undefined;

export class Gateway {
  readonly publicKey: string;
  private readonly privateKey: KeyObject;
  private server!: Server;
  url = "";
  journals = new Map<string, JournalEntry[]>();
  /** Every checkpoint body received, in order. */
  checkpoints: JournalEntry[] = [];
  hook: Hook | undefined;
  /** The deadline invocations carry (InvocationRequest.deadline), if any. */
  deadline: (() => string) | undefined;
  /** Answers a sleep's checkpoint without its wake time, as a broken gateway would. */
  sleepAckWithoutUntil = false;
  /** Every stream write received, in order. */
  streamWrites: StreamWrite[] = [];
  /** A stream hook: answers [code, body] instead of writing, or undefined to write. */
  streamHook: ((runId: string, w: StreamWrite) => [number, string] | undefined) | undefined;
  /** Each run's streams (by `${runId} ${key}`): chunks in offset order, each with its place; closed. */
  streams = new Map<string, { chunks: { place: string; chunk: unknown }[]; closed: boolean }>();
  /**
   * Runs whose invocations no longer own them, or were claimed by another process:
   * checkpoint.url + "/current" answers 409 (checkpoints are still taken: a copy of an
   * invocation request checkpoints under the original's token).
   */
  stale = new Set<string>();
  /** How many times each run's invocations asked whether they own it. */
  currentChecks = new Map<string, number>();

  constructor() {
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    this.privateKey = privateKey;
    this.publicKey = publicKey.export({ format: "jwk" }).x!;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        const runId = decodeURIComponent(req.url!.split("/")[2] ?? "");
        const auth = req.headers.authorization;
        if (auth !== `Bearer token-${runId}`) {
          res.writeHead(401, { "Content-Type": "application/problem+json" }).end(JSON.stringify({ detail: "bad token" }));
          return;
        }
        if (req.url!.endsWith("/current")) {
          let nonce: unknown;
          try {
            nonce = (JSON.parse(Buffer.concat(chunks).toString()) as { nonce?: unknown }).nonce;
          } catch {
            // Not JSON: no nonce.
          }
          if (typeof nonce !== "string" || !/^[0-9a-f]{32}$/.test(nonce)) {
            res.writeHead(400, { "Content-Type": "application/problem+json" }).end(JSON.stringify({ detail: "nonce must be 32 lowercase hex digits (128 random bits)" }));
            return;
          }
          this.currentChecks.set(runId, (this.currentChecks.get(runId) ?? 0) + 1);
          if (this.stale.has(runId)) {
            res.writeHead(409, { "Content-Type": "application/problem+json" }).end(JSON.stringify({ type: "superseded", detail: "this invocation no longer owns the run: run no step" }));
          } else res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ run_id: runId }));
          return;
        }
        if (req.url!.endsWith("/stream")) {
          this.writeStream(runId, JSON.parse(Buffer.concat(chunks).toString()) as StreamWrite, res);
          return;
        }
        const e = JSON.parse(Buffer.concat(chunks).toString()) as JournalEntry;
        this.checkpoints.push(e);
        const hooked = this.hook?.(runId, e);
        if (hooked) {
          res.writeHead(hooked[0], { "Content-Type": "application/problem+json" }).end(hooked[1]);
          return;
        }
        const [code, problem] = this.append(runId, e);
        if (code !== 200) {
          res.writeHead(code).end(problem);
          return;
        }
        const j = this.journal(runId);
        const ack: Record<string, unknown> = { seq: e.seq };
        if (e.kind === "callback") ack.output = j.find((x) => x.seq === e.seq)!.output;
        if (e.kind === "sleep" && !this.sleepAckWithoutUntil) ack.until = j.find((x) => x.seq === e.seq)!.until;
        res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(ack));
      });
    });
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /**
   * Journals e in the run's journal as the gateway does, and answers 200, or the code and
   * problem of an entry it refuses (409 for another entry at its seq, 400 out of order).
   */
  append(runId: string, e: JournalEntry): [number, string] {
    return appendEntry(this.journal(runId), e, {
      now: Date.now(),
      callbackOutput: (c) => ({ url: `${this.url}/v1/callbacks/tok-${c.seq}`, token: `tok-${c.seq}`, expires_at: "2030-01-01T00:00:00Z" }),
    });
  }

  /** The gateway's stream write: chunks at places the stream holds are skipped (the first write wins). */
  private writeStream(runId: string, w: StreamWrite, res: import("node:http").ServerResponse) {
    this.streamWrites.push(w);
    const hooked = this.streamHook?.(runId, w);
    if (hooked) {
      res.writeHead(hooked[0], { "Content-Type": "application/problem+json" }).end(hooked[1]);
      return;
    }
    const k = `${runId} ${w.key}`;
    let s = this.streams.get(k);
    if (!s) this.streams.set(k, (s = { chunks: [], closed: false }));
    const fresh = w.chunks
      .map((chunk, i) => ({ place: `${w.seq}/${w.attempt ?? 0}/${(w.index ?? 0) + i}`, chunk }))
      .filter((c) => !s!.chunks.some((x) => x.place === c.place));
    if (s.closed && fresh.length > 0) {
      res.writeHead(409, { "Content-Type": "application/problem+json" }).end(JSON.stringify({ type: "stream_closed", detail: `stream ${w.key} is closed` }));
      return;
    }
    s.chunks.push(...fresh);
    if (w.close) s.closed = true;
    res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ key: w.key, length: s.chunks.length, closed: s.closed }));
  }

  /** The chunks of a run's stream, in order. */
  stream(runId: string, key: string): unknown[] {
    return (this.streams.get(`${runId} ${key}`)?.chunks ?? []).map((c) => c.chunk);
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  journal(runId: string): JournalEntry[] {
    let j = this.journals.get(runId);
    if (!j) this.journals.set(runId, (j = []));
    return j;
  }

  /**
   * The header that signs body for tenant at t (seconds), as a request to url (its path;
   * a URL or a path): a GET when body is empty (the manifest), else a POST.
   */
  sign(body: string, url: string, tenant = TENANT, t = Math.floor(Date.now() / 1000)): string {
    const method = body === "" ? "GET" : "POST";
    const path = new URL(url, "http://app.test").pathname;
    const msg = Buffer.from(`v2\n${t}\n${tenant}\n${method}\n${path}\n${body}`);
    const sig = sign(null, msg, this.privateKey).toString("base64url");
    return `v=2,t=${t},tenant=${encodeURIComponent(tenant)},ed25519=${sig}`;
  }

  /** A duplex claim's proof (docs/protocol.md, "The duplex mode"): method CLAIM over the nonce. */
  signClaim(runId: string, attempt: number, nonce: string, t = Math.floor(Date.now() / 1000)): string {
    const msg = Buffer.from(`v2\n${t}\n${TENANT}\nCLAIM\n/runs/${runId}/${attempt}\n${nonce}`);
    return `v=2,t=${t},tenant=${TENANT},ed25519=${sign(null, msg, this.privateKey).toString("base64url")}`;
  }

  request(runId: string, fn: string, input: unknown, extra: Partial<InvocationRequest> = {}): InvocationRequest {
    return {
      protocol: 1,
      run: { id: runId, function: fn, revision: 1, attempt: 1, input, created_at: new Date().toISOString() },
      identity: { subject: "ann", tenant: TENANT, roles: ["developer"], claims: { plan: "pro" } },
      journal: [...this.journal(runId)],
      checkpoint: { url: `${this.url}/checkpoint/${runId}`, token: `token-${runId}` },
      ...(this.deadline ? { deadline: this.deadline() } : {}),
      ...extra,
    };
  }

  /**
   * Sends one signed invocation to handler and returns the HTTP status and body, having
   * journaled the answer's steps as the gateway does before it applies the answer.
   */
  async invoke(handler: FetchHandler, appUrl: string, req: InvocationRequest, signal?: AbortSignal): Promise<{ status: number; body: any }> {
    const body = JSON.stringify(req);
    const resp = await handler(
      new Request(`${appUrl}/${req.run.function}`, {
        method: "POST",
        ...(signal ? { signal } : {}),
        headers: { "Content-Type": "application/json", "Stepgate-Signature": this.sign(body, `${appUrl}/${req.run.function}`) },
        body,
      }),
    );
    const answer = await resp.json();
    if (resp.status === 200) {
      for (const e of (answer as InvocationAnswer).steps ?? []) {
        const [code, problem] = this.append(req.run.id, e);
        if (code !== 200) throw new Error(`run ${req.run.id}: journal the answer's step ${e.seq}: ${code} ${problem}`);
      }
    }
    return { status: resp.status, body: answer };
  }

  /**
   * Drives a run to its end the way the gateway does, without waiting: sleeps end at once,
   * retries come back with the next attempt, a child run's outcome comes from children,
   * continues call again. Returns the last answer and the awaits met on the way.
   */
  async run(
    handler: FetchHandler,
    appUrl: string,
    runId: string,
    fn: string,
    input: unknown,
    opts: { children?: (aw: Await) => Partial<JournalEntry>; maxInvocations?: number } = {},
  ): Promise<{ answer: InvocationAnswer & { type?: string; message?: string }; status: number; awaits: Await[]; invocations: number }> {
    const attempts: Record<string, number> = {};
    const awaits: Await[] = [];
    for (let i = 1; i <= (opts.maxInvocations ?? 20); i++) {
      const { status, body } = await this.invoke(handler, appUrl, this.request(runId, fn, input, { step_attempts: { ...attempts } }));
      const answer = body as InvocationAnswer;
      if (status !== 200 || answer.status !== "suspended") return { answer: body, status, awaits, invocations: i };
      const aw = answer.await!;
      awaits.push(aw);
      const j = this.journal(runId); // the answer's steps are in it (invoke)
      switch (aw.type) {
        case "sleep":
          j.push({ seq: aw.seq, kind: "sleep", name: aw.name, until: new Date().toISOString() });
          break;
        case "retry":
          attempts[String(aw.seq)] = (aw.attempt ?? 1) + 1;
          break;
        case "invoke":
          j.push({ seq: aw.seq, kind: "invoke", name: aw.name, ...(opts.children?.(aw) ?? { output: null }) });
          break;
        case "invoke_all":
          // Each child at a seq of its own, named by the invoke_all, as the gateway journals them.
          (aw.calls ?? []).forEach((c, k) => {
            const child: Await = { type: "invoke", seq: aw.seq + k, name: aw.name, ...c };
            j.push({ seq: aw.seq + k, kind: "invoke", name: aw.name, ...(opts.children?.(child) ?? { output: null }) });
          });
          break;
        case "continue":
          break;
        default:
          throw new Error(`the test gateway does not drive ${aw.type}`);
      }
      j.sort((a, b) => a.seq - b.seq);
    }
    throw new Error("too many invocations");
  }
}
