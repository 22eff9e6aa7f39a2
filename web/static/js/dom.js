// DOM building and formatting helpers shared by every page.

const SVG = "http://www.w3.org/2000/svg";

/**
 * h builds an element. attrs: "class", "style", "dataset" keys as data-*, "on<event>"
 * functions as listeners, booleans as present/absent attributes, the rest as attributes.
 * Children may be nodes, strings, numbers, arrays, or null/false (skipped).
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = Array.isArray(v) ? v.filter(Boolean).join(" ") : v;
    else if (k === "style") el.style.cssText = v; // CSSOM, which the page's CSP allows
    else if (k === "value" && "value" in el) el.value = v;
    else if (k === "checked" || k === "selected" || k === "disabled" || k === "open") el[k] = !!v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** replace empties el and appends children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// Icons: 24×24 stroked paths in the style of Lucide (ISC), drawn here so nothing loads.
const ICONS = {
  runs: "M3 12h4l3-8 4 16 3-8h4",
  functions: "M9 3H7a2 2 0 0 0-2 2v4a2 2 0 0 1-2 2 2 2 0 0 1 2 2v4a2 2 0 0 0 2 2h2M15 3h2a2 2 0 0 1 2 2v4a2 2 0 0 0 2 2 2 2 0 0 0-2 2v4a2 2 0 0 1-2 2h-2",
  river: "M2 6c2-2 4-2 6 0s4 2 6 0 4-2 6 0M2 12c2-2 4-2 6 0s4 2 6 0 4-2 6 0M2 18c2-2 4-2 6 0s4 2 6 0 4-2 6 0",
  sun: "M12 8a4 4 0 1 0 0 8 4 4 0 0 0 0-8zM12 2v2M12 20v2M4.9 4.9l1.4 1.4M17.7 17.7l1.4 1.4M2 12h2M20 12h2M4.9 19.1l1.4-1.4M17.7 6.3l1.4-1.4",
  moon: "M20 14.5A8 8 0 0 1 9.5 4 8 8 0 1 0 20 14.5z",
  monitor: "M4 4h16a1 1 0 0 1 1 1v10a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1V5a1 1 0 0 1 1-1zM8 20h8M12 16v4",
  logout: "M9 21H5a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h4M16 17l5-5-5-5M21 12H9",
  copy: "M9 9h11v11H9zM5 15H4V4h11v1",
  check: "M20 6 9 17l-5-5",
  chevron: "m9 18 6-6-6-6",
  external: "M15 3h6v6M10 14 21 3M18 13v6a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2V8a2 2 0 0 1 2-2h6",
  search: "M11 4a7 7 0 1 0 0 14 7 7 0 0 0 0-14zM21 21l-4.3-4.3",
  refresh: "M21 12a9 9 0 1 1-3-6.7L21 8M21 3v5h-5",
  x: "M18 6 6 18M6 6l12 12",
  play: "M6 4l14 8-14 8z",
  stop: "M6 6h12v12H6z",
  rerun: "M3 12a9 9 0 1 0 3-6.7L3 8M3 3v5h5",
  clock: "M12 3a9 9 0 1 0 0 18 9 9 0 0 0 0-18zM12 7v5l3 2",
  alert: "M12 3 2 20h20L12 3zM12 10v4M12 17.5v.5",
  key: "M15 7a4 4 0 1 1-3.9 4.9L4 19v2h3v-2h2v-2h2l1.1-1.1A4 4 0 0 1 15 7zM16 9.5h.01",
  arrowLeft: "M19 12H5M12 19l-7-7 7-7",
  user: "M12 12a4 4 0 1 0 0-8 4 4 0 0 0 0 8zM4 21a8 8 0 0 1 16 0",
  zap: "M13 2 3 14h9l-1 8 10-12h-9l1-8z",
  moonSleep: "M12 3a9 9 0 1 0 9 9 7 7 0 0 1-9-9z",
  plus: "M12 5v14M5 12h14",
  minus: "M5 12h14",
  expand: "m7 15 5 5 5-5M7 9l5-5 5 5",
  fold: "m7 20 5-5 5 5M7 4l5 5 5-5",
};

/** icon returns an inline SVG icon by name. */
export function icon(name, size = 16) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", size);
  svg.setAttribute("height", size);
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "icon");
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", ICONS[name] || "");
  svg.append(path);
  return svg;
}

export const TERMINAL = new Set(["completed", "failed", "cancelled"]);
export const STATUSES = ["scheduled", "queued", "running", "suspended", "completed", "failed", "cancelled"];

/** badge is a run status as a colored pill. */
export function badge(status) {
  return h("span", { class: `badge s-${status}`, "data-status": status }, h("i", { class: "dot" }), status);
}

/** parseTime returns the time in ms since the epoch, or NaN for empty input. */
export function ms(t) {
  return t ? Date.parse(t) : NaN;
}

