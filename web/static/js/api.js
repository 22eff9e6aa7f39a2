// The gateway's HTTP API (openapi.yaml), the signed-in token, and the live run stream.

const TOKEN_KEY = "stepgate.token";

/** APIError is a failed call: the problem's status, title and detail. */
export class APIError extends Error {
  constructor(status, title, detail) {
    super(detail || title);
    this.status = status;
    this.title = title;
    this.detail = detail;
  }
}

let token = "";
try { token = localStorage.getItem(TOKEN_KEY) || ""; } catch {}
let onUnauthorized = () => {};

/** getToken returns the signed-in token, or "". */
export function getToken() {
  return token;
}

/** setToken keeps t for the next visits; "" forgets it. */
export function setToken(t) {
  token = t;
  sessionRoles = null;
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {}
}

/** handleUnauthorized sets what happens when the gateway rejects the token (401). */
export function handleUnauthorized(fn) {
  onUnauthorized = fn;
}

/** claims decodes the token's payload, without verifying it (the gateway does), or null. */
export function claims(t = token) {
  try {
    const part = t.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const bin = atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), "="));
    const c = JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0))));
    return c && typeof c === "object" ? c : null;
  } catch {
    return null;
  }
}

// The permissions each role grants: auth/permission.go's table, "*" standing for every
// permission. web's TestRoleTable reads it as JSON (trailing commas aside) and requires
// it to equal auth's.
const ROLE_PERMISSIONS = {
  "admin": ["*"],
  "developer": ["functions:read", "functions:write", "runs:invoke", "runs:read", "runs:manage", "events:send"],
  "operator": ["functions:read", "runs:read", "runs:manage"],
  "invoker": ["functions:read", "runs:invoke", "runs:read", "events:send"],
  "viewer": ["functions:read", "runs:read"],
};

let sessionRoles = null; // the roles the gateway read from the token, once the session says

/**
 * roles returns the token's roles: as the gateway read them (the session's answer, which
 * knows the configured roles claim and scope prefix), else the token's roles claim.
 */
export function roles(c = claims()) {
  if (sessionRoles && c === claims()) return sessionRoles;
  if (!c) return [];
  const out = [];
  const r = c.roles;
  if (Array.isArray(r)) out.push(...r.filter((x) => typeof x === "string"));
  else if (typeof r === "string") out.push(...r.split(/[\s,]+/));
  return [...new Set(out.filter(Boolean))];
}

/**
 * can reports whether the token's roles grant perm. The gateway decides; this only hides
 * what would surely be refused. A token whose roles cannot be read (a differently named
 * claim) may try everything.
 */
export function can(perm) {
  const rs = roles();
  if (rs.length === 0) return true;
  return rs.some((r) => r === perm || (ROLE_PERMISSIONS[r] || []).some((p) => p === "*" || p === perm));
}

async function problemFrom(res) {
  let title = res.statusText || `HTTP ${res.status}`;
  let detail = "";
  try {
    const text = await res.text();
    try {
      const p = JSON.parse(text);
      title = p.title || title;
      detail = p.detail || p.message || "";
    } catch {
      if (!/^\s*</.test(text)) detail = text.trim().slice(0, 300); // never echo an HTML error page
    }
  } catch {}
  if (!detail) {
    detail = {
      401: "the token was rejected",
      403: "your token lacks the permission this needs",
      404: "not found",
      501: "this gateway does not implement it yet",
      502: "the gateway could not reach the function",
      503: "the gateway is not ready",
    }[res.status] || `the gateway answered HTTP ${res.status}`;
  }
  return new APIError(res.status, title, detail);
}

/**
 * rejected tells onUnauthorized that the gateway refused sent, the token a request
 * carried, unless that is no longer the signed-in token: a late answer to a request made
 * before signing out (or in as someone else) says nothing about the current token.
 */
function rejected(sent, err) {
  if (sent && sent === token) onUnauthorized(err);
}

