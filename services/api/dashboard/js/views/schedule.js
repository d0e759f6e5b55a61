// Where the bandwidth goes: per comm step, what each link carries (a heat map of steps x links, the links
// labelled by tail -> head) with the step's maximum beside it; a step player that animates the schedule
// step by step (the step's row outlined, and up to 64 nodes the topology drawn with the step's busy links);
// and a per-chunk trace: where one chunk of one shard travels, step by step, outlined on the heat map.
// A plan's loads come from GET /v1/plans/<id>/schedules/<collective>/loads (beyond `columns` links,
// consecutive arcs share a column that shows their maximum, so every step's maximum survives). A revision's
// (?revision=n) are computed here from its schedule and topology JSON, the same way (the API serves stored
// loads for revision 0 only); the trace and the player read the schedule's JSON too.
import { get } from "../api.js";
import { COLLECTIVES } from "../cost.js";
import { el, facts, fill, fmtNumber, intParam, PLOT_STYLE } from "../util.js";
import { DRAW_MAX_NODES, drawTopology } from "./topology.js";

export const NAME = "schedule";
const DEFAULT_COLUMNS = 256;
const LABEL_EVERY_COLUMN = 64;           // up to this many columns each one is labelled tail -> head
export const TRACE_MAX_TRANSFERS = 100_000;   // the trace and player read the schedule JSON up to this size
const STEP_MS = 900;

function columnLabel(l) {
  return l.first_arc === l.last_arc ? `${l.tail} → ${l.head}${l.lane ? ` lane ${l.lane}` : ""}`
    : `arcs ${l.first_arc}-${l.last_arc} (tails ${l.tail}-${l.last_tail})`;
}

function shortLabel(l) {
  return l.first_arc === l.last_arc ? `${l.tail}→${l.head}${l.lane ? `'${l.lane}` : ""}` : `${l.tail}-${l.last_tail}`;
}

function unitName(data) {
  return data.unit.split(" ")[0];                         // "shard" (M/N bytes) or "block" (an all-to-all's D/N)
}

/** The loads view of GET .../loads computed from a schedule's JSON and its topology's JSON (arcs in arc
 * order): loads per step and column in shards (or blocks), the step maxima and means, and tau. */
export function loadsFromSchedule(sched, topo, maxLinks) {
  const arcs = topo.arcs;
  const index = new Map(arcs.map(([u, v, l], a) => [`${u},${v},${l}`, a]));
  const a2a = sched.collective === "alltoall";
  const unitGrid = a2a ? sched.grid / sched.nodes : sched.grid;
  const perArc = sched.steps.map((st) => {
    const row = new Float64Array(arcs.length);
    for (const [, u, v, l, lo, hi] of st.transfers) {
      const a = index.get(`${u},${v},${l}`);
      if (a === undefined) throw new Error(`step ${st.step}: the link ${u}→${v} lane ${l} is not in the topology`);
      row[a] += hi - lo;
    }
    return row;
  });
  const width = Math.ceil(arcs.length / maxLinks) || 1;
  const starts = d3.range(0, arcs.length, width);
  const links = starts.map((a) => {
    const last = Math.min(a + width, arcs.length) - 1;
    return width === 1 ? { first_arc: a, last_arc: a, tail: arcs[a][0], last_tail: arcs[a][0], head: arcs[a][1], lane: arcs[a][2] }
      : { first_arc: a, last_arc: last, tail: arcs[a][0], last_tail: arcs[last][0], head: null, lane: null };
  });
  const loads = perArc.map((row) => starts.map((a) => Math.max(...row.subarray(a, Math.min(a + width, row.length))) / unitGrid));
  const stepMax = perArc.map((row) => Math.max(0, ...row) / unitGrid);
  const stepMean = perArc.map((row) => (row.length ? row.reduce((x, y) => x + y, 0) / row.length / unitGrid : 0));
  // tau = d/N x the sum of the step maxima, in shards (or, for an all-to-all, in blocks: the same formula)
  return { collective: sched.collective, nodes: topo.nodes, degree: topo.degree, steps: sched.steps.length, arcs: arcs.length,
    arcs_per_column: width, unit: a2a ? "block (D/N bytes)" : "shard (M/N bytes)", links, loads, step_max: stepMax,
    step_mean: stepMean, tau: (topo.degree * stepMax.reduce((x, y) => x + y, 0)) / topo.nodes };
}

