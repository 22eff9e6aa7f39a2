// The checkpoint POST for Node over plain keep-alive sockets (node:net, node:tls).
//
// Each step of a function waits for one checkpoint round trip, so its cost is the SDK's
// cost per step. Node's global fetch (undici) and node:http's client spend a few hundred
// and about a hundred microseconds of CPU per request on machinery a checkpoint does not
// need; this client writes the request in one write and reads the one answer that
// follows it. It speaks what a checkpoint needs of HTTP/1.1 and no more: one request at
// a time per connection, a Content-Length or chunked body (or one that ends with the
// connection), 1xx answers skipped, keep-alive unless the server says close. Idle
// connections are kept per origin (up to 64) and do not keep the process alive.
import { isIP, connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import type { PostResult, Poster } from "./invocation.js";

const MAX_IDLE_PER_ORIGIN = 64;
const MAX_ANSWER_BYTES = 1 << 20;
const idle = new Map<string, Socket[]>();

/** A reused connection that the server had closed before it answered: safe to retry. */
class StaleConnection extends Error {}

function open(u: URL): Socket {
  const host = u.hostname.replace(/^\[(.*)\]$/, "$1");
  const tls = u.protocol === "https:";
  const port = Number(u.port || (tls ? 443 : 80));
  const s = tls
    ? tlsConnect({ host, port, ALPNProtocols: ["http/1.1"], ...(isIP(host) ? {} : { servername: host }) })
    : netConnect({ host, port });
  s.setNoDelay(true);
  s.setKeepAlive(true, 30_000);
  return s;
}

function release(key: string, s: Socket) {
  const pool = idle.get(key) ?? [];
  if (pool.length >= MAX_IDLE_PER_ORIGIN || s.destroyed) {
    s.destroy();
    return;
  }
  const drop = () => {
    const p = idle.get(key);
    const i = p?.indexOf(s) ?? -1;
    if (i >= 0) p!.splice(i, 1);
    s.destroy();
  };
  s.once("error", drop);
  s.once("close", drop);
  s.once("end", drop);
  (s as Socket & { __drop?: () => void }).__drop = drop;
  s.unref();
  pool.push(s);
  idle.set(key, pool);
}

function take(key: string): Socket | undefined {
  const pool = idle.get(key);
  for (;;) {
    const s = pool?.pop();
    if (!s) return undefined;
    const drop = (s as Socket & { __drop?: () => void }).__drop;
    if (drop) {
      s.off("error", drop);
      s.off("close", drop);
      s.off("end", drop);
    }
    if (s.destroyed || !s.writable) continue;
    s.ref();
    return s;
  }
}

/** The SDK's checkpoint POST over keep-alive sockets: serve's post option (serveNode uses it). */
export const nodePost: Poster = async (url, headers, body, signal) => {
  const u = new URL(url);
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`checkpoint URL ${url}: not http or https`);
  let head = `POST ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\n`;
  for (const [k, v] of Object.entries(headers)) {
    if (/[\r\n]/.test(k + v)) throw new Error(`header ${k}: a value with a line break`);
    head += `${k}: ${v}\r\n`;
  }
  const payload = Buffer.from(`${head}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  const key = `${u.protocol}//${u.host}`;
  for (;;) {
    const reused = take(key);
    const socket = reused ?? open(u);
    try {
      const { result, keepAlive } = await exchange(socket, payload, !!reused, signal);
      if (keepAlive) release(key, socket);
      else socket.destroy();
      return result;
    } catch (e) {
      socket.destroy();
      if (e instanceof StaleConnection) continue; // a fresh connection next
      throw e;
    }
  }
};

/** Writes payload on socket and reads the answer. */
function exchange(socket: Socket, payload: Buffer, reused: boolean, signal?: AbortSignal): Promise<{ result: PostResult; keepAlive: boolean }> {
  return new Promise((resolve, reject) => {
    let buf: Buffer = Buffer.alloc(0);
    let got = false; // any byte of an answer
    let done = false;
    const finish = (err: Error | undefined, v?: { result: PostResult; keepAlive: boolean }) => {
      if (done) return;
      done = true;
      socket.off("data", onData);
      socket.off("error", onError);
      socket.off("close", onClose);
      socket.off("end", onEnd);
      signal?.removeEventListener("abort", onAbort);
      if (err) reject(err);
      else resolve(v!);
    };
    const onError = (e: Error) => finish(reused && !got ? new StaleConnection(e.message) : e);
    const onAbort = () => finish(new Error(String(signal?.reason ?? "aborted")));
    // An answer whose body ends with the connection.
    let untilClose: { status: number; headers: Map<string, string>; start: number } | undefined;
    const onEnd = () => {
      if (untilClose) {
        const text = buf.subarray(untilClose.start).toString("utf8");
        finish(undefined, { result: { status: untilClose.status, body: text, retryAfter: untilClose.headers.get("retry-after") ?? null }, keepAlive: false });
      } else {
        finish(reused && !got ? new StaleConnection("the connection closed") : new Error("the connection closed before the answer ended"));
      }
    };
    const onClose = onEnd;
    const onData = (chunk: Buffer) => {
      got = true;
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      if (buf.length > MAX_ANSWER_BYTES) return finish(new Error(`the answer is larger than ${MAX_ANSWER_BYTES} bytes`));
      if (untilClose) return;
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
        const m = /^HTTP\/1\.([01]) (\d{3})/.exec(lines[0] ?? "");
        if (!m) return finish(new Error(`not an HTTP/1.1 answer: ${JSON.stringify((lines[0] ?? "").slice(0, 64))}`));
        const status = Number(m[2]);
        const hs = new Map<string, string>();
        for (const l of lines.slice(1)) {
          const i = l.indexOf(":");
          if (i > 0) hs.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
        }
        if (status >= 100 && status < 200) {
          buf = buf.subarray(end + 4); // 100 Continue and the like: the answer follows
          continue;
        }
        const conn = (hs.get("connection") ?? "").toLowerCase();
        const keepAlive = m[1] === "1" ? conn !== "close" : conn === "keep-alive";
        const start = end + 4;
        const answer = (text: string, rest: number) =>
          finish(undefined, { result: { status, body: text, retryAfter: hs.get("retry-after") ?? null }, keepAlive: keepAlive && rest === buf.length });
        if ((hs.get("transfer-encoding") ?? "").toLowerCase().includes("chunked")) {
          const parts: Buffer[] = [];
          let at = start;
          for (;;) {
            const nl = buf.indexOf("\r\n", at);
            if (nl < 0) return;
            const size = parseInt(buf.subarray(at, nl).toString("latin1").split(";")[0]!, 16);
            if (Number.isNaN(size)) return finish(new Error("a malformed chunked answer"));
            if (size === 0) {
              const trailerEnd = buf.indexOf("\r\n\r\n", nl);
              if (buf.indexOf("\r\n", nl + 2) === nl + 2) return answer(Buffer.concat(parts).toString("utf8"), nl + 4);
              if (trailerEnd < 0) return;
              return answer(Buffer.concat(parts).toString("utf8"), trailerEnd + 4);
            }
            if (buf.length < nl + 2 + size + 2) return;
            if (buf[nl + 2 + size] !== 13 || buf[nl + 3 + size] !== 10) return finish(new Error("a malformed chunked answer"));
            parts.push(buf.subarray(nl + 2, nl + 2 + size));
            at = nl + 2 + size + 2;
          }
        }
        const cl = hs.get("content-length");
        if (cl !== undefined) {
          const n = Number(cl);
          if (!Number.isInteger(n) || n < 0) return finish(new Error(`a bad Content-Length ${JSON.stringify(cl)}`));
          if (buf.length < start + n) return;
          return answer(buf.subarray(start, start + n).toString("utf8"), start + n);
        }
        if (status === 204 || status === 304) return answer("", start);
        untilClose = { status, headers: hs, start };
        return;
      }
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    socket.on("data", onData);
    socket.on("error", onError);
    socket.on("close", onClose);
    socket.on("end", onEnd);
    socket.write(payload);
  });
}