/**
 * request calls the API with the token. It returns the parsed JSON body (null for 204)
 * and throws an APIError with the problem's detail otherwise. A 401 for the signed-in
 * token signs out.
 */
export async function request(path, { method = "GET", body, headers = {}, signal, raw = false } = {}) {
  const init = { method, signal, headers: { Accept: "application/json", ...headers } };
  const sent = token;
  if (sent) init.headers.Authorization = "Bearer " + sent;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = raw ? body : JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new APIError(0, "Network error", "the gateway did not answer; is it running?");
  }
  if (!res.ok) {
    const err = await problemFrom(res);
    if (res.status === 401 && path.startsWith("/v1/")) rejected(sent, err);
    throw err;
  }
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** runRequests returns the newest page of run id's requests ({requests, next_cursor}). */
export function runRequests(id, { limit = 100 } = {}) {
  return request(`/v1/runs/${encodeURIComponent(id)}/requests${query({ limit })}`);
}

/** query builds a query string from the defined, non-empty values of params. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v != null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

/**
 * startSession gives the token to the gateway's cookie session, which River UI uses. It
 * returns the session's answer ({subject, tenant, roles, river}) or null when there is
 * none: River UI is an extra, and the dashboard itself needs no cookie.
 */
export async function startSession(t) {
  try {
    const res = await fetch("/ui/session", {
      method: "POST",
      headers: { Authorization: "Bearer " + t, "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ token: t }),
      credentials: "same-origin",
    });
    if (!res.ok) return null;
    const s = await res.json();
    if (t === token && Array.isArray(s.roles)) sessionRoles = s.roles;
    return s;
  } catch {
    return null;
  }
}

/** endSession ends the cookie session. */
export async function endSession() {
  try {
    await fetch("/ui/session", { method: "DELETE", credentials: "same-origin" });
  } catch {}
}

/**
 * streamRuns follows GET /v1/runs/stream with the token in the Authorization header
 * (EventSource cannot send one). It calls onRun for each `run` event, onResync when
 * events may have been missed (the server said `resync`, or the stream (re)opened), and
 * onState with "connecting", "live", "retrying" or "unavailable" (with the APIError).
 * It reconnects with jittered exponential backoff until the returned stop is called.
 */
export function streamRuns(params, { onRun, onResync = () => {}, onState = () => {} }) {
  let stopped = false;
  let sent = ""; // the token the stream opened with
  let ctrl = null;
  let timer = 0;
  let failures = 0;

  const retry = (err) => {
    if (stopped) return;
    failures++;
    const base = err && (err.status === 501 || err.status === 404) ? 30_000 : Math.min(30_000, 500 * 2 ** (failures - 1));
    onState(err ? "unavailable" : "retrying", err);
    timer = setTimeout(connect, base * (0.5 + Math.random() / 2));
  };

  async function connect() {
    if (stopped) return;
    ctrl = new AbortController();
    sent = token;
    let watchdog = 0;
    const arm = () => { clearTimeout(watchdog); watchdog = setTimeout(() => ctrl.abort(), 45_000); }; // heartbeats come every 15s
    onState("connecting");
    try {
      const res = await fetch("/v1/runs/stream" + query(params), {
        headers: { Authorization: "Bearer " + sent, Accept: "text/event-stream" },
        signal: ctrl.signal,
        cache: "no-store",
      });
      if (!res.ok) {
        const err = await problemFrom(res);
        if (res.status === 401) { rejected(sent, err); return; }
        retry(err);
        return;
      }
      failures = 0;
      onState("live");
      onResync(); // nothing is replayed: what changed before the stream opened needs a reload
      arm();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      let event = "";
      let data = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        arm();
        buf += value;
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          let line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (line === "") {
            dispatch(event || "message", data.join("\n"));
            event = "";
            data = [];
          } else if (!line.startsWith(":")) {
            const c = line.indexOf(":");
            const field = c < 0 ? line : line.slice(0, c);
            let val = c < 0 ? "" : line.slice(c + 1);
            if (val.startsWith(" ")) val = val.slice(1);
            if (field === "event") event = val;
            else if (field === "data") data.push(val);
          }
        }
      }
    } catch (e) {
      if (stopped) return;
    } finally {
      clearTimeout(watchdog);
    }
    retry();
  }

  function dispatch(event, data) {
    if (stopped) return;
    if (event === "resync") { onResync(); return; }
    if (event === "expired") { stopped = true; rejected(sent, new APIError(401, "Unauthorized", "the token expired")); return; }
    if (event !== "run" || !data) return;
    try {
      onRun(JSON.parse(data));
    } catch {} // a malformed event is skipped; the next resync repairs the view
  }

  connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (ctrl) ctrl.abort();
  };
}

