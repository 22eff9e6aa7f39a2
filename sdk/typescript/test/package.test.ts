// The packed package, as a consumer's TypeScript sees it: `npm pack` (of dist, which npm
// test has just compiled), installed into a temporary project, and a consumer compiled
// against it under moduleResolution node10 (the types and typesVersions fields), nodenext
// and bundler (the exports map), each with lib ES2022 only (no DOM) and the Node types,
// and skipLibCheck off so that the package's own declarations are checked too.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

const sdk = fileURLToPath(new URL("../..", import.meta.url));
const tsc = join(sdk, "node_modules", "typescript", "bin", "tsc");
let work: string;

before(() => {
  work = mkdtempSync(join(tmpdir(), "stepgate-sdk-pack-"));
  execFileSync("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", work], { cwd: sdk });
  const tarball = readdirSync(work).find((f) => f.endsWith(".tgz"));
  assert.ok(tarball, "npm pack made a tarball");
  const scope = join(work, "node_modules", "@stepgate");
  mkdirSync(scope, { recursive: true });
  execFileSync("tar", ["xzf", join(work, tarball), "-C", scope]);
  renameSync(join(scope, "package"), join(scope, "sdk"));
  mkdirSync(join(work, "node_modules", "@types"));
  symlinkSync(join(sdk, "node_modules", "@types", "node"), join(work, "node_modules", "@types", "node"));
});

after(() => rmSync(work, { recursive: true, force: true }));

/** A consumer of every entry point, and of step.run's JSON typing. */
const consumer = `import { createFunction, serve, type FetchHandler, type Jsonify } from "@stepgate/sdk";
import { serveNode } from "@stepgate/sdk/node";
import { toLambdaHandler } from "@stepgate/sdk/lambda";
import { harness, type Outcome } from "@stepgate/sdk/testing";
import { Client, ref } from "@stepgate/sdk/client";

const hello = createFunction({ name: "hello" }, async ({ step }) => {
  const at: string = await step.run("at", () => new Date());
  return at;
});
const handler: FetchHandler = serve({ functions: [hello], signingKeys: "key" });
export const listener = serveNode({ functions: [hello] });
export const lambda = toLambdaHandler(handler);
export const outcome: Promise<Outcome> = harness(hello).start().result();
export const when: Jsonify<{ at: Date }> = { at: "2026-01-01T00:00:00Z" };
export const output: Promise<string> = new Client({ url: "http://127.0.0.1:8080" }).run(hello, null);
export const priced: Promise<number> = new Client({ url: "http://127.0.0.1:8080", retries: 0 }).run(ref<{ sku: string }, number>("price"), { sku: "A" });
`;

const settings: Record<string, { module: string; moduleResolution: string; type?: "module" }> = {
  node10: { module: "commonjs", moduleResolution: "node10" },
  nodenext: { module: "nodenext", moduleResolution: "nodenext", type: "module" },
  bundler: { module: "esnext", moduleResolution: "bundler" },
};

for (const [name, s] of Object.entries(settings)) {
  test(`a consumer compiles under moduleResolution ${s.moduleResolution}, with lib ES2022 and no DOM`, () => {
    const dir = join(work, name);
    mkdirSync(dir);
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: `consumer-${name}`, private: true, ...(s.type ? { type: s.type } : {}) }));
    writeFileSync(join(dir, "consumer.ts"), consumer);
    const compilerOptions = {
      target: "ES2022", module: s.module, moduleResolution: s.moduleResolution, lib: ["ES2022"], types: ["node"],
      strict: true, skipLibCheck: false, noEmit: true,
    };
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["consumer.ts"] }));
    try {
      execFileSync(process.execPath, [tsc, "-p", dir], { encoding: "utf8" });
    } catch (e) {
      assert.fail(`tsc under ${name}:\n${(e as { stdout?: string }).stdout ?? String(e)}`);
    }
  });
}
