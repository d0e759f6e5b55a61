// Where the bandwidth goes: per comm step, what each link carries (a heat map of steps x links) with the
// step's maximum beside it. GET /v1/plans/<id>/schedules/<collective>/loads; beyond `columns` links,
// consecutive arcs share a column that shows their maximum (so every step's maximum survives).
import { get } from "../api.js";
import { COLLECTIVES } from "../cost.js";
import { el, facts, fmtNumber, intParam } from "../util.js";

export const NAME = "schedule";
const DEFAULT_COLUMNS = 256;

function columnLabel(l) {
  return l.first_arc === l.last_arc ? `${l.tail} → ${l.head}${l.lane ? ` lane ${l.lane}` : ""}`
    : `arcs ${l.first_arc}-${l.last_arc} (tails ${l.tail}-${l.last_tail})`;
}

const MARGINS = { marginTop: 20, marginBottom: 40, marginLeft: 50 };   // the same in both charts: rows line up

function unitName(data) {
  return data.unit.split(" ")[0];                         // "shard" (M/N bytes) or "block" (an all-to-all's D/N)
}

function colourScale(data) {
  return { type: "linear", scheme: "YlOrRd", label: `load (${unitName(data)}s)`, domain: [0, Math.max(...data.step_max, 1e-9)] };
}

export function heatMap(data) {
  const cells = [];
  data.loads.forEach((row, t) => row.forEach((load, c) => cells.push({ step: t + 1, column: c, load })));
  const width = Math.max(480, Math.min(860, 60 + 4 * data.links.length));   // leaves room for the step maxima
  const steps = d3.range(1, data.steps + 1);
  return Plot.plot({
    width, height: 60 + 22 * data.steps, ...MARGINS,
    x: { label: "links (arc order: by tail node) →", axis: null, padding: 0 },
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

function stepMaxChart(data) {
  const rows = data.step_max.map((max, i) => ({ step: i + 1, max, mean: data.step_mean[i] }));
  return Plot.plot({
    width: 300, height: 60 + 22 * data.steps, ...MARGINS, marginRight: 40,
    x: { label: `load (${unitName(data)}s) →`, grid: true },
    y: { label: "comm step", domain: rows.map((r) => r.step), padding: 0.05 },
    marks: [
      Plot.barX(rows, { x: "max", y: "step", fill: "#c62828", className: "step-max", title: (r) => `step ${r.step}: max ${fmtNumber(r.max)}, mean ${fmtNumber(r.mean)}` }),
      Plot.tickX(rows, { x: "mean", y: "step", stroke: "#1d2430" }),
      Plot.text(rows, { x: "max", y: "step", text: (r) => fmtNumber(r.max, 3), dx: 4, textAnchor: "start" }),
    ],
  });
}

export async function render(root, { id, query }) {
  const asked = query.get("collective");
  const collective = [...COLLECTIVES, "alltoall"].includes(asked) ? asked : "allreduce";
  const columns = Math.min(4096, Math.max(1, intParam(query, "columns") ?? DEFAULT_COLUMNS));
  const [plan, data] = await Promise.all([get(`v1/plans/${id}`),
    get(`v1/plans/${id}/schedules/${collective}/loads`, { max_links: columns })]);
  const reported = plan.schedules?.[collective];
  const shown = Object.keys(plan.schedules || {}).length ? Object.keys(plan.schedules) : COLLECTIVES;
  root.append(
    el("h1", {}, "Link loads of plan ", el("a", { href: `#/plans/${id}` }, el("code", {}, id.slice(0, 8)))),
    el("p", {}, shown.map((c) => [c === collective ? el("b", {}, c) : el("a", { href: `#/plans/${id}/schedule?collective=${c}` }, c), " "])),
    el("div", { class: "card" }, facts([
      ["topology", el("code", {}, plan.topology.expr)],
      ["steps", data.steps], ["links", data.arcs],
      ["columns", data.arcs_per_column === 1 ? `${data.links.length} (one per link)`
        : `${data.links.length}, each the maximum of ${data.arcs_per_column} consecutive arcs`],
      ["tau from these loads", `${fmtNumber(data.tau, 6)} (d/N x the sum of the step maxima)`],
      reported && ["tau the plan reports", fmtNumber(reported.tau, 6)],
    ])),
    el("div", { class: "card" }, el("h2", {}, `${collective}: load of each link in each step`),
      el("p", { class: "legend-note" }, `A link's load in a step (unit: ${data.unit}); the bar on the right is the step's maximum (red) and mean (tick): T_B adds up the maxima.`),
      el("div", { style: "display:flex; gap:1rem; align-items:flex-start; flex-wrap:wrap" },
        el("div", { class: "chart", id: "heat-map" }, heatMap(data)),
        el("div", { class: "chart", id: "step-max" }, stepMaxChart(data))),
      Plot.legend({ color: colourScale(data) })));
}
