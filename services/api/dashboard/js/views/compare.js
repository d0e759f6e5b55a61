// Two to four plans side by side (#/compare?plans=<id>,<id>[,..]&collective=..), each as it runs now (its
// current revision after failures): their requests, topologies, predicted times and costs in one table (the best of each row marked), and overlaid charts: the
// predicted time of the collective against the message size (each plan at its own alpha and B, from its
// verified schedule's steps and tau), the workload times, and every plan's frontier in the steps-tau plane.
import { get } from "../api.js";
import { COLLECTIVES, SIZES, linkModel, time_s } from "../cost.js";
import { bandLabels, el, fmtBytes, fmtNumber, fmtUs, PLOT_STYLE, shortId, table, timeUnit, titleTicks, yesNo } from "../util.js";

export const NAME = "compare";
export const MIN_PLANS = 2;
export const MAX_PLANS = 4;
const PALETTE = ["#1f77b4", "#e8590c", "#2b8a3e", "#9c36b5"];

/** The plan ids of the URL: hex ids, without repeats, in order. */
export function planIds(query) {
  const ids = (query.get("plans") || "").split(",").map((s) => s.trim().toLowerCase()).filter((s) => /^[0-9a-f]{8,64}$/.test(s));
  return [...new Set(ids)];
}

/** A plan as it runs now: when failures made a later revision current, that revision's topology,
 * schedules and predicted times replace revision 0's (its frontier stays the plan's). */
async function current(p) {
  const n = p.revision?.current ?? 0;
  if (!n) return p;
  const rev = await get(`v1/plans/${p.id}/revisions/${n}`);
  const t = rev.topology || {};
  return { ...p, planned_expr: p.topology?.expr, schedules: rev.schedules, predicted_time_us: rev.predicted_time_us,
    topology: { ...p.topology, expr: t.expr, diameter: t.diameter, workload_time_us: rev.workload_time_us,
      bw_optimal: null, moore_optimal: null } };                  // not reported for a degraded topology
}

function picker(ids, collective) {
  const f = el("form", { class: "inline", id: "compare-form" },
    el("label", {}, "plan ids (2 to 4, comma-separated)", el("input", { name: "plans", size: 80, value: ids.join(","), required: true })),
    el("label", {}, "collective", el("select", { name: "collective" },
      COLLECTIVES.map((c) => el("option", { value: c, selected: c === collective }, c)))),
    el("button", { type: "submit" }, "Compare"));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = `#/compare?${new URLSearchParams([...new FormData(f)])}`;
  });
  return f;
}

function workloadText(r) {
  const w = r.workload || {};
  if (w.training) return `training: ${w.training.model || w.training.model_spec?.name || "inline model"}`;
  const colls = (w.collectives || [w.collective || "allreduce"]).join(", ");
  return `${colls} at ${(w.sizes_bytes || []).map(fmtBytes).join(", ")}${w.alltoall_bytes ? ` + all-to-all ${fmtBytes(w.alltoall_bytes)}` : ""}`;
}

function swatch(i) {
  return el("span", { class: "swatch", style: `background:${PALETTE[i]}` });
}

/** A row of the table: label, one value per plan, and (for numbers) which plan is best (smallest). */
function row(label, plans, value, { number = null, fmt = (x) => x } = {}) {
  const values = plans.map(value);
  const nums = number ? plans.map(number) : null;
  let best = null;
  if (nums && nums.filter((x) => Number.isFinite(x)).length > 1) {
    const min = Math.min(...nums.filter((x) => Number.isFinite(x)));
    if (nums.filter((x) => x === min).length < nums.filter((x) => Number.isFinite(x)).length) best = min;
  }
  return { label, cells: values.map((v, i) => ({ text: v === null || v === undefined ? "-" : fmt(v), best: best !== null && nums[i] === best })) };
}

