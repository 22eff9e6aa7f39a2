/**
 * A duration: milliseconds, or a Go duration string such as "1.5s", "10m" or "1h30m"
 * (what the gateway reads).
 */
export type Duration = number | string;

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const PART = /([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)/g;

/** Returns d in milliseconds; throws naming what when d is not a duration of 0 or more. */
export function toMs(d: Duration, what: string): number {
  if (typeof d === "number") {
    if (!Number.isFinite(d) || d < 0) throw new TypeError(`stepgate: ${what} ${d} is not a duration (milliseconds, 0 or more)`);
    return d;
  }
  if (d === "0") return 0;
  let ms = 0;
  let rest = d;
  for (const m of d.matchAll(PART)) {
    ms += Number(m[1]) * UNIT_MS[m[2]!]!;
    rest = rest.replace(m[0], "");
  }
  if (d === "" || rest !== "") {
    throw new TypeError(`stepgate: ${what} ${JSON.stringify(d)} is not a duration: use milliseconds or a string such as "1.5s", "10m" or "1h30m"`);
  }
  return ms;
}

/** Returns d as the gateway's duration string, after checking it as toMs does. */
export function toGo(d: Duration, what: string): string {
  const ms = toMs(d, what);
  if (typeof d === "string") return d;
  return `${Math.round(ms * 1000) / 1000}ms`;
}