const MARGINS = { marginTop: 20, marginLeft: 60 };   // the same in both charts: rows line up

function colourScale(data) {
  return { type: "linear", scheme: "YlOrRd", label: `load (${unitName(data)}s)`, domain: [0, Math.max(...data.step_max, 1e-9)] };
}

/** Bottom margin and x axis of the heat map: every column labelled when there are few, else tail nodes. */
function xAxis(data) {
  const n = data.links.length;
  if (n <= LABEL_EVERY_COLUMN) {
    return { bottom: 80, axis: { label: "link (tail → head) →", tickFormat: (c) => shortLabel(data.links[c]), tickRotate: -90 } };
  }
  const every = Math.ceil(n / 10);
  return { bottom: 50, axis: { label: "links by tail node (a tick: the column's first tail) →",
    ticks: d3.range(0, n, every), tickFormat: (c) => String(data.links[c].tail) } };
}

export function heatMap(data) {
  const cells = [];
  data.loads.forEach((row, t) => row.forEach((load, c) => cells.push({ step: t + 1, column: c, load })));
  const n = data.links.length;          // up to LABEL_EVERY_COLUMN columns: 13 px each, room for a label
  const width = n <= LABEL_EVERY_COLUMN ? Math.max(420, 80 + 13 * n) : Math.max(520, Math.min(860, 80 + 4 * n));
  const steps = d3.range(1, data.steps + 1);
  const x = xAxis(data);
  return Plot.plot({
    style: PLOT_STYLE, width, height: 20 + x.bottom + 24 * data.steps, ...MARGINS, marginBottom: x.bottom,
    x: { ...x.axis, padding: 0, domain: d3.range(data.links.length) },
    y: { label: "comm step", domain: steps, padding: 0.05 },
    color: colourScale(data),
    marks: [
      Plot.cell(cells, {
        x: "column", y: "step", fill: "load", inset: 0, className: "load-cell",
        title: (d) => `step ${d.step}, ${columnLabel(data.links[d.column])}: ${fmtNumber(d.load)} ${unitName(data)}s`,
      }),
    ],
  });
}

function stepMaxChart(data, bottom) {
  const rows = data.step_max.map((max, i) => ({ step: i + 1, max, mean: data.step_mean[i] }));
  return Plot.plot({
    style: PLOT_STYLE, width: 240, height: 20 + bottom + 24 * data.steps, ...MARGINS, marginBottom: bottom, marginRight: 50,
    x: { label: `load (${unitName(data)}s) →`, grid: true },
    y: { label: "comm step", domain: rows.map((r) => r.step), padding: 0.05 },
    marks: [
      Plot.barX(rows, { x: "max", y: "step", fill: "#c62828", className: "step-max", title: (r) => `step ${r.step}: max ${fmtNumber(r.max)}, mean ${fmtNumber(r.mean)}` }),
      Plot.tickX(rows, { x: "mean", y: "step", stroke: "#1d2430" }),
      Plot.text(rows, { x: "max", y: "step", text: (r) => fmtNumber(r.max, 3), dx: 4, textAnchor: "start" }),
    ],
  });
}

const SVG = "http://www.w3.org/2000/svg";

