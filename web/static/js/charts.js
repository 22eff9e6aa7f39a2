// Charts of a FunctionSeries (GET /v1/functions/{name}/stats, GET
// /v1/stats/functions/series): runs started, completed and failed per bucket, their
// duration, the queue's depth and the wait for a slot, over the last hour or day. Each is
// a small inline SVG with no library: its colors are classes of style.css, drawn with the
// theme's variables, so it follows the light and the dark theme. Each SVG is role=img
// with an aria-label (and a <title>) that says its numbers in words; each bar and point
// carries its bucket (data-at) and value (data-value) and a tooltip.

import { h, fmtDuration } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const W = 600, H = 150; // the viewBox; the SVG scales to its card's width
const L = 44, R = 8, T = 10, B = 22; // the plot's margins, for the axes' labels

// svg makes an SVG element; attributes that are null or undefined are left out.
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c != null) el.append(c);
  return el;
}

const tick = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", hour12: false });

/** windowText says a series' window and buckets: "per minute over the last hour". */
export function windowText(series) {
  const per = series.bucket_seconds === 60 ? "minute" : `${series.bucket_seconds / 60} minutes`;
  return `per ${per} over the last ${series.window === "1d" ? "day" : "hour"}`;
}

/** niceMax rounds v up to 1, 2 or 5 times a power of ten (1 at least). */
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const maxOf = (xs) => xs.reduce((a, b) => (b != null && b > a ? b : a), 0);
const count = (n) => (Number.isInteger(n) ? String(n) : ""); // a count axis labels whole numbers only

// frame draws the plot's grid, its y labels (fmt) and its first and last times; it
// returns {el, x, y, bw} to place the marks.
function frame(series, top, fmt) {
  const n = series.buckets.length;
  const bw = (W - L - R) / n;
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const x = (i) => L + bw * (i + 0.5);
  const grid = [0, top / 2, top].map((v) => svg("g", null,
    svg("line", { class: "chart-grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }),
    svg("text", { class: "chart-axis", x: L - 6, y: y(v) + 3.5, "text-anchor": "end" }, fmt(v))));
  const first = series.buckets[0], last = series.buckets[n - 1];
  const times = [
    svg("text", { class: "chart-axis", x: L, y: H - 6 }, tick.format(new Date(first.at))),
    svg("text", { class: "chart-axis", x: W - R, y: H - 6, "text-anchor": "end" }, "now"),
  ];
  return { el: [grid, times], x, y, bw, last };
}

// line draws the values (null: a gap) as a path, with a point at each value that
// pointIf keeps.
function line(series, f, key, cls, label, fmt, pointIf = () => true) {
  const segs = [];
  let d = "";
  const points = [];
  series.buckets.forEach((b, i) => {
    const v = b[key];
    if (v == null) { if (d) segs.push(d); d = ""; return; }
    d += `${d ? "L" : "M"}${f.x(i).toFixed(1)},${f.y(v).toFixed(1)}`;
    if (pointIf(v)) points.push(svg("circle", { class: `chart-point ${cls}`, cx: f.x(i).toFixed(1), cy: f.y(v).toFixed(1), r: 2.2, "data-at": b.at, "data-value": v },
      svg("title", null, `${tick.format(new Date(b.at))}: ${label} ${fmt(v)}`)));
  });
  if (d) segs.push(d);
  return [segs.map((s) => svg("path", { class: `chart-line ${cls}`, d: s })), points];
}

// chart wraps an SVG and its legend in a card; label is the SVG's text alternative.
function chart(testid, heading, label, marks, legend) {
  const el = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, class: "chart" },
    svg("title", null, label), marks);
  return h("figure", { class: "chart-card", "data-testid": testid },
    h("figcaption", null, h("span", { class: "chart-title" }, heading),
      h("span", { class: "chart-legend" }, legend.map(([cls, text]) => h("span", { class: "chart-key" }, h("i", { class: `chart-swatch ${cls}` }), text)))),
    el);
}

