// A run of the test harness (testing.ts): its journal, its invocations, what it waits on
// and what meets it (deliveries, the virtual clock, child runs).
import { toMs } from "./duration.js";
import type { PostResult } from "./invocation.js";
import { appendEntry } from "./memjournal.js";
import type { Await, ErrorInfo, InvocationRequest, JournalEntry, StreamWrite, WireIdentity } from "./protocol.js";
import { REQUEST_TOPIC_PREFIX } from "./step.js";
import type { Harness } from "./testing.js";

/** How a run stands once the harness can drive it no further. */
export type Outcome =
  | { status: "completed"; output: unknown }
  | { status: "failed"; error: ErrorInfo }
  /** Waiting for what the test must deliver (an event, a message, a callback, a request) or for the clock (h.advance). */
  | { status: "suspended"; await: Await };

const DEFAULT_WAIT_TIMEOUT = "24h";
const DEFAULT_CALLBACK_TIMEOUT = "168h";
/** The start of the harness's checkpoint URLs: URL_PREFIX + run id + "/checkpoint". */
export const URL_PREFIX = "stepgate-test://runs/";

/** A child run's outcome, or the run of it. */
export type ChildOutcome = { done: { output?: unknown; error?: ErrorInfo } } | { run: TestRun };

/** A message in a run's mailbox. */
export interface Mail {
  id: string;
  topic: string;
  data: unknown;
  identity: WireIdentity;
  source_run_id?: string;
  sent_at: string;
}

/** An event sent to a run. */
export interface Ev {
  id: string;
  name: string;
  data: unknown;
  identity: WireIdentity;
  created_at: string;
}

/** What a suspended run waits on. */
interface Waiting {
  aw: Await;
  /** When it falls due (a sleep's end, a wait's timeout), in ms of the virtual clock. */
  due?: number;
  /** How many events the run had been sent when the invocation that waits started: later ones match it. */
  since: number;
  /** invoke, invoke_all: each child's outcome once it has one. */
  children?: (ChildOutcome | undefined)[];
}

/** A run in a harness. */
export class TestRun {
  /** The stream chunks the run wrote, by stream key. */
  readonly streams = new Map<string, unknown[]>();
  /** The invocation token: a new one each invocation. @internal */
  token = "";
  private readonly entries: JournalEntry[] = [];
  private attempt = 1;
  private failures = 0;
  private stepAttempts: Record<string, number> = {};
  private state: "ready" | "suspended" | "completed" | "failed" = "ready";
  private outcome: Outcome | undefined;
  private waiting: Waiting | undefined;
  private readonly mailbox: Mail[] = [];
  private readonly inbox: Ev[] = [];
  private readonly resolutions = new Map<number, { data?: unknown; error?: ErrorInfo; resolver: "token"; resolved_at: string }>();
  /** The ids of the events the run's waits received: a look-back does not take one again. */
  private readonly gotEvents = new Set<string>();
  /** The journal's next seq when the last invocation began. */
  private began = 1;
  private crashAt: number | undefined;
  private crashed = false;
  private invocations = 0;

  /** @internal Made by Harness.start. */
  constructor(
    private readonly h: Harness,
    readonly id: string,
    readonly fn: string,
    readonly input: unknown,
    private readonly createdAt: Date,
    readonly parentId?: string,
  ) {}

  /** The run's journal: its entries in seq order (a copy). */
  get journal(): JournalEntry[] {
    return this.entries.map((e) => ({ ...e }));
  }

  /** Whether the run has completed or failed. */
  get finished(): boolean {
    return this.state === "completed" || this.state === "failed";
  }

  /**
   * Drives the run (and the harness's other runs) until it completes, fails, or
   * suspends on something the test must deliver or on the clock, and returns how it stands.
   */
  result(): Promise<Outcome> {
    return this.h.serial(async () => {
      await this.h.pump();
      return this.stands();
    });
  }

  /**
   * Makes the invocation that journals seq stop right after it is journaled, as if its
   * process died there; the next invocation replays the journal (steps up to seq do not
   * run again). For steps journaled by a checkpoint (the default; not lazy checkpoints).
   */
  crashAfter(seq: number): this {
    this.crashAt = seq;
    return this;
  }

