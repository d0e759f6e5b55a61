// The Pareto frontier (paper section 7): steps (T_L / alpha) against tau (T_B / (M/B)), one point per entry,
// the selected entry and the lower bounds marked; and the predicted time of every entry from 1 KiB to 1 GiB,
// where the crossover between latency- and bandwidth-optimal topologies shows. Standalone
// (#/frontier?nodes=..&degree=..: GET /v1/frontiers; without them N = 64, d = 4) or for a plan
// (#/plans/<id>/frontier).
import { get } from "../api.js";
import { COLLECTIVES, SIZES, entryTime_s, linkModel } from "../cost.js";
import { el, fmtBytes, fmtNumber, fmtUs, intParam, PLOT_STYLE, table, textWidth, yesNo } from "../util.js";

export const NAME = "frontier";
/** What #/frontier shows without parameters. */
export const DEFAULT = { nodes: 64, degree: 4 };

function numberParam(query, name, fallback) {
  const v = Number(query.get(name));
  return query.get(name) !== null && Number.isFinite(v) && v > 0 ? v : fallback;
}

function form(q) {
  const f = el("form", { class: "inline", id: "frontier-form" },
    el("label", {}, "hosts N", el("input", { name: "nodes", type: "number", min: 2, max: 4096, required: true, value: q.nodes ?? "" })),
    el("label", {}, "ports d", el("input", { name: "degree", type: "number", min: 1, max: 16, required: true, value: q.degree ?? "" })),
    el("label", {}, "bidirectional", el("input", { name: "bidirectional", type: "checkbox", value: "true", checked: q.bidirectional })),
    el("label", {}, "alpha (µs)", el("input", { name: "alpha_us", type: "number", step: "any", min: 0, value: q.alpha_us })),
    el("label", {}, "B (Gbit/s)", el("input", { name: "bandwidth_gbps", type: "number", step: "any", min: 0, value: q.bandwidth_gbps })),
    el("label", {}, "collective", el("select", { name: "collective" },
      COLLECTIVES.map((c) => el("option", { value: c, selected: c === q.collective }, c)))),
    el("button", { type: "submit" }, "Show frontier"));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = `#/frontier?${new URLSearchParams([...new FormData(f)])}`;
  });
  return f;
}

const FRAME = { width: 620, height: 380, marginTop: 20, marginLeft: 60, marginRight: 30, marginBottom: 45 };
const LABEL_HEIGHT_PX = 16;            // a line of chart text (13 px) with its descenders
const ENTRY_R = 5;
const SELECTED_R = 11;
/** Pixels kept free inside the frame around the data: the selected entry's ring (radius 11, stroke 3) stays in. */
const INSET_PX = 14;

/** Of the candidate places of a label ([{x, y, anchor: "start"|"end", dx, dy}], x and y in pixels), the first
 * whose box keeps clear of every obstacle ([{box: [x0, y0, x1, y1], weight}], pixels: a point weighs more than a
 * rule); when none does, the first that covers the least weight. */
export function placeLabel(text, candidates, obstacles) {
  const w = textWidth(text);
  const box = (c) => {
    const x0 = c.anchor === "end" ? c.x + c.dx - w : c.x + c.dx;
    const yc = c.y + c.dy;
    return [x0, yc - LABEL_HEIGHT_PX / 2, x0 + w, yc + LABEL_HEIGHT_PX / 2];
  };
  const covered = (c) => {
    const [x0, y0, x1, y1] = box(c);
    return obstacles.reduce((sum, { box: [a0, b0, a1, b1], weight }) =>
      sum + (a1 > x0 && a0 < x1 && b1 > y0 && b0 < y1 ? weight : 0), 0);
  };
  let best = candidates[0];
  let least = Infinity;
  for (const c of candidates) {
    const n = covered(c);
    if (n === 0) return c;
    if (n < least) [best, least] = [c, n];
  }
  return best;
}

const POINT_WEIGHT = 10;      // covering a point is worse than crossing a line (the other bound's rule, the frontier)

/** Chart 1: one dot per entry (class frontier-entry), the selected one ringed, the bounds as dashed rules
 * labelled where no entry is drawn (`placeLabel`). */
