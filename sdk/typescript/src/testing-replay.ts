// Replays a run exported from a gateway (`stepgate runs export`, RunExport) against the
// code of its function in this process, running no step body: the TypeScript side of Go's
// functionstest.Replay (functions/functionstest/replay.go), whose judgement it mirrors.
import type { StepgateFunction } from "./function.js";
import { q, type PostResult } from "./invocation.js";
import type { ErrorInfo, InvocationAnswer, InvocationRequest, JournalEntry, ReplayStep, RunExport, StreamWrite } from "./protocol.js";
import { serve, type FetchHandler } from "./serve.js";

export type { RunExport };

/** The format of a run export (RunExport) that replay reads. */
export const EXPORT_FORMAT = "stepgate.run/1";

/**
 * One journal entry, or what the code asked for at a seq: its kind and name. An outcome
 * is the StepRef of kind "completed" (its name the output, as compact JSON with sorted
 * keys, cut to 200 bytes) or "failed" (its name the error's type); an end the code would
 * make where the journal goes on has no name.
 */
export interface StepRef {
  kind: string;
  name: string;
  /** `step "charge"`, `completed with "shipped book"`, `completed`. */
  toString(): string;
}

/**
 * Where the code parts from the exported run: at seq the journal holds journal and the
 * code asked for asked. For a run that ended and replays its journal but not its end,
 * journal is the run's outcome and asked the code's: another outcome (at the seq after
 * the journal's last), or the step, entry or wait it would make instead (at its seq).
 */
export interface Divergence {
  seq: number;
  journal: StepRef;
  asked: StepRef;
  /** The SDK's own words, when it failed the run with nondeterminism. */
  message?: string;
  /** `seq 1: the journal holds step "reserve" but the code asks for step "charge"`. */
  toString(): string;
}

/** What the code would do after the exported journal, had the replay let it. */
export interface Next {
  /**
   * "step" (it would run a step the journal does not hold, step names it), "checkpoint"
   * (it would journal a new entry: an event, a message, a value, a patch...), "wait" (it
   * would suspend: a sleep, a wait for an event, a message or a callback, a child run),
   * "completed" or "failed" (it ends the run: as the run ended, for a run that ended).
   */
  kind: "step" | "checkpoint" | "wait" | "completed" | "failed";
  /** The seq of the new step, entry or wait; the seq after the journal's last for an end. */
  seq: number;
  /** For "step", "checkpoint" and "wait": its kind and name. */
  step?: StepRef;
  /** `would wait for sleep "cool off" at seq 3`, `would end completed`. */
  toString(): string;
}

/**
 * The outcome of a replay: clean when the code replays the whole journal (and, for a run
 * that ended, ends the same way), with next what it would do next; otherwise divergence
 * says where it parts from the run. answer is the function's answer to the replay's
 * (last) invocation.
 */
export type Replayed =
  | { clean: true; next: Next; divergence?: undefined; answer: InvocationAnswer; toString(): string }
  | { clean: false; divergence: Divergence; next?: undefined; answer: InvocationAnswer; toString(): string };

export interface ReplayOptions {
  /**
   * The function to replay the run on, by name: by default the only function given, else
   * the export's run.function.
   */
  function?: string;
}

/**
 * Thrown by replay at the first divergence of the code from the run; replayed says where.
 * Test runners report it as a failed assertion.
 */
export class ReplayDivergenceError extends Error {
  constructor(
    message: string,
    readonly replayed: Replayed & { clean: false },
  ) {
    super(message);
    this.name = "ReplayDivergenceError";
  }

  get divergence(): Divergence {
    return this.replayed.divergence;
  }
}

/**
 * Replays the run exported in x (a RunExport, or the path of its file, as
 * `stepgate runs export ID -o run.json` writes it) as replayExport does, for a test: it
 * throws a ReplayDivergenceError at the code's first divergence from the run, naming its
 * seq, the journal's entry there and what the code asks for, and otherwise returns the
 * clean replay, whose next says what the code would do next. An export it cannot read or
 * replay rejects with an Error too.
 */