function compareTable(plans, collective) {
  const sizes = [...new Set(plans.flatMap((p) => Object.keys(p.predicted_time_us?.[collective] || {})))].sort((a, b) => a - b);
  const sameWorkload = new Set(plans.map((p) => JSON.stringify(p.request.workload))).size === 1;
  const rows = [
    row("status", plans, (p) => p.status),
    row("job", plans, (p) => p.job_id),
    row("hosts N", plans, (p) => p.request.nodes),
    row("ports d", plans, (p) => p.request.degree),
    row("alpha", plans, (p) => `${p.request.alpha_us} µs`),
    row("bandwidth B", plans, (p) => `${p.request.bandwidth_gbps} Gbit/s`),
    row("workload", plans, (p) => workloadText(p.request)),
    row("topology", plans, (p) => p.topology?.expr),
    row("revision shown (the current one)", plans, (p) => (p.revision ? (p.revision.current ? `${p.revision.current} (${p.revision.failed.length} failed links; planned: ${p.planned_expr})` : "0 (as planned)") : null)),
    row(`${collective} steps (T_L / alpha)`, plans, (p) => p.schedules?.[collective]?.steps, { number: (p) => p.schedules?.[collective]?.steps }),
    row(`${collective} tau (T_B / (M/B))`, plans, (p) => p.schedules?.[collective]?.tau, { number: (p) => p.schedules?.[collective]?.tau, fmt: (x) => fmtNumber(x) }),
    row("diameter", plans, (p) => p.topology?.diameter, { number: (p) => p.topology?.diameter }),
    row("BW-optimal / Moore-optimal", plans, (p) => (p.topology?.bw_optimal != null ? `${yesNo(p.topology.bw_optimal)} / ${yesNo(p.topology.moore_optimal)}` : null)),
    ...sizes.map((s) => row(`${collective} at ${fmtBytes(Number(s))}`, plans, (p) => p.predicted_time_us?.[collective]?.[s],
      { number: (p) => p.predicted_time_us?.[collective]?.[s], fmt: fmtUs })),
    row(sameWorkload ? "workload time" : "workload time (different workloads)", plans, (p) => p.topology?.workload_time_us,
      { number: sameWorkload ? (p) => p.topology?.workload_time_us : null, fmt: fmtUs }),
    row("best baseline", plans, (p) => bestBaseline(p), { fmt: ([name, t]) => `${name}: ${fmtUs(t)}` }),
    row("capital cost (bound fabric)", plans, (p) => p.fabric?.cost?.plan_usd, { number: (p) => p.fabric?.cost?.plan_usd,
      fmt: (x) => `$${Math.round(x).toLocaleString("en-US")}` }),
  ];
  return el("table", { class: "compare-table", id: "compare-table" },
    el("thead", {}, el("tr", {}, el("th", {}, ""), plans.map((p, i) => el("th", { "data-plan-id": p.id },
      swatch(i), el("a", { href: `#/plans/${p.id}`, class: "mono" }, shortId(p.id)))))),
    el("tbody", {}, rows.map((r) => el("tr", { "data-row": r.label }, el("th", {}, r.label),
      r.cells.map((c) => el("td", { class: c.best ? "best num" : "num" }, c.text))))));
}

function bestBaseline(p) {
  const entries = Object.entries(p.baselines_time_us || {}).filter(([, t]) => t != null);
  return entries.length ? entries.reduce((a, b) => (b[1] < a[1] ? b : a)) : null;
}

/** Each plan's predicted time of the collective over 1 KiB..1 GiB, at its own alpha and B. */
export function timeCurves(plans, collective) {
  return plans.flatMap((p, i) => {
    const s = p.schedules?.[collective];
    if (!s) return [];
    const model = linkModel(p.request.alpha_us, p.request.bandwidth_gbps);
    return SIZES.map((size) => {
      const r = rangeAt(s, size);
      return { plan: i, label: shortId(p.id), size, time_us: servedTime_us(r, model, size) };
    });
  });
}

/** The time the plan serves at `size` with range `r`: its dependency-driven time as the API reports it (the piece
 * [start, latency_us, us_per_byte] of `time_pieces` holding the size), or T = steps alpha + tau M/B for a range
 * stored without pieces (its step-synchronous price, equal to it on uniform links). */
function servedTime_us(r, model, size) {
  const pieces = (r.time_pieces || []).filter((x) => x[0] <= size);
  if (pieces.length) {
    const [, a, b] = pieces.reduce((best, x) => (x[0] > best[0] ? x : best));
    return a + b * size;
  }
  return 1e6 * time_s(model, r.steps, r.tau, size);
}

/** The schedule served at `size`: the range of the collective's schedule set (`by_size`) holding it, else the
 * one schedule. */
function rangeAt(s, size) {
  const r = (s.by_size || []).find((x) => x.min_bytes <= size && (x.max_bytes == null || size < x.max_bytes));
  return r || s;
}

