// A topology: summary (degree, diameter, distance distribution) and, up to 64 nodes, a drawing with every
// arc (parallel arcs bent apart, self-loops as loops) coloured by the permutation of a Konig split it
// belongs to (the panel plane, i.e. host port, in the planes cabling); beyond 64 nodes, where such a drawing
// is a hairball, the adjacency heat map (adjacency.js). A plan's chosen topology (#/plans/<id>/topology), one
// of its revisions with the failed arcs marked (#/plans/<id>/topology?revision=n), or any expression
// (#/topology?expr=..: POST /v1/topologies/evaluate).
import { evaluate, get } from "../api.js";
import { adjacencyView } from "../adjacency.js";
import { COLLECTIVES } from "../cost.js";
import { el, facts, fmtNumber, intParam, PLOT_STYLE, yesNo } from "../util.js";

export const NAME = "topology";
export const DRAW_MAX_NODES = 64;
const EVALUATE_ARCS_MAX_NODES = 256;     // services.evaluation.WITH_ARCS_MAX_NODES
const SVG = "http://www.w3.org/2000/svg";

function colours(d) {
  return d <= 10 ? d3.schemeTableau10.slice(0, d) : d3.quantize(d3.interpolateRainbow, d + 1).slice(0, d);
}

/** The drawing: nodes on a circle (class node), one path per arc (class arc); removed arcs dashed red. */
export function drawTopology(nodes, arcs, permutation, degree, removed = []) {
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
  removed.forEach(([u, v, lane]) => {
    const [x1, y1] = pos(u);
    const [x2, y2] = pos(v);
    arcLayer.append(el("path", { xmlns: SVG, class: "arc removed", d: `M${x1},${y1} L${x2},${y2}`, stroke: "#d00000",
      "stroke-dasharray": "5 4", "stroke-width": 2.5, dataset: { tail: u, head: v, lane } },
    el("title", { xmlns: SVG }, `${u} → ${v}${lane ? ` (lane ${lane})` : ""}: failed, removed`)));
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
    palette.map((col, k) => el("span", { style: `color:${col}; margin-right:.6rem` }, `■ ${k}`)),
    removed.length ? el("span", { style: "color:#d00000" }, `- - removed (${removed.length})`) : "");
  return el("div", {}, legend, svg);
}

function distanceChart(counts) {
  const rows = counts.map((pairs, i) => ({ distance: i + 1, pairs }));
  return Plot.plot({
    style: PLOT_STYLE, width: 420, height: 240, marginLeft: 80, marginBottom: 45,
    x: { label: "distance (hops)", type: "band", tickFormat: (d) => (counts.length <= 12 || d === 1 || d % Math.ceil(counts.length / 10) === 0 ? d : "") },
    y: { label: "↑ ordered node pairs", grid: true },
    marks: [Plot.barY(rows, { x: "distance", y: "pairs", fill: "#1f4e79", title: (r) => `${r.pairs} pairs at distance ${r.distance}` }),
      Plot.ruleY([0])],
  });
}

function summary(t, extra = []) {
  return el("div", { class: "card", id: "topology-summary" }, el("h2", {}, el("code", {}, t.expr)),
    el("div", {},
      facts([
        ["nodes N", t.nodes], ["degree d", t.degree], ["arcs", Number.isInteger(t.arcs) ? t.arcs : t.nodes * t.degree], ["diameter", t.diameter],
        ["mean distance", t.mean_distance != null ? fmtNumber(t.mean_distance) : "-"],
        ["duplex cabling", yesNo(t.bidirectional)], ...extra,
      ]),
      t.distance_counts ? el("div", { class: "chart", id: "distance-chart" }, distanceChart(t.distance_counts))
        : el("p", { class: "muted" }, "This plan predates the stored distance distribution.")));
}

/** The circle drawing up to DRAW_MAX_NODES nodes, the adjacency heat map beyond. */
function drawing(nodes, arcs, permutation, degree, removed = []) {
  if (nodes > DRAW_MAX_NODES) {
    return el("div", { class: "card chart", id: "topology-matrix" },
      adjacencyView(nodes, arcs, permutation, degree, colours(degree), removed));
  }
  return el("div", { class: "card chart", id: "topology-drawing" }, drawTopology(nodes, arcs, permutation, degree, removed));
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
    const n = intParam(query, "revision") ?? 0;
    const link = el("a", { href: `#/plans/${id}${n ? `?revision=${n}` : ""}` }, el("code", {}, id.slice(0, 8)));
    if (n) {
      const [rev, topo] = await Promise.all([get(`v1/plans/${id}/revisions/${n}`), get(`v1/plans/${id}/revisions/${n}/topology`)]);
      const t = rev.topology;
      const removed = t.removed || [];
      const steps = Object.entries(rev.schedules || {}).map(([c, s]) => [`steps, tau (${c})`, `${s.steps}, ${fmtNumber(s.tau)}`]);
      root.append(el("h1", {}, `Topology of revision ${n} of plan `, link),
        el("p", { class: "legend-note" }, `Revision ${n} (${rev.kind}${rev.current ? ", current" : ""}): `,
          `${plan.topology.expr} without ${removed.map(([a, b]) => `${a}→${b}`).join(", ") || "nothing"}.`),
        layout(summary({ ...t, arcs: topo.arcs.length }, [["removed arcs", removed.length], ...steps]),
          drawing(t.nodes, topo.arcs, topo.permutation || null, t.degree, removed)));
      return;
    }
    const t = plan.topology;
    const topo = await get(`v1/plans/${id}/topology`);
    root.append(el("h1", {}, "Topology of plan ", link),
      layout(summary(t, [["steps (allgather)", t.steps], ["tau (allgather)", fmtNumber(t.tau)]]),
        drawing(t.nodes, topo.arcs, topo.permutation || null, t.degree)));
    root.append(el("h2", {}, "Evaluate another expression"), evaluateForm("", "allgather"));
    return;
  }
  const expr = query.get("expr");
  const collective = COLLECTIVES.includes(query.get("collective")) ? query.get("collective") : "allgather";
  root.append(el("h1", {}, "Topology"),
    el("p", { class: "legend-note" }, "Any topology expression (the grammar of the README), evaluated by its optimal BFB schedule, model-checked."),
    evaluateForm(expr, collective));
  if (!expr) return;
  const waiting = el("p", { class: "muted", id: "topology-waiting", hidden: true });
  root.append(waiting);
  const t = await evaluate({ expr, collective, with_arcs: true }, (ev) => {
    waiting.hidden = false;
    waiting.dataset.status = ev.status;
    waiting.replaceChildren(el("span", { class: "spinner" }), ` evaluating ${expr}: ${ev.status} …`);
  });
  waiting.remove();
  root.append(layout(summary(t, [
    ["collective", t.collective], ["steps", t.steps], ["tau", `${fmtNumber(t.tau)} (${t.tau_exact})`],
    ["BW-optimal", yesNo(t.bw_optimal)], ["Moore-optimal", yesNo(t.moore_optimal)], ["verified", yesNo(t.verified)],
    ["transfers", t.transfers], ["solved in", `${fmtNumber(t.seconds, 3)} s`],
  ]), t.arcs ? drawing(t.nodes, t.arcs, t.permutation, t.degree)
    : el("p", { class: "muted", id: "topology-no-drawing" }, `An evaluation returns its arcs up to ${EVALUATE_ARCS_MAX_NODES} `
      + `nodes (with_arcs); a plan's topology page shows the adjacency heat map of any size.`)));
}
