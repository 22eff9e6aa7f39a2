// The conformance scenarios for waits (protocol/conformance/scenarios, which pass against
// a real gateway: protocol/conformance/README.md) run against the test harness: each
// scenario's functions are played on the wire by a scripted raw handler (rawHarness), as
// the Go runners play them with conformance.NewFunction.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import type { Poster } from "../src/invocation.js";
import type { ErrorInfo, InvocationAnswer, InvocationRequest, JournalEntry } from "../src/protocol.js";
import type { Duration } from "../src/duration.js";
import * as testing from "../src/testing.js";

/**
 * The scenarios this harness does not pass, by name, with what it does instead of what
 * the gateway does. Each is still run and must still fail: a harness that comes to agree
 * with the gateway fails the test until its entry goes.
 */
const KNOWN_DISAGREEMENTS: Record<string, string> = {};

const DIR = new URL("../../../../protocol/conformance/scenarios/", import.meta.url);

type Pattern = Record<string, unknown>;

interface Invocation {
  request?: Pattern;
  checkpoints?: JournalEntry[];
  answer: InvocationAnswer;
}

interface Delivery {
  event?: { name: string; data?: unknown };
  message?: { topic: string; data?: unknown };
  request?: { name: string; data?: unknown };
  resolve_callback?: { name: string; data?: unknown };
  reject_callback?: { name: string; type?: string; message: string };
  wait?: string;
  resumes?: boolean;
}

interface Scenario {
  name: string;
  description: string;
  start: string;
  input?: unknown;
  functions: Record<string, Invocation[]>;
  deliveries?: Delivery[];
  expect: { status: string; invocations?: number; entries?: Pattern[]; output?: unknown; error?: Pattern };
}

function load(): Scenario[] {
  return readdirSync(DIR)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => ({ ...JSON.parse(readFileSync(new URL(f, DIR), "utf8")), name: f.slice(0, -".json".length) }) as Scenario);
}

const ANY = "$any";

/**
 * Where got first differs from the pattern want ("" when it matches): JSON compared
 * exactly (RFC 3339 times by instant), "$any" matching any value there.
 */
function diff(want: unknown, got: unknown, present: boolean, at: string): string {
  const where = at || ".";
  if (want === ANY) return present ? "" : where;
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) return where;
    for (let i = 0; i < want.length; i++) {
      const d = diff(want[i], got[i], true, `${at}[${i}]`);
      if (d) return d;
    }
    return "";
  }
  if (want !== null && typeof want === "object") {
    if (got === null || typeof got !== "object" || Array.isArray(got)) return where;
    const w = want as Record<string, unknown>;
    const g = got as Record<string, unknown>;
    for (const k of Object.keys(w).sort()) {
      const d = diff(w[k], g[k] ?? null, k in g && g[k] !== undefined, `${at}.${k}`);
      if (d) return d;
    }
    for (const k of Object.keys(g).sort()) if (!(k in w) && g[k] !== undefined) return `${at}.${k} (not in the pattern)`;
    return "";
  }
  if (typeof want === "string" && typeof got === "string" && want !== got) return sameInstant(want, got) ? "" : where;
  return want === (got ?? null) ? "" : where;
}

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

/** Whether a and b are RFC 3339 times of the same instant. */
function sameInstant(a: string, b: string): boolean {
  return RFC3339.test(a) && RFC3339.test(b) && Date.parse(a) === Date.parse(b);
}

function match(want: unknown, got: unknown): string | undefined {
  const d = diff(want, got ?? null, got !== undefined, "");
  return d ? `${d}: want ${JSON.stringify(want)}, got ${JSON.stringify(got ?? null)}` : undefined;
}

/** The fields the pattern names, each compared with match. */
function matchFields(want: Pattern, got: Record<string, unknown>, what: string): string | undefined {
  const errs = Object.keys(want)
    .sort()
    .flatMap((k) => {
      const e = match(want[k], got[k]);
      return e ? [`${k}: ${e}`] : [];
    });
  return errs.length ? `${what}: ${errs.join("; ")}` : undefined;
}

function seqs(journal: JournalEntry[]): string {
  return journal.length ? journal.map((e) => `${e.seq} ${e.kind} ${JSON.stringify(e.name)}`).join(", ") : "no entry";
}