/**
 * checkToken asks the gateway whether it accepts t. It returns null when it does (a 403
 * too: the token is valid, only limited) and the APIError otherwise.
 */
export async function checkToken(t) {
  let res;
  try {
    res = await fetch("/v1/runs?limit=1", { headers: { Authorization: "Bearer " + t, Accept: "application/json" } });
  } catch {
    return new APIError(0, "Network error", "the gateway did not answer; is it running?");
  }
  return res.status === 401 ? problemFrom(res) : null;
}

/**
 * streamChunks reads stream key of run id (server-sent events) from offset 0: onChunk
 * gets each chunk's offset and value, in order, once; onEnd the stream's end
 * ({length, reason}). A dropped connection resumes after the last chunk received. It
 * returns the function that stops reading.
 */
export function streamChunks(id, key, { onChunk, onEnd = () => {} }) {
  let stopped = false;
  let sent = ""; // the token the stream opened with
  let ctrl = null;
  let timer = 0;
  let next = 0; // the offset to resume from
  let failures = 0;

  async function connect() {
    if (stopped) return;
    ctrl = new AbortController();
    sent = token;
    try {
      const res = await fetch(`/v1/runs/${encodeURIComponent(id)}/streams/${encodeURIComponent(key)}?offset=${next}`, {
        headers: { Authorization: "Bearer " + sent, Accept: "text/event-stream" },
        signal: ctrl.signal,
        cache: "no-store",
      });
      if (!res.ok) {
        const err = await problemFrom(res);
        if (res.status === 401) { rejected(sent, err); return; }
        if (res.status === 404 || res.status === 403) return; // nothing to show
      } else {
        failures = 0;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        let ev = { event: "", id: "", data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            let line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (line.endsWith("\r")) line = line.slice(0, -1);
            if (line === "") {
              if (dispatch(ev)) return;
              ev = { event: "", id: "", data: [] };
            } else if (!line.startsWith(":")) {
              const c = line.indexOf(":");
              const field = c < 0 ? line : line.slice(0, c);
              let val = c < 0 ? "" : line.slice(c + 1);
              if (val.startsWith(" ")) val = val.slice(1);
              if (field === "event") ev.event = val;
              else if (field === "id") ev.id = val;
              else if (field === "data") ev.data.push(val);
            }
          }
        }
      }
    } catch {
      if (stopped) return;
    }
    failures++;
    timer = setTimeout(connect, Math.min(30_000, 500 * 2 ** (failures - 1)));
  }

  // dispatch handles one event; it returns true when the stream has ended.
  function dispatch(ev) {
    if (stopped) return true;
    try {
      if (ev.event === "chunk") {
        const offset = Number(ev.id);
        if (offset >= next) {
          next = offset + 1;
          onChunk(offset, JSON.parse(ev.data.join("\n")));
        }
      } else if (ev.event === "end") {
        stopped = true;
        onEnd(JSON.parse(ev.data.join("\n")));
        return true;
      } else if (ev.event === "expired") {
        stopped = true;
        rejected(sent, new APIError(401, "Unauthorized", "the token expired"));
        return true;
      }
    } catch {} // a malformed event is skipped
    return false;
  }

  connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (ctrl) ctrl.abort();
  };
}
