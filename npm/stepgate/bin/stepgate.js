#!/usr/bin/env node
// The stepgate command from npm. The binary itself is in a package of its platform,
// @stepgate/cli-<os>-<cpu>, one of this package's optional dependencies: npm installs
// the one whose "os" and "cpu" match the machine and skips the others. This runs it
// with the same arguments, standard streams and exit code, and passes it SIGINT and
// SIGTERM.
"use strict";

const { spawn } = require("node:child_process");
const { version } = require("../package.json");

const packages = {
  "darwin arm64": "@stepgate/cli-darwin-arm64",
  "darwin x64": "@stepgate/cli-darwin-x64",
  "linux arm64": "@stepgate/cli-linux-arm64",
  "linux x64": "@stepgate/cli-linux-x64",
};

function fail(message) {
  process.stderr.write(`stepgate: ${message}\n`);
  process.exit(1);
}

function binaryPath() {
  const platform = `${process.platform} ${process.arch}`;
  const pkg = packages[platform];
  if (pkg === undefined) {
    fail(
      `the npm package has no stepgate binary for ${process.platform}-${process.arch} ` +
        `(it has ${Object.keys(packages).map((k) => k.replace(" ", "-")).join(", ")}).\n` +
        `Build it with Go instead: go install github.com/stepgate/stepgate/cmd/stepgate@v${version}`,
    );
  }
  try {
    return require.resolve(`${pkg}/bin/stepgate`);
  } catch {
    fail(
      `the package ${pkg}, which holds the stepgate binary for ${process.platform}-${process.arch}, ` +
        `is not installed.\n` +
        `npm installs it as an optional dependency of stepgate, so it is missing after an install with ` +
        `--omit=optional (or --no-optional, or optional=false in .npmrc).\n` +
        `Install it again with optional dependencies: npm install --include=optional stepgate@${version}`,
    );
  }
}

// STEPGATE_LAUNCHER tells the binary how it was started, for the command lines it prints.
const child = spawn(binaryPath(), process.argv.slice(2), {
  stdio: "inherit",
  env: { STEPGATE_LAUNCHER: "npx stepgate", ...process.env },
});

// A terminal's Ctrl+C reaches the binary too (it is in the same process group); a
// signal sent to this process alone (kill, a supervisor) must reach it as well. The
// binary treats a second SIGINT during its shutdown as the first.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => child.kill(signal));
}

child.on("error", (err) => fail(`run ${child.spawnfile}: ${err.message}`));
child.on("exit", (code, signal) => {
  if (signal !== null) {
    // Die of the same signal, so that the caller sees how the binary ended.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