export async function replay(
  fns: StepgateFunction<any, any> | StepgateFunction<any, any>[],
  x: RunExport | string,
  opts: ReplayOptions = {},
): Promise<Replayed & { clean: true }> {
  const exp = typeof x === "string" ? await readExport(x) : x;
  const r = await replayExport(fns, exp, opts);
  if (!r.clean) {
    const what = typeof x === "string" ? x : `run ${exp.run.id}`;
    throw new ReplayDivergenceError(`stepgate/testing: replay of ${what} (${pick(fns, exp, opts)}): the code diverges from the run at ${r.divergence}`, r);
  }
  return r;
}

/**
 * Replays run export x (a RunExport, or the path of its file: read with node:fs) against
 * its function among fns with no side effects, and returns where the code diverges from
 * the run or what it would do next; it rejects only for an export that cannot be read
 * (a format other than EXPORT_FORMAT included) or an invocation that cannot be made,
 * never for a divergence.
 *
 * It invokes the function in this process, as the gateway would, with the request made
 * from the export: run.id, revision, input, parent_id and created_at as they are,
 * run.attempt the run's invocations plus one (the next invocation, to which
 * step_attempts belong), identity, journal and step_attempts as they are, a checkpoint
 * of the harness's own, and replay_only, so the SDK replays the journaled entries
 * without running them and answers status replayed: replay.next (the first step, entry
 * or wait past the journal) is next, replay.divergence the divergence. Where the code
 * would end, the function is invoked once more, without replay_only, for its output or
 * error type (it runs nothing: every step it takes is journaled): an end other than the
 * run's is the divergence, as is a run that ended where the code would go on. As a
 * backstop the harness's checkpoint refuses (409 superseded) every claim, checkpoint and
 * stream write, so no step body runs even then. A run suspended in a sleep has that
 * sleep in its journal (the gateway journals it with its wake time): it is left out of
 * the replay, and the code must ask for that sleep at its seq, else it diverges there.
 */
export async function replayExport(
  fns: StepgateFunction<any, any> | StepgateFunction<any, any>[],
  x: RunExport | string,
  opts: ReplayOptions = {},
): Promise<Replayed> {
  const exp = typeof x === "string" ? await readExport(x) : x;
  if (typeof exp !== "object" || exp === null || exp.format !== EXPORT_FORMAT) {
    const format = typeof exp === "object" && exp !== null ? exp.format : undefined;
    throw new Error(`stepgate/testing: the export's format is ${q(String(format ?? ""))}, not ${q(EXPORT_FORMAT)}`);
  }
  if (!exp.run?.id || !Array.isArray(exp.journal)) throw new Error("stepgate/testing: the export has no run.id or no journal");
  const list = Array.isArray(fns) ? fns : [fns];
  const fn = pick(fns, exp, opts);
  if (!list.some((f) => f.name === fn)) throw new Error(`stepgate/testing: no function ${q(fn)} among the functions given`);
  const { journal, pending } = pendingWait(exp);
  const gw = new RefusingGateway(exp.run.id);
  const handler = serve({ functions: list, insecureSkipVerify: true, post: (url, headers, body) => gw.post(url, headers, body), onError: () => {} });

  let ans = await invoke(handler, gw, fn, exp, journal, true);
  if (ans.status === "replayed" && ans.replay) {
    const n = ans.replay.next;
    if (!n || n.kind !== "end") return checkPending(judgeReplayed(exp, ans), pending, ans);
    // The code would end: its output or error type is known only from an ordinary
    // invocation, which runs nothing (the code took only journaled steps).
    ans = await invoke(handler, gw, fn, exp, journal, false);
  }
  return checkPending(judge(exp, journal, ans, gw.refused), pending, ans);
}

/** The function to replay x on: opts.function, the only one of fns, else the run's. */
function pick(fns: StepgateFunction<any, any> | StepgateFunction<any, any>[], x: RunExport, opts: ReplayOptions): string {
  if (opts.function) return opts.function;
  const list = Array.isArray(fns) ? fns : [fns];
  if (list.length === 1) return list[0]!.name;
  return x.run?.function ?? "";
}

