// The state of one invocation: the request, the next step's seq, the steps running in
// parallel, the checkpoint client, and how the invocation stops early. It mirrors the Go
// SDK's functions/internal/invocation.
//
// Stopping: when the invocation must end early (a sleep, a step retry, nondeterminism, a
// 409 from the checkpoint), a step records the first Stop and returns a promise that
// never settles, so the function's code stops where it is; the invocation answers the
// recorded Stop once the steps running in parallel have finished (and been journaled).
// Later steps stop at once without running anything. Code that catches errors cannot
// change the outcome, since nothing is thrown into it.
//
// Checkpoints are eager by default: a step that succeeds is journaled before its promise
// resolves. With lazy checkpoints (opt-in, per function or per step) a step that succeeds
// is held (defer) and checkpointed when the invocation takes its next seq, decides a
// patch or writes to a stream (flush), or, when the function answers first, sent in the
// answer's steps: the last step rides with the answer.
//
// Replay-only (InvocationRequest.replay_only): the invocation replays the journal and
// stops, answering status replayed, at the first thing its code asks for past it (next,
// or patch, taking a seq: before any step body, checkpoint or claim) or at the first
// entry the code asks for that the journal does not hold (a divergence, where a normal
// invocation fails as nondeterminism); serve answers the code's end the same way.
import { inStep } from "./context.js";
import { NonRetryableError } from "./errors.js";
import type { Await, CheckpointAck, EntryKind, ErrorInfo, InvocationAnswer, InvocationClaim, InvocationRequest, JournalEntry, ReplayOutcome, ReplayStep, StreamWrite } from "./protocol.js";

/** How an invocation ends early: an answer (HTTP 200) or an error (HTTP 500, retried). */
export interface Stop {
  answer?: InvocationAnswer;
  error?: ErrorInfo;
}

export const failed = (type: string, message: string): Stop => ({
  answer: { status: "failed", error: { type, message, retryable: false } },
});
export const suspended = (aw: Await): Stop => ({ answer: { status: "suspended", await: aw } });
export const retry = (type: string, message: string): Stop => ({ error: { type, message } });
/** The answer of a replay-only invocation (InvocationRequest.replay_only). */
export const replayed = (replay: ReplayOutcome): Stop => ({ answer: { status: "replayed", replay } });

/** The largest window a checkpoint or an await declares (the gateway's bound). */
export const MAX_WINDOW = 64;

/** The largest step output, in bytes of JSON, that defer holds for the answer (Go's maxDeferredBytes). */
export const MAX_DEFERRED_BYTES = 64 << 10;

const CHECKPOINT_BACKOFF_MS = 20;
const MAX_CHECKPOINT_BACKOFF_MS = 2000;

/** What a checkpoint POST answered. */
export interface PostResult {
  status: number;
  body: string;
  /** The Retry-After header, if any. */
  retryAfter: string | null;
}

/**
 * Makes one checkpoint POST; rejects when it could not be made (the connection failed,
 * signal aborted). serve uses fetch; the Node adapter a leaner node:http client.
 */
export type Poster = (url: string, headers: Record<string, string>, body: string, signal?: AbortSignal) => Promise<PostResult>;

/** A Poster that uses fetchFn. */
export function fetchPoster(fetchFn: typeof fetch): Poster {
  return async (url, headers, body, signal) => {
    const resp = await fetchFn(url, { method: "POST", headers, body, signal: signal ?? null });
    return { status: resp.status, body: await resp.text().catch(() => ""), retryAfter: resp.headers.get("Retry-After") };
  };
}

/** A promise that never settles: what a step returns once the invocation has stopped. */
export function never<T>(): Promise<T> {
  return new Promise<T>(() => {});
}

/** The message of a step started inside another step's function (Go's step.ErrNested). */
export const NESTED = "step: a step cannot start inside another step's function";

/**
 * Thrown by a stream write that stopped the invocation (a 409, the gateway gone): the
 * answer is decided already, and code that catches it cannot change it.
 */
export class StoppedError extends Error {
  constructor() {
    super("step: invocation stopped");
    this.name = "StoppedError";
  }
}

