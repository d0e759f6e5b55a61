// The adjacency heat map: a topology too large for a node-link drawing (beyond 64 nodes a circle of arcs is a
// hairball) as a matrix on a canvas, rows the tail node and columns the head node in node order. Up to
// MAX_BINS (360) nodes each node pair is one cell, coloured by the arc's permutation (panel plane) - a circulant
// shows as d diagonals, a Kautz or de Bruijn graph as d lines of slope d. Beyond, consecutive nodes share a
// bin and a cell's colour is the number of arcs between the two bins. Removed (failed) arcs are red. Hovering
// names the cell's arcs; clicking a row lists that node's out- and in-neighbours.
import { el, fill } from "./util.js";

export const MAX_BINS = 360;           // at least 2 pixels a cell in SIZE: one pixel is too faint to see
const SIZE = 720;                      // pixels of the matrix at most (drawn 1:1, never scaled)
const REMOVED = "#d00000";

/** The bins of an N-node matrix: {bins, width} with width consecutive nodes per bin. */
export function binning(nodes) {
  const width = Math.ceil(nodes / Math.min(nodes, MAX_BINS));
  return { bins: Math.ceil(nodes / width), width };
}

/** cells: Map "i,j" -> {count, perms:Set, removed} for the arcs (and removed arcs) of the topology. */
export function adjacencyCells(nodes, arcs, permutation, removed = []) {
  const { width } = binning(nodes);
  const cells = new Map();
  const add = (u, v, perm, gone) => {
    const key = `${Math.floor(u / width)},${Math.floor(v / width)}`;
    let c = cells.get(key);
    if (!c) cells.set(key, (c = { count: 0, perms: new Set(), removed: 0 }));
    if (gone) c.removed += 1;
    else {
      c.count += 1;
      c.perms.add(perm);
    }
  };
  arcs.forEach(([u, v, lane], a) => add(u, v, permutation ? permutation[a] : lane, false));
  removed.forEach(([u, v]) => add(u, v, null, true));
  return cells;
}

/** The matrix (a canvas) with its legend, hover readout and node detail. */
export function adjacencyView(nodes, arcs, permutation, degree, palette, removed = []) {
  const { bins, width } = binning(nodes);
  const cell = Math.max(2, Math.floor(SIZE / bins));
  const px = bins * cell;
  const cells = adjacencyCells(nodes, arcs, permutation, removed);
  const maxCount = Math.max(1, ...[...cells.values()].map((c) => c.count));
  const density = d3.scaleSequential([0, maxCount], d3.interpolateBlues);
  const canvas = el("canvas", { class: "adjacency", width: px, height: px, style: `width:${px}px; height:${px}px`,
    role: "img", "aria-label": `adjacency matrix: ${nodes} nodes, ${arcs.length} arcs`,
    dataset: { nodes, bins, binWidth: width, cells: cells.size, removed: removed.length } });
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, px, px);
  ctx.fillStyle = "#f3f5f8";                                   // a faint diagonal: the self-pairs
  for (let i = 0; i < bins; i++) ctx.fillRect(i * cell, i * cell, cell, cell);
  for (const [key, c] of cells) {
    const [i, j] = key.split(",").map(Number);
    if (c.removed && !c.count) ctx.fillStyle = REMOVED;
    else if (width === 1) ctx.fillStyle = c.removed ? REMOVED : palette[[...c.perms][0] % palette.length];
    else ctx.fillStyle = c.removed ? REMOVED : density(0.25 * maxCount + 0.75 * c.count);
    ctx.fillRect(j * cell, i * cell, cell, cell);
  }
  const readout = el("p", { class: "legend-note", id: "adjacency-readout" }, "Hover the matrix to name a cell's arcs; click to list a node's neighbours.");
  const detail = el("div", { id: "adjacency-detail" });
  const out = new Map();
  const inn = new Map();
  arcs.forEach(([u, v, lane]) => {
    if (!out.has(u)) out.set(u, []);
    if (!inn.has(v)) inn.set(v, []);
    out.get(u).push([v, lane]);
    inn.get(v).push([u, lane]);
  });
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.min(bins - 1, Math.floor(((e.clientX - r.left) / r.width) * bins));
    const i = Math.min(bins - 1, Math.floor(((e.clientY - r.top) / r.height) * bins));
    return [Math.max(0, i), Math.max(0, j)];
  };
  const range = (b) => (width === 1 ? `${b}` : `${b * width}-${Math.min(nodes, (b + 1) * width) - 1}`);
  canvas.addEventListener("mousemove", (e) => {
    const [i, j] = at(e);
    const c = cells.get(`${i},${j}`);
    readout.textContent = `tail ${range(i)} → head ${range(j)}: ` + (c ? `${c.count} arc${c.count === 1 ? "" : "s"}`
      + (c.perms.size ? `, permutation ${[...c.perms].join(", ")}` : "") + (c.removed ? `, ${c.removed} removed` : "") : "no arc");
  });
  canvas.addEventListener("click", (e) => {
    const [i] = at(e);
    const u = i * width;
    const list = (pairs) => (pairs || []).map(([x, lane]) => `${x}${lane ? ` (lane ${lane})` : ""}`).join(", ") || "none";
    fill(detail, el("p", { "data-node": u }, el("b", {}, `node ${u}`), width > 1 ? ` (first of bin ${range(i)})` : "",
      `: out to ${list(out.get(u))}; in from ${list(inn.get(u))}.`));
  });
  const legend = el("p", { class: "legend-note", id: "adjacency-legend" },
    `Rows: tail node, columns: head node (node order${width > 1 ? `, ${width} nodes per row and column` : ""}). `,
    width === 1 ? [permutation ? "Colour: permutation of a Konig split (panel plane): " : "Colour: lane: ",
      palette.map((col, k) => el("span", { style: `color:${col}; margin-right:.5rem` }, `■ ${k}`))]
      : `Colour: arcs between the two bins (darker: more, up to ${maxCount}).`,
    removed.length ? el("span", { style: `color:${REMOVED}` }, ` ■ removed (${removed.length})`) : "");
  return el("div", { id: "adjacency" }, legend, canvas, readout, detail);
}
