// The README's Hono app (section Hono), run by test/frameworks.test.ts.
import { Hono } from "hono";
import { createFunction, serve } from "../src/index.js";

const hello = createFunction<{ name: string }>({ name: "hello" }, async ({ input, step }) => {
  const greeting = await step.run("greet", () => `Hello, ${input.name}!`);
  await step.sleep("pause", "1s");
  return greeting;
});

const stepgate = serve({ functions: [hello], signingKeys: process.env.STEPGATE_PUBLIC_KEYS, basePath: "/api/stepgate" });

const app = new Hono();
app.all("/api/stepgate", (c) => stepgate(c.req.raw));
app.all("/api/stepgate/:fn", (c) => stepgate(c.req.raw));

export default app; // Bun, Deno, Workers; on Node, @hono/node-server's serve({ fetch: app.fetch })
