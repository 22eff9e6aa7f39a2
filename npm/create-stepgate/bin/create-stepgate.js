#!/usr/bin/env node
// create-stepgate scaffolds a stepgate app in TypeScript:
//
//   npm create stepgate@latest my-app
//   create-stepgate --packages DIR my-app
//
// It copies template/ into the new folder, with a package.json whose @stepgate/sdk and
// stepgate are this package's version, and refuses a folder that is not empty. With
// --packages, they come from the tarballs in DIR (`go run ./internal/tooling/npmdist -out DIR
// -sdk` in a stepgate checkout makes them) instead of the registry.
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { basename, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL("..", import.meta.url));
const { version } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const usage = "usage: npm create stepgate@latest <folder>\n   or: create-stepgate --packages <dir of tarballs> <folder>";

function fail(message) {
  process.stderr.write(`create-stepgate: ${message}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
if (args.includes("-h") || args.includes("--help")) {
  process.stdout.write(`${usage}\n\nMakes <folder> a stepgate app in TypeScript: a function, its server, and the scripts to run them.\n`);
  process.exit(0);
}
let packagesDir;
const at = args.indexOf("--packages");
if (at >= 0) {
  if (at + 1 >= args.length) fail(`--packages wants a directory\n${usage}`);
  packagesDir = resolve(args[at + 1]);
  args.splice(at, 2);
}
if (args.length !== 1 || args[0].startsWith("-")) fail(`want one folder\n${usage}`);

// fromPackages returns the dependencies and overrides that install @stepgate/sdk, stepgate
// and its platform packages from the tarballs in packagesDir.
function fromPackages() {
  const files = existsSync(packagesDir) ? readdirSync(packagesDir) : [];
  const tarball = (file) => {
    if (!files.includes(file)) {
      fail(`${packagesDir} has no ${file}: make the packages with \`go run ./internal/tooling/npmdist -out ${packagesDir} -sdk\` in a stepgate checkout`);
    }
    return `file:${join(packagesDir, file)}`;
  };
  const overrides = {};
  for (const f of files) {
    const m = /^stepgate-cli-([a-z]+-[a-z0-9]+)-(.+)\.tgz$/.exec(f);
    if (m && m[2] === version) overrides[`@stepgate/cli-${m[1]}`] = `file:${join(packagesDir, f)}`;
  }
  if (Object.keys(overrides).length === 0) fail(`${packagesDir} has no stepgate-cli-<os>-<cpu>-${version}.tgz: make them with \`go run ./internal/tooling/npmdist -out ${packagesDir} -sdk\``);
  return { sdk: tarball(`stepgate-sdk-${version}.tgz`), stepgate: tarball(`stepgate-${version}.tgz`), overrides };
}
const local = packagesDir === undefined ? undefined : fromPackages();

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
if (local) {
  pkg.dependencies["@stepgate/sdk"] = local.sdk;
  pkg.devDependencies.stepgate = local.stepgate;
  pkg.overrides = local.overrides;
}
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
