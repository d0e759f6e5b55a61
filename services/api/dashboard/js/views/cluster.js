// Shared cluster (TopoOpt section 5.6): a job mix at several loads on the direct-connect fabric and on switched
// ones, simulated in a worker (POST /v1/cluster/simulations, polled until done). #/cluster?servers=..&degree=..
// without parameters shows TopoOpt's setting: 432 servers, d = 8, B = 100 Gbps, jobs of 16 servers.
import { get, post } from "../api.js";
import { el, fmtNumber, PLOT_STYLE, sleep, spinner, table } from "../util.js";

export const NAME = "cluster";
export const DEFAULT = { servers: 432, degree: 8, bandwidth_gbps: 100, servers_per_job: 16, jobs: "5,10,15,20,27",
  fabrics: ["direct", "fat-tree", "fat-tree-2to1"], placement: "packed" };
const FABRICS = ["direct", "fat-tree", "fat-tree-2to1", "fat-tree-4to1", "rail-optimised"];

function request(query) {
  const num = (name) => (query.get(name) !== null && Number.isFinite(Number(query.get(name))) ? Number(query.get(name)) : DEFAULT[name]);
  const fabrics = query.getAll("fabric");
  return {
    servers: num("servers"), degree: num("degree"), bandwidth_gbps: num("bandwidth_gbps"),
    servers_per_job: num("servers_per_job"),
    jobs: (query.get("jobs") ?? DEFAULT.jobs).split(",").map(Number).filter((x) => Number.isInteger(x) && x > 0),
    fabrics: fabrics.length ? fabrics : DEFAULT.fabrics,
    placement: query.get("placement") === "random" ? "random" : "packed",
  };
}

function form(r) {
  const f = el("form", { class: "inline", id: "cluster-form" },
    el("label", {}, "servers", el("input", { name: "servers", type: "number", min: 2, max: 8192, value: r.servers })),
    el("label", {}, "ports d", el("input", { name: "degree", type: "number", min: 1, max: 64, value: r.degree })),
    el("label", {}, "B per port (Gbit/s)", el("input", { name: "bandwidth_gbps", type: "number", step: "any", min: 0, value: r.bandwidth_gbps })),
    el("label", {}, "servers per job", el("input", { name: "servers_per_job", type: "number", min: 2, value: r.servers_per_job })),
    el("label", {}, "active jobs", el("input", { name: "jobs", type: "text", value: r.jobs.join(",") })),
    FABRICS.map((f) => el("label", {}, f, el("input", { name: "fabric", type: "checkbox", value: f, checked: r.fabrics.includes(f) }))),
    el("label", {}, "placement", el("select", { name: "placement" },
      ["packed", "random"].map((p) => el("option", { value: p, selected: p === r.placement }, p)))),
    el("button", { type: "submit" }, "Simulate"));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = `#/cluster?${new URLSearchParams([...new FormData(f)])}`;
  });
  return f;
}

/** Mean (solid) and p99 (dashed) iteration time against the load, one colour per fabric. */
export function loadChart(rows) {
  const points = rows.flatMap((r) => [
    { load: 100 * r.load, ms: 1e3 * r.mean_iteration_s, fabric: r.fabric, stat: "mean" },
    { load: 100 * r.load, ms: 1e3 * r.p99_iteration_s, fabric: r.fabric, stat: "p99" }]);
  return Plot.plot({
    ...PLOT_STYLE, width: 760, height: 380, marginLeft: 60, grid: true, color: { legend: true },
    x: { label: "load (% of servers busy)" }, y: { label: "iteration time (ms)", zero: true },
    marks: [
      Plot.line(points.filter((p) => p.stat === "mean"), { x: "load", y: "ms", stroke: "fabric", strokeWidth: 2, className: "cluster-mean" }),
      Plot.line(points.filter((p) => p.stat === "p99"), { x: "load", y: "ms", stroke: "fabric", strokeDasharray: "5,4", className: "cluster-p99" }),
      Plot.dot(points, { x: "load", y: "ms", stroke: "fabric", r: 3 }),
      Plot.tip(points, Plot.pointer({ x: "load", y: "ms", title: (p) => `${p.fabric} ${p.stat}: ${fmtNumber(p.ms, 3)} ms at ${fmtNumber(p.load, 3)} %` })),
    ],
  });
}

function rowsTable(rows) {
  return table([
    { label: "jobs", class: "num", value: (r) => r.jobs },
    { label: "load", class: "num", value: (r) => `${Math.round(100 * r.load)} %` },
    { label: "fabric", value: (r) => r.fabric },
    { label: "server Gbit/s", class: "num", value: (r) => fmtNumber(r.host_bandwidth_gbps, 4) },
    { label: "mean ms", class: "num", value: (r) => fmtNumber(1e3 * r.mean_iteration_s, 4) },
    { label: "p99 ms", class: "num", value: (r) => fmtNumber(1e3 * r.p99_iteration_s, 4) },
    { label: "job completion s", class: "num", value: (r) => fmtNumber(r.mean_completion_s, 4) },
    { label: "reconfiguration s", class: "num", value: (r) => fmtNumber(r.reconfiguration_s, 4) },
  ], rows, (r) => ({ "data-jobs": r.jobs, "data-fabric": r.fabric, "data-mean": r.mean_iteration_s }));
}

export async function render(root, { query }, ctx) {
  const r = request(query);
  root.append(el("h2", {}, "Shared cluster: direct-connect against switched fabrics"), form(r));
  const status = el("p", {}, spinner("simulating in a worker"));
  root.append(status);
  let sim = await post("v1/cluster/simulations", r);
  while (ctx.alive && (sim.status === "queued" || sim.status === "running")) {
    await sleep(500);
    sim = await get(`v1/cluster/simulations/${sim.id}`);
  }
  if (!ctx.alive) return;
  if (sim.status !== "done") throw new Error(`the simulation failed: ${sim.reason}`);
  status.replaceWith(el("div", { id: "cluster-chart" }, loadChart(sim.results)), rowsTable(sim.results));
}
