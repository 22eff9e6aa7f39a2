/** This SDK's version (the npm package's). */
export const SDK_VERSION = "0.1.0";

/** The function protocol's version that this SDK speaks (a semantic version). */
export const PROTOCOL_VERSION = "1.0.0";

/** This SDK's name and version, as its manifest (`sdk`) and its errors say it. */
export const SDK_NAME = `stepgate-ts/${SDK_VERSION}`;

/**
 * The HTTP header in which each side of the function protocol says the protocol version
 * it speaks: the gateway on every invocation and manifest request, this SDK on every
 * answer. A side that sends none speaks 1.0.0.
 */
export const PROTOCOL_HEADER = "Stepgate-Protocol";

/** The bound of a protocol version, in bytes (characters: a version is ASCII). */
export const MAX_VERSION_LENGTH = 32;

const INT32_MAX = 2147483647;

/**
 * Reads a protocol version, MAJOR.MINOR.PATCH: three decimal numbers without leading
 * zeros, sign, spaces, pre-release or build part, at most MAX_VERSION_LENGTH
 * characters, each number at most 2³¹−1. Returns undefined for anything else.
 */
export function parseVersion(s: string): [major: number, minor: number, patch: number] | undefined {
  if (s.length > MAX_VERSION_LENGTH) return undefined;
  const n = [0, 0, 0];
  let part = 0;
  let digits = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits === 1 && n[part] === 0) return undefined; // a leading zero
      const next = n[part]! * 10 + (c - 48);
      if (next > INT32_MAX) return undefined;
      n[part] = next;
      digits++;
    } else if (c === 46 && digits > 0 && part < 2) {
      part++;
      digits = 0;
    } else {
      return undefined;
    }
  }
  if (part !== 2 || digits === 0) return undefined;
  return [n[0]!, n[1]!, n[2]!];
}

const SDK_MAJOR = parseVersion(PROTOCOL_VERSION)![0];

function quoteVersion(v: string): string {
  return v.length > MAX_VERSION_LENGTH ? JSON.stringify(v.slice(0, MAX_VERSION_LENGTH)) + "…" : JSON.stringify(v);
}

/**
 * Returns "" when this SDK serves a gateway that says it speaks protocol version v (its
 * Stepgate-Protocol header; a gateway that says nothing speaks 1.0.0: check nothing
 * then): a gateway of this SDK's major. Otherwise the refusal, naming both versions:
 *
 *     the gateway speaks function protocol 2.0.0; this SDK (stepgate-ts/0.1.0) speaks 1.0.0 and serves gateways of protocol 1.x only
 *     the gateway's Stepgate-Protocol header "x" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (stepgate-ts/0.1.0) speaks 1.0.0
 */
export function checkGatewayVersion(v: string): string {
  if (v === PROTOCOL_VERSION) return "";
  const gw = parseVersion(v);
  if (!gw) {
    return `the gateway's ${PROTOCOL_HEADER} header ${quoteVersion(v)} is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (${SDK_NAME}) speaks ${PROTOCOL_VERSION}`;
  }
  if (gw[0] === SDK_MAJOR) return "";
  return `the gateway speaks function protocol ${gw.join(".")}; this SDK (${SDK_NAME}) speaks ${PROTOCOL_VERSION} and serves gateways of protocol ${SDK_MAJOR}.x only`;
}
