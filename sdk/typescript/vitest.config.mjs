// Vitest runs only the *.vitest.ts files (npm run test:vitest): they show that
// @stepgate/sdk/testing works under Vitest. npm test runs the rest with node --test.
import { defineConfig } from "vitest/config";

export default defineConfig({ test: { include: ["test/**/*.vitest.ts"] } });
