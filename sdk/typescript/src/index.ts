// @stepgate/sdk: durable stepgate functions for any platform with the Fetch API (Node,
// Deno, Bun, Cloudflare Workers, Vercel) and AWS Lambda. No runtime dependencies.
export { createFunction } from "./function.js";
export type { Context, FunctionOptions, RunInfo, StandardSchemaV1, StepgateFunction } from "./function.js";
export { serve } from "./serve.js";
export type { FetchHandler, ServeOptions } from "./serve.js";
export { Step, COMPENSATION_PREFIX, DEFAULT_MAX_ATTEMPTS, IncompleteCompensation } from "./step.js";
export { Wait } from "./wait.js";
export { MAX_ALTERNATIVES, MAX_INVOKE_ALL } from "./combine.js";
export type { Values } from "./combine.js";
export { StreamRefusedError, StreamWriter } from "./stream.js";
export { StoppedError } from "./invocation.js";
// Every type of step.ts (its options and results) is public, so a new wait adds none here.
export type * from "./step.js";
export { ErrorType, InputError, NonRetryableError, StepError, TimedOutError } from "./errors.js";
export type { Duration } from "./duration.js";
export type { Jsonify } from "./json.js";
export { SIGNATURE_HEADER, SignatureError, importKeys, parseSignature, signedMessage, verifySignature } from "./signature.js";
export type * as protocol from "./protocol.js";
export {
  ApiError, BadRequestError, Client, ConflictError, ForbiddenError, NetworkError, NotFoundError, RequestFailedError, RunCancelledError,
  RunFailedError, TooLargeError, TooManyRequestsError, UnauthorizedError, UnavailableError, WaitTimeoutError, eventRef, ref,
} from "./client.js";
export type { ClientOptions, EventRef, FunctionRef, InputOf, OutputOf, RetryOptions, StartOptions, StartedRun, StartedRunWithMessage, Target, WaitOptions } from "./client.js";