/** An overlay layer on a Plot heat map: rectangles at (column, step) cells, in chart coordinates. */
function overlay(chart, className) {
  const svg = chart.tagName === "svg" ? chart : chart.querySelector("svg");
  const layer = document.createElementNS(SVG, "g");
  layer.setAttribute("class", className);
  svg.append(layer);
  const xs = chart.scale("x");
  const ys = chart.scale("y");
  return {
    clear: () => layer.replaceChildren(),
    row(step) {
      const r = document.createElementNS(SVG, "rect");
      const xr = xs.range;
      Object.entries({ x: Math.min(...xr), y: ys.apply(step), width: Math.abs(xr[1] - xr[0]), height: ys.bandwidth,
        fill: "none", stroke: "#1d2430", "stroke-width": 2.5 }).forEach(([k, v]) => r.setAttribute(k, v));
      layer.append(r);
    },
    cell(column, step, colour) {
      const r = document.createElementNS(SVG, "rect");
      Object.entries({ x: xs.apply(column) - 1, y: ys.apply(step) - 1, width: Math.max(3, xs.bandwidth + 2), height: ys.bandwidth + 2,
        fill: "none", stroke: colour, "stroke-width": 2.5, class: "trace-cell" }).forEach(([k, v]) => r.setAttribute(k, v));
      layer.append(r);
    },
  };
}

/** Per step, the transfers of one chunk (chunk k of shard s: [k, k+1) in grid units) and who holds it. */
export function chunkTrace(sched, shard, chunk) {
  let holders = null;
  return sched.steps.map((st) => {
    const moves = st.transfers.filter(([s, , , , lo, hi]) => s === shard && lo <= chunk && chunk < hi)
      .map(([, u, v, l]) => ({ u, v, l }));
    if (st.op === "copy") {
      holders ??= new Set([shard]);
      moves.forEach((m) => holders.add(m.v));
    }
    return { step: st.step, op: st.op, moves, holders: holders ? holders.size : null };
  });
}

function traceCard(sched, data, chart, arcColumn) {
  const layer = overlay(chart, "trace-layer");
  const a2a = sched.collective === "alltoall";
  const shardIn = el("input", { type: "number", min: 0, max: sched.nodes - 1, value: 0, name: "shard", id: "trace-shard" });
  const chunkIn = el("input", { type: "number", min: 0, max: sched.grid - 1, value: 0, name: "chunk", id: "trace-chunk" });
  const out = el("div", { id: "trace-table" });
  const show = () => {
    const s = Math.max(0, Math.min(sched.nodes - 1, Number(shardIn.value) || 0));
    const k = Math.max(0, Math.min(sched.grid - 1, Number(chunkIn.value) || 0));
    const trace = chunkTrace(sched, s, k);
    layer.clear();
    trace.forEach((t) => t.moves.forEach((m) => layer.cell(arcColumn(m), t.step, "#1565c0")));
    const moved = trace.reduce((n, t) => n + t.moves.length, 0);
    fill(out, el("p", { class: "legend-note" }, `${a2a ? "Source" : "Shard"} ${s}, chunk ${k} (1/${sched.grid} of ${a2a ? "the source's buffer" : "a shard"}): `
      + `${moved} transfers, outlined in blue on the heat map.`),
    el("table", { class: "trace-steps" },
      el("thead", {}, el("tr", {}, el("th", {}, "step"), el("th", {}, "op"), el("th", {}, "links that carry it"), el("th", { class: "num" }, "nodes holding it"))),
      el("tbody", {}, trace.map((t) => el("tr", { "data-step": t.step, "data-moves": t.moves.length },
        el("td", {}, t.step), el("td", {}, t.op),
        el("td", {}, t.moves.map((m) => `${m.u}→${m.v}${m.l ? ` lane ${m.l}` : ""}`).join(", ") || "-"),
        el("td", { class: "num" }, t.holders === null ? "-" : `${t.holders} of ${sched.nodes}`))))));
  };
  const form = el("form", { class: "inline", id: "trace-form", onsubmit: (e) => { e.preventDefault(); show(); } },
    el("label", {}, a2a ? "source node" : "shard (its owner node)", shardIn), el("label", {}, `chunk (0-${sched.grid - 1})`, chunkIn),
    el("button", { type: "submit" }, "Trace"));
  shardIn.addEventListener("change", show);
  chunkIn.addEventListener("change", show);
  show();
  return el("div", { class: "card", id: "chunk-trace" }, el("h2", {}, "Per-chunk trace"),
    el("p", { class: "legend-note" }, "Where one chunk travels: the links that carry it in each step (from the schedule's JSON); copy steps count the nodes that hold it."),
    form, out);
}

