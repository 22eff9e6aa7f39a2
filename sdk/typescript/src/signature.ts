// Verification of the gateway's Stepgate-Signature header with Web Crypto, as
// protocol/signature does in Go (see docs/protocol.md, "How functions verify the gateway"):
//
//   Stepgate-Signature: v=2,t=<unix seconds>,tenant=<percent-encoded>,ed25519=<base64url>[,…][,v1=<hex>…]
//
// The signed message (version 2) is "v2", the decimal t, the tenant, the method and the
// URL path as sent (percent-encoded, no query), each followed by "\n", then the raw body
// bytes. Binding the path means a request signed for one function verifies at no other;
// a header without v=2 (an older gateway's, which bound neither) is refused.

/** The HTTP header that carries the gateway's signature. */
/** Bytes in a plain ArrayBuffer, as Web Crypto takes them. */
export type Bytes = Uint8Array<ArrayBuffer>;

export const SIGNATURE_HEADER = "Stepgate-Signature";

/** How far a signature's timestamp may be from this clock, in seconds. */
export const WINDOW_SECONDS = 300;

/** Bounds on what is read, so that a forged header costs little to refuse. */
const MAX_HEADER_BYTES = 8 << 10;
const MAX_SIGNATURES = 8;

/** The minimum length of an HMAC secret, in bytes. */
export const MIN_SECRET_BYTES = 32;

/** A signature that does not verify; its message says which check failed. */
export class SignatureError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SignatureError";
  }
}

/** The version of the signed message this SDK verifies, and the only one it accepts. */
export const SIGNATURE_VERSION = 2;

/** A header's content. */
export interface Parsed {
  /** 1 when the header has no v. */
  version: number;
  t: number;
  tenant: string;
  ed25519: Bytes[];
  hmac: Bytes[];
}

const malformed = (why?: string) =>
  new SignatureError(`signature: malformed ${SIGNATURE_HEADER} header${why ? ": " + why : ""}`);

/** Reads a header value; unknown schemes are ignored. */
export function parseSignature(header: string | null): Parsed {
  if (!header) throw new SignatureError(`signature: missing ${SIGNATURE_HEADER} header`);
  if (header.length > MAX_HEADER_BYTES) throw malformed(`longer than ${MAX_HEADER_BYTES} bytes`);
  let version: number | undefined;
  let t: number | undefined;
  let tenant: string | undefined;
  const ed: Bytes[] = [];
  const mac: Bytes[] = [];
  for (const raw of header.split(",")) {
    const part = raw.trim();
    const eq = part.indexOf("=");
    if (eq < 0) throw malformed();
    const k = part.slice(0, eq);
    const v = part.slice(eq + 1);
    switch (k) {
      case "v": {
        if (version !== undefined || !/^[0-9]+$/.test(v) || Number(v) < 1) throw malformed();
        version = Number(v);
        break;
      }
      case "t": {
        if (t !== undefined || !/^[0-9]+$/.test(v) || Number(v) <= 0) throw malformed();
        t = Number(v);
        break;
      }
      case "tenant": {
        let dec: string;
        try {
          dec = decodeURIComponent(v);
        } catch {
          throw malformed();
        }
        if (tenant !== undefined || dec === "" || /[\n\0]/.test(dec)) throw malformed();
        tenant = dec;
        break;
      }
      case "ed25519": {
        const s = decodeBase64(v);
        if (!s || s.length !== 64 || ed.length === MAX_SIGNATURES) throw malformed();
        ed.push(s);
        break;
      }
      case "v1": {
        const s = decodeHex(v);
        if (!s || s.length !== 32 || mac.length === MAX_SIGNATURES) throw malformed();
        mac.push(s);
        break;
      }
    }
  }
  if (t === undefined || tenant === undefined || ed.length + mac.length === 0) throw malformed();
  return { version: version ?? 1, t, tenant, ed25519: ed, hmac: mac };
}

/** What a signature binds besides its time and tenant: the request as received. */
export interface SignedRequest {
  /** "POST" for an invocation, "GET" for the manifest. */
  method: string;
  /** The URL path as sent on the request line: percent-encoded, without the query. */
  path: string;
  body: Bytes;
}

/** The bytes signed for r, a request of tenant at Unix second t. */
export function signedMessage(t: number, tenant: string, r: SignedRequest): Bytes {
  const body = r.body;
  const head = new TextEncoder().encode(`v2\n${t}\n${tenant}\n${r.method}\n${r.path}\n`);
  const m = new Uint8Array(head.length + body.length);
  m.set(head);
  m.set(body, head.length);
  return m;
}