/** runsChart: runs completed and failed (stacked bars) and started (a line) per bucket. */
export function runsChart(series) {
  const bs = series.buckets;
  const started = sum(bs.map((b) => b.started)), completed = sum(bs.map((b) => b.completed));
  const failed = sum(bs.map((b) => b.failed)), cancelled = sum(bs.map((b) => b.cancelled));
  const top = niceMax(Math.max(maxOf(bs.map((b) => b.started)), maxOf(bs.map((b) => b.completed + b.failed))));
  const f = frame(series, top, count);
  const bars = [];
  bs.forEach((b, i) => {
    const w = Math.max(1, f.bw * 0.64), x0 = f.x(i) - w / 2, when = tick.format(new Date(b.at));
    if (b.completed) {
      bars.push(svg("rect", { class: "chart-bar s-completed", x: x0.toFixed(1), width: w.toFixed(1), y: f.y(b.completed).toFixed(1), height: (f.y(0) - f.y(b.completed)).toFixed(1), "data-at": b.at, "data-value": b.completed },
        svg("title", null, `${when}: ${b.completed} completed`)));
    }
    if (b.failed) {
      bars.push(svg("rect", { class: "chart-bar s-failed", x: x0.toFixed(1), width: w.toFixed(1), y: f.y(b.completed + b.failed).toFixed(1), height: (f.y(b.completed) - f.y(b.completed + b.failed)).toFixed(1), "data-at": b.at, "data-value": b.failed },
        svg("title", null, `${when}: ${b.failed} failed`)));
    }
  });
  const startedLine = line(series, f, "started", "s-started", "started", count, (v) => v > 0);
  const label = `Runs ${windowText(series)}: ${started} started, ${completed} completed, ${failed} failed` +
    (cancelled ? `, ${cancelled} cancelled` : "") + `; at most ${maxOf(bs.map((b) => b.started))} started in one bucket.`;
  return chart("chart-runs", "Runs", label, [f.el, bars, startedLine],
    [["s-started", "started"], ["s-completed", "completed"], ["s-failed", "failed"]]);
}

/** durationChart: the p50 and p95 duration of the runs that finished in each bucket. */
export function durationChart(series) {
  return percentiles(series, "chart-duration", "Duration", "p50_ms", "p95_ms", "Duration (first claim to finish) of the runs that finished");
}

/** waitChart: the p50 and p95 wait for a slot of the runs first claimed in each bucket. */
export function waitChart(series) {
  return percentiles(series, "chart-wait", "Wait for a slot", "wait_p50_ms", "wait_p95_ms", "Wait (creation to first claim) of the runs claimed");
}

function percentiles(series, testid, heading, k50, k95, what) {
  const bs = series.buckets;
  const top = niceMax(maxOf(bs.map((b) => b[k95])));
  const f = frame(series, top, (v) => (v ? fmtDuration(v) : "0"));
  const latest = [...bs].reverse().find((b) => b[k50] != null);
  const label = latest
    ? `${what}, ${windowText(series)}: p95 at most ${fmtDuration(maxOf(bs.map((b) => b[k95])))}; latest p50 ${fmtDuration(latest[k50])}, p95 ${fmtDuration(latest[k95])}.`
    : `${what}, ${windowText(series)}: none.`;
  return chart(testid, heading, label,
    [f.el, line(series, f, k95, "s-p95", "p95", fmtDuration), line(series, f, k50, "s-p50", "p50", fmtDuration)],
    [["s-p50", "p50"], ["s-p95", "p95"]]);
}

/** queueChart: the runs waiting to be claimed at the end of each bucket. */
export function queueChart(series) {
  const bs = series.buckets;
  const top = niceMax(maxOf(bs.map((b) => b.queue_depth)));
  const f = frame(series, top, count);
  const area = `M${f.x(0).toFixed(1)},${f.y(0)}` + bs.map((b, i) => `L${f.x(i).toFixed(1)},${f.y(b.queue_depth).toFixed(1)}`).join("") +
    `L${f.x(bs.length - 1).toFixed(1)},${f.y(0)}Z`;
  const label = `Queue depth ${windowText(series)}: ${bs[bs.length - 1].queue_depth} waiting now, at most ${maxOf(bs.map((b) => b.queue_depth))}.`;
  return chart("chart-queue", "Queue depth", label,
    [f.el, svg("path", { class: "chart-area s-queue", d: area }), line(series, f, "queue_depth", "s-queue", "waiting", count, (v) => v > 0)],
    [["s-queue", "runs waiting"]]);
}

/** seriesCharts lays out the four charts of a series. */
export function seriesCharts(series) {
  return h("div", { class: "charts", "data-testid": "charts", "data-window": series.window },
    runsChart(series), durationChart(series), queueChart(series), waitChart(series));
}