function playerCard(sched, data, chart, topo, ctx) {
  const layer = overlay(chart, "step-layer");
  const n = data.steps;
  const slider = el("input", { type: "range", min: 1, max: n, value: 1, id: "step-slider", "aria-label": "comm step" });
  const label = el("span", { id: "step-label" });
  const info = el("p", { class: "legend-note", id: "step-info" });
  const small = topo && topo.nodes <= DRAW_MAX_NODES;
  const drawing = small ? drawTopology(topo.nodes, topo.arcs, topo.permutation || null, topo.degree) : null;
  const paths = drawing ? [...drawing.querySelectorAll("path.arc")] : [];
  paths.forEach((p) => p.removeAttribute("marker-end"));    // arrowheads in permutation colours would clash
  drawing?.querySelector("#topology-legend")?.replaceChildren("Link colour: its load in the step (the heat map's scale); grey: idle.");
  const loadOf = (st) => {
    const m = new Map();
    for (const [, u, v, l, lo, hi] of st.transfers) m.set(`${u},${v},${l}`, (m.get(`${u},${v},${l}`) || 0) + hi - lo);
    return m;
  };
  const maxLoad = Math.max(1e-9, ...data.step_max);
  const colour = d3.scaleSequential([0, maxLoad], d3.interpolateYlOrRd);
  const a2a = sched.collective === "alltoall";
  const unitGrid = a2a ? sched.grid / sched.nodes : sched.grid;
  const show = (t) => {
    slider.value = t;
    label.textContent = `step ${t} of ${n}`;
    layer.clear();
    layer.row(t);
    const st = sched.steps[t - 1];
    const loads = loadOf(st);
    info.textContent = `Step ${t}: ${st.op}, ${st.transfers.length} transfers on ${loads.size} links; busiest link ${fmtNumber(data.step_max[t - 1])} ${unitName(data)}s, mean ${fmtNumber(data.step_mean[t - 1])}.`;
    for (const p of paths) {
      const load = (loads.get(`${p.dataset.tail},${p.dataset.head},${p.dataset.lane}`) || 0) / unitGrid;
      p.style.stroke = load ? colour(0.3 * maxLoad + 0.7 * load) : "#d5dbe3";
      p.style.strokeWidth = load ? 1.5 + 2.5 * (load / maxLoad) : 0.8;
      p.style.opacity = load ? 1 : 0.5;
      p.dataset.load = load;
    }
    root.dataset.step = t;
  };
  let timer = null;
  const play = el("button", { type: "button", id: "step-play" }, "▶ play");
  const stop = () => { clearInterval(timer); timer = null; play.textContent = "▶ play"; };
  play.addEventListener("click", () => {
    if (timer) return stop();
    play.textContent = "❚❚ pause";
    timer = setInterval(() => show((Number(slider.value) % n) + 1), STEP_MS);
  });
  ctx?.cleanups.push(stop);
  slider.addEventListener("input", () => { stop(); show(Number(slider.value)); });
  const root = el("div", { class: "card", id: "step-player" }, el("h2", {}, "Step by step"),
    el("p", { class: "legend-note" }, "The step's row is outlined on the heat map" + (small ? "; in the drawing the links busy in the step are coloured by their load (faded: idle)." : ".")),
    el("div", { class: "player" }, play,
      el("button", { type: "button", onclick: () => { stop(); show(Math.max(1, Number(slider.value) - 1)); } }, "◀ step"),
      el("button", { type: "button", onclick: () => { stop(); show(Math.min(n, Number(slider.value) + 1)); } }, "step ▶"),
      slider, label),
    info, drawing ? el("div", { class: "chart", id: "step-drawing" }, drawing) : null);
  show(1);
  return root;
}