/** The export in file, parsed (not checked). */
async function readExport(file: string): Promise<RunExport> {
  // Imported here, so that the testing entry loads where there is no node:fs.
  const { readFile } = await import("node:fs/promises");
  const raw = await readFile(file, "utf8");
  try {
    return JSON.parse(raw) as RunExport;
  } catch (e) {
    throw new Error(`stepgate/testing: decode the export ${file}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** The start of the replay's checkpoint URLs: CHECKPOINT_PREFIX + run id + "/checkpoint". */
const CHECKPOINT_PREFIX = "stepgate-replay://runs/";

/** Invokes fn through handler with x's run and journal (replay only if replayOnly), and returns its answer. */
async function invoke(handler: FetchHandler, gw: RefusingGateway, fn: string, x: RunExport, journal: JournalEntry[], replayOnly: boolean): Promise<InvocationAnswer> {
  const run = x.run;
  const req: InvocationRequest = {
    protocol: 1,
    run: { id: run.id, function: fn, revision: run.revision, attempt: run.invocations + 1, input: run.input ?? null, created_at: run.created_at },
    identity: run.identity,
    journal,
    checkpoint: { url: `${CHECKPOINT_PREFIX}${run.id}/checkpoint`, token: gw.token },
  };
  if (run.parent_id) req.run.parent_id = run.parent_id;
  if (x.step_attempts) req.step_attempts = x.step_attempts;
  if (replayOnly) req.replay_only = true;
  const resp = await handler(
    new Request(`http://stepgate.replay/${encodeURIComponent(fn)}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req) }),
  );
  const text = await resp.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`stepgate/testing: invoke ${fn}: ${resp.status} ${text.trim()}`);
  }
  if (resp.status === 200) return body as InvocationAnswer;
  const info = body as ErrorInfo;
  if (!info?.type) throw new Error(`stepgate/testing: invoke ${fn}: ${resp.status} ${text.trim()}`);
  return { status: "failed", error: info };
}

/** A StepRef; toString is not enumerable, so that refs compare as plain objects. */
function stepRef(kind: string, name = ""): StepRef {
  return withString({ kind, name }, function (this: StepRef) {
    if (this.name === "") return this.kind;
    if (this.kind === "completed" || this.kind === "failed") return `${this.kind} with ${this.name}`;
    return `${this.kind} ${q(this.name)}`;
  });
}

function withString<T extends object>(o: T, f: (this: T) => string): T {
  Object.defineProperty(o, "toString", { value: f, enumerable: false, writable: true, configurable: true });
  return o;
}

function divergence(seq: number, journal: StepRef, asked: StepRef, message?: string): Divergence {
  const d: Omit<Divergence, "toString"> = { seq, journal, asked };
  if (message !== undefined) d.message = message;
  return withString(d as Divergence, function () {
    return `seq ${this.seq}: the journal holds ${this.journal} but the code asks for ${this.asked}`;
  });
}

function next(kind: Next["kind"], seq: number, step?: StepRef): Next {
  const n: Omit<Next, "toString"> = { kind, seq };
  if (step) n.step = step;
  return withString(n as Next, function () {
    switch (this.kind) {
      case "step":
        return this.step?.name ? `would run ${this.step} at seq ${this.seq}` : `would run a new step after seq ${this.seq - 1}`;
      case "checkpoint":
        return `would journal ${this.step} at seq ${this.seq}`;
      case "wait":
        return `would wait for ${this.step} at seq ${this.seq}`;
    }
    return `would end ${this.kind}`;
  });
}

function clean(n: Next, answer: InvocationAnswer): Replayed {
  return withString({ clean: true as const, next: n, answer }, function () {
    return `replays cleanly; ${this.next}`;
  });
}

function diverged(d: Divergence, answer: InvocationAnswer): Replayed {
  return withString({ clean: false as const, divergence: d, answer }, function () {
    return `diverges at ${this.divergence}`;
  });
}