function matchEntries(want: Pattern[], journal: JournalEntry[]): string[] {
  return want.flatMap((w) => {
    const e = journal.find((x) => x.seq === w.seq);
    if (!e) return [`no entry at seq ${w.seq} (the journal holds ${seqs(journal)})`];
    const err = matchFields(w, e as unknown as Record<string, unknown>, `entry at seq ${e.seq}`);
    return err ? [err] : [];
  });
}

function matchRequest(want: Pattern, req: InvocationRequest): string[] {
  const { journal, ...rest } = want;
  const errs: string[] = [];
  if (journal !== undefined) {
    const pats = journal as Pattern[];
    if (pats.length !== req.journal.length) errs.push(`journal: want ${pats.length} entries, got ${seqs(req.journal)}`);
    else pats.forEach((p, i) => {
      const e = matchFields(p, req.journal[i] as unknown as Record<string, unknown>, `journal: entry ${i}`);
      if (e) errs.push(e);
    });
  }
  const e = matchFields(rest, req as unknown as Record<string, unknown>, "request");
  if (e) errs.push(e);
  return errs;
}

/** The scenario's functions on the wire, as conformance.NewFunction plays them in Go. */
class ScriptedFunction {
  readonly errors: string[] = [];
  private readonly runs = new Map<string, { requests: InvocationRequest[]; callbacks: Map<string, string> }>();

  constructor(private readonly sc: Scenario) {}

  invocations(runId: string): number {
    return this.runs.get(runId)?.requests.length ?? 0;
  }

  lastRequest(runId: string): InvocationRequest | undefined {
    return this.runs.get(runId)?.requests.at(-1);
  }

  readonly handler: testing.RawHandler = async (request, post) => {
    const name = new URL(request.url).pathname.split("/").pop() ?? "";
    const script = this.sc.functions[name];
    if (!script) {
      this.errors.push(`an invocation of ${JSON.stringify(name)}, which the scenario does not have`);
      return new Response("no such function", { status: 404 });
    }
    const req = (await request.json()) as InvocationRequest;
    if (req.run.function !== name) this.errors.push(`function ${name}: an invocation of run.function ${JSON.stringify(req.run.function)}`);
    let rs = this.runs.get(req.run.id);
    if (!rs) this.runs.set(req.run.id, (rs = { requests: [], callbacks: new Map() }));
    rs.requests.push(req);
    const n = rs.requests.length;
    let answer = defaultAnswer(script, req.journal);
    const inv = script[n - 1];
    if (inv) {
      if (inv.request) for (const e of matchRequest(inv.request, req)) this.errors.push(`function ${name}, invocation ${n}: ${e}`);
      for (const e of inv.checkpoints ?? []) await this.checkpoint(post, req, rs.callbacks, e);
      answer = inv.answer;
    }
    return new Response(JSON.stringify(answer), { status: 200, headers: { "Content-Type": "application/json" } });
  };

  private async checkpoint(post: Poster, req: InvocationRequest, callbacks: Map<string, string>, e: JournalEntry) {
    const resp = await post(req.checkpoint.url, { "Content-Type": "application/json", Authorization: `Bearer ${req.checkpoint.token}` }, JSON.stringify(e));
    if (resp.status !== 200) {
      this.errors.push(`checkpoint of ${e.kind} ${JSON.stringify(e.name)} at seq ${e.seq}: HTTP ${resp.status} ${resp.body}`);
      return;
    }
    if (e.kind !== "callback") return;
    const token = (JSON.parse(resp.body) as { output?: { token?: string } }).output?.token;
    if (!token) this.errors.push(`checkpoint of callback ${JSON.stringify(e.name)}: the acknowledgement ${resp.body} has no output.token`);
    else callbacks.set(e.name, token);
  }
}

/** Past its script a function completes, with the entry at its last await's seq as output. */
function defaultAnswer(script: Invocation[], journal: JournalEntry[]): InvocationAnswer {
  const aw = [...script].reverse().find((i) => i.answer.await)?.answer.await;
  const e = aw && journal.find((x) => x.seq === aw.seq);
  if (!e) return { status: "completed", output: null };
  const out: Record<string, unknown> = { seq: e.seq, kind: e.kind, name: e.name };
  if (e.output !== undefined) out.output = e.output;
  if (e.error !== undefined) out.error = e.error;
  return { status: "completed", output: out };
}