function timeChart(plans, collective) {
  const rows = timeCurves(plans, collective);
  const points = plans.flatMap((p, i) => Object.entries(p.predicted_time_us?.[collective] || {})
    .map(([size, us]) => ({ plan: i, label: shortId(p.id), size: Number(size), time_us: us })));
  const color = { domain: plans.map((p, i) => i), range: PALETTE };
  return Plot.plot({
    style: PLOT_STYLE, width: 640, height: 360, marginLeft: 70, marginBottom: 45,
    x: { type: "log", base: 2, label: "message size M →", ticks: [2 ** 10, 2 ** 15, 2 ** 20, 2 ** 25, 2 ** 30], tickFormat: fmtBytes, grid: true },
    y: { type: "log", label: `↑ predicted ${collective} time (µs)`, grid: true },
    color,
    marks: [
      Plot.line(rows, { x: "size", y: "time_us", stroke: "plan", strokeWidth: 2, className: "compare-line", z: "plan" }),
      Plot.dot(points, { x: "size", y: "time_us", fill: "plan", r: 4, className: "compare-point",
        title: (r) => `${r.label}: ${fmtBytes(r.size)} in ${fmtUs(r.time_us)}` }),
      Plot.tip(rows, Plot.pointer({ x: "size", y: "time_us", title: (r) => `${r.label}\n${fmtBytes(r.size)}: ${fmtUs(r.time_us)}` })),
    ],
  });
}

function workloadChart(plans) {
  const rows = plans.map((p, i) => ({ plan: i, label: `${shortId(p.id)} ${p.topology?.expr ?? ""}`, time: p.topology?.workload_time_us }))
    .filter((r) => r.time != null);
  if (!rows.length) return el("p", { class: "muted" }, "No workload times.");
  const unit = timeUnit(Math.max(...rows.map((r) => r.time)));
  const labels = rows.map((r) => r.label);
  const ticks = bandLabels(labels, 300);
  return titleTicks(Plot.plot({
    style: PLOT_STYLE, width: 640, height: 70 + 34 * rows.length, marginLeft: ticks.marginLeft, marginRight: 90, marginBottom: 45,
    x: { label: `workload time (${unit.unit}) →`, grid: true },
    y: { label: null, domain: labels, tickFormat: ticks.tickFormat },
    color: { domain: plans.map((p, i) => i), range: PALETTE },
    marks: [
      Plot.barX(rows, { x: (r) => r.time * unit.per_us, y: "label", fill: "plan", className: "compare-bar", title: (r) => `${r.label}: ${fmtUs(r.time)}` }),
      Plot.text(rows, { x: (r) => r.time * unit.per_us, y: "label", text: (r) => unit.fmt(r.time), dx: 4, textAnchor: "start" }),
      Plot.ruleX([0]),
    ],
  }), labels);
}

/** Each plan's line style and marker in the frontier chart: plans with the same frontier draw the same points,
 * so besides its colour each has its own dash pattern and marker symbol and is shifted FRONTIER_SHIFT_PX from
 * the previous one (every line stays visible where they coincide). */
export const FRONTIER_DASHES = ["none", "8,4", "2,3", "10,3,2,3"];
export const FRONTIER_SYMBOLS = ["circle", "square", "triangle", "diamond"];
const FRONTIER_SHIFT_PX = 3;
/** Pixels kept free inside the chart's frame around the data: the chosen entry's ring (radius 10, stroke 3)
 * and the shifts stay inside the axes. */
const FRONTIER_INSET_PX = 18;

function frontierChart(plans) {
  const entries = plans.flatMap((p, i) => (p.frontier || []).map((e) => ({ ...e, plan: i, label: shortId(p.id) })));
  const chosen = plans.flatMap((p, i) => (p.frontier || []).filter((e) => e.expr === (p.planned_expr ?? p.topology?.expr)).map((e) => ({ ...e, plan: i })));
  const shift = (i) => (i - (plans.length - 1) / 2) * FRONTIER_SHIFT_PX;
  const steps = entries.map((e) => e.steps);
  const ticks = steps.length ? d3.range(Math.min(...steps), Math.max(...steps) + 1) : [];    // steps are integers
  const marks = plans.flatMap((p, i) => {
    const mine = entries.filter((e) => e.plan === i);
    const style = { dx: shift(i), dy: shift(i), ariaDescription: `plan ${i}` };
    return [
      Plot.line(mine, { x: "steps", y: "tau", stroke: PALETTE[i], strokeWidth: 2, strokeDasharray: FRONTIER_DASHES[i],
        curve: "step-after", className: "compare-frontier-line", ...style }),
      Plot.dot(chosen.filter((e) => e.plan === i), { x: "steps", y: "tau", r: 10, stroke: PALETTE[i], strokeWidth: 3,
        className: "compare-chosen", ...style }),
      Plot.dot(mine, { x: "steps", y: "tau", fill: PALETTE[i], r: 4, symbol: FRONTIER_SYMBOLS[i], className: "compare-frontier",
        title: (e) => `${e.label}: ${e.expr}\nsteps ${e.steps}, tau ${e.tau_exact}`, ...style }),
    ];
  });
  return Plot.plot({
    style: PLOT_STYLE, width: 640, height: 360, marginLeft: 70, marginBottom: 45,
    x: { label: "steps = T_L / alpha →", grid: true, ticks, tickFormat: "d", inset: FRONTIER_INSET_PX },
    y: { label: "↑ tau = T_B / (M/B)", grid: true, inset: FRONTIER_INSET_PX },
    marks,
  });
}