/**
 * The journal to replay x with, without the entry of the sleep a suspended run waits for
 * if the journal holds it (the gateway journals a sleep with its wake time when the run
 * suspends on it, and the SDK takes a journaled sleep as over), and that wait.
 */
function pendingWait(x: RunExport): { journal: JournalEntry[]; pending?: Next } {
  const journal: JournalEntry[] = [];
  let pending: Next | undefined;
  const aw = x.run.awaiting;
  for (const e of x.journal) {
    if (x.run.status === "suspended" && aw?.kind === "sleep" && e.seq === aw.seq && e.kind === "sleep" && e.name === aw.name) {
      pending = next("wait", e.seq, stepRef(e.kind, e.name));
      continue;
    }
    journal.push(e);
  }
  return pending ? { journal, pending } : { journal };
}

/** r, made from answer ans, as a divergence at the sleep the run waits for, if pending, unless the code would wait for that sleep where the run does. */
function checkPending(r: Replayed, pending: Next | undefined, ans: InvocationAnswer): Replayed {
  if (!pending || !r.clean) return r;
  const n = r.next;
  if (n.seq === pending.seq && n.step?.kind === pending.step?.kind && n.step?.name === pending.step?.name) return r;
  const asked = n.kind === "completed" || n.kind === "failed" ? outcome(ans) : (n.step ?? stepRef(n.kind));
  return diverged(divergence(pending.seq, pending.step!, asked), ans);
}

/** The entry kinds the code suspends on. */
const WAIT_KINDS = new Set(["sleep", "wait_event", "receive", "invoke", "wait_any", "await_callback"]);

/** The StepRef of what a replay-only answer names: an end as a StepRef of kind "completed" or "failed" with no name. */
function replayStep(s: ReplayStep): StepRef {
  return s.kind === "end" ? stepRef(s.name) : stepRef(s.kind, s.name);
}

/** The Replayed of replay-only answer ans (status replayed) to the replay of x, when it names a divergence or a next that is no end. */
function judgeReplayed(x: RunExport, ans: InvocationAnswer): Replayed {
  const d = ans.replay?.divergence;
  if (d) return diverged(divergence(d.seq, replayStep(d.journal), replayStep(d.asked)), ans);
  const rn = ans.replay?.next;
  if (!rn) return diverged(divergence(0, stepRef(""), stepRef(ans.status)), ans);
  const kind = rn.kind === "step" ? "step" : WAIT_KINDS.has(rn.kind) ? "wait" : "checkpoint";
  const n = next(kind, rn.seq, replayStep(rn));
  const ended = exportOutcome(x);
  // The run ended there; the code would go on.
  if (ended) return diverged(divergence(n.seq, ended, n.step!), ans);
  return clean(n, ans);
}