  /**
   * Sends the run (only) an event name with data, as a client's POST /v1/events would: it
   * meets a wait_event that matches (an event sent before the invocation that waits
   * started matches only a look-back, since); drives the run and returns how it stands.
   */
  sendEvent(name: string, data?: unknown): Promise<Outcome> {
    return this.h.serial(async () => {
      this.receiveEvent({ id: crypto.randomUUID(), name, data: data ?? null, identity: this.h.starter, created_at: new Date(this.h.clockMs()).toISOString() });
      await this.h.pump();
      return this.stands();
    });
  }

  /**
   * Sends the run a message of topic with data: it goes to the run's mailbox, for
   * step.receive; drives the run and returns how it stands. Rejects when the run has finished.
   */
  sendMessage(topic: string, data?: unknown): Promise<Outcome> {
    return this.h.serial(async () => {
      this.checkOpen(`message ${JSON.stringify(topic)}`);
      this.deliver({ id: crypto.randomUUID(), topic, data: data ?? null, identity: this.h.starter, sent_at: new Date(this.h.clockMs()).toISOString() });
      await this.h.pump();
      return this.stands();
    });
  }

  /**
   * Resolves the run's latest callback named name with data (or rejects it with error);
   * throws when the run has made no callback of that name.
   */
  resolveCallback(name: string, data?: unknown, error?: ErrorInfo): Promise<Outcome> {
    return this.h.serial(async () => {
      const cb = [...this.entries].reverse().find((e) => e.kind === "callback" && e.name === name);
      if (!cb) throw new Error(`stepgate/testing: run ${this.id} has made no callback ${JSON.stringify(name)}`);
      if (this.resolutions.has(cb.seq)) throw new Error(`stepgate/testing: callback ${JSON.stringify(name)} (seq ${cb.seq}) is resolved already`);
      // As the gateway journals a resolution through the callback's URL (its token).
      const by = { resolver: "token" as const, resolved_at: gatewayTime(this.h.clockMs()) };
      this.resolutions.set(cb.seq, error ? { error, ...by } : { data: data ?? null, ...by });
      await this.h.pump();
      return this.stands();
    });
  }

  /**
   * Sends the run a request called name with data (as a client's POST
   * /v1/runs/{id}/requests), drives it, and returns the run's reply (step.reply); a
   * step.replyError rejects with an Error carrying its type. Rejects when the run stops
   * without replying, or has finished.
   */
  sendRequest(name: string, data?: unknown): Promise<unknown> {
    return this.h.serial(async () => {
      this.checkOpen(`request ${JSON.stringify(name)}`);
      const id = crypto.randomUUID();
      this.deliver({ id, topic: REQUEST_TOPIC_PREFIX + name, data: data ?? null, identity: this.h.starter, sent_at: new Date(this.h.clockMs()).toISOString() });
      await this.h.pump();
      const reply = this.entries.find((e) => e.kind === "reply" && e.name === id);
      if (!reply) throw new Error(`stepgate/testing: run ${this.id} did not reply to request ${JSON.stringify(name)}: it is ${describe(this.stands())}`);
      if (reply.error) throw Object.assign(new Error(reply.error.message), { type: reply.error.type });
      return reply.output ?? null;
    });
  }

  /** Throws when the run has finished: it takes no message nor request (the gateway's 409, type finished). */
  private checkOpen(what: string) {
    if (this.finished) throw new Error(`stepgate/testing: run ${this.id} has finished (${describe(this.stands())}): it takes no ${what}`);
  }

  /** How the run stands now. */
  private stands(): Outcome {
    if (this.outcome) return this.outcome;
    if (this.waiting) return { status: "suspended", await: this.waiting.aw };
    throw new Error(`stepgate/testing: run ${this.id} has not run yet`);
  }

  /** @internal Keeps ev for the run's waits. */
  receiveEvent(ev: Ev) {
    this.inbox.push(ev);
  }

  /** @internal Puts m in the mailbox. */
  deliver(m: Mail) {
    this.mailbox.push(m);
  }

  /** @internal When what the run waits on falls due (virtual clock), if it does. */
  dueAt(): number | undefined {
    return this.state === "suspended" ? this.waiting?.due : undefined;
  }

  /** @internal Makes one move: an invocation, or the resumption of a wait that is met. Says whether it moved. */
  async move(): Promise<boolean> {
    if (this.state === "suspended") {
      const es = this.met();
      if (!es) return false;
      for (const e of es) this.put(e);
      this.waiting = undefined;
      this.state = "ready";
      return true;
    }
    if (this.state !== "ready") return false;
    await this.invokeOnce();
    return true;
  }