/** The frontier chart's key: each plan's colour, dash pattern and marker beside its id. */
function frontierLegend(plans) {
  const ns = "http://www.w3.org/2000/svg";
  return el("p", { class: "legend-note", id: "compare-frontier-legend" }, plans.map((p, i) => {
    const dash = FRONTIER_DASHES[i] === "none" ? null : FRONTIER_DASHES[i];
    const shape = { circle: d3.symbolCircle, square: d3.symbolSquare, triangle: d3.symbolTriangle, diamond: d3.symbolDiamond };
    const symbol = d3.symbol(shape[FRONTIER_SYMBOLS[i]], 50)();
    return [el("svg", { xmlns: ns, width: 44, height: 14, "aria-hidden": "true" },
      el("line", { xmlns: ns, x1: 2, x2: 42, y1: 7, y2: 7, stroke: PALETTE[i], "stroke-width": 2, "stroke-dasharray": dash }),
      el("path", { xmlns: ns, d: symbol, transform: "translate(22,7)", fill: PALETTE[i] })),
    " ", el("code", {}, shortId(p.id)), "   "];
  }));
}

export async function render(root, { query }) {
  const ids = planIds(query);
  const collective = COLLECTIVES.includes(query.get("collective")) ? query.get("collective") : "allreduce";
  root.append(el("h1", {}, "Compare plans"), picker(ids, collective));
  if (ids.length < MIN_PLANS || ids.length > MAX_PLANS) {
    root.append(el("p", { class: "muted", id: "compare-help" }, `Pick ${MIN_PLANS} to ${MAX_PLANS} plans: tick them in the `,
      el("a", { href: "#/plans?status=done" }, "plan list"), " and press Compare, or paste their ids above",
      ids.length > MAX_PLANS ? ` (${ids.length} given).` : "."));
    return;
  }
  const plans = await Promise.all(ids.map(async (id) => current(await get(`v1/plans/${id}`))));
  const notDone = plans.filter((p) => p.status !== "done");
  root.append(el("div", {},
    el("p", { class: "legend-note" }, plans.map((p, i) => [swatch(i), el("code", {}, shortId(p.id)), ` ${p.topology?.expr ?? p.status}`, "   "])),
    notDone.length ? el("p", { class: "note-warn" }, `Not done yet: ${notDone.map((p) => `${shortId(p.id)} (${p.status})`).join(", ")}; their results are blank.`) : null,
    el("div", { class: "card chart" }, el("h2", {}, "Request, topology, predicted times, cost"),
      el("p", { class: "legend-note" }, "Green: the smallest value of a row (when the plans differ)."), compareTable(plans, collective)),
    el("div", { class: "grid2" },
      el("div", { class: "card" }, el("h2", {}, `Predicted ${collective} time against the message size`),
        el("p", { class: "legend-note" }, "Lines: T = steps x alpha + tau x M/B with each plan's verified schedule and its own alpha and B; dots: the times the plan reports at its workload's sizes."),
        el("div", { class: "chart", id: "compare-time-chart" }, timeChart(plans, collective))),
      el("div", { class: "card" }, el("h2", {}, "Workload time"),
        el("div", { class: "chart", id: "compare-workload-chart" }, workloadChart(plans)),
        el("h2", {}, "Frontiers (steps against tau)"),
        el("p", { class: "legend-note" }, "Each plan's Pareto frontier; ringed: its choice when it was planned."),
        frontierLegend(plans),
        el("div", { class: "chart", id: "compare-frontier-chart" }, frontierChart(plans))))));
}
