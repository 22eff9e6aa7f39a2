import { createServer } from "node:http";
import { createFunction } from "../src/index.js";
import { serveNode } from "../src/node.js";

const checkout = createFunction<{ item: string }>({ name: "checkout" }, async ({ input, step, identity }) => {
  const order = await step.run("reserve", () => ({ id: `o-${input.item}` }));
  await step.sleep("cool-off", "5s");
  const charged = await step.run("charge", () => 42);
  const tracking = await step.run("ship", () => `TRACK-${order.id}`);
  return { order: order.id, charged, tracking, by: identity.subject };
});

const port = Number(process.env.PORT ?? 3000);
createServer(serveNode({
  functions: [checkout],
  signingKeys: process.env.STEPGATE_PUBLIC_KEYS,
  basePath: "/api/stepgate",
})).listen(port, () => console.log(`serving http://127.0.0.1:${port}/api/stepgate`));