/** A stream write the gateway refused without stopping the invocation (Go's invocation.StreamError). */
export interface StreamRefusal {
  /** limit_exceeded (a bound of the stream), stream_closed, or checkpoint (a write that can never be taken). */
  type: string;
  message: string;
}

/** A compensation registered by step.compensate. */
export interface Undo {
  name: string;
  fn: (ctx: { attempt: number; signal: AbortSignal }) => unknown;
}

/** Go's %q for the strings the SDK quotes in messages (names, kinds). */
export const q = (s: string) => JSON.stringify(s);

export class Invocation {
  readonly req: InvocationRequest;
  /**
   * The gateway asks only to replay the journal (InvocationRequest.replay_only): no step
   * body runs and nothing is journaled, claimed or sent. The first seq the code takes
   * past the journal (next, patch) stops the invocation with the replayed answer naming
   * it, and a nondeterminism with the divergence; stream writes resolve at once, sending
   * nothing; no sleep is waited out in the process; any POST is refused (postTried).
   */
  readonly replayOnly: boolean;
  /** Aborted when the invocation stops early: given to steps' functions. */
  readonly controller = new AbortController();
  /** Resolved with the Stop when the invocation stops early. */
  readonly stopped: Promise<Stop>;

  private resolveStopped!: (s: Stop) => void;
  private stop: Stop | undefined;
  private bySeq = new Map<number, JournalEntry>();
  private seq = 0;
  private readonly started = Date.now();
  private fresh = 0;
  private budgetMs = 0;
  private sleepMaxMs = 0;
  /** The function's default for its steps: lazy checkpoints (see defer). */
  lazy = false;
  private ended = false;

  // Steps that run (their function or their checkpoint): a step is a hole in the
  // journal from when it takes its seq until it is journaled; the retry a failed one
  // waits for is kept with it.
  private running = 0;
  private holes = new Map<number, Await | undefined>();
  private waiters: (() => void)[] = [];

  // A finished step's entry not checkpointed yet (see defer), and the checkpoint flush
  // made of it, until the gateway answers it. The seqs this invocation journaled (done;
  // the held step counts, as nothing after it is written before it), and the highest seq
  // at and below which every seq is journaled, by this invocation or before it.
  private pending: JournalEntry | undefined;
  private flushing: Promise<boolean> | undefined;
  private journaledSeqs = new Set<number>();
  private journaledTo = 0;

  // Chunks written per stream and place (see streamPlace); compensations, oldest first.
  private places = new Map<string, number>();
  private undos: Undo[] = [];

  // The request's signal, aborted when the gateway goes away, read on first need (see
  // the constructor).
  private signal: AbortSignal | undefined;
  private signalRead = false;
  /** The gateway confirmed that this invocation owns its run, claimed by this process's nonce (checkOwner). */
  private owned = false;
  private owning: Promise<boolean> | undefined;

  constructor(
    req: InvocationRequest,
    /**
     * Reads the request's signal, aborted when the gateway goes away: it bounds waits (a
     * checkpoint tried again, a sleep in the process). It is read only when the
     * invocation first waits, since reading it has a cost on some platforms: Deno.serve
     * warns about its legacy abort once a handler has read request.signal.
     */
    private readonly readSignal: () => AbortSignal | undefined,
    private readonly post: Poster,
  ) {
    this.req = req;
    this.replayOnly = req.replay_only === true;
    for (const e of req.journal) this.bySeq.set(e.seq, e);
    this.stopped = new Promise((r) => (this.resolveStopped = r));
  }

  /** The request's signal, read now if it was not before. */
  private get requestSignal(): AbortSignal | undefined {
    if (!this.signalRead) {
      this.signal = this.readSignal();
      this.signalRead = true;
    }
    return this.signal;
  }

  /** The signal for a POST: the request's once the invocation has read it (a retry reads it first). */
  private postSignal(attempt: number): AbortSignal | undefined {
    return attempt > 0 || this.signalRead ? this.requestSignal : undefined;
  }

  /** Makes the invocation stop at a step boundary once four fifths of ms have passed. */
  setBudget(ms: number) {
    this.budgetMs = ms;
  }