/** fmtDuration formats milliseconds for people: 850 ms, 1.25 s, 3m 12s, 2h 5m, 3d 4h. */
export function fmtDuration(d) {
  if (!Number.isFinite(d)) return "—";
  if (d < 0) d = 0;
  if (d < 1) return "<1 ms"; // timestamps are to the millisecond
  if (d < 1000) return `${Math.round(d)} ms`;
  if (d < 10_000) return `${(d / 1000).toFixed(2)} s`;
  if (d < 60_000) return `${(d / 1000).toFixed(1)} s`;
  const s = Math.round(d / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "short" });

/** fmtRelative says how long ago (or in how long) t is: "12 sec. ago", "in 3 min.". */
export function fmtRelative(t, now = Date.now()) {
  const v = typeof t === "number" ? t : ms(t);
  if (!Number.isFinite(v)) return "—";
  const d = (v - now) / 1000;
  const a = Math.abs(d);
  if (a < 5) return d <= 0 ? "just now" : "in a moment";
  if (a < 60) return rtf.format(Math.round(d), "second");
  if (a < 3600) return rtf.format(Math.round(d / 60), "minute");
  if (a < 86400) return rtf.format(Math.round(d / 3600), "hour");
  return rtf.format(Math.round(d / 86400), "day");
}

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
});

/** fmtTime formats t as a time of day with milliseconds, with the date when not today. */
export function fmtTime(t) {
  const v = typeof t === "number" ? t : ms(t);
  if (!Number.isFinite(v)) return "—";
  const d = new Date(v);
  const msPart = "." + String(d.getMilliseconds()).padStart(3, "0");
  if (new Date().toDateString() === d.toDateString()) return timeFmt.format(d) + msPart;
  return dateTimeFmt.format(d) + msPart;
}

/** fmtDateTime formats t with its date, to the second. */
export function fmtDateTime(t) {
  const v = typeof t === "number" ? t : ms(t);
  return Number.isFinite(v) ? dateTimeFmt.format(new Date(v)) : "—";
}

/**
 * timeAgo is an element that says how long ago t was and keeps saying it: the ticker
 * refreshes every element with data-tick each second.
 */
export function timeAgo(t) {
  if (!t) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: t, title: fmtDateTime(t), "data-tick": "rel", "data-t": ms(t) }, fmtRelative(t));
}

/** elapsed is a duration from start to end, or to now (ticking) while end is empty. */
export function elapsed(start, end) {
  if (!start) return h("span", { class: "muted" }, "—");
  if (end) return h("span", { class: "num" }, fmtDuration(ms(end) - ms(start)));
  return h("span", { class: "num live-num", "data-tick": "elapsed", "data-t": ms(start) }, fmtDuration(Date.now() - ms(start)));
}

/** countdown says "in 25 s" until t, then "due". */
export function countdown(t) {
  return h("span", { class: "num", "data-tick": "countdown", "data-t": ms(t) }, countdownText(ms(t)));
}

function countdownText(t) {
  const d = t - Date.now();
  return d > 0 ? "in " + fmtDuration(d) : "due now";
}

setInterval(() => {
  const now = Date.now();
  for (const el of document.querySelectorAll("[data-tick]")) {
    const t = Number(el.dataset.t);
    switch (el.dataset.tick) {
      case "rel": el.textContent = fmtRelative(t, now); break;
      case "elapsed": el.textContent = fmtDuration(now - t); break;
      case "countdown": el.textContent = countdownText(t); break;
    }
  }
}, 1000);

/**
 * shortID shortens a run id to its last 12 digits: run ids are UUIDv7, whose leading
 * digits are a timestamp shared by runs started in the same millisecond.
 */
export function shortID(id) {
  return id ? id.slice(-12) : "";
}

/** copyButton copies text to the clipboard and confirms with a check mark. */
export function copyButton(text, label = "Copy") {
  const b = h("button", { type: "button", class: "icon-btn", title: label, "aria-label": label }, icon("copy", 14));
  b.addEventListener("click", async (ev) => {
    ev.stopPropagation();
    try {
      await navigator.clipboard.writeText(typeof text === "function" ? text() : text);
    } catch {
      return; // no clipboard (an insecure origin): the text is selectable anyway
    }
    replace(b, icon("check", 14));
    b.classList.add("copied");
    setTimeout(() => { replace(b, icon("copy", 14)); b.classList.remove("copied"); }, 1200);
  });
  return b;
}

/** code is an inline code element. */
export function code(text) {
  return h("code", null, text);
}

/** isUUID reports whether s looks like a run id. */
export function isUUID(s) {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s.trim());
}

/** debounce delays fn until wait ms have passed without another call. */
export function debounce(fn, wait) {
  let t;
  const d = (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), wait); };
  d.cancel = () => clearTimeout(t);
  return d;
}

/** navigate goes to a hash route; going to the current one reloads it. */
export function navigate(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}
