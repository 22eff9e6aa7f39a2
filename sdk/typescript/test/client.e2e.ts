// The client against a real gateway: run by the Go test TestTypeScriptClient
// (cmd/stepgate/typescript_e2e_test.go), which starts `stepgate dev` and runs
//
//   STEPGATE_URL=... STEPGATE_TOKEN=... STEPGATE_PUBLIC_KEYS=... node --test dist/test/client.e2e.js
//
// This file serves its own functions with the SDK's Node server, registers them with the
// gateway (POST /v1/apps), and calls them with the Client: a typed run, start and attach,
// cancel, an event that resumes a waiting run, a message, a start with a message (and
// its refusals for a second tenant and a token without events:send), a request and its
// reply, values and a stream, and a start retried after a 503 through a proxy that
// starts one run only.
import assert from "node:assert/strict";
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { Client, ConflictError, ForbiddenError, NotFoundError, RunCancelledError, RunFailedError, WaitTimeoutError, createFunction, eventRef, ref } from "../src/index.js";
import { serveNode } from "../src/node.js";

const url = process.env.STEPGATE_URL ?? "";
const token = process.env.STEPGATE_TOKEN ?? "";
const keys = process.env.STEPGATE_PUBLIC_KEYS ?? "";
// A token of a second tenant, and one of this tenant with runs:invoke alone.
const secondTenantToken = process.env.STEPGATE_SECOND_TENANT_TOKEN ?? "";
const invokeOnlyToken = process.env.STEPGATE_INVOKE_ONLY_TOKEN ?? "";
const skip =
  url === "" || token === "" || keys === "" || secondTenantToken === "" || invokeOnlyToken === ""
    ? "needs STEPGATE_URL, STEPGATE_TOKEN, STEPGATE_PUBLIC_KEYS, STEPGATE_SECOND_TENANT_TOKEN and STEPGATE_INVOKE_ONLY_TOKEN (a gateway): go test -run TestTypeScriptClient ./cmd/stepgate"
    : false;

const greet = createFunction({ name: "client.greet" }, async ({ input, step }: { input: { name: string }; step: import("../src/index.js").Step }) => {
  const greeting = await step.run("greet", () => `hello ${input.name}`);
  return { greeting, at: new Date(0) };
});
const sleeper = createFunction({ name: "client.sleeper" }, async ({ step }) => {
  await step.sleep("nap", "1h");
  return "woke";
});
const waiter = createFunction({ name: "client.waiter" }, async ({ input, step }: { input: { order: string }; step: import("../src/index.js").Step }) => {
  const ev = await step.waitForEvent<{ order: string; paid: number }>("paid", { event: "client.paid", match: { "data.order": input.order }, timeout: "5m" });
  return { order: ev.data.order, paid: ev.data.paid };
});
const inbox = createFunction({ name: "client.inbox" }, async ({ step }) => {
  const m = await step.receive<{ approved: boolean }>("approval", { timeout: "5m" });
  return { approved: m.data.approved, id: m.id };
});
const pricer = createFunction({ name: "client.pricer" }, async ({ step }) => {
  const r = await step.receiveRequest<{ sku: string }>("price", { timeout: "5m" });
  await step.reply(r.id, { sku: r.data.sku, price: 10 });
  return "replied";
});
const publisher = createFunction({ name: "client.publisher" }, async ({ step }) => {
  await step.setValue("progress", { done: 1 });
  const out = step.stream("tokens");
  await out.write("a");
  await out.write("b");
  await out.send({ n: 3 });
  await out.close();
  await step.setValue("progress", { done: 2 });
  return "published";
});
const all = [greet, sleeper, waiter, inbox, pricer, publisher];

let app: Server;
let client: Client;

before(async () => {
  if (skip) return;
  app = createServer(serveNode({ functions: all, signingKeys: keys, basePath: "/fns" }));
  await new Promise<void>((r) => app.listen(0, "127.0.0.1", r));
  const appURL = `http://127.0.0.1:${(app.address() as AddressInfo).port}/fns`;
  const resp = await fetch(`${url}/v1/apps`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ url: appURL }),
  });
  assert.equal(resp.status, 200, `sync ${appURL}: ${await resp.text()}`);
  client = new Client({ url, token });
});

after(async () => {
  if (skip) return;
  app.closeAllConnections();
  await new Promise((r) => app.close(r));
});