export function stepsTauChart(entries, bound, selected) {
  const pick = entries.filter((e) => e.expr === selected);
  const xs = entries.map((e) => e.steps).concat([bound.steps]);
  const ys = entries.map((e) => e.tau).concat([bound.tau]);
  const xDomain = [Math.min(...xs) - 1, Math.max(...xs) + 1];
  const yDomain = [Math.min(...ys) * 0.97, Math.max(...ys) * 1.03];
  const sx = Plot.scale({ x: { domain: xDomain, range: [FRAME.marginLeft + INSET_PX, FRAME.width - FRAME.marginRight - INSET_PX] } });
  const sy = Plot.scale({ y: { domain: yDomain, range: [FRAME.height - FRAME.marginBottom - INSET_PX, FRAME.marginTop + INSET_PX] } });
  const points = entries.map((e) => [sx.apply(e.steps), sy.apply(e.tau), ENTRY_R + 1])
    .concat(pick.map((e) => [sx.apply(e.steps), sy.apply(e.tau), SELECTED_R + 2]))
    .map(([cx, cy, r]) => ({ box: [cx - r, cy - r, cx + r, cy + r], weight: POINT_WEIGHT }));
  const [x0, x1] = sx.range;
  const [y1, y0] = sy.range;
  const mooreRule = { box: [sx.apply(bound.steps) - 1, y0, sx.apply(bound.steps) + 1, y1], weight: 1 };
  const bwRule = { box: [x0, sy.apply(bound.tau) - 1, x1, sy.apply(bound.tau) + 1], weight: 1 };
  // the frontier's step line: each entry's horizontal run to the next entry's steps, then the drop to its tau
  const sorted = [...entries].sort((a, b) => a.steps - b.steps);
  const line = sorted.slice(1).flatMap((e, i) => {
    const [xa, xb, ya, yb] = [sx.apply(sorted[i].steps), sx.apply(e.steps), sy.apply(sorted[i].tau), sy.apply(e.tau)];
    return [{ box: [xa, ya - 1, xb, ya + 1], weight: 1 }, { box: [xb - 1, Math.min(ya, yb), xb + 1, Math.max(ya, yb)], weight: 1 }];
  });
  const label = (text, spots, rule) => {
    const at = placeLabel(text, spots.map(([x, y, anchor, dx, dy]) => ({ x: sx.apply(x), y: sy.apply(y), anchor, dx, dy, data: [x, y] })),
      points.concat([rule], line));
    return Plot.text([bound], { x: () => at.data[0], y: () => at.data[1], text: () => text, textAnchor: at.anchor, dx: at.dx, dy: at.dy,
      fill: "#c62828", className: "frontier-bound-label" });
  };
  const [left, right] = [xDomain[0] + 0.1, xDomain[1] - 0.1];
  const [low, high] = [yDomain[0] + 0.01 * (yDomain[1] - yDomain[0]), Math.max(...ys) * 1.02];
  const mid = (yDomain[0] + yDomain[1]) / 2;
  const bw = `BW bound: tau = ${bound.tau_exact}`;
  const moore = `Moore bound: ${bound.steps} steps`;
  return Plot.plot({
    style: PLOT_STYLE, ...FRAME,
    x: { label: "steps = T_L / alpha →", domain: xDomain, grid: true, inset: INSET_PX,
      ticks: d3.range(Math.min(...xs) - 1, Math.max(...xs) + 2), tickFormat: "d" },
    y: { label: "↑ tau = T_B / (M/B)", domain: yDomain, grid: true, inset: INSET_PX },
    marks: [
      Plot.ruleX([bound.steps], { stroke: "#c62828", strokeDasharray: "4,3", className: "frontier-bound" }),
      Plot.ruleY([bound.tau], { stroke: "#c62828", strokeDasharray: "4,3", className: "frontier-bound" }),
      label(moore, [high, mid, low].flatMap((y) => [[bound.steps, y, "start", 4, y === low ? -8 : 0],
        [bound.steps, y, "end", -4, y === low ? -8 : 0]]), bwRule),
      label(bw, [-11, 11, -19, 19].flatMap((dy) => [[right, bound.tau, "end", 0, dy], [left, bound.tau, "start", 0, dy],
        [(left + right) / 2, bound.tau, "start", 0, dy]]), mooreRule),
      Plot.line(entries, { x: "steps", y: "tau", stroke: "#9aa7b5", curve: "step-after" }),
      Plot.dot(pick, { x: "steps", y: "tau", r: SELECTED_R, stroke: "#f4a261", strokeWidth: 3, className: "frontier-selected" }),
      Plot.dot(entries, {
        x: "steps", y: "tau", r: ENTRY_R, fill: "#1f4e79", stroke: "#1f4e79",
        className: "frontier-entry", title: (e) => `${e.expr}\nsteps ${e.steps}, tau ${e.tau_exact}`,
      }),
      Plot.tip(entries, Plot.pointer({ x: "steps", y: "tau", title: (e) => `${e.expr}\nsteps ${e.steps}, tau ${e.tau_exact}` })),
    ],
  });
}

