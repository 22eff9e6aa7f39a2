import { createFunction } from "@stepgate/sdk";

// A durable function: each step.run is journaled by the gateway once it finishes, and
// the sleep suspends the run. When it ends, the gateway calls the function again with
// the journal, and "greet" returns its journaled output instead of running again.
export const welcome = createFunction<{ name: string }>({ name: "welcome" }, async ({ input, step }) => {
  const greeting = await step.run("greet", () => `Hello, ${input.name}!`);
  await step.sleep("pause", "3s");
  const at = await step.run("done", () => new Date().toISOString());
  return { greeting, at };
});

export const functions = [welcome];
