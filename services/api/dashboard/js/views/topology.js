// A topology: summary (degree, diameter, distance distribution) and, up to 256 nodes, a drawing with every
// arc (parallel arcs bent apart, self-loops as loops) coloured by the permutation of a Konig split it
// belongs to (the panel plane, i.e. host port, in the planes cabling). A plan's chosen topology
// (#/plans/<id>/topology) or any expression (#/topology?expr=..: POST /v1/topologies/evaluate).
import { get, post } from "../api.js";
import { COLLECTIVES } from "../cost.js";
import { el, facts, fmtNumber, yesNo } from "../util.js";

export const NAME = "topology";
export const DRAW_MAX_NODES = 256;
const SVG = "http://www.w3.org/2000/svg";

function colours(d) {
  return d <= 10 ? d3.schemeTableau10.slice(0, d) : d3.quantize(d3.interpolateRainbow, d + 1).slice(0, d);
}

/** The drawing: nodes on a circle (class node), one path per arc (class arc). */
export function drawTopology(nodes, arcs, permutation, degree) {
  const size = 700;
  const r = size / 2 - 40;
  const c = size / 2;
  const pos = (i) => {
    const a = (2 * Math.PI * i) / nodes - Math.PI / 2;
    return [c + r * Math.cos(a), c + r * Math.sin(a), a];
  };
  const palette = colours(degree);
  const colourOf = (a) => palette[(permutation ? permutation[a] : arcs[a][2]) % palette.length];
  const svg = el("svg", { xmlns: SVG, class: "topology", viewBox: `0 0 ${size} ${size}`, width: size, height: size,
    role: "img", "aria-label": `${nodes} nodes, ${arcs.length} arcs` });
  const defs = el("defs", { xmlns: SVG });
  palette.forEach((col, k) => defs.append(el("marker", { xmlns: SVG, id: `arrow-${k}`, viewBox: "0 0 8 8", refX: 7, refY: 4,
    markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse" }, el("path", { xmlns: SVG, d: "M0,0 L8,4 L0,8 z", fill: col }))));
  svg.append(defs);
  const arcLayer = el("g", { xmlns: SVG, class: "arcs" });
  const nodeR = nodes <= 64 ? 6 : nodes <= 128 ? 4 : 3;
  arcs.forEach(([u, v, lane], a) => {
    const [x1, y1, ang] = pos(u);
    const [x2, y2] = pos(v);
    const k = permutation ? permutation[a] : lane;
    let d;
    if (u === v) {    // a self-loop: a small loop outside the circle, larger for each further lane
      const s = 10 + 6 * lane;
      const ox = Math.cos(ang), oy = Math.sin(ang), px = -oy, py = ox;
      d = `M${x1},${y1} C${x1 + s * (2 * ox + px)},${y1 + s * (2 * oy + py)} ${x1 + s * (2 * ox - px)},${y1 + s * (2 * oy - py)} ${x1},${y1}`;
    } else {          // bend to the left of u -> v: the reverse arc bends the other way, parallel lanes further
      const mx = (x1 + x2) / 2, my = (y1 + y2) / 2;
      const len = Math.hypot(x2 - x1, y2 - y1);
      const bend = Math.min(0.12 * len + 4, 40) * (1 + 0.8 * lane);
      const nx = -(y2 - y1) / len, ny = (x2 - x1) / len;
      const t = (len - nodeR - 2) / len;   // stop at the head's rim so the arrowhead shows
      const cx = mx + nx * bend, cy = my + ny * bend;
      const ex = cx + (x2 - cx) * t, ey = cy + (y2 - cy) * t;
      d = `M${x1},${y1} Q${cx},${cy} ${ex},${ey}`;
    }
    arcLayer.append(el("path", {
      xmlns: SVG, class: "arc", d, stroke: colourOf(a), "marker-end": nodes <= 128 ? `url(#arrow-${k % palette.length})` : null,
      dataset: { tail: u, head: v, lane, permutation: k },
    }, el("title", { xmlns: SVG }, `${u} → ${v}${lane ? ` (lane ${lane})` : ""}, permutation ${k}`)));
  });
  const nodeLayer = el("g", { xmlns: SVG, class: "nodes" });
  for (let i = 0; i < nodes; i++) {
    const [x, y, ang] = pos(i);
    nodeLayer.append(el("circle", { xmlns: SVG, class: "node", cx: x, cy: y, r: nodeR, dataset: { node: i } },
      el("title", { xmlns: SVG }, `node ${i}`)));
    if (nodes <= 64) {
      nodeLayer.append(el("text", { xmlns: SVG, class: "node-label", x: x + 14 * Math.cos(ang), y: y + 14 * Math.sin(ang) + 3,
        "text-anchor": "middle" }, String(i)));
    }
  }
  svg.append(arcLayer, nodeLayer);
  const legend = el("p", { class: "legend-note", id: "topology-legend" },
    permutation ? "Arc colour: permutation of a Konig split (panel plane / host port in the planes cabling): "
      : "Arc colour: lane among parallel arcs: ",
    palette.map((col, k) => el("span", { style: `color:${col}; margin-right:.6rem` }, `■ ${k}`)));
  return el("div", {}, legend, svg);
}

function distanceChart(counts) {
  const rows = counts.map((pairs, i) => ({ distance: i + 1, pairs }));
  return Plot.plot({
    width: 420, height: 220, marginLeft: 70,
    x: { label: "distance (hops)", type: "band" },
    y: { label: "↑ ordered node pairs", grid: true },
    marks: [Plot.barY(rows, { x: "distance", y: "pairs", fill: "#1f4e79", title: (r) => `${r.pairs} pairs at distance ${r.distance}` }),
      Plot.ruleY([0])],
  });
}

function summary(t, extra = []) {
  return el("div", { class: "card", id: "topology-summary" }, el("h2", {}, el("code", {}, t.expr)),
    el("div", {},
      facts([
        ["nodes N", t.nodes], ["degree d", t.degree], ["arcs", t.nodes * t.degree], ["diameter", t.diameter],
        ["mean distance", t.mean_distance != null ? fmtNumber(t.mean_distance) : "-"],
        ["duplex cabling", yesNo(t.bidirectional)], ...extra,
      ]),
      t.distance_counts ? el("div", { class: "chart", id: "distance-chart" }, distanceChart(t.distance_counts))
        : el("p", { class: "muted" }, "This plan predates the stored distance distribution.")));
}

function drawingOrNote(nodes, draw) {
  if (nodes > DRAW_MAX_NODES) {
    return el("p", { class: "muted", id: "topology-no-drawing" },
      `${nodes} nodes: the drawing is shown up to ${DRAW_MAX_NODES} nodes; the summary above describes this one.`);
  }
  return el("div", { class: "card chart", id: "topology-drawing" }, draw());
}

function layout(summaryCard, drawing) {
  return el("div", { class: "topology-layout" }, summaryCard, drawing);
}

function evaluateForm(expr, collective) {
  const f = el("form", { class: "inline", id: "evaluate-form" },
    el("label", {}, "expression", el("input", { name: "expr", size: 40, required: true, value: expr || "", placeholder: "genkautz(4, 64)" })),
    el("label", {}, "collective", el("select", { name: "collective" },
      COLLECTIVES.map((c) => el("option", { value: c, selected: c === collective }, c)))),
    el("button", { type: "submit" }, "Evaluate"));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = `#/topology?${new URLSearchParams([...new FormData(f)])}`;
  });
  return f;
}

export async function render(root, { id, query }) {
  if (id) {
    const plan = await get(`v1/plans/${id}`);
    if (!plan.topology) throw new Error(`plan ${id} is ${plan.status}; its topology exists once it is done`);
    const t = plan.topology;
    const drawing = t.nodes <= DRAW_MAX_NODES ? await get(`v1/plans/${id}/topology`) : null;
    root.append(el("h1", {}, "Topology of plan ", el("a", { href: `#/plans/${id}` }, el("code", {}, id.slice(0, 8)))),
      layout(summary(t, [["steps (allgather)", t.steps], ["tau (allgather)", fmtNumber(t.tau)]]),
        drawingOrNote(t.nodes, () => drawTopology(t.nodes, drawing.arcs, drawing.permutation || null, t.degree))));
    root.append(el("h2", {}, "Evaluate another expression"), evaluateForm("", "allgather"));
    return;
  }
  const expr = query.get("expr");
  const collective = COLLECTIVES.includes(query.get("collective")) ? query.get("collective") : "allgather";
  root.append(el("h1", {}, "Topology"),
    el("p", { class: "legend-note" }, "Any topology expression (the grammar of the README), evaluated by its optimal BFB schedule, model-checked."),
    evaluateForm(expr, collective));
  if (!expr) return;
  const t = await post("v1/topologies/evaluate", { expr, collective, with_arcs: true });
  root.append(layout(summary(t, [
    ["collective", t.collective], ["steps", t.steps], ["tau", `${fmtNumber(t.tau)} (${t.tau_exact})`],
    ["BW-optimal", yesNo(t.bw_optimal)], ["Moore-optimal", yesNo(t.moore_optimal)], ["verified", yesNo(t.verified)],
    ["transfers", t.transfers], ["solved in", `${fmtNumber(t.seconds, 3)} s`],
  ]), drawingOrNote(t.nodes, () => drawTopology(t.nodes, t.arcs, t.permutation, t.degree))));
}
