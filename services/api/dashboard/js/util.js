// Small DOM and formatting helpers. Text from the API always goes in as text nodes, never as HTML.

/** el("td", {class: "num"}, "12", child, ...): an element with attributes, listeners (on*) and children. */
export function el(tag, attrs = {}, ...children) {
  const ns = attrs && attrs.xmlns;
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "xmlns" || v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replace a node's children. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

export function badge(text, kind = text) {
  return el("span", { class: `badge ${kind}` }, text);
}

export function progressBar(fraction, status) {
  const pct = Math.round(100 * Math.max(0, Math.min(1, fraction || 0)));
  return el("span", { class: `progress ${status || ""}`, title: `${pct} %`, role: "progressbar",
    "aria-valuenow": pct, "aria-valuemin": 0, "aria-valuemax": 100 }, el("span", { style: `width:${pct}%` }));
}

/** A table: columns [{label, value: row => node|text, class}], rows, optional row attributes. */
export function table(columns, rows, rowAttrs = () => ({})) {
  return el("table", {},
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.class }, c.label)))),
    el("tbody", {}, rows.map((r) => el("tr", rowAttrs(r), columns.map((c) => el("td", { class: c.class }, c.value(r)))))));
}

export function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

export function fmtNumber(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return "-";
  const s = Number(x).toPrecision(digits);
  return s.includes(".") ? s.replace(/\.?0+(e|$)/, "$1") : s;       // trailing zeros of a fraction only: 100 stays 100
}

/** A duration given in microseconds, in the unit that reads best. */
export function fmtUs(us) {
  if (us === null || us === undefined) return "-";
  if (us < 1000) return `${fmtNumber(us, 4)} µs`;
  if (us < 1e6) return `${fmtNumber(us / 1e3, 4)} ms`;
  return `${fmtNumber(us / 1e6, 4)} s`;
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function fmtBytes(n) {
  let i = 0;
  while (n >= 1024 && i < BYTE_UNITS.length - 1) {
    n /= 1024;
    i++;
  }
  return `${fmtNumber(n, 3)} ${BYTE_UNITS[i]}`;
}

export function age(iso) {
  if (!iso) return "-";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

export function yesNo(b) {
  return b ? "yes" : "no";
}

export function shortId(id) {
  return id ? id.slice(0, 8) : "-";
}

export function errorBox(err) {
  return el("p", { class: "error", role: "alert" }, err && err.message ? err.message : String(err));
}

/** An int query parameter, or null when absent or not an integer. */
export function intParam(query, name) {
  const v = query.get(name);
  return v !== null && /^\d+$/.test(v) ? Number(v) : null;
}

/** A duration in seconds with sub-second precision: 0.042 s, 3.18 s, 2 min 05.3 s, 1 h 02 min. */
export function fmtSeconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "-";
  if (s < 60) return `${s < 10 ? s.toFixed(3) : s.toFixed(2)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${(s % 60).toFixed(1).padStart(4, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

/** A timestamp's local time of day with milliseconds: 09:16:12.345. */
export function fmtClock(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  const two = (x) => String(x).padStart(2, "0");
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

/** One unit for a whole chart of durations given in µs (axis and bar labels agree): {unit, per_us, fmt}. */
export function timeUnit(maxUs) {
  const [unit, per_us] = maxUs >= 1e6 ? ["s", 1e-6] : maxUs >= 1e3 ? ["ms", 1e-3] : ["µs", 1];
  return { unit, per_us, fmt: (us) => (us === null || us === undefined ? "-" : `${fmtNumber(us * per_us, 4)} ${unit}`) };
}

/** Options every Plot chart shares: labels at a readable size (Plot's default is 10 px). */
export const PLOT_STYLE = { fontSize: "13px", overflow: "visible" };

/** A spinner with a text beside it (role=status, so a screen reader announces it). */
export function spinner(text, attrs = {}) {
  return el("span", { class: "spinner-box", role: "status", ...attrs }, el("span", { class: "spinner", "aria-hidden": "true" }), " ", text);
}

/** Resolve after ms milliseconds. */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The font Plot draws chart text in (its own system-ui, sans-serif at PLOT_STYLE's size). */
export const CHART_FONT = `${PLOT_STYLE.fontSize} system-ui, sans-serif`;

let measurer = null;

/** The width in pixels of `text` drawn in `font` (a canvas measures it; nothing is laid out). */
export function textWidth(text, font = CHART_FONT) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = font;
  return measurer.measureText(String(text)).width;
}

/** What a y tick label needs left of it inside the svg: Plot's tick (6 px) and padding (3 px), and 8 px
 * so a label measured on a canvas still fits where the svg draws it. */
const TICK_ROOM = 17;

/** `label`, or its longest prefix with an ellipsis that fits in `room` pixels. */
export function ellipsis(label, room, font = CHART_FONT) {
  const text = String(label);
  if (textWidth(text, font) <= room) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (textWidth(text.slice(0, mid) + "…", font) <= room) lo = mid;
    else hi = mid - 1;
  }
  return text.slice(0, lo) + "…";
}

/** The band labels of a horizontal bar chart, readable: the left margin as wide as the widest label measures,
 * up to `maxMargin` pixels; a label wider than that ends in an ellipsis (its full text is the tick's tooltip:
 * `titleTicks`). {marginLeft, tickFormat} for Plot's options and y scale. */
export function bandLabels(labels, maxMargin) {
  const widest = Math.max(0, ...labels.map((l) => textWidth(l)));
  const marginLeft = Math.ceil(Math.min(widest + TICK_ROOM, maxMargin));
  const short = new Map(labels.map((l) => [l, ellipsis(l, marginLeft - TICK_ROOM)]));
  return { marginLeft, tickFormat: (l) => short.get(l) ?? l };
}

/** Each y tick label of `chart` (Plot's svg or figure) gets its band's full text as a tooltip (<title>) and in
 * data-label; `labels` in the y domain's order. */
export function titleTicks(chart, labels) {
  chart.querySelectorAll('g[aria-label="y-axis tick label"] text').forEach((t, i) => {
    if (labels[i] === undefined) return;
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = labels[i];
    t.append(title);
    t.setAttribute("data-label", labels[i]);
  });
  return chart;
}
