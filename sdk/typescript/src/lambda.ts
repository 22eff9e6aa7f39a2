// An adapter from the Fetch handler to AWS Lambda: API Gateway (REST and HTTP APIs) and
// function URL events. `export const handler = toLambdaHandler(serve({...}))`.
import type { FetchHandler } from "./serve.js";

/** The parts of an API Gateway (v1 or v2) or function URL event that are read. */
export interface LambdaEvent {
  version?: string;
  httpMethod?: string;
  path?: string;
  rawPath?: string;
  rawQueryString?: string;
  headers?: Record<string, string | undefined> | null;
  body?: string | null;
  isBase64Encoded?: boolean;
  requestContext?: { http?: { method?: string; path?: string }; domainName?: string };
}

/** What Lambda answers with. */
export interface LambdaResult {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  isBase64Encoded: boolean;
}

/**
 * Returns a Lambda handler that turns each event into a Fetch Request, calls handler and
 * answers its Response. Set the function's maxInvocationDuration below the Lambda's
 * timeout, so that long runs continue in a new invocation instead of being cut off.
 */
export function toLambdaHandler(handler: FetchHandler): (event: LambdaEvent) => Promise<LambdaResult> {
  return async (event) => {
    const headers = new Headers();
    for (const [k, v] of Object.entries(event.headers ?? {})) if (v !== undefined) headers.set(k, v);
    const method = event.requestContext?.http?.method ?? event.httpMethod ?? "GET";
    const path = event.rawPath ?? event.requestContext?.http?.path ?? event.path ?? "/";
    const host = headers.get("host") ?? event.requestContext?.domainName ?? "lambda";
    const url = new URL(path + (event.rawQueryString ? "?" + event.rawQueryString : ""), `https://${host}`);
    let body: Uint8Array<ArrayBuffer> | undefined;
    if (event.body != null && method !== "GET" && method !== "HEAD") {
      body = event.isBase64Encoded ? Uint8Array.from(atob(event.body), (c) => c.charCodeAt(0)) : new TextEncoder().encode(event.body);
    }
    const response = await handler(new Request(url, { method, headers, body }));
    const out: Record<string, string> = {};
    response.headers.forEach((v, k) => (out[k] = v));
    return { statusCode: response.status, headers: out, body: await response.text(), isBase64Encoded: false };
  };
}
