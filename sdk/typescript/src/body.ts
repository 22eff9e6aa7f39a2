// Reading an invocation's body with a bound, whatever the runtime: Deno, Bun, Workers and
// Vercel hand serve a Request whose body is a stream, and so does the Node adapter.

/** A body over the bound: serve answers it 413. */
export class BodyTooLarge extends Error {
  constructor(max: number) {
    super(`the body is larger than ${max} bytes`);
  }
}

/**
 * Reads request's body, counting while it streams in: a declared Content-Length over max,
 * or a count that passes max (a chunked body, or one longer than its Content-Length says),
 * cancels the body's stream, so that the rest is neither read nor buffered, and throws
 * BodyTooLarge. What is kept is at most max bytes of chunks (and the one that passed
 * max, dropped with them), joined into one array once the body has ended within max.
 */
export async function readBody(request: Request, max: number): Promise<Uint8Array<ArrayBuffer>> {
  const stream = request.body;
  if (stream === null) return new Uint8Array(0);
  if (Number(request.headers.get("Content-Length") ?? 0) > max) {
    await stream.cancel().catch(() => {});
    throw new BodyTooLarge(max);
  }
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.byteLength;
    if (n > max) {
      await reader.cancel().catch(() => {});
      throw new BodyTooLarge(max);
    }
    chunks.push(value);
  }
  const body = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    body.set(c, at);
    at += c.byteLength;
  }
  return body;
}