/** Decodes base64url or base64, with or without padding; undefined when it is neither. */
export function decodeBase64(s: string): Bytes | undefined {
  const t = s.trim().replace(/=+$/, "").replace(/-/g, "+").replace(/_/g, "/");
  if (!/^[A-Za-z0-9+/]*$/.test(t) || t.length % 4 === 1) return undefined;
  const bin = atob(t + "=".repeat((4 - (t.length % 4)) % 4));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function decodeHex(s: string): Bytes | undefined {
  if (!/^([0-9a-fA-F]{2})*$/.test(s)) return undefined;
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function splitList(keys: string | string[] | undefined): string[] {
  const list = Array.isArray(keys) ? keys : keys ? [keys] : [];
  return list.flatMap((k) => k.split(",")).map((k) => k.trim()).filter((k) => k !== "");
}

/** A key imported for Web Crypto (CryptoKey, named without the DOM lib). */
type WebCryptoKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

/** The keys that verify a tenant's requests, imported for Web Crypto. */
export interface VerifyKeys {
  ed25519: WebCryptoKey[];
  hmac: WebCryptoKey[];
}

/**
 * Checks the text form of keys as importKeys reads them, at once (importing is
 * asynchronous); throws naming the key that is wrong.
 */
export function checkKeys(publicKeys?: string | string[], hmacSecrets?: string | string[]) {
  splitList(publicKeys).forEach((k, i) => {
    const b = decodeBase64(k);
    if (!b || b.length !== 32) {
      throw new Error(`stepgate: signing key ${i + 1} is not an Ed25519 public key: want 32 bytes in base64url, as \`stepgate keys\` prints them`);
    }
  });
  splitList(hmacSecrets).forEach((k, i) => {
    const b = decodeBase64(k);
    if (!b || b.length < MIN_SECRET_BYTES) {
      throw new Error(`stepgate: HMAC secret ${i + 1} is not a secret: want at least ${MIN_SECRET_BYTES} bytes in base64url, as \`stepgate keys secrets\` prints them`);
    }
  });
}

/**
 * Imports Ed25519 public keys and HMAC secrets in their text form (base64url, as
 * `stepgate keys` prints them; comma-separated or in an array). Its errors say which key
 * is wrong.
 */
export async function importKeys(publicKeys?: string | string[], hmacSecrets?: string | string[]): Promise<VerifyKeys> {
  const out: VerifyKeys = { ed25519: [], hmac: [] };
  const pubs = splitList(publicKeys);
  for (let i = 0; i < pubs.length; i++) {
    const b = decodeBase64(pubs[i]!);
    if (!b || b.length !== 32) {
      throw new Error(`stepgate: signing key ${i + 1} is not an Ed25519 public key: want 32 bytes in base64url, as \`stepgate keys\` prints them`);
    }
    out.ed25519.push(await crypto.subtle.importKey("raw", b, { name: "Ed25519" }, false, ["verify"]));
  }
  const secrets = splitList(hmacSecrets);
  for (let i = 0; i < secrets.length; i++) {
    const b = decodeBase64(secrets[i]!);
    if (!b || b.length < MIN_SECRET_BYTES) {
      throw new Error(`stepgate: HMAC secret ${i + 1} is not a secret: want at least ${MIN_SECRET_BYTES} bytes in base64url, as \`stepgate keys secrets\` prints them`);
    }
    out.hmac.push(await crypto.subtle.importKey("raw", b, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]));
  }
  return out;
}

/**
 * Verifies header against r, the request received, with keys at nowSeconds and returns
 * the parsed header and the signed message, or throws a SignatureError naming the failed
 * check. A request signed for another method or path (another function's) matches no
 * signature.
 */
export async function verifySignature(
  header: string | null,
  r: SignedRequest,
  keys: VerifyKeys,
  nowSeconds = Date.now() / 1000,
): Promise<{ parsed: Parsed; message: Bytes }> {
  const p = parseSignature(header);
  if (p.version < SIGNATURE_VERSION) {
    throw new SignatureError(
      `signature: not a version 2 signature, which binds the request's method and path: the request is signed as version ${p.version} (no v in the header), by a gateway older than this SDK; upgrade the gateway`,
    );
  }
  if (p.version > SIGNATURE_VERSION) {
    throw new SignatureError(
      `signature: not a version 2 signature, which binds the request's method and path: the request is signed as version ${p.version}, newer than this SDK's ${SIGNATURE_VERSION}; upgrade the SDK`,
    );
  }
  if (Math.abs(nowSeconds - p.t) > WINDOW_SECONDS) {
    throw new SignatureError("signature: timestamp outside the allowed window");
  }
  if (keys.ed25519.length + keys.hmac.length === 0) {
    throw new SignatureError(`signature: no key to verify the tenant's requests ${JSON.stringify(p.tenant)}`);
  }
  const message = signedMessage(p.t, p.tenant, r);
  for (const key of keys.ed25519) {
    for (const s of p.ed25519) {
      if (await crypto.subtle.verify({ name: "Ed25519" }, key, s, message)) return { parsed: p, message };
    }
  }
  for (const key of keys.hmac) {
    for (const s of p.hmac) {
      // HMAC verify compares in constant time.
      if (await crypto.subtle.verify("HMAC", key, s, message)) return { parsed: p, message };
    }
  }
  throw new SignatureError("signature: no signature matches");
}

/**
 * Remembers accepted signatures (a hash of their message) until they leave the window,
 * so that a captured request cannot be sent again. When full, it forgets first the
 * entries closest to expiry (insertion order approximates that, as t is near now).
 */
export class ReplayCache {
  private seen = new Map<string, number>(); // hash -> expiry (unix seconds)
  constructor(private readonly max = 100_000) {}

  /** Records message signed at t; false when it was recorded before (a replay). */
  async accept(message: Bytes, t: number, nowSeconds = Date.now() / 1000): Promise<boolean> {
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", message));
    let key = "";
    for (const b of digest) key += b.toString(16).padStart(2, "0");
    for (const [k, exp] of this.seen) {
      if (exp >= nowSeconds) break;
      this.seen.delete(k);
    }
    if (this.seen.has(key)) return false;
    if (this.seen.size >= this.max) {
      const oldest = this.seen.keys().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    this.seen.set(key, t + WINDOW_SECONDS + 1);
    return true;
  }
}
