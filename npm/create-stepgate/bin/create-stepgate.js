#!/usr/bin/env node
// create-stepgate scaffolds a stepgate app in TypeScript:
//
//   npm create stepgate@latest my-app
//
// It copies template/ into the new folder, with a package.json whose @stepgate/sdk and
// stepgate are this package's version, and refuses a folder that is not empty.
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { basename, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL("..", import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const usage = "usage: npm create stepgate@latest <folder>";

function fail(message) {
  process.stderr.write(`create-stepgate: ${message}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
if (args.includes("-h") || args.includes("--help")) {
  process.stdout.write(`${usage}\n\nMakes <folder> a stepgate app in TypeScript: a function, its server, and the scripts to run them.\n`);
  process.exit(0);
}
if (args.length !== 1 || args[0].startsWith("-")) fail(`want one folder\n${usage}`);

const dir = resolve(args[0]);
if (existsSync(dir) && readdirSync(dir).length > 0) {
  fail(`${dir} is not empty: choose a new folder, or empty it first`);
}
mkdirSync(dir, { recursive: true });

cpSync(join(here, "template"), dir, { recursive: true });
// npm leaves .gitignore and .env out of a package, so the template has them without their dot.
renameSync(join(dir, "gitignore"), join(dir, ".gitignore"));
renameSync(join(dir, "env"), join(dir, ".env"));

const name = basename(dir).toLowerCase().replace(/[^a-z0-9._-]+/g, "-").replace(/^[._-]+/, "") || "stepgate-app";
const readme = join(dir, "README.md");
writeFileSync(readme, readFileSync(readme, "utf8").replaceAll("{{name}}", name));

const pkg = {
  name,
  version: "0.1.0",
  private: true,
  type: "module",
  scripts: {
    dev: "tsx watch --env-file=.env src/server.ts",
    gateway: "stepgate dev",
    sync: "stepgate apps sync http://127.0.0.1:3000/",
    typecheck: "tsc --noEmit",
  },
  dependencies: {
    "@stepgate/sdk": `^${version}`,
  },
  devDependencies: {
    "@types/node": "^20.19.0",
    stepgate: `^${version}`,
    tsx: "^4.20.0",
    typescript: "^5.9.3",
  },
  engines: {
    node: ">=20.6",
  },
};
writeFileSync(join(dir, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);

const cd = relative(process.cwd(), dir) || ".";
process.stdout.write(`Created a stepgate app in ${dir}

Next:
  cd ${cd}
  npm install
  npm run gateway     # a local gateway and dashboard; copy the key it prints into .env
  npm run dev         # in a second terminal: serves src/functions.ts
  npm run sync        # in a third, after the export line the gateway printed: registers the functions

README.md has the rest.
`);