  /** The entries that resume the wait, when it is met now. */
  private met(): JournalEntry[] | undefined {
    const w = this.waiting!;
    const aw = w.aw;
    const now = this.h.clockMs();
    const timedOut = w.due !== undefined && now >= w.due;
    switch (aw.type) {
      case "sleep":
        return timedOut ? [{ seq: aw.seq, kind: "sleep", name: aw.name, until: gatewayTime(w.due!) }] : undefined;
      case "invoke":
      case "invoke_all": {
        const outs = w.children!.map((c) => this.childDone(c));
        if (outs.some((o) => o === undefined)) return undefined;
        // As the gateway journals a child's error: not retryable.
        return outs.map((o, k) => ({ seq: aw.seq + k, kind: "invoke" as const, name: aw.name, ...(o!.error ? { error: { ...o!.error, retryable: false } } : o!) }));
      }
      case "wait_any": {
        const of = aw.of ?? [];
        for (let i = 0; i < of.length; i++) {
          const got = this.take(of[i]!, w.since);
          if (got !== undefined) return [{ seq: aw.seq, kind: "wait_any", name: aw.name, output: { index: i, kind: of[i]!.type, output: got } }];
        }
        return timedOut ? [{ seq: aw.seq, kind: "wait_any", name: aw.name, output: { timed_out: true } }] : undefined;
      }
      case "wait_event":
      case "receive":
      case "await_callback":
      case "await_run": {
        const got = this.take(aw, w.since);
        if (got !== undefined) return [{ seq: aw.seq, kind: aw.type, name: aw.name, output: got }];
        return timedOut ? [{ seq: aw.seq, kind: aw.type, name: aw.name, output: { timed_out: true } }] : undefined;
      }
      default:
        return undefined;
    }
  }

  /** A child's journaled outcome, once it has one. */
  private childDone(c: ChildOutcome | undefined): { output?: unknown; error?: ErrorInfo } | undefined {
    if (!c) return undefined;
    if ("done" in c) return c.done;
    const o = c.run.outcome;
    if (!o || o.status === "suspended") return undefined;
    return o.status === "completed" ? { output: o.output } : { error: o.error };
  }

  /** The output that meets the wait aw (an alternative of a wait_any, or alone) now, taking a message from the mailbox; or undefined. */
  private take(aw: Await, since: number): unknown {
    switch (aw.type) {
      case "wait_event": {
        const after = aw.since ? new Date(aw.since).getTime() : undefined;
        // As on the gateway, not an event another wait of the run received.
        const ev = this.inbox.find(
          (e, i) =>
            e.name === aw.event &&
            !this.gotEvents.has(e.id) &&
            (aw.since_start || (after !== undefined ? new Date(e.created_at).getTime() >= after : i >= since)) &&
            matches(e, aw.match ?? {}),
        );
        if (!ev) return undefined;
        this.gotEvents.add(ev.id);
        return { event: ev };
      }
      case "receive": {
        const i = this.mailbox.findIndex((m) => m.topic === aw.topic);
        if (i < 0) return undefined;
        const [m] = this.mailbox.splice(i, 1);
        return { message: m };
      }
      case "await_callback": {
        const r = this.resolutions.get(aw.callback_seq ?? -1);
        return r ? { ...r } : undefined;
      }
      case "await_run": {
        // As the gateway: the awaited run's end, or not_found for a run the harness does not have.
        const id = (aw.run_id ?? "").toLowerCase();
        const run = this.h.runOf(id);
        if (!run) return { run: { id, error: { type: "not_found", message: `no run ${id} in the tenant` } } };
        const o = run.outcome;
        if (!o || o.status === "suspended") return undefined;
        return o.status === "completed"
          ? { run: { id, status: "completed", output: o.output ?? null } }
          : { run: { id, status: "failed", error: o.error } };
      }
      default:
        return undefined;
    }
  }

  private put(e: JournalEntry) {
    const [code, problem] = this.append(e);
    if (code !== 200) throw new Error(`stepgate/testing: run ${this.id}: journal step ${e.seq}: ${code} ${problem}`);
  }

