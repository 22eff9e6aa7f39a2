import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { createFunction, serve } from "../src/index.js";
import { serveNode, toNodeListener } from "../src/node.js";

// An oversized body is refused with 413 as soon as its count (or its Content-Length)
// passes maxBodyBytes: the rest is neither read nor buffered, whatever the framing.
const MAX = 1 << 20;
const fn = createFunction({ name: "hello" }, () => "hi");

describe("maxBodyBytes", () => {
  /**
   * Sends a body of total bytes to the Node adapter from a raw socket, a chunk at a time
   * as the socket takes them, until the server answers. It returns the answer, the bytes
   * the client had sent when it came, and the bytes the server had read off its socket
   * when it answered.
   */
  async function sendToNode(total: number, framing: "content-length" | "chunked") {
    const listener = serveNode({ functions: [fn], insecureSkipVerify: true, maxBodyBytes: MAX });
    let readAtAnswer = -1;
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      res.on("finish", () => (readAtAnswer = req.socket.bytesRead));
      listener(req, res);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const socket = connect((server.address() as AddressInfo).port, "127.0.0.1");
    try {
      let answer = "";
      let done = false;
      const answered = new Promise<void>((resolve, reject) => {
        socket.on("data", (d) => {
          answer += d.toString("latin1");
          if (answer.includes("\r\n\r\n")) resolve();
        });
        socket.on("error", reject);
        socket.on("close", () => reject(new Error(`the connection closed before an answer: ${JSON.stringify(answer)}`)));
      });
      const over = answered.then(() => (done = true), () => (done = true));

      const head = framing === "chunked" ? "Transfer-Encoding: chunked" : `Content-Length: ${total}`;
      socket.write(`POST /hello HTTP/1.1\r\nHost: app\r\nContent-Type: application/json\r\n${head}\r\n\r\n`);
      const chunk = Buffer.alloc(64 << 10, "x");
      let sent = 0;
      while (!done && sent < total) {
        const part = framing === "chunked" ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")]) : chunk;
        sent += chunk.length;
        if (!socket.write(part)) await Promise.race([new Promise((r) => socket.once("drain", r)), over]);
      }
      if (!done && framing === "chunked") socket.write("0\r\n\r\n");
      await answered;
      return { answer, sent, readAtAnswer };
    } finally {
      socket.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  }

  for (const framing of ["content-length", "chunked"] as const) {
    test(`the Node adapter answers 413 to a ${framing} body over the bound before the client has sent it, having read no more than the bound`, async () => {
      const total = 64 << 20;
      const { answer, sent, readAtAnswer } = await sendToNode(total, framing);
      assert.match(answer, /^HTTP\/1\.1 413 /);
      assert.match(answer, /\r\nconnection: close\r\n/i);
      assert.match(answer, /"type":"too_large","message":"the body is larger than 1048576 bytes"/);
      assert.ok(sent < total, `the client had sent all ${total} bytes before the answer`);
      assert.ok(readAtAnswer >= 0 && readAtAnswer <= 2 * MAX, `the server had read ${readAtAnswer} bytes when it answered (the bound is ${MAX})`);
    });
  }

  test("the Node adapter keeps the connection of a body within the bound", async () => {
    const listener = serveNode({ functions: [fn], insecureSkipVerify: true, maxBodyBytes: MAX });
    const server = createServer(listener);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hello`;
      const resp = await fetch(url, { method: "POST", body: "x".repeat(MAX) });
      assert.equal(resp.status, 400, "read whole, then refused as not JSON");
      assert.match(((await resp.json()) as any).message, /decode invocation/);
      assert.notEqual(resp.headers.get("connection"), "close");
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  for (const [what, handler] of [
    ["answers", async () => new Response("no", { status: 403 })],
    ["throws", async () => { throw new Error("boom"); }],
  ] as const) {
    test(`a Fetch handler that ${what} before the body has arrived is answered, and the connection closed`, { timeout: 30_000 }, async () => {
      const server = createServer(toNodeListener(handler));
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      const socket = connect((server.address() as AddressInfo).port, "127.0.0.1");
      try {
        let answer = "";
        const closed = new Promise<void>((resolve) => {
          socket.on("data", (d) => (answer += d.toString("latin1")));
          socket.on("error", () => {});
          socket.on("close", () => resolve());
        });
        // The body's first chunk, and not its end: the answer cannot wait for it.
        socket.write("POST /x HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
        await closed;
        assert.match(answer, what === "answers" ? /^HTTP\/1\.1 403 / : /^HTTP\/1\.1 500 /);
        assert.match(answer, /\r\nconnection: close\r\n/i);
      } finally {
        socket.destroy();
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      }
    });
  }

  /** A body of total bytes, made as it is read, that counts what its reader pulled. */
  function counted(total: number) {
    const chunk = new Uint8Array(64 << 10);
    const seen = { pulled: 0, cancelled: false };
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        if (seen.pulled >= total) return c.close();
        seen.pulled += chunk.length;
        c.enqueue(chunk);
      },
      cancel() {
        seen.cancelled = true;
      },
    });
    return { body, seen };
  }

  for (const [what, headers] of [
    ["a stream with no length", {}],
    ["a Content-Length that lies", { "Content-Length": "2" }],
  ] as const) {
    test(`a Fetch handler's Request body over the bound, ${what}, is read only up to the bound`, async () => {
      const h = serve({ functions: [fn], insecureSkipVerify: true, maxBodyBytes: MAX });
      const total = 400 << 20;
      const { body, seen } = counted(total);
      const resp = await h(new Request("http://app/hello", { method: "POST", headers, body, duplex: "half" }));
      assert.equal(resp.status, 413);
      assert.deepEqual(await resp.json(), { type: "too_large", message: "the body is larger than 1048576 bytes" });
      assert.ok(seen.pulled <= MAX + 2 * (64 << 10), `pulled ${seen.pulled} of ${total} bytes`);
      assert.ok(seen.cancelled, "the body's stream is cancelled");
    });
  }

  test("a declared Content-Length over the bound is refused before any of the body is read", async () => {
    const h = serve({ functions: [fn], insecureSkipVerify: true, maxBodyBytes: MAX });
    const { body, seen } = counted(400 << 20);
    const resp = await h(new Request("http://app/hello", { method: "POST", headers: { "Content-Length": String(400 << 20) }, body, duplex: "half" }));
    assert.equal(resp.status, 413);
    assert.ok(seen.pulled <= 2 * (64 << 10), `pulled ${seen.pulled} bytes`); // what the stream queued on its own
    assert.ok(seen.cancelled);
  });
});
