// Every TypeScript code block (```ts or ```typescript) of the repository's README.md, of
// its docs/*.md and of this package's README.md compiles: each is written to a file of
// its own, importing the SDK as a user does ("@stepgate/sdk", mapped to src/), and tsc
// checks them all with lib ES2022 and the Node types.
//
// A block that is whole (its imports and declarations in it) is compiled as it is. A
// fragment (a few lines of a function: `step` and the user's own helpers come from
// around it) is marked by an HTML comment just before it, which readers do not see, and
// which carries the declarations it needs:
//
//     <!-- ts-fragment
//     declare const step: import("@stepgate/sdk").Step;
//     -->
//
// The checker appends them to the block (so that tsc's line numbers are the block's).
//
// A block that names its source with an example comment just before it
// (<!-- example: sdk/typescript/examples/tour.ts -->, or PATH#REGION for a region of
// it) is compiled where it lives when that is this package's src/, test/ or examples/
// (tsconfig.json's include), and not again here: the Go test internal/tooling/readme's
// TestExampleBlocks checks that the block equals its source, in every language.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const sdk = fileURLToPath(new URL("../..", import.meta.url));
const repo = join(sdk, "..", "..");

/** The markdown files whose blocks compile, by the name their blocks' files take. */
function markdownFiles(): Record<string, string> {
  const files: Record<string, string> = { "README.md": join(repo, "README.md"), "sdk-README.md": join(sdk, "README.md") };
  for (const name of readdirSync(join(repo, "docs")).filter((n) => n.endsWith(".md")).sort()) {
    files[`docs-${name}`] = join(repo, "docs", name);
  }
  return files;
}

/** The directories, relative to the repository, that tsconfig.json compiles. */
const compiledHere = ["sdk/typescript/src/", "sdk/typescript/test/", "sdk/typescript/examples/"];

/** A block of a README: where it starts (the line after its fence), its code, its fragment declarations, and the example it shows. */
interface Block {
  line: number;
  code: string;
  fragment?: string;
  example?: string;
}

/** The TypeScript blocks of markdown. */
export function tsBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  const re = /(?:<!--\s*ts-fragment\b([\s\S]*?)-->[ \t]*\n)?(?:<!--\s*example:\s*(\S+?)\s*-->[ \t]*\n)?```(?:ts|typescript)(?:[ \t][^\n]*)?\n([\s\S]*?)```/g;
  for (const m of markdown.matchAll(re)) {
    const fence = m.index + m[0].indexOf("```");
    const line = markdown.slice(0, fence).split("\n").length + 1;
    const b: Block = { line, code: m[3]! };
    if (m[1] !== undefined) b.fragment = m[1].trim();
    if (m[2] !== undefined) b.example = m[2];
    blocks.push(b);
  }
  return blocks;
}

test("tsBlocks finds ```ts and ```typescript blocks, their fragments and examples", () => {
  const md = [
    "```ts", "a;", "```",
    "```typescript", "b;", "```",
    "<!-- ts-fragment", "declare const c: number;", "-->", "```ts", "c;", "```",
    "<!-- example: sdk/typescript/examples/tour.ts#run -->", "```typescript", "d;", "```",
    "```tsx", "e;", "```",
    "```js", "f;", "```", "",
  ].join("\n");
  assert.deepEqual(tsBlocks(md), [
    { line: 2, code: "a;\n" },
    { line: 5, code: "b;\n" },
    { line: 11, code: "c;\n", fragment: "declare const c: number;" },
    { line: 15, code: "d;\n", example: "sdk/typescript/examples/tour.ts#run" },
  ]);
});

test("every TypeScript block of the READMEs and docs/*.md compiles", () => {
  const dir = join(sdk, "dist", "readme-blocks");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const files: string[] = [];
  for (const [name, path] of Object.entries(markdownFiles())) {
    for (const b of tsBlocks(readFileSync(path, "utf8"))) {
      if (b.example !== undefined && compiledHere.some((dir) => b.example!.startsWith(dir))) continue;
      // Named after the README and the block's first line, as tsc's errors will say.
      const file = `${name}.${b.line}.ts`;
      writeFileSync(join(dir, file), b.fragment === undefined ? b.code : `${b.code}\n${b.fragment}\nexport {};\n`);
      files.push(file);
    }
  }
  assert.ok(files.length >= 8, `the READMEs have their blocks: ${files.join(", ")}`);
  const src = join(sdk, "src");
  const compilerOptions = {
    target: "ES2022", module: "esnext", moduleResolution: "bundler", lib: ["ES2022"], types: ["node"],
    strict: true, noEmit: true, skipLibCheck: true, allowImportingTsExtensions: true,
    paths: {
      "@stepgate/sdk": [join(src, "index.ts")],
      "@stepgate/sdk/node": [join(src, "node.ts")],
      "@stepgate/sdk/lambda": [join(src, "lambda.ts")],
      "@stepgate/sdk/testing": [join(src, "testing.ts")],
      "@stepgate/sdk/client": [join(src, "client.ts")],
    },
  };
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files }));
  try {
    execFileSync(process.execPath, [join(sdk, "node_modules", "typescript", "bin", "tsc"), "-p", dir], { encoding: "utf8" });
  } catch (e) {
    assert.fail(`a block does not compile (file NAME.<line>.ts: the block starting at that line of NAME, where docs-X.md is docs/X.md and sdk-README.md this package's README):\n${(e as { stdout?: string }).stdout ?? String(e)}`);
  }
});
