// The README's Next.js route handler (section Next.js), run by test/frameworks.test.ts.
import { createFunction, serve } from "../src/index.js";

const hello = createFunction<{ name: string }>({ name: "hello" }, async ({ input, step }) => {
  const greeting = await step.run("greet", () => `Hello, ${input.name}!`);
  await step.sleep("pause", "1s");
  return greeting;
});

const handler = serve({ functions: [hello], signingKeys: process.env.STEPGATE_PUBLIC_KEYS, basePath: "/api/stepgate" });

export async function GET(req: Request) {
  return handler(req);
}

export async function POST(req: Request) {
  return handler(req);
}
