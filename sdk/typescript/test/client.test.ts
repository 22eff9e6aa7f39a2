// The client's retries and errors against a small HTTP server that answers as a gateway
// under trouble would (503, 429, a dropped connection, problem bodies). The client against
// a real gateway: test/client.e2e.ts.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { ApiError, BadRequestError, Client, NetworkError, NotFoundError, TooManyRequestsError, UnavailableError } from "../src/index.js";

/** Serves answer for each request (numbered from 0), recording each; closes after fn. */
async function withServer(answer: (n: number, req: IncomingMessage, res: ServerResponse) => void, fn: (url: string, seen: IncomingMessage[]) => Promise<void>) {
  const seen: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    seen.push(req);
    req.resume();
    req.on("end", () => answer(seen.length - 1, req, res));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    await fn(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
}

const problem = (res: ServerResponse, status: number, detail: string, headers: Record<string, string> = {}, type?: string) =>
  res.writeHead(status, { "Content-Type": "application/problem+json", ...headers }).end(JSON.stringify({ title: "x", status, detail, ...(type ? { type } : {}) }));

test("a start answered 503 and 429 is retried after Retry-After with the first try's idempotency key", async () => {
  await withServer(
    (n, _req, res) => {
      if (n === 0) return problem(res, 503, "database unreachable", { "Retry-After": "0" });
      if (n === 1) return problem(res, 429, "busy", { "Retry-After": "0" });
      res.writeHead(202, { "Content-Type": "application/json" }).end(JSON.stringify({ id: "r-1", status: "queued" }));
    },
    async (url, seen) => {
      const c = new Client({ url, token: "tok", retries: { attempts: 3, initialDelay: 1 } });
      assert.deepEqual(await c.start("f", { a: 1 }), { id: "r-1", status: "queued" });
      assert.equal(seen.length, 3);
      const keys = seen.map((r) => r.headers["idempotency-key"]);
      assert.match(String(keys[0]), /^[0-9a-f-]{36}$/);
      assert.deepEqual(keys, [keys[0], keys[0], keys[0]]);
      assert.equal(seen[0]!.headers.authorization, "Bearer tok");
      // Another start gets another key.
      await c.start("f", { a: 1 });
      assert.notEqual(seen[3]!.headers["idempotency-key"], keys[0]);
    },
  );
});

test("a dropped connection is retried; the caller's key is kept", async () => {
  await withServer(
    (n, req, res) => {
      if (n === 0) return req.socket.destroy();
      res.writeHead(202, { "Content-Type": "application/json" }).end(JSON.stringify({ id: "r-2", status: "queued" }));
    },
    async (url, seen) => {
      const c = new Client({ url, retries: { attempts: 1, initialDelay: 1 } });
      assert.equal((await c.start("f", null, { idempotencyKey: "mine" })).id, "r-2");
      assert.deepEqual(seen.map((r) => r.headers["idempotency-key"]), ["mine", "mine"]);
      assert.equal(seen[0]!.headers.authorization, undefined);
    },
  );
});

test("retries are bounded; then the error is typed", async () => {
  await withServer(
    (_n, _req, res) => problem(res, 503, "stopping", { "Retry-After": "0" }),
    async (url, seen) => {
      const c = new Client({ url, retries: { attempts: 2, initialDelay: 1 } });
      await assert.rejects(c.get("r"), (e: unknown) => e instanceof UnavailableError && e.status === 503 && e.code === "unavailable" && e.message === "stopping");
      assert.equal(seen.length, 3);
    },
  );
  await withServer(
    (n, req, res) => (n < 10 ? req.socket.destroy() : res.end()),
    async (url, seen) => {
      await assert.rejects(new Client({ url, retries: { attempts: 1, initialDelay: 1 } }).get("r"), NetworkError);
      assert.equal(seen.length, 2);
    },
  );
});

test("a Retry-After past maxDelay, and other errors, are not retried", async () => {
  await withServer(
    (n, _req, res) => {
      if (n === 0) return problem(res, 429, "throttled", { "Retry-After": "3600" });
      if (n === 1) return problem(res, 400, "bad wait");
      if (n === 2) return problem(res, 404, "no run", {}, "run_gone");
      problem(res, 418, "teapot");
    },
    async (url, seen) => {
      const c = new Client({ url, retries: { attempts: 3, initialDelay: 1, maxDelay: "10s" } });
      await assert.rejects(c.start("f", 1), TooManyRequestsError);
      await assert.rejects(c.get("r"), (e: unknown) => e instanceof BadRequestError && e.code === "bad_request");
      await assert.rejects(c.get("r"), (e: unknown) => e instanceof NotFoundError && e.code === "run_gone" && e.message === "no run");
      await assert.rejects(c.get("r"), (e: unknown) => e instanceof ApiError && e.status === 418 && e.code === "http_418");
      assert.equal(seen.length, 4);
    },
  );
});

test("run attaches when the start's wait ends first, and waits without a bound by default", async () => {
  await withServer(
    (n, req, res) => {
      if (n === 0) {
        assert.match(req.url!, /^\/v1\/functions\/f\/runs\?wait=55000ms$/);
        return res.writeHead(202, { "Content-Type": "application/json" }).end(JSON.stringify({ id: "r-3", status: "running" }));
      }
      assert.match(req.url!, /^\/v1\/runs\/r-3\/result\?wait=55000ms$/);
      if (n === 1) return res.writeHead(202, { "Content-Type": "application/json" }).end(JSON.stringify({ id: "r-3", status: "running" }));
      res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ id: "r-3", status: "completed", output: { ok: true } }));
    },
    async (url, seen) => {
      assert.deepEqual(await new Client({ url }).run("f", 1), { ok: true });
      assert.equal(seen.length, 3);
    },
  );
});
