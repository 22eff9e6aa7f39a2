// An adapter from the Fetch handler to Node's http module (and Express, Connect, Fastify's
// raw handlers): `http.createServer(toNodeListener(serve({...})))`.
import type { IncomingMessage, ServerResponse } from "node:http";
import { isFrames } from "./duplex.js";
import { nodePost } from "./node-post.js";
import { serve, type FetchHandler, type ServeOptions } from "./serve.js";

export { nodePost };

/**
 * serve for Node: a node:http listener (see toNodeListener) whose checkpoints use
 * nodePost, a lean keep-alive client, several hundred microseconds faster per step than
 * Node's global fetch.
 *
 *     http.createServer(serveNode({ functions, signingKeys })).listen(3000)
 */
export function serveNode(opts: ServeOptions): (req: IncomingMessage, res: ServerResponse) => void {
  return toNodeListener(serve({ post: nodePost, duplex: true, ...opts }));
}

/**
 * Returns a listener for node:http's createServer (or an Express route:
 * `app.all("/api/stepgate{/*fn}", toNodeListener(handler))`) that turns each request into a
 * Fetch Request, calls handler and writes its Response. Mount it before any body parser
 * (express.json()): the signature is over the raw body. The body reaches handler as a
 * stream read from the socket only as handler pulls it (serve stops at maxBodyBytes);
 * after an answer given before the whole body arrived, the connection closes. A client
 * that goes away aborts the request's signal, which ends the invocation's checkpoint
 * retries.
 */
export function toNodeListener(handler: FetchHandler): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    void handle(handler, req, res).catch((err) => {
      if (!res.headersSent) {
        // A body left unread on the wire would be taken for the next request.
        res.writeHead(500, { "Content-Type": "application/json", ...(req.complete ? {} : { Connection: "close" }) });
        res.end(JSON.stringify({ type: "error", message: String(err instanceof Error ? err.message : err) }));
      } else {
        res.destroy();
      }
    });
  };
}

async function handle(handler: FetchHandler, req: IncomingMessage, res: ServerResponse) {
  const ac = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) ac.abort(new Error("the client went away"));
  });
  const method = req.method ?? "GET";
  let body: Buffer | ReadableStream<Uint8Array> | undefined;
  let stream: ReturnType<typeof bodyOf> | undefined;
  const parsed = (req as IncomingMessage & { body?: unknown }).body;
  if (method === "GET" || method === "HEAD") {
    body = undefined;
  } else if (req.readableEnded && parsed !== undefined) {
    if (typeof parsed === "string") body = Buffer.from(parsed);
    else if (Buffer.isBuffer(parsed)) body = parsed;
    else throw new Error("stepgate: the request body was parsed before the stepgate handler: mount it before body parsers such as express.json(), since the signature covers the raw body");
  } else {
    stream = bodyOf(req);
    body = stream.body;
  }
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (Array.isArray(v)) for (const x of v) headers.append(k, x);
    else if (v !== undefined) headers.set(k, v);
  }
  const host = req.headers.host ?? "localhost";
  const url = new URL(req.originalUrl ?? req.url ?? "/", `http://${host}`);
  const request = new Request(url, { method, headers, body, signal: ac.signal, ...(stream ? { duplex: "half" as const } : {}) });
  const response = await handler(request);
  const out: Record<string, string> = {};
  response.headers.forEach((v, k) => (out[k] = v));
  if (isFrames(response.headers.get("Content-Type")) && response.body) {
    // A duplex answer: each frame goes out as it is written, while the request's body
    // still brings the gateway's acknowledgements.
    res.writeHead(response.status, out);
    res.flushHeaders();
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!res.write(value)) await new Promise((r) => res.once("drain", r));
    }
    res.end();
    return;
  }
  const answer = Buffer.from(await response.arrayBuffer());
  if (stream) {
    if (req.complete) {
      stream.discard(); // all of it arrived; what the handler did not read is dropped
    } else {
      // The handler answered before the whole body arrived (a 413): the rest stays
      // unread, and the connection closes after the answer, since the next request on it
      // would follow that rest.
      out["connection"] = "close";
    }
  }
  res.writeHead(response.status, out);
  res.end(method === "HEAD" ? undefined : answer);
}

/**
 * The body of req as a stream that reads from the socket only as its reader pulls: the
 * handler counts what it reads and stops (cancels) at its bound, so nothing past it is
 * read or buffered. discard drops whatever the handler did not read.
 */
function bodyOf(req: IncomingMessage): { body: ReadableStream<Uint8Array>; discard: () => void } {
  let over = false;
  const end = () => {
    over = true;
    req.pause();
  };
  const body = new ReadableStream<Uint8Array>(
    {
      start(c) {
        req.on("data", (chunk: Buffer) => {
          if (over) return;
          c.enqueue(chunk);
          if ((c.desiredSize ?? 0) <= 0) req.pause();
        });
        req.on("end", () => {
          if (!over) c.close();
          over = true;
        });
        const fail = (e: Error) => {
          if (!over) c.error(e);
          over = true;
        };
        req.on("error", fail);
        req.on("close", () => fail(new Error("the request ended before its body did")));
      },
      pull() {
        req.resume();
      },
      cancel: end,
    },
    { highWaterMark: 1 },
  );
  return {
    body,
    discard: () => {
      over = true;
      req.resume();
    },
  };
}

declare module "node:http" {
  interface IncomingMessage {
    /** Express's original URL, when mounted under a path. */
    originalUrl?: string;
  }
}
