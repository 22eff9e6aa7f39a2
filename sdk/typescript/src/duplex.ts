// The duplex mode (docs/protocol.md, "The duplex mode"): one exchange per invocation, the
// invocation on the request body's first line and the gateway's acknowledgements after
// it, the function's checkpoints, claim and stream writes as frames on the response body
// and its answer last. A Poster over it sends each request of the invocation as a frame
// and returns the acknowledgement as the HTTP endpoint's answer, so that Invocation does
// the same in both modes.
import { BodyTooLarge } from "./body.js";
import type { PostResult, Poster } from "./invocation.js";

/** The content type of a duplex invocation's two bodies: one JSON value per line. */
export const CONTENT_TYPE_FRAMES = "application/x-ndjson";

/** The longest acknowledgement line read; a longer one ends the exchange. */
const MAX_ACK_BYTES = 1 << 20;

/** Says whether contentType is the duplex mode's. */
export function isFrames(contentType: string | null): boolean {
  return (contentType ?? "").split(";")[0]!.trim().toLowerCase() === CONTENT_TYPE_FRAMES;
}

/** Reads lines from a byte stream. */
export class LineReader {
  private buf = new Uint8Array(0);
  private done = false;

  constructor(private readonly reader: ReadableStreamDefaultReader<Uint8Array>) {}

  /** The next line without its newline, at most max bytes (else BodyTooLarge); null at the end. */
  async next(max: number): Promise<Uint8Array | null> {
    for (;;) {
      const nl = this.buf.indexOf(10);
      if (nl >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        return line;
      }
      if (this.buf.byteLength > max) throw new BodyTooLarge(max);
      if (this.done) {
        if (this.buf.byteLength === 0) return null;
        const line = this.buf;
        this.buf = new Uint8Array(0);
        return line;
      }
      const { done, value } = await this.reader.read();
      if (done) {
        this.done = true;
        continue;
      }
      const joined = new Uint8Array(this.buf.byteLength + value.byteLength);
      joined.set(this.buf);
      joined.set(value, this.buf.byteLength);
      this.buf = joined;
    }
  }

  cancel() {
    void this.reader.cancel().catch(() => {});
  }
}

interface Ack {
  id: number;
  status: number;
  body?: unknown;
  retry_after?: number;
}

/**
 * The function's side of one duplex exchange: frames written to out, acknowledgements
 * read from acks. verifyProof checks a claim's proof (undefined: not checked).
 */
export class Duplex {
  private next = 0;
  private readonly waiting = new Map<number, (a: Ack | Error) => void>();
  private ended: Error | undefined;
  /** Aborted when the exchange ends: the invocation's requests can no longer be answered. */
  readonly signal: AbortSignal;
  private readonly ac = new AbortController();
  private readonly encoder = new TextEncoder();

  constructor(
    private readonly out: WritableStreamDefaultWriter<Uint8Array>,
    private readonly acks: LineReader,
    private readonly verifyProof: ((nonce: string, proof: string) => Promise<void>) | undefined,
  ) {
    this.signal = this.ac.signal;
    void this.read();
  }

  private async read() {
    let err: Error = new Error("the invocation's exchange with the gateway ended");
    try {
      for (;;) {
        const line = await this.acks.next(MAX_ACK_BYTES);
        if (line === null) break;
        const text = new TextDecoder().decode(line).trim();
        if (text === "") continue;
        const a = JSON.parse(text) as Ack;
        const w = this.waiting.get(a.id);
        this.waiting.delete(a.id);
        w?.(a);
      }
    } catch (e) {
      err = new Error(`the invocation's exchange with the gateway ended: ${e instanceof Error ? e.message : String(e)}`);
    }
    this.ended = err;
    for (const w of this.waiting.values()) w(err);
    this.waiting.clear();
    this.ac.abort(err);
  }

  private async write(frame: object) {
    await this.out.write(this.encoder.encode(JSON.stringify(frame) + "\n"));
  }

  /** A Poster whose requests are frames of this exchange (the URL's suffix names the op). */
  poster(): Poster {
    return async (url, _headers, body) => {
      if (this.ended) throw this.ended;
      const op = url.endsWith("/current") ? "current" : url.endsWith("/stream") ? "stream" : "checkpoint";
      const id = ++this.next;
      const answer = new Promise<Ack | Error>((resolve) => this.waiting.set(id, resolve));
      await this.write({ id, op, body: JSON.parse(body) });
      const a = await answer;
      if (a instanceof Error) throw a;
      const result: PostResult = { status: a.status, body: JSON.stringify(a.body ?? null), retryAfter: a.retry_after ? String(a.retry_after) : null };
      if (op === "current" && a.status === 200 && this.verifyProof) {
        const nonce = (JSON.parse(body) as { nonce: string }).nonce;
        const proof = (a.body as { proof?: string } | undefined)?.proof;
        try {
          if (!proof) throw new Error("it has no proof");
          await this.verifyProof(nonce, proof);
        } catch (e) {
          return {
            status: 409,
            body: JSON.stringify({
              status: 409,
              type: "superseded",
              detail: `the claim's acknowledgement is not the gateway's (${e instanceof Error ? e.message : String(e)}): another process answered a copy of this invocation's request`,
            }),
            retryAfter: null,
          };
        }
      }
      return result;
    };
  }

  /** Writes the answer, the last frame, and ends the response. */
  async answer(status: number, body: unknown) {
    try {
      await this.write({ op: "answer", status, body });
      await this.out.close();
    } catch {
      // The gateway is gone; nobody to tell.
    }
  }
}
