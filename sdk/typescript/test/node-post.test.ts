import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { nodePost } from "../src/node-post.js";

// A raw HTTP server whose answers each test writes by hand: nodePost must read every
// framing a gateway (or a proxy before it) may use.
let server: Server;
let url = "";
let answer: (req: string, socket: Socket) => void = () => {};
const requests: string[] = [];
const sockets = new Set<Socket>();

before(async () => {
  server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    let buf = "";
    socket.on("data", (d) => {
      buf += d.toString();
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        const req = buf.slice(0, end + 4 + len);
        buf = buf.slice(end + 4 + len);
        requests.push(req);
        answer(req, socket);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/checkpoint/x?y=1`;
});
after(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => server.close(r));
});

const post = (signal?: AbortSignal) => nodePost(url, { "Content-Type": "application/json", Authorization: "Bearer t" }, '{"seq":1}', signal);

test("the request is one POST with its headers and body; Content-Length answers are read and the connection reused", async () => {
  requests.length = 0;
  answer = (_r, s) => s.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{"seq":1}');
  assert.deepEqual(await post(), { status: 200, body: '{"seq":1}', retryAfter: null });
  assert.deepEqual(await post(), { status: 200, body: '{"seq":1}', retryAfter: null });
  assert.equal(requests[0], 'POST /checkpoint/x?y=1 HTTP/1.1\r\nHost: ' + new URL(url).host + '\r\nContent-Type: application/json\r\nAuthorization: Bearer t\r\nContent-Length: 9\r\n\r\n{"seq":1}');
  assert.equal(sockets.size, 1, "one connection for both");
});

test("chunked answers, 1xx answers and Retry-After", async () => {
  answer = (_r, s) => {
    s.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nTransfer-Encoding: chunked\r\n\r\n");
    setTimeout(() => s.write('4\r\n{"de\r\na\r\ntail":"x"}\r\n0\r\n\r\n'), 5);
  };
  assert.deepEqual(await post(), { status: 503, body: '{"detail":"x"}', retryAfter: "2" });
});

test("an answer that ends with the connection, and Connection: close", async () => {
  answer = (_r, s) => s.end("HTTP/1.1 409 Conflict\r\nConnection: close\r\n\r\nno length");
  assert.deepEqual(await post(), { status: 409, body: "no length", retryAfter: null });
});

test("a kept connection the server closed meanwhile is replaced, not an error", async () => {
  answer = (_r, s) => s.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  await post();
  let first = true;
  answer = (_r, s) => {
    if (first) {
      first = false;
      s.destroy(); // as a server's idle timeout races the request
      return;
    }
    s.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh");
  };
  assert.deepEqual(await post(), { status: 200, body: "fresh", retryAfter: null });
});

test("an abort ends the wait; a refused connection rejects", async () => {
  answer = () => {}; // never answers
  const ac = new AbortController();
  const p = post(ac.signal);
  setTimeout(() => ac.abort(new Error("the gateway went away")), 10);
  await assert.rejects(p, /the gateway went away/);
  await assert.rejects(nodePost("http://127.0.0.1:1/x", {}, "{}"), /ECONNREFUSED/);
  await assert.rejects(nodePost(url, { Authorization: "Bearer a\r\nX: y" }, "{}"), /line break/);
});