  /** Sets the longest sleep, in milliseconds, waited out in the process; 0 makes every sleep suspend the run. */
  setSleepInProcess(ms: number) {
    this.sleepMaxMs = ms;
  }

  /**
   * Says whether a sleep of ms may be waited out in this process (Go's SleepInProcess):
   * it is no longer than the limit (setSleepInProcess), and the invocation has time to
   * spare after it: before the gateway's deadline for its answer (a gateway that sends
   * none gets no sleeps in the process), with a margin of a tenth of the invocation's
   * time and at least 2s, and within the budget (setBudget).
   */
  sleepInProcess(ms: number): boolean {
    if (this.replayOnly || this.sleepMaxMs <= 0 || ms > this.sleepMaxMs || !this.req.deadline || this.stop) return false;
    const deadline = new Date(this.req.deadline).getTime();
    if (Number.isNaN(deadline)) return false;
    const now = Date.now();
    const margin = Math.max(2000, (deadline - this.started) / 10);
    if (ms > deadline - now - margin) return false;
    return this.budgetMs <= 0 || now - this.started + ms < this.budgetMs - this.budgetMs / 5;
  }

  /**
   * Waits ms in this process, for a sleep. When the gateway ends its request meanwhile
   * the invocation stops (HTTP 500, retried at the sleep's end) and the promise never
   * settles, nor does it when the invocation stops otherwise.
   */
  waitOut(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const req = this.requestSignal;
      const own = this.controller.signal;
      const t = setTimeout(finish, Math.max(0, ms));
      function cleanup() {
        clearTimeout(t);
        req?.removeEventListener("abort", gone);
        own.removeEventListener("abort", stopped);
      }
      function finish() {
        cleanup();
        resolve();
      }
      const gone = () => {
        cleanup();
        void this.halt(retry("sleep", `the gateway ended the invocation during a sleep in its process: ${String(req?.reason ?? "the request was aborted")}`));
      };
      const stopped = () => cleanup();
      if (req?.aborted) return gone();
      if (own.aborted) return stopped();
      req?.addEventListener("abort", gone, { once: true });
      own.addEventListener("abort", stopped, { once: true });
    });
  }

  /**
   * Marks the invocation as answered: from now on every step call throws (checkEnded),
   * so a step object kept past its invocation neither runs nor journals anything.
   */
  end() {
    this.ended = true;
  }

  /** Whether the invocation has answered (end). */
  get hasEnded(): boolean {
    return this.ended;
  }

  /**
   * Throws a NonRetryableError naming what when the invocation has answered (end): its
   * step object is spent, and nothing it would run could be journaled.
   */
  checkEnded(what: string) {
    if (this.ended) {
      throw new NonRetryableError(
        `${what}: the invocation of run ${this.req.run.id} (attempt ${this.req.run.attempt}) has answered, so its step object cannot run or journal anything: use step only while the function's call runs (await every step before returning)`,
      );
    }
  }

  /** The recorded Stop, if the invocation stopped early. */
  get stoppedWith(): Stop | undefined {
    return this.stop;
  }

  /**
   * Ends the invocation with stop (or with the Stop recorded before) and returns a
   * promise that never settles, for the step to return. While the held step is being
   * checkpointed (flush), stop is recorded once the gateway has answered: a failed flush
   * stops the invocation with its own Stop first, as Go's NextN and Patch flush before
   * they decide anything.
   */
  halt<T>(stop: Stop | undefined): Promise<T> {
    const f = this.flushing;
    if (f && stop) void f.then(() => this.record(stop));
    else this.record(stop);
    return never<T>();
  }

  /** Records stop, unless a Stop was recorded before, and aborts what runs. */
  private record(stop: Stop | undefined) {
    if (!this.stop && stop) {
      this.stop = stop;
      this.controller.abort(new Error("stepgate: the invocation stopped"));
      this.resolveStopped(stop);
    }
  }

  /** Why the gateway went away, or undefined; reads the request's signal. */
  gone(): string | undefined {
    const s = this.requestSignal;
    return s?.aborted ? String(s.reason ?? "the request was aborted") : undefined;
  }

  /**
   * Why the gateway went away, if the invocation has read the request's signal (it
   * waited) and it is aborted: the check before each step, which does not read it. A step
   * that starts after the gateway left unseen runs, and its checkpoint finds out.
   */
  goneSeen(): string | undefined {
    return this.signalRead ? this.gone() : undefined;
  }

  /**
   * Takes the next n seqs for entries of kind named name and returns the first and the
   * journal's entries for them (undefined where not journaled). Returns undefined when
   * the invocation has stopped (or stops now: nondeterminism, the budget). The step defer
   * holds is checkpointed first (flush, as Go's NextN): what the caller writes or runs
   * next waits for it (room, checkpoint), and so does the answer (drain). With awaits,
   * for entries whose fresh path suspends the run at once (a sleep, a wait, a receive,
   * an invoke; Go's NextAwaitN), it is not: it stays held and goes in the suspended
   * answer's steps, or is checkpointed before whatever the function does next.
   */
  next(kind: EntryKind, name: string, n = 1, awaits = false): { seq: number; entries: (JournalEntry | undefined)[] } | undefined {
    this.checkEnded(`${kind} ${q(name)}`);
    if (this.stop) return undefined;
    this.checkNested(name);
    if (this.pending && !awaits) void this.flush();
    const first = this.seq + 1;
    this.seq += n;
    const entries: (JournalEntry | undefined)[] = [];
    for (let seq = first; seq < first + n; seq++) {
      const e = this.bySeq.get(seq);
      if (e && (e.kind !== kind || e.name !== name)) {
        const msg = `step ${seq}: code asks for ${kind} ${q(name)} but the journal holds ${e.kind} ${q(e.name)}`;
        void this.halt(this.diverged(seq, e, { kind, name }, msg));
        return undefined;
      }
      if (!e && this.replayOnly) {
        void this.halt(replayed({ next: { seq, kind, name } }));
        return undefined;
      }
      entries.push(e);
    }
    if (!entries[0]) {
      const over = this.budgetMs > 0 && this.fresh > 0 && Date.now() - this.started >= this.budgetMs - this.budgetMs / 5;
      this.fresh++;
      if (over) {
        void this.halt(suspended({ type: "continue", seq: first, name: "continue" }));
        return undefined;
      }
    }
    return { seq: first, entries };
  }

  /** Throws a NonRetryableError when called from a step's function (where the platform tells). */
  checkNested(name: string) {
    const p = inStep(this);
    if (p) throw new NonRetryableError(`step ${q(name)}, inside the function of step ${p.seq}: ${NESTED}`);
  }

  /**
   * Decides the patch named name where the code reaches it, at the journal's next seq (Go's
   * State.Patch): a patch marker of that name there takes the seq and returns it with the
   * marker (a replay of the patched path); nothing there takes the seq and returns it
   * without one (the caller journals the marker), unless consumeOnly; another entry there
   * takes no seq and returns seq 0 (the old path). undefined when the invocation stopped.
   * The step defer holds is checkpointed first, as next does.
   */
  patch(name: string, consumeOnly: boolean): { seq: number; marker?: JournalEntry } | undefined {
    this.checkEnded(`patch ${q(name)}`);
    if (this.stop) return undefined;
    this.checkNested(name);
    if (this.pending) void this.flush();
    const e = this.bySeq.get(this.seq + 1);
    if (e && e.kind === "patch" && e.name === name) return { seq: ++this.seq, marker: e };
    if (!e && !consumeOnly) {
      if (this.replayOnly) {
        void this.halt(replayed({ next: { seq: this.seq + 1, kind: "patch", name } }));
        return undefined;
      }
      return { seq: ++this.seq };
    }
    return { seq: 0 };
  }

  /**
   * The Stop of a nondeterminism at seq, where the code asks for asked but the journal
   * holds journal: the run fails (type nondeterminism, with message), or, replay-only,
   * the replayed answer's divergence.
   */
  diverged(seq: number, journal: { kind: string; name: string }, asked: { kind: string; name: string }, message: string): Stop {
    if (!this.replayOnly) return failed("nondeterminism", message);
    return replayed({ divergence: { seq, journal: { seq, kind: journal.kind, name: journal.name }, asked: { seq, kind: asked.kind, name: asked.name } } });
  }

  /**
   * What a replay-only invocation answers when its code ends (completes or fails, as
   * outcome says) having taken the seqs so far: next, of kind end at the next seq; or,
   * when the journal holds an entry past those seqs (the code ends before its journal
   * does), the divergence with the lowest such entry.
   */
  replayEnd(outcome: "completed" | "failed"): ReplayOutcome {
    const asked: ReplayStep = { seq: this.seq + 1, kind: "end", name: outcome };
    let later: JournalEntry | undefined;
    for (const e of this.bySeq.values()) if (e.seq > this.seq && (!later || e.seq < later.seq)) later = e;
    if (!later) return { next: asked };
    return { divergence: { seq: asked.seq, journal: { seq: later.seq, kind: later.kind, name: later.name }, asked } };
  }

  /** Registers a compensation. */
  pushUndo(u: Undo) {
    this.undos.push(u);
  }

  /** The registered compensations, newest first, forgotten. */
  takeUndos(): Undo[] {
    const out = this.undos.reverse();
    this.undos = [];
    return out;
  }

  /**
   * Reserves the places of n chunks written now to the stream key (Go's StreamPlace): in
   * the step at place when given (the step whose function writes), else between steps at
   * the seq the next entry takes with attempt 0; and the index of the first there. The
   * same code makes the same places on every invocation, so the gateway skips chunks a
   * replay writes again.
   */
  streamPlace(key: string, n: number, place?: { seq: number; attempt: number }): { seq: number; attempt: number; index: number } {
    const seq = place ? place.seq : this.seq + 1;
    const attempt = place ? place.attempt : 0;
    const k = `${key}\0${seq}\0${attempt}`;
    const index = this.places.get(k) ?? 0;
    this.places.set(k, index + n);
    return { seq, attempt, index };
  }

  /**
   * Sends w to the gateway (checkpoint.url + "/stream") and waits for its answer, tried
   * again as checkpoint is. Resolves undefined once the chunks are durable, or with the
   * refusal of a write the gateway refuses without stopping the run; when the invocation
   * no longer owns the run or the gateway stays unreachable, it stops the invocation and
   * throws a StoppedError. The step defer holds is checkpointed first (Go's WriteStream).
   */
  async writeStream(w: StreamWrite): Promise<StreamRefusal | undefined> {
    const where = `stream ${q(w.key)}`;
    this.checkEnded(where);
    const stopWith = (s: Stop): never => {
      void this.halt(s);
      throw new StoppedError();
    };
    if (this.stop) stopWith(this.stop);
    // Replay-only: nothing is sent, as a replay's chunks the stream holds are skipped.
    if (this.replayOnly) return undefined;
    if ((this.pending || this.flushing) && !(await this.flush())) stopWith(this.stoppedWith ?? retry("checkpoint", where));
    const r = await this.postTried("/stream", JSON.stringify(w), where);
    if ("stop" in r) return stopWith(r.stop);
    const code = r.resp.status;
    if (code >= 200 && code < 300) return undefined;
    const { type, detail } = problemOf(r.resp);
    if (code === 409) {
      if (type === "limit_exceeded" || type === "stream_closed") return { type, message: `${where}: ${detail}` };
      return stopWith(failed("superseded", `${where}: ${detail}`));
    }
    if (code === 401) return stopWith(retry("checkpoint", `${where}: ${code} ${detail}`));
    return { type: "checkpoint", message: `${where}: ${code} ${detail}` };
  }

  /**
   * Resolves true once the gateway has confirmed that this invocation owns its run,
   * claimed for this process, and false when the invocation stopped instead. The SDK
   * awaits it before the first step function of the invocation that the journal does not
   * hold, so that a captured invocation request sent again to another process (whose
   * replay memory is empty, within the signature's window) runs no step function, even
   * while the invocation it copies runs. The first call makes a random 128-bit nonce and
   * asks the gateway (POST checkpoint.url + "/current" with the invocation token and
   * `{"nonce"}`), which answers 200 only to the first nonce asked for the invocation;
   * tried again with the same nonce as a checkpoint is. Later calls (parallel steps)
   * share its answer. A checkpoint the gateway took is no proof: a copy of the request
   * checkpoints under the same token. A 409 stops the invocation with the superseded
   * failure; a 400, a 401, or a gateway that stays unreachable, with a retryable one.
   */
  checkOwner(): Promise<boolean> {
    if (this.owned) return Promise.resolve(true);
    this.owning ??= this.askOwner();
    return this.owning;
  }

  private async askOwner(): Promise<boolean> {
    const where = "check that the invocation owns its run";
    // One nonce for every try of the question: a try whose answer was lost may have
    // claimed the invocation.
    const nonce = Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
    const body = JSON.stringify({ nonce } satisfies InvocationClaim);
    const stopWith = (s: Stop) => {
      void this.halt(s);
      return false;
    };
    const r = await this.postTried("/current", body, where);
    if ("stop" in r) return stopWith(r.stop);
    const code = r.resp.status;
    if (code >= 200 && code < 300) {
      this.owned = true;
      return true;
    }
    const { detail } = problemOf(r.resp);
    if (code === 409) return stopWith(failed("superseded", `${where}: ${detail}`));
    // 401 (the token expired or is another run's), or a gateway without the check: no
    // step runs on an answer that is not a yes.
    return stopWith(retry("checkpoint", `${where}: ${code} ${detail}`));
  }

  /** The attempt this invocation makes of the step at seq (step_attempts, else 1). */
  attempt(seq: number): number {
    const a = this.req.step_attempts?.[String(seq)];
    return a && a > 0 ? a : 1;
  }

  /** Marks the step at seq as running: a hole until done() says it was journaled. */
  begin(seq: number) {
    this.running++;
    this.holes.set(seq, undefined);
  }

  /** Marks the step at seq as ended: journaled, or not (with the retry it waits for). */
  done(seq: number, journaled: boolean, retryAwait?: Await) {
    this.running--;
    if (journaled) {
      this.holes.delete(seq);
      this.journaledSeqs.add(seq);
    } else this.holes.set(seq, retryAwait);
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  private lowestHole(seq: number): number {
    let low = 0;
    for (const h of this.holes.keys()) if (h < seq && (low === 0 || h < low)) low = h;
    return low;
  }

  /**
   * The window an entry or an await at seq declares: the distance from the lowest hole
   * below it, and at least 2 while another step runs (its checkpoint may be concurrent)
   * or when later seqs were taken (it may fill a hole below their entries). self says
   * that the step at seq is one of those running.
   */
  window(seq: number, self = false): number {
    let w = 1;
    const low = this.lowestHole(seq);
    if (low > 0) w = seq - low + 1;
    if (this.running > (self ? 1 : 0) || (self && this.seq > seq)) w = Math.max(w, 2);
    return w;
  }

  /**
   * Waits until the step defer holds is journaled (flush) and seq is within MAX_WINDOW of
   * the lowest hole below it: what takes a seq waits here before it runs or writes
   * anything. A hole that no running step will fill stops the invocation, as a failed
   * flush does: false then.
   */
  async room(seq: number): Promise<boolean> {
    if ((this.pending || this.flushing) && !(await this.flush())) return false;
    for (;;) {
      if (this.stop) return false;
      const low = this.lowestHole(seq);
      if (low === 0 || seq - low + 1 <= MAX_WINDOW) return true;
      // This step counts as running itself once begun; callers ask before begin().
      if (this.running === 0) {
        const aw = this.holes.get(low);
        void this.halt(aw ? suspended(aw) : retry("parallel", `step ${seq}: step ${low}, run in parallel, did not finish, and ${seq - low} steps came after it (at most ${MAX_WINDOW - 1})`));
        return false;
      }
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  /** Waits until no step runs and the gateway has answered the checkpoint flush made. */
  async drain(): Promise<void> {
    for (;;) {
      if (this.running > 0) await new Promise<void>((r) => this.waiters.push(r));
      else if (this.flushing) await this.flushing;
      else return;
    }
  }

  /** The lowest-seq retry a failed parallel step waits for, if any. */
  lowestRetry(): Await | undefined {
    let best: Await | undefined;
    for (const aw of this.holes.values()) if (aw && (!best || aw.seq < best.seq)) best = aw;
    return best;
  }

  /**
   * Journals e, a step that finished: at once, as checkpoint, unless lazy. With lazy, e is
   * journaled later than checkpoint would but still before anything that follows it
   * (Go's State.Defer): the invocation's next seq, patch or stream write checkpoints it
   * first (flush), and when the function answers first, it goes in the answer's steps
   * (takePending), so a function's last step costs no checkpoint of its own. Every step is still journaled before the next one starts.
   * What changes is the window in which a lost invocation runs the step again: it ends
   * when the function moves on, rather than when the step ends.
   *
   * A lazy defer checkpoints e at once too unless the step at e.seq is alone: while
   * other steps run, left holes or took later seqs (parallel steps: their windows are
   * reckoned at checkpoint time), while a step is held or being flushed, once the
   * invocation has stopped, and when its output (outputJSON) is over MAX_DEFERRED_BYTES
   * (an answer carries it beside the run's output, within the gateway's bound on an
   * answer). Call it while the step runs (before done). Resolves false when the
   * invocation stopped instead.
   */
  async defer(e: JournalEntry, outputJSON: string, lazy: boolean): Promise<boolean> {
    const alone = lazy && this.running === 1 && this.holes.size === 1 && this.holes.has(e.seq) && this.seq === e.seq && this.journaledBelow(e.seq);
    if (alone && !this.pending && !this.flushing && !this.stop && fitsDeferred(outputJSON)) {
      this.pending = e;
      return true;
    }
    return (await this.checkpoint(e)) !== undefined;
  }

  /**
   * Checkpoints the step defer holds, if any, as checkpoint does (Go's Flush); the one
   * flush under way is waited for. Resolves true once it is durable (or when none is
   * held), false when the invocation stopped instead.
   */
  flush(): Promise<boolean> {
    const e = this.pending;
    if (e) {
      this.pending = undefined;
      // Its window was reckoned when defer held it, alone: 1.
      const p: Promise<boolean> = this.put(e, 1).then((r) => {
        if (this.flushing === p) this.flushing = undefined;
        // Before the Stops that wait for this flush (halt).
        if ("stop" in r) this.record(r.stop);
        return !("stop" in r);
      });
      this.flushing = p;
    }
    return this.flushing ?? Promise.resolve(true);
  }

  /**
   * Whether every seq below seq is journaled: in the request's journal, or by this
   * invocation (a step that took a lower seq and has not begun is not).
   */
  private journaledBelow(seq: number): boolean {
    for (let s = this.journaledTo + 1; s < seq && (this.bySeq.has(s) || this.journaledSeqs.has(s)); s++) this.journaledTo = s;
    return this.journaledTo >= seq - 1;
  }

  /** The step defer holds, forgotten, or undefined: the caller journals it with the invocation's answer. */
  takePending(): JournalEntry | undefined {
    const e = this.pending;
    this.pending = undefined;
    return e;
  }

  /**
   * Journals e with the gateway and returns its acknowledgement once it is durable, or
   * undefined when the invocation stopped instead (a 409, the gateway gone or refusing).
   * Failures that may pass (unreachable, 5xx, 408, 429) are tried again with backoff for
   * as long as the gateway's request lasts. The step defer holds is journaled first.
   */
  async checkpoint(e: JournalEntry): Promise<CheckpointAck | undefined> {
    if ((this.pending || this.flushing) && !(await this.flush())) return undefined;
    const r = await this.put(e, this.window(e.seq, true));
    if ("stop" in r) {
      void this.halt(r.stop);
      return undefined;
    }
    return r.ack;
  }

  /** Makes the checkpoint of e, declaring window w: its acknowledgement, or the Stop it ends with. */
  private async put(e: JournalEntry, w: number): Promise<{ ack: CheckpointAck } | { stop: Stop }> {
    if (w > 1 && e.window === undefined) e.window = w;
    const where = `checkpoint step ${e.seq} ${q(e.name)}`;
    const r = await this.postTried("", JSON.stringify(e), where);
    if ("stop" in r) return r;
    const code = r.resp.status;
    if (code >= 200 && code < 300) {
      let ack: CheckpointAck = { seq: e.seq };
      try {
        if (r.resp.body) ack = { seq: e.seq, ...JSON.parse(r.resp.body) };
      } catch {
        // An older gateway's empty body is an acknowledgement too.
      }
      return { ack };
    }
    const { type, detail } = problemOf(r.resp);
    if (code === 409) {
      if (type === "nondeterminism" || type === "conflict") return { stop: failed("nondeterminism", `step ${e.seq} ${q(e.name)}: ${detail}`) };
      return { stop: failed("superseded", `${where}: ${detail}`) };
    }
    // The invocation token expired or is unknown: a new invocation brings a new one.
    if (code === 401) return { stop: retry("checkpoint", `${where}: ${code} ${detail}`) };
    // The gateway refuses this entry (too large, invalid): another try makes the same.
    return { stop: failed("checkpoint", `${where}: ${code} ${detail}`) };
  }

  /**
   * POSTs body to checkpoint.url + path with the invocation token, and tries again, with
   * a backoff from CHECKPOINT_BACKOFF_MS doubling up to MAX_CHECKPOINT_BACKOFF_MS (or
   * the answer's Retry-After, within it), while the failure may pass: the POST could not
   * be made, or the gateway answered 5xx, 408 or 429. Returns the first other answer, or,
   * once the gateway has gone away (the request's signal), the retryable Stop naming
   * where and the last failure.
   */
  private async postTried(path: string, body: string, where: string): Promise<{ resp: PostResult } | { stop: Stop }> {
    // Replay-only stops before anything is journaled or claimed: a POST here is a bug,
    // and sends nothing.
    if (this.replayOnly) return { stop: retry("replay_only", `${where}: a replay-only invocation journals nothing, yet the SDK tried to: report it`) };
    let delay = CHECKPOINT_BACKOFF_MS;
    let last = "";
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) {
        await sleepMs(delay, this.requestSignal);
        const gone = this.gone();
        if (gone) return { stop: retry("checkpoint", `${where}: ${gone} (last: ${last})`) };
        delay = Math.min(2 * delay, MAX_CHECKPOINT_BACKOFF_MS);
      }
      let resp: PostResult;
      try {
        resp = await this.post(
          this.req.checkpoint.url + path,
          { "Content-Type": "application/json", Authorization: `Bearer ${this.req.checkpoint.token}` },
          body,
          this.postSignal(attempt),
        );
      } catch (err) {
        last = String(err instanceof Error ? err.message : err);
        if (this.gone()) return { stop: retry("checkpoint", `${where}: ${last}`) };
        continue;
      }
      const code = resp.status;
      if (code >= 500 || code === 408 || code === 429) {
        last = `${code} ${problemOf(resp).detail}`;
        const after = Number(resp.retryAfter);
        if (after > 0) delay = Math.max(delay, Math.min(after * 1000, MAX_CHECKPOINT_BACKOFF_MS));
        continue;
      }
      return { resp };
    }
  }
}

/** The type (the last segment of its path) and the detail (else the status code) of a problem answer. */
function problemOf(resp: PostResult): { type: string; detail: string } {
  let problem: { type?: string; detail?: string } = {};
  try {
    problem = JSON.parse(resp.body);
  } catch {
    // A body that is not a problem leaves it empty.
  }
  return { type: (problem.type ?? "").split("/").pop() ?? "", detail: problem.detail || String(resp.status) };
}

function sleepMs(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Whether s is at most MAX_DEFERRED_BYTES long in UTF-8, where a UTF-16 unit takes 1 to 3 bytes. */
function fitsDeferred(s: string): boolean {
  if (s.length > MAX_DEFERRED_BYTES) return false;
  if (3 * s.length <= MAX_DEFERRED_BYTES) return true;
  return new TextEncoder().encode(s).length <= MAX_DEFERRED_BYTES;
}