/** Waits, up to 30s, until run id has status. */
async function until(id: string, status: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = await client.get(id);
    if (r.status === status) return;
    assert.ok(Date.now() < deadline, `run ${id} is ${r.status}, not ${status}, after 30s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("run: a typed start-and-wait returns the function's output", { skip }, async () => {
  const out = await client.run(greet, { name: "Ada" }, { wait: "60s" });
  assert.deepEqual(out, { greeting: "hello Ada", at: "1970-01-01T00:00:00.000Z" });
  // A ref and a bare name call the same function.
  const byRef = await client.startAndWait(ref<{ name: string }, { greeting: string }>("client.greet"), { name: "Bo" });
  assert.equal(byRef.greeting, "hello Bo");
});

test("start, then attach", { skip }, async () => {
  const started = await client.start(greet, { name: "Cy" });
  assert.match(started.id, /^[0-9a-f-]{36}$/);
  const out = await client.attach(started, { wait: "60s" });
  assert.equal(out.greeting, "hello Cy");
  // The same idempotency key answers the same run.
  const a = await client.start(greet, { name: "Di" }, { idempotencyKey: "client-key-1" });
  const b = await client.start(greet, { name: "Di" }, { idempotencyKey: "client-key-1" });
  assert.equal(a.id, b.id);
  await assert.rejects(client.start(greet, { name: "Ed" }, { idempotencyKey: "client-key-1" }), (e: unknown) => e instanceof ConflictError && e.status === 409 && e.code === "conflict");
});

test("cancel: attach throws RunCancelledError; a wait that runs out throws WaitTimeoutError", { skip }, async () => {
  const started = await client.start(sleeper, null);
  await until(started.id, "suspended");
  await assert.rejects(client.attach(started, { wait: 50 }), (e: unknown) => e instanceof WaitTimeoutError && e.runId === started.id && e.status === "suspended");
  const cancelled = await client.cancel(started.id);
  assert.equal(cancelled.status, "cancelled");
  await assert.rejects(client.attach(started), (e: unknown) => e instanceof RunCancelledError && e instanceof RunFailedError && e.runId === started.id);
  await assert.rejects(client.cancel(started.id), ConflictError);
  await assert.rejects(client.get("00000000-0000-0000-0000-000000000000"), (e: unknown) => e instanceof NotFoundError && e.status === 404);
});

test("sendEvent resumes a run waiting for it", { skip }, async () => {
  const started = await client.start(waiter, { order: "o-7" });
  await until(started.id, "suspended");
  const receipt = await client.sendEvent(eventRef<{ order: string; paid: number }>("client.paid"), { order: "o-7", paid: 42 });
  assert.deepEqual(receipt.resumed, [started.id]);
  assert.deepEqual(await client.attach(started, { wait: "60s" }), { order: "o-7", paid: 42 });
});

test("send: a message to a run's mailbox", { skip }, async () => {
  const started = await client.start(inbox, null);
  const receipt = await client.send(started.id, "approval", { approved: true }, { id: "approval-1" });
  assert.equal(receipt.id, "approval-1");
  assert.deepEqual(await client.attach<{ approved: boolean; id: string }>(started.id, { wait: "60s" }), { approved: true, id: "approval-1" });
});

test("startWithMessage: the run of a key, started with the message in its mailbox, once", { skip }, async () => {
  const key = `with-message-${Date.now()}`;
  const approval = { topic: "approval", data: { approved: true } };
  const first = await client.startWithMessage(inbox, null, approval, { idempotencyKey: key });
  assert.equal(first.created, true);
  assert.equal(first.message.id, key);
  assert.equal(first.message.topic, "approval");
  assert.equal(first.message.run_id, first.id);
  // A retry answers the same run and the first message, and sends nothing again.
  const again = await client.startWithMessage(inbox, null, approval, { idempotencyKey: key });
  assert.equal(again.id, first.id);
  assert.equal(again.created, false);
  assert.equal(again.message.duplicate, true);
  assert.deepEqual(await client.attach(first, { wait: "60s" }), { approved: true, id: key });
  // Another message under the key of a run that finished without it: a conflict.
  await assert.rejects(client.startWithMessage(inbox, null, { topic: "approval", data: { approved: false } }, { idempotencyKey: key }), ConflictError);
  // No key: refused before any request.
  await assert.rejects(client.startWithMessage(inbox, null, approval, { idempotencyKey: "" }), /opts\.idempotencyKey is required/);
});

test("startWithMessage: another tenant has none of this tenant's functions; without events:send, a ForbiddenError and nothing stored", { skip }, async () => {
  const key = `with-message-scoped-${Date.now()}`;
  const approval = { topic: "approval", data: { approved: true } };
  const second = new Client({ url, token: secondTenantToken });
  await assert.rejects(second.startWithMessage(inbox, null, approval, { idempotencyKey: key }), NotFoundError);
  const invokeOnly = new Client({ url, token: invokeOnlyToken });
  await assert.rejects(invokeOnly.startWithMessage(inbox, null, approval, { idempotencyKey: key }), (e: unknown) => e instanceof ForbiddenError && /events:send/.test(e.message));
  // Neither stored a run nor a message under the key.
  const started = await client.startWithMessage(inbox, null, approval, { idempotencyKey: key });
  assert.equal(started.created, true);
  assert.equal(started.message.duplicate ?? false, false);
  assert.deepEqual(await client.attach(started, { wait: "60s" }), { approved: true, id: key });
});

test("request: the run's reply", { skip }, async () => {
  const started = await client.start(pricer, null);
  const reply = await client.request<{ sku: string; price: number }>(started.id, "price", { sku: "A-1" }, { wait: "60s" });
  assert.deepEqual(reply, { sku: "A-1", price: 10 });
  assert.equal(await client.attach(started.id, { wait: "60s" }), "replied");
});

test("values and a stream", { skip }, async () => {
  const started = await client.start(publisher, null);
  const chunks: unknown[] = [];
  for await (const c of client.stream(started.id, "tokens")) chunks.push(c);
  assert.deepEqual(chunks, ["a", "b", { n: 3 }]);
  assert.equal(await client.attach(started, { wait: "60s" }), "published");
  const values = await client.values(started.id);
  assert.deepEqual(values.map((v) => [v.key, v.value]), [["progress", { done: 2 }]]);
  const seen: unknown[] = [];
  for await (const v of client.watchValue(started.id, "progress")) seen.push(v);
  assert.deepEqual(seen, [{ done: 2 }]);
  // From an offset.
  const rest: unknown[] = [];
  for await (const c of client.stream(started.id, "tokens", { offset: 2 })) rest.push(c);
  assert.deepEqual(rest, [{ n: 3 }]);
});

/**
 * A proxy in front of the gateway that forwards every request; the first start it sees
 * reaches the gateway (the run is created) but its answer is replaced by a 503 with
 * Retry-After, as when a gateway's answer is lost. It records each start's
 * Idempotency-Key.
 */
async function lossyProxy(): Promise<{ url: string; keys: string[]; close: () => Promise<void> }> {
  const keys: string[] = [];
  const target = new URL(url);
  const server = createServer((req, res) => {
    const isStart = req.method === "POST" && /^\/v1\/functions\/[^/]+\/runs(\?|$)/.test(req.url!);
    if (isStart) keys.push(String(req.headers["idempotency-key"]));
    const out = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (up: IncomingMessage) => {
      if (isStart && keys.length === 1) {
        up.resume();
        res.writeHead(503, { "Retry-After": "0", "Content-Type": "application/problem+json" }).end(JSON.stringify({ title: "Service Unavailable", status: 503, detail: "lost" }));
        return;
      }
      res.writeHead(up.statusCode!, up.headers);
      up.pipe(res);
    });
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    keys,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

test("a start retried after a 503 starts one run: the retry carries the first try's idempotency key", { skip }, async () => {
  const proxy = await lossyProxy();
  try {
    const c = new Client({ url: proxy.url, token, retries: { attempts: 3, initialDelay: 1 } });
    const out = await c.run(greet, { name: "Flo" }, { wait: "60s" });
    assert.equal(out.greeting, "hello Flo");
    assert.equal(proxy.keys.length, 2, "the start was tried twice");
    assert.equal(proxy.keys[0], proxy.keys[1], "with one idempotency key");
    assert.match(proxy.keys[0]!, /^[0-9a-f-]{36}$/);
    // The gateway holds one run with the name Flo.
    const resp = await fetch(`${url}/v1/runs?function=client.greet&include=io&limit=500`, { headers: { Authorization: `Bearer ${token}` } });
    const page = (await resp.json()) as { runs: { input?: { name?: string } }[] };
    assert.equal(page.runs.filter((r) => r.input?.name === "Flo").length, 1);
  } finally {
    await proxy.close();
  }
});