function timeRows(entries, model, collective) {
  const rows = entries.flatMap((e) => SIZES.map((size) => ({
    expr: e.expr, size, time_us: 1e6 * entryTime_s(model, collective, e, size),
  })));
  const fastest = new Map(SIZES.map((size) => [size, Math.min(...rows.filter((r) => r.size === size).map((r) => r.time_us))]));
  return rows.map((r) => ({ ...r, slowdown: r.time_us / fastest.get(r.size) }));
}

const SIZE_AXIS = { type: "log", base: 2, label: "message size M →", ticks: [2 ** 10, 2 ** 15, 2 ** 20, 2 ** 25, 2 ** 30],
  tickFormat: fmtBytes, grid: true };

/** Chart 2: predicted time of each entry against the message size (log-log), one line per entry, and under
 * it the same as a slowdown against the fastest entry at each size, where the crossovers stand out. */
export function timeChart(entries, model, collective, selected) {
  const rows = timeRows(entries, model, collective);
  const color = { domain: entries.map((e) => e.expr), scheme: "tableau10" };
  const width = (r) => (r.expr === selected ? 3.5 : 1.5);
  const absolute = Plot.plot({
    style: PLOT_STYLE, width: 620, height: 300, marginLeft: 70, marginBottom: 45, x: SIZE_AXIS, color: { ...color, legend: true },
    y: { type: "log", label: `↑ predicted ${collective} time (µs)`, grid: true },
    marks: [
      Plot.line(rows, { x: "size", y: "time_us", stroke: "expr", strokeWidth: width, className: "time-line" }),
      Plot.tip(rows, Plot.pointer({ x: "size", y: "time_us", title: (r) => `${r.expr}\n${fmtBytes(r.size)}: ${fmtUs(r.time_us)}` })),
    ],
  });
  const relative = Plot.plot({
    style: PLOT_STYLE, width: 620, height: 200, marginLeft: 70, marginBottom: 45, x: SIZE_AXIS, color,
    y: { type: "log", label: "↑ time / fastest at that size", grid: true, tickFormat: (v) => `${fmtNumber(v, 3)}x` },
    marks: [
      Plot.ruleY([1]),
      Plot.line(rows, { x: "size", y: "slowdown", stroke: "expr", strokeWidth: width, className: "slowdown-line" }),
      Plot.tip(rows, Plot.pointer({ x: "size", y: "slowdown", title: (r) => `${r.expr}\n${fmtBytes(r.size)}: ${fmtNumber(r.slowdown, 3)}x the fastest` })),
    ],
  });
  return el("div", {}, absolute, relative);
}

/** Sizes where the fastest entry changes: the crossovers. */
function crossovers(entries, model, collective) {
  const out = [];
  let prev = null;
  for (const size of SIZES) {
    const best = entries.reduce((a, b) => (entryTime_s(model, collective, b, size) <
      entryTime_s(model, collective, a, size) ? b : a));
    if (prev && best.expr !== prev.expr) out.push(`${prev.expr} → ${best.expr} near ${fmtBytes(size)}`);
    prev = best;
  }
  return out;
}