  /** Journals e as the gateway does (appendEntry), a sleep's until written as the gateway writes a time. */
  private append(e: JournalEntry): [number, string] {
    const res = appendEntry(this.entries, e, { now: this.h.clockMs(), callbackOutput: (c) => this.callbackOutput(c) });
    const stored = this.entries.find((x) => x.seq === e.seq);
    if (res[0] === 200 && stored?.kind === "sleep" && stored.until !== undefined) stored.until = gatewayTime(Date.parse(stored.until));
    return res;
  }

  private callbackOutput(e: JournalEntry): unknown {
    const timeout = (e.output as { timeout?: string } | undefined)?.timeout ?? DEFAULT_CALLBACK_TIMEOUT;
    return {
      url: `${URL_PREFIX}${this.id}/callbacks/${e.seq}`,
      token: `tok-${this.id}-${e.seq}`,
      expires_at: new Date(this.h.clockMs() + toMs(timeout, "callback timeout")).toISOString(),
    };
  }

  /** @internal The checkpoint of e: journaled, then answered. */
  checkpoint(e: JournalEntry): PostResult {
    const [code, problem] = this.append(e);
    if (code !== 200) return { status: code, body: problem, retryAfter: null };
    const stored = this.entries.find((x) => x.seq === e.seq)!;
    const ack: Record<string, unknown> = { seq: e.seq };
    if (e.kind === "callback") ack.output = stored.output;
    if (e.kind === "sleep") ack.until = stored.until;
    if (e.kind === "event" || e.kind === "send") {
      const err = this.h.sent(this, e);
      if (err) ack.error = err;
    }
    if (this.crashAt === e.seq) {
      // The process "dies" once seq is durable: the invocation's token is revoked, so it
      // stops here (answering HTTP 500), and the next invocation replays the journal.
      this.crashAt = undefined;
      this.crashed = true;
      this.token = "";
      return { status: 401, body: JSON.stringify({ detail: `the test crashed the invocation after step ${e.seq} (crashAfter)` }), retryAfter: null };
    }
    return { status: 200, body: JSON.stringify(ack), retryAfter: null };
  }

  /** @internal The stream write w. */
  write(w: StreamWrite): unknown {
    let s = this.streams.get(w.key);
    if (!s) this.streams.set(w.key, (s = []));
    s.push(...w.chunks);
    return { key: w.key, length: s.length, closed: w.close === true };
  }

  private async invokeOnce() {
    if (++this.invocations > this.h.maxInvocations) {
      return this.finish({ status: "failed", error: { type: "limit_exceeded", message: `stepgate/testing: run ${this.id} made more than ${this.h.maxInvocations} invocations (HarnessOptions.maxInvocations)` } });
    }
    const since = this.inbox.length;
    this.began = (this.entries.at(-1)?.seq ?? 0) + 1;
    this.token = `token-${crypto.randomUUID()}`;
    const req: InvocationRequest = {
      protocol: 1,
      run: { id: this.id, function: this.fn, revision: 1, attempt: this.attempt, input: this.input, created_at: this.createdAt.toISOString(), ...(this.parentId ? { parent_id: this.parentId } : {}) },
      identity: this.h.starter,
      journal: this.journal,
      checkpoint: { url: `${URL_PREFIX}${this.id}/checkpoint`, token: this.token },
      step_attempts: { ...this.stepAttempts },
    };
    const { status, body } = await this.h.invoke(req);
    this.token = "";
    if (status !== 200) {
      if (this.crashed) {
        this.crashed = false;
        this.attempt++;
        return;
      }
      this.failures++;
      const max = this.h.invocationAttempts(this.fn);
      if (this.failures >= max) {
        // As the gateway says it (invoker.failedInvocation).
        const message = `${body.message ?? `HTTP ${status}`} (attempt ${this.failures} of ${max}; giving up)`;
        return this.finish({ status: "failed", error: { type: body.type ?? "error", message, retryable: false } });
      }
      this.attempt++;
      return;
    }
    this.failures = 0;
    for (const e of body.steps ?? []) this.put(e);
    if (body.status === "completed") return this.finish({ status: "completed", output: body.output ?? null });
    if (body.status === "failed") return this.finish({ status: "failed", error: body.error! });
    await this.suspend(body.await!, since);
  }

  private finish(o: Outcome) {
    this.outcome = o;
    this.state = o.status === "completed" ? "completed" : "failed";
  }