/** The SDK's message for a journaled entry the code does not ask for (Invocation.next). */
const NONDETERMINISM = /step (\d+): code asks for (\S+) "((?:[^"\\]|\\.)*)" but the journal holds (\S+) "((?:[^"\\]|\\.)*)"/;

/** The Replayed of answer ans to an ordinary (not replay-only) invocation replaying x with journal, given the first call the harness refused, if any. */
function judge(x: RunExport, journal: JournalEntry[], ans: InvocationAnswer, refused: Next | undefined): Replayed {
  let after = 1;
  for (const e of journal) after = Math.max(after, e.seq + 1);
  const ended = exportOutcome(x);
  if (ans.status === "failed" && ans.error?.type === "nondeterminism") {
    const m = NONDETERMINISM.exec(ans.error.message);
    const d = m
      ? divergence(Number(m[1]), stepRef(m[4]!, unquote(m[5]!)), stepRef(m[2]!, unquote(m[3]!)), ans.error.message)
      : divergence(0, stepRef(""), stepRef(""), ans.error.message);
    return diverged(d, ans);
  }
  let n: Next | undefined = refused && refused.kind === "step" ? next("step", after, stepRef("step")) : refused;
  if (!n && ans.status === "suspended") {
    const aw = ans.await;
    n = aw && aw.type !== "continue" ? next("wait", aw.seq, stepRef(aw.type, aw.name)) : next("step", after, stepRef("step"));
  }
  if (n) {
    // The run ended there; the code would go on.
    if (ended) return diverged(divergence(n.seq, ended, n.step!), ans);
    return clean(n, ans);
  }
  if (ans.status === "completed" || ans.status === "failed") {
    const got = outcome(ans);
    if (ended && (got.kind !== ended.kind || !sameEnd(ans, x))) return diverged(divergence(after, ended, got), ans);
    return clean(next(ans.status, after), ans);
  }
  return diverged(divergence(after, stepRef(""), stepRef(ans.status)), ans);
}

function unquote(s: string): string {
  try {
    return JSON.parse(`"${s}"`) as string;
  } catch {
    return s;
  }
}

/** The end answer ans makes: completed with its output, or failed with its error's type. */
function outcome(ans: InvocationAnswer): StepRef {
  return ans.status === "completed" ? stepRef("completed", shown(ans.output)) : stepRef("failed", ans.error?.type ?? "");
}

/** How the exported run ended, if it did. */
function exportOutcome(x: RunExport): StepRef | undefined {
  if (x.run.status === "completed") return stepRef("completed", shown(x.run.output));
  if (x.run.status === "failed") return stepRef("failed", x.run.error?.type ?? "");
  return undefined;
}

/** The largest output an outcome's StepRef shows, in bytes. */
const MAX_SHOWN = 200;

/** out as compact JSON with sorted keys, cut to MAX_SHOWN bytes (ending "…" when cut). */
function shown(out: unknown): string {
  const s = canonical(out);
  const bytes = new TextEncoder().encode(s);
  if (bytes.length <= MAX_SHOWN) return s;
  return new TextDecoder().decode(bytes.slice(0, MAX_SHOWN)).replace(/\uFFFD+$/, "") + "…";
}

/** v as JSON with its objects' keys sorted (null when absent), so that equal values encode the same whatever their order. */
function canonical(v: unknown): string {
  return JSON.stringify(v ?? null, (_k, val: unknown) => {
    if (val === null || typeof val !== "object" || Array.isArray(val)) return val;
    const o = val as Record<string, unknown>;
    return Object.fromEntries(Object.keys(o).sort().map((k) => [k, o[k]]));
  });
}

/** Whether the answer's output (or error type) is the run's. */
function sameEnd(ans: InvocationAnswer, x: RunExport): boolean {
  if (ans.status !== "completed") return ans.error !== undefined && x.run.error !== undefined && ans.error.type === x.run.error.type;
  return canonical(ans.output) === canonical(x.run.output);
}

/**
 * The replay's checkpoint endpoint: it refuses (409 superseded) every claim, checkpoint
 * and stream write the SDK makes, keeping the first as what the code would do next.
 */
class RefusingGateway {
  readonly token: string;
  refused: Next | undefined;

  constructor(private readonly runId: string) {
    this.token = `replay-${runId}`;
  }

  async post(url: string, headers: Record<string, string>, body: string): Promise<PostResult> {
    const answer = (status: number, detail: string): PostResult => ({
      status,
      body: JSON.stringify(status === 409 ? { type: "superseded", title: "Conflict", status, detail } : { title: "Error", status, detail }),
      retryAfter: null,
    });
    if (headers.Authorization !== `Bearer ${this.token}`) return answer(401, "bad invocation token");
    const base = `${CHECKPOINT_PREFIX}${this.runId}/checkpoint`;
    let n: Next;
    if (url === base + "/current") n = next("step", 0);
    else if (url === base) {
      const e = JSON.parse(body) as JournalEntry;
      n = next("checkpoint", e.seq, stepRef(e.kind, e.name));
    } else if (url === base + "/stream") {
      const w = JSON.parse(body) as StreamWrite;
      n = next("checkpoint", w.seq, stepRef("stream", w.key));
    } else return answer(404, "no such endpoint in a replay");
    this.refused ??= n;
    return answer(409, "stepgate/testing: a replay runs nothing new");
  }
}
