// A run's streams, as the Go SDK's step.Stream writes them.
import { inStep } from "./context.js";
import { messageOf, NonRetryableError } from "./errors.js";
import { type Invocation, q } from "./invocation.js";

/**
 * A write the gateway refused without stopping the run: past a bound of the stream
 * (type limit_exceeded), to a closed stream (stream_closed), or one it can never take
 * (checkpoint). Non-retryable: thrown out of a step's function, it fails the step at once.
 * Go's step.ErrStreamRefused.
 */
export class StreamRefusedError extends NonRetryableError {
  constructor(
    /** limit_exceeded, stream_closed or checkpoint. */
    readonly type: string,
    message: string,
  ) {
    super(`step: stream write refused: ${message}`);
    this.name = "StreamRefusedError";
  }
}

const KEY = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;

/**
 * Writes the ordered chunks of one of the run's streams, which clients read live with
 * GET /v1/runs/{id}/streams/{key} (server-sent events, resumable from an offset): the
 * tokens of an LLM's answer, log lines, progress events. Get one with step.stream(key)
 * or, inside a step's function, ctx.stream(key).
 *
 * Guarantees, as the Go SDK's:
 *  - Each chunk is durable (committed by the gateway) when its write resolves, and no
 *    reader sees it before. The writes of one writer keep the order they were called in,
 *    awaited or not.
 *  - Chunks are not written twice by replays. A chunk is known by where it was written:
 *    between steps, the chunks written there on a replay are the same ones and are
 *    skipped; a step that finished is not run again, so its chunks are not written
 *    again. A step retried after a failure (its next attempt) writes its chunks anew:
 *    readers see the failed attempt's chunks, then the retry's.
 *  - Chunks are not journal entries: they take no seq and count against the stream's
 *    bounds, not the journal's: a write past one throws a StreamRefusedError and stores
 *    nothing; the run goes on.
 *  - The stream ends for its readers when close() is called, or when the run finishes.
 *
 * A writer places its chunks in the step whose function writes them: one made with
 * ctx.stream always; one made with step.stream where the platform has AsyncLocalStorage
 * (Node, Bun, Deno; Workers under nodejs_compat), and between steps elsewhere. Each write
 * is one request to the gateway: write words or lines, not characters.
 */
export class StreamWriter {
  private queue: Promise<unknown> = Promise.resolve();

  /** @internal Made by step.stream and StepContext.stream. */
  constructor(
    private readonly st: Invocation,
    readonly key: string,
    private readonly place?: { seq: number; attempt: number },
  ) {
    if (!KEY.test(key)) {
      throw new NonRetryableError(
        `step: stream key ${q(String(key).slice(0, 64))} is invalid: use 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit`,
      );
    }
  }

  /** Writes s as one chunk, a JSON string, and resolves once it is durable. */
  write(s: string): Promise<void> {
    // Lone surrogates become U+FFFD, as Go makes bytes that are not UTF-8 (Node 20+).
    const str = String(s) as string & { toWellFormed?: () => string };
    return this.send(str.toWellFormed ? str.toWellFormed() : str);
  }

  /** Writes value, as JSON, as one chunk, and resolves once it is durable. */
  send(value: unknown): Promise<void> {
    let raw: string | undefined;
    try {
      raw = JSON.stringify(value);
    } catch (e) {
      return Promise.reject(new NonRetryableError(`step: stream ${q(this.key)}: encode chunk: ${messageOf(e)}`));
    }
    return this.enqueue([raw === undefined ? null : JSON.parse(raw)], false);
  }

  /**
   * Ends the stream: its readers get its end once they have read every chunk, and later
   * writes are refused. Closing a closed stream is harmless.
   */
  close(): Promise<void> {
    return this.enqueue([], true);
  }

  private enqueue(chunks: unknown[], closing: boolean): Promise<void> {
    // The place is taken now, in call order, so that a replay makes the same places.
    const st = this.st;
    const place = st.streamPlace(this.key, chunks.length, this.place ?? inStep(st));
    const w = { key: this.key, seq: place.seq, chunks, ...(place.attempt > 0 ? { attempt: place.attempt } : {}), ...(place.index > 0 ? { index: place.index } : {}), ...(closing ? { close: true } : {}) };
    const p = this.queue.then(async () => {
      const refused = await st.writeStream(w);
      if (refused) throw new StreamRefusedError(refused.type, refused.message);
    });
    this.queue = p.catch(() => {});
    return p;
  }
}