  /** Handles the await of a suspended answer: at once (a retry, a continue) or as a wait. */
  private async suspend(aw: Await, since: number) {
    const now = this.h.clockMs();
    switch (aw.type) {
      case "retry":
        return this.retry(aw);
      case "continue":
        // As on the gateway, a continue that journaled nothing since its invocation began
        // fails the run (it would be called again at once, forever).
        if (aw.seq <= this.began) {
          const message = `stepgate/testing: continue at seq ${aw.seq} journals nothing since the invocation began (the journal's next seq was ${this.began})`;
          return this.finish({ status: "failed", error: { type: "bad_answer", message } });
        }
        return;
      case "await_run":
        // As on the gateway: a run awaiting its own end would wait until its timeout.
        if ((aw.run_id ?? "").toLowerCase() === this.id.toLowerCase()) {
          const message = `stepgate/testing: await_run ${JSON.stringify(aw.name)} at seq ${aw.seq} awaits the run itself`;
          return this.finish({ status: "failed", error: { type: "bad_answer", message } });
        }
        this.wait({ aw, since, due: now + toMs(aw.timeout ?? DEFAULT_WAIT_TIMEOUT, "timeout") });
        return;
      case "sleep": {
        const due = aw.until ? new Date(aw.until).getTime() : now + toMs(aw.duration ?? "0s", "sleep");
        this.wait({ aw, due, since });
        return;
      }
      case "invoke":
        this.wait({ aw, since, children: [await this.h.child(this, aw.seq, aw.function!, aw.input ?? null)] });
        return;
      case "invoke_all": {
        const children: ChildOutcome[] = [];
        for (const [k, c] of (aw.calls ?? []).entries()) children.push(await this.h.child(this, aw.seq + k, c.function, c.input ?? null));
        this.wait({ aw, since, children });
        return;
      }
      case "await_callback": {
        const cb = this.entries.find((e) => e.seq === aw.callback_seq);
        const exp = (cb?.output as { expires_at?: string } | undefined)?.expires_at;
        const due = aw.timeout ? now + toMs(aw.timeout, "timeout") : exp ? new Date(exp).getTime() : undefined;
        this.wait({ aw, since, ...(due !== undefined ? { due } : {}) });
        return;
      }
      default:
        this.wait({ aw, since, due: now + toMs(aw.timeout ?? DEFAULT_WAIT_TIMEOUT, "timeout") });
    }
  }

  /**
   * A retry of a step: as the gateway, the harness counts the step's attempts itself, not
   * from the answer, and journals the step's failure once they reach its max_attempts
   * (the await's, else the function's); it retries at once, not after the backoff.
   */
  private retry(aw: Await) {
    const key = String(aw.seq);
    const attempt = Math.max(this.stepAttempts[key] ?? 1, 1);
    const most = aw.retry?.max_attempts ?? this.h.invocationAttempts(this.fn);
    if (attempt < most) {
      this.stepAttempts[key] = attempt + 1;
      return;
    }
    const err = aw.error ?? { type: "", message: "" };
    const error: ErrorInfo = { ...err, type: err.type || "step_failed", message: `${err.message} (attempt ${attempt} of ${most}; the gateway gives up)`, retryable: false };
    this.put({ seq: aw.seq, kind: "step", name: aw.name, attempt, error, ...(aw.window ? { window: aw.window } : {}) });
  }

  private wait(w: Waiting) {
    this.waiting = w;
    this.state = "suspended";
    this.outcome = undefined;
  }
}

/** The time ms as the gateway writes a time (Go's RFC 3339 with nanoseconds): no fraction of zeros, "…00Z". */
function gatewayTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d*?)0*Z$/, (_, f: string) => (f ? `.${f}Z` : "Z"));
}

/** Whether the dotted paths of match hold their values in ev ({id, name, data}). */
function matches(ev: Ev, match: Record<string, unknown>): boolean {
  return Object.entries(match).every(([path, want]) => {
    let v: unknown = { id: ev.id, name: ev.name, data: ev.data };
    for (const p of path.split(".")) v = v !== null && typeof v === "object" ? (v as Record<string, unknown>)[p] : undefined;
    return v === want;
  });
}

function describe(o: Outcome): string {
  if (o.status === "completed") return "completed";
  if (o.status === "failed") return `failed (${o.error.type}: ${o.error.message})`;
  return `suspended on ${o.await.type} ${JSON.stringify(o.await.name)}`;
}