export async function render(root, { id, query }) {
  let q;
  let entries;
  let bound;
  let selected = null;
  let title;
  let defaulted = false;
  if (id) {
    const plan = await get(`v1/plans/${id}`);
    if (!plan.frontier) throw new Error(`plan ${id} is ${plan.status}; its frontier exists once it is done`);
    const r = plan.request;
    const w = r.workload || {};
    q = { nodes: r.nodes, degree: r.degree, bidirectional: Boolean(r.bidirectional_only), alpha_us: r.alpha_us,
      bandwidth_gbps: r.bandwidth_gbps, collective: (w.collectives || [w.collective || "allreduce"])[0] };
    entries = plan.frontier;
    selected = plan.topology.expr;
    bound = (await get("v1/frontiers", { nodes: q.nodes, degree: q.degree, bidirectional: q.bidirectional,
      collective: q.collective })).bound;
    title = [`Frontier of plan `, el("a", { href: `#/plans/${id}` }, el("code", {}, id.slice(0, 8)))];
  } else {
    const given = intParam(query, "nodes") !== null && intParam(query, "degree") !== null;
    q = { nodes: given ? intParam(query, "nodes") : DEFAULT.nodes, degree: given ? intParam(query, "degree") : DEFAULT.degree,
      bidirectional: query.get("bidirectional") === "true",
      alpha_us: numberParam(query, "alpha_us", 10), bandwidth_gbps: numberParam(query, "bandwidth_gbps", 100),
      collective: COLLECTIVES.includes(query.get("collective")) ? query.get("collective") : "allgather" };
    title = "Pareto frontier";
    defaulted = !given;
  }
  root.append(el("h1", {}, title), form(q));
  if (defaulted) {
    root.append(el("p", { class: "muted", id: "frontier-default" }, `No N and d given: showing N = ${DEFAULT.nodes}, `
      + `d = ${DEFAULT.degree} (a rack of ${DEFAULT.nodes} hosts with ${DEFAULT.degree} ports each). Change them above.`));
  }
  if (!id) {
    const f = await get("v1/frontiers", { nodes: q.nodes, degree: q.degree, bidirectional: q.bidirectional,
      collective: q.collective });
    entries = f.entries;
    bound = f.bound;
    selected = entries[0]?.expr ?? null;
  }
  const model = linkModel(q.alpha_us, q.bandwidth_gbps);
  const fastest = (size) => entries.reduce((a, b) => (entryTime_s(model, q.collective, b, size) <
    entryTime_s(model, q.collective, a, size) ? b : a));
  const cross = crossovers(entries, model, q.collective);
  root.append(
    el("p", { class: "legend-note" }, `N = ${q.nodes}, d = ${q.degree}${q.bidirectional ? ", bidirectional" : ""}: `,
      `${entries.length} Pareto-efficient topologies. Lower bounds: ${bound.steps} steps (Moore), tau ${bound.tau_exact} (bandwidth). `,
      id ? "Ringed: the plan's choice. " : "Ringed: the fewest steps. ",
      `Costs are each entry's exact ${q.collective} cost (reduce-scatter by BFB on the transpose).`),
    el("div", { class: "grid2" },
      el("div", { class: "card" }, el("h2", {}, "Steps against tau"), el("div", { class: "chart", id: "frontier-chart" },
        stepsTauChart(entries, bound, selected))),
      el("div", { class: "card" }, el("h2", {}, `Predicted ${q.collective} time, 1 KiB to 1 GiB`),
        el("p", { class: "legend-note" }, `alpha = ${q.alpha_us} µs, B = ${q.bandwidth_gbps} Gbit/s; T = steps x alpha + tau x M/B`,
          ` with the entry's own ${q.collective} (steps, tau)`, ". ",
          cross.length ? `Crossovers: ${cross.join("; ")}.` : `${fastest(SIZES[0]).expr} is fastest at every size.`),
        el("div", { class: "chart", id: "time-chart" }, timeChart(entries, model, q.collective, selected)))),
    el("div", { class: "card" }, el("h2", {}, "Entries"), table([
      { label: "expression", value: (e) => el("a", { href: `#/topology?expr=${encodeURIComponent(e.expr)}` }, el("code", {}, e.expr)) },
      { label: "steps", class: "num", value: (e) => e.steps },
      { label: "tau", class: "num", value: (e) => fmtNumber(e.tau) },
      { label: "diameter", class: "num", value: (e) => e.diameter ?? "-" },
      { label: "BW-optimal", value: (e) => yesNo(e.bw_optimal) },
      { label: "Moore-optimal", value: (e) => yesNo(e.moore_optimal) },
      { label: "family", value: (e) => e.family },
      { label: "1 MiB", class: "num", value: (e) => fmtUs(1e6 * entryTime_s(model, q.collective, e, 2 ** 20)) },
      { label: "workload (plan)", class: "num", value: (e) => fmtUs(e.workload_time_us) },
    ], entries, (e) => ({ "data-expr": e.expr, class: e.expr === selected ? "selected" : null }))));
}