export async function render(root, { id, query }, ctx) {
  const asked = query.get("collective");
  const collective = [...COLLECTIVES, "alltoall"].includes(asked) ? asked : "allreduce";
  const columns = Math.min(4096, Math.max(1, intParam(query, "columns") ?? DEFAULT_COLUMNS));
  const n = intParam(query, "revision") ?? 0;
  const plan = await get(`v1/plans/${id}`);
  const rev = n ? await get(`v1/plans/${id}/revisions/${n}`) : null;
  const summaries = (n ? rev.schedules : plan.schedules) || {};
  const reported = summaries[collective];
  const traceable = reported && reported.transfers <= TRACE_MAX_TRANSFERS;
  // each URL written out whole, so the dashboard's API test can match it against the OpenAPI paths
  const schedOf = () => (n ? get(`v1/plans/${id}/revisions/${n}/schedules/${collective}`)
    : get(`v1/plans/${id}/schedules/${collective}`));
  const topoOf = () => (n ? get(`v1/plans/${id}/revisions/${n}/topology`) : get(`v1/plans/${id}/topology`));
  const [sched, topo] = await Promise.all([traceable ? schedOf() : null, traceable || n ? topoOf() : null]);
  let data;
  if (n) {
    if (!sched) throw new Error(`revision ${n}'s ${collective} schedule has ${reported?.transfers ?? "no"} transfers: the page computes a revision's link loads from its JSON up to ${TRACE_MAX_TRANSFERS}`);
    data = loadsFromSchedule(sched, topo, columns);
  } else {
    data = await get(`v1/plans/${id}/schedules/${collective}/loads`, { max_links: columns });
  }
  const shown = Object.keys(summaries).length ? Object.keys(summaries) : COLLECTIVES;
  const q = (c) => `#/plans/${id}/schedule?collective=${c}${n ? `&revision=${n}` : ""}`;
  const chart = heatMap(data);
  const bottom = xAxis(data).bottom;
  const arcIndex = topo ? new Map(topo.arcs.map(([u, v, l], a) => [`${u},${v},${l}`, a])) : null;
  const arcColumn = (m) => Math.floor(arcIndex.get(`${m.u},${m.v},${m.l}`) / data.arcs_per_column);
  root.append(
    el("h1", {}, "Link loads of plan ", el("a", { href: `#/plans/${id}${n ? `?revision=${n}` : ""}` }, el("code", {}, id.slice(0, 8))),
      n ? ` revision ${n}` : ""),
    el("p", {}, shown.map((c) => [c === collective ? el("b", {}, c) : el("a", { href: q(c) }, c), " "])),
    el("div", { class: "card" }, facts([
      ["topology", el("code", {}, n ? rev.topology.expr : plan.topology.expr)],
      ["steps", data.steps], ["links", data.arcs],
      ["columns", data.arcs_per_column === 1 ? `${data.links.length} (one per link)`
        : `${data.links.length}, each the maximum of ${data.arcs_per_column} consecutive arcs`],
      ["tau from these loads", `${fmtNumber(data.tau, 6)} (d/N x the sum of the step maxima)`],
      reported && ["tau the plan reports", fmtNumber(reported.tau, 6)],
      n && ["loads", "computed in the browser from the revision's schedule and topology JSON"],
    ])),
    el("div", { class: "card" }, el("h2", {}, `${collective}: load of each link in each step`),
      el("p", { class: "legend-note" }, `A link's load in a step (unit: ${data.unit}); the bar on the right is the step's maximum (red) and mean (tick): T_B adds up the maxima.`),
      el("div", { style: "display:flex; gap:1rem; align-items:flex-start; flex-wrap:wrap" },
        el("div", { class: "chart", id: "heat-map" }, chart),
        el("div", { class: "chart", id: "step-max" }, stepMaxChart(data, bottom))),
      Plot.legend({ color: colourScale(data), style: PLOT_STYLE })),
    sched ? el("div", { class: "grid2" }, playerCard(sched, data, chart, topo, ctx), traceCard(sched, data, chart, arcColumn))
      : el("p", { class: "muted", id: "no-trace" }, `This schedule has ${reported?.transfers ?? "?"} transfers: the step player and the chunk trace read the schedule's JSON up to ${TRACE_MAX_TRANSFERS}.`));
}