/** Plays the scenario in a harness and returns how it differs from its expectations. */
async function play(sc: Scenario): Promise<string[]> {
  const fn = new ScriptedFunction(sc);
  const h = testing.rawHarness(fn.handler, Object.keys(sc.functions));
  const run = h.start(sc.input ?? null, { function: sc.start });
  await run.result();
  for (const [i, d] of (sc.deliveries ?? []).entries()) {
    const before = fn.invocations(run.id);
    if (d.event) await h.sendEvent(d.event.name, d.event.data ?? null);
    else if (d.message) await run.sendMessage(d.message.topic, d.message.data ?? null);
    else if (d.request) {
      // The scripted functions never reply: the harness rejects the request for it.
      await run.sendRequest(d.request.name, d.request.data ?? null).catch((e: Error) => {
        if (!/did not reply/.test(e.message)) throw e;
      });
    } else if (d.resolve_callback) await run.resolveCallback(d.resolve_callback.name, d.resolve_callback.data ?? null);
    else if (d.reject_callback) {
      const r = d.reject_callback;
      await run.resolveCallback(r.name, undefined, { type: r.type || "rejected", message: r.message });
    } else if (d.wait) await h.advance(d.wait as Duration);
    const o = await run.result();
    const resumed = fn.invocations(run.id) > before;
    if (resumed !== (d.resumes ?? false)) {
      return [...fn.errors, `deliveries[${i}] (${Object.keys(d).find((k) => k !== "resumes")}): the run resumed: ${resumed}; the scenario says ${d.resumes ?? false} (it is ${o.status})`];
    }
  }
  const o = await run.result();
  const x = sc.expect;
  const errs = [...fn.errors];
  const error = o.status === "failed" ? (o.error as ErrorInfo) : undefined;
  if (o.status !== x.status) errs.push(`status: want ${x.status}, got ${o.status}${error ? ` (${error.type}: ${error.message})` : ""}`);
  const n = fn.invocations(run.id);
  if (x.invocations && n !== x.invocations) errs.push(`invocations of the started run: want ${x.invocations}, got ${n}`);
  if (x.entries) {
    const req = fn.lastRequest(run.id);
    if (!req) errs.push("the started run's function was never invoked");
    else errs.push(...matchEntries(x.entries, req.journal).map((e) => `the journal of the last invocation request (invocation ${n}): ${e}`));
  }
  if (x.output !== undefined) {
    const e = match(x.output, o.status === "completed" ? o.output : undefined);
    if (e) errs.push(`output: ${e}`);
  }
  if (x.error) {
    const e = matchFields(x.error, (error ?? {}) as unknown as Record<string, unknown>, "error");
    if (e) errs.push(e);
  }
  return errs;
}

const scenarios = load();

test("the conformance scenarios are there", () => {
  assert.ok(scenarios.length >= 15, `${scenarios.length} scenarios in ${DIR.pathname}`);
  for (const name of Object.keys(KNOWN_DISAGREEMENTS)) assert.ok(scenarios.some((s) => s.name === name), `KNOWN_DISAGREEMENTS names ${name}, which is no scenario`);
});

for (const sc of scenarios) {
  test(`conformance: ${sc.name}`, async (t) => {
    let errs: string[];
    try {
      errs = await play(sc);
    } catch (e) {
      errs = [`the harness threw: ${e instanceof Error ? e.stack ?? e.message : String(e)}`];
    }
    const why = KNOWN_DISAGREEMENTS[sc.name];
    if (why !== undefined) {
      assert.ok(errs.length > 0, `the harness passes now: remove ${sc.name} from KNOWN_DISAGREEMENTS (${why})`);
      t.diagnostic(`a known disagreement with the gateway: ${why}\n${errs.join("\n")}`);
      return;
    }
    assert.deepEqual(errs, [], `${errs.join("\n")}\n(the scenario: ${sc.description})`);
  });
}
