// The fake gateway of one test file (node --test runs each file in a process of its
// own): started before the file's tests, closed after them, its hooks cleared before
// each test.
import { after, before, beforeEach } from "node:test";
import { Gateway } from "./gateway.js";

/** The file's fake gateway, once useGateway's before hook has started it. */
export let gw: Gateway;

/** Starts gw for the file's tests and returns a maker of run ids in the file's own space (4 hex digits). */
export function useGateway(space: string): () => string {
  before(async () => {
    gw = await new Gateway().start();
  });
  after(async () => {
    await gw.close();
  });
  beforeEach(() => {
    gw.hook = undefined;
    gw.streamHook = undefined;
  });
  let n = 0;
  return () => `00000000-0000-4000-${space}-${String(++n).padStart(12, "0")}`;
}
