// One plan: request, status history, chosen topology with T_L/T_B and predicted times, the baselines, a training
// job's iteration on every entry, the all-to-all schedule, artifact links and the fabric block. Refreshed every
// 2 s until the plan (and its fabric) settle.
import { download, get } from "../api.js";
import { COLLECTIVES } from "../cost.js";
import { age, badge, el, facts, fill, fmtBytes, fmtNumber, fmtUs, progressBar, table, yesNo } from "../util.js";

export const NAME = "plan";
const REFRESH_MS = 2000;

function header(p) {
  return el("div", { class: "card", id: "plan-header" },
    el("h1", {}, "Plan ", el("code", {}, p.id), " ", badge(p.status)),
    facts([
      ["job", p.job_id],
      ["progress", [progressBar(p.progress.fraction, p.status), ` ${Math.round(100 * p.progress.fraction)} % - ${p.progress.stage}`]],
      p.reason && ["reason", el("span", { class: "error" }, p.reason)],
      ["created", `${new Date(p.created_at).toLocaleString()} (${age(p.created_at)} ago)`],
      ["updated", `${age(p.updated_at)} ago`],
    ]),
    p.status === "done" ? el("p", {},
      el("a", { href: `#/plans/${p.id}/frontier` }, "Frontier"), " · ",
      el("a", { href: `#/plans/${p.id}/topology` }, "Topology"), " · ",
      el("a", { href: `#/plans/${p.id}/schedule` }, "Schedule link loads")) : null);
}

function workloadFacts(w) {
  const t = w.training;
  if (!t) {
    return [["collectives", (w.collectives || [w.collective || "allreduce"]).join(", ")],
      ["sizes", (w.sizes_bytes || []).map(fmtBytes).join(", ")],
      w.alltoall_bytes && ["all-to-all", `${fmtBytes(w.alltoall_bytes)} x ${w.alltoall_weight}`]];
  }
  const device = t.device && typeof t.device === "object" ? t.device.name : t.device;
  return [["training job", t.model ? t.model : `${t.model_spec.name} (inline, ${t.model_spec.layers.length} layers)`],
    t.model && ["device", device || "a100"], t.batch && ["batch per node", t.batch],
    t.buckets_bytes && ["DDP buckets", t.buckets_bytes.map(fmtBytes).join(", ")],
    ["all-to-all cost", t.alltoall_cost || "mcf"]];
}

function request(p) {
  const r = p.request;
  return el("div", { class: "card" }, el("h2", {}, "Request"),
    facts([
      ["hosts N", r.nodes], ["ports d", r.degree], ["alpha", `${r.alpha_us} µs`], ["bandwidth B", `${r.bandwidth_gbps} Gbit/s`],
      ["bidirectional only", yesNo(r.bidirectional_only)], ...workloadFacts(r.workload || {}),
      r.fabric_id && ["fabric", el("a", { href: "#/fabrics" }, r.fabric_id)],
    ]),
    el("details", {}, el("summary", {}, "JSON"), el("pre", { class: "json" }, JSON.stringify(r, null, 2))));
}

function chosen(p) {
  const t = p.topology;
  return el("div", { class: "card", id: "plan-topology" }, el("h2", {}, "Chosen topology"),
    facts([
      ["expression", el("code", {}, t.expr)],
      ["T_L", `${t.steps} steps x alpha = ${fmtUs(t.t_l_us)}`],
      ["T_B", `tau = ${fmtNumber(t.tau)} (${t.tau_exact}) x M/B${t.t_b_us_per_mib != null ? ` = ${fmtUs(t.t_b_us_per_mib)} per MiB` : ""}`],
      ["diameter", t.diameter], ["BW-optimal", yesNo(t.bw_optimal)], ["Moore-optimal", yesNo(t.moore_optimal)],
      ["duplex cabling", yesNo(t.bidirectional)],
      t.workload_time_us != null && [p.training ? "iteration time" : "workload time", fmtUs(t.workload_time_us)],
    ]));
}

function predicted(p) {
  const pt = p.predicted_time_us || {};
  const sizes = Object.keys(pt.allgather || pt.allreduce || {}).sort((a, b) => a - b);
  const columns = [{ label: "message size", value: (s) => fmtBytes(Number(s)) },
    ...COLLECTIVES.map((c) => ({ label: c, class: "num", value: (s) => fmtUs(pt[c]?.[s]) }))];
  return el("div", { class: "card" }, el("h2", {}, "Predicted time per size and collective"),
    el("p", { class: "legend-note" }, "From the verified schedules' measured steps and tau: T = steps x alpha + tau x M/B."
      + (p.training ? " Sizes: the DDP bucket capacities." : "")),
    table(columns, sizes));
}

function baselines(p) {
  const rows = [{ name: `fabricplan: ${p.topology.expr}`, time: p.topology.workload_time_us, ours: true },
    ...Object.entries(p.baselines_time_us || {}).map(([name, time]) => ({ name, time, ours: false }))]
    .filter((r) => r.time != null);
  const chart = Plot.plot({
    marginLeft: 230, marginRight: 70, width: 640, height: 40 + 28 * rows.length,
    x: { label: `${p.training ? "iteration" : "workload"} time (µs)`, grid: true },
    y: { label: null, domain: rows.map((r) => r.name) },
    color: { domain: [true, false], range: ["#f4a261", "#1f4e79"] },
    marks: [
      Plot.barX(rows, { x: "time", y: "name", fill: "ours", className: "baseline-bar", title: (r) => `${r.name}: ${fmtUs(r.time)}` }),
      Plot.text(rows, { x: "time", y: "name", text: (r) => fmtUs(r.time), dx: 4, textAnchor: "start" }),
      Plot.ruleX([0]),
    ],
  });
  return el("div", { class: "card" }, el("h2", {}, "Against today's topologies"),
    el("p", { class: "legend-note" }, "The workload on the chosen topology and on the baselines (same N, d, alpha, B)."),
    el("div", { class: "chart", id: "baseline-chart" }, chart));
}

const PARTS = [["compute_s", "compute"], ["exposed_allreduce_s", "exposed allreduce"], ["alltoall_s", "all-to-all"]];

function entryLabel(e, best) {
  if (e.kind === "baseline") return `${e.name} (${e.expr})`;
  return e.expr === best ? `${e.expr} (chosen)` : e.expr;
}

function training(p) {
  const t = p.training;
  const labels = t.entries.map((e) => entryLabel(e, t.best));
  const bars = t.entries.flatMap((e, i) => PARTS.map(([key, part]) => ({ label: labels[i], part, ms: e[key] * 1e3 })));
  const chart = Plot.plot({
    marginLeft: 260, marginRight: 80, width: 760, height: 50 + 28 * t.entries.length,
    x: { label: "iteration time (ms) →", grid: true },
    y: { label: null, domain: labels },
    color: { legend: true, domain: PARTS.map(([, part]) => part), range: ["#1f4e79", "#f4a261", "#c62828"] },
    marks: [
      Plot.barX(bars, { x: "ms", y: "label", fill: "part", className: "iteration-bar",
        title: (b) => `${b.label}: ${b.part} ${fmtUs(b.ms * 1e3)}` }),
      Plot.text(t.entries, { x: (e) => e.iteration_s * 1e3, y: (e, i) => labels[i], text: (e) => fmtUs(e.iteration_s * 1e6), dx: 4, textAnchor: "start" }),
      Plot.ruleX([t.lower_bound_s * 1e3], { stroke: "#1d2430", strokeDasharray: "4 3" }),
    ],
  });
  const rows = t.entries.map((e, i) => ({ e, label: labels[i] }));
  return el("div", { class: "card", id: "plan-training" }, el("h2", {}, `Training iteration: ${t.model}`),
    el("p", { class: "legend-note" }, `${t.layers} layers (${t.moe_layers} MoE), ${fmtBytes(t.gradient_bytes)} of gradients; `
      + `every frontier entry and baseline with its best DDP bucket. Dashed: the lower bound ${fmtUs(t.lower_bound_s * 1e6)} `
      + "(no N-node degree-d topology runs the iteration faster)."),
    el("div", { class: "chart", id: "training-chart" }, chart),
    table([
      { label: "topology", value: (r) => r.label },
      { label: "iteration", class: "num", value: (r) => fmtUs(r.e.iteration_s * 1e6) },
      { label: "compute", class: "num", value: (r) => fmtUs(r.e.compute_s * 1e6) },
      { label: "exposed allreduce", class: "num", value: (r) => fmtUs(r.e.exposed_allreduce_s * 1e6) },
      { label: "all-to-all", class: "num", value: (r) => fmtUs(r.e.alltoall_s * 1e6) },
      { label: "bucket", class: "num", value: (r) => fmtBytes(r.e.bucket_bytes) },
      { label: "allreduce steps", class: "num", value: (r) => r.e.allreduce.steps },
      { label: "allreduce tau", class: "num", value: (r) => fmtNumber(r.e.allreduce.tau) },
      { label: "all-to-all f", class: "num", value: (r) => fmtNumber(r.e.alltoall.throughput) },
    ], rows, (r) => ({ "data-kind": r.e.kind, "data-expr": r.e.expr })));
}

function alltoall(p) {
  const a = p.alltoall;
  if (a.status !== "built") {
    return el("div", { class: "card", id: "plan-alltoall" }, el("h2", {}, "All-to-all schedule"),
      el("p", { class: "error" }, `No all-to-all schedule for ${a.expr}: ${a.reason}`));
  }
  const sizes = Object.keys(a.times_us).sort((x, y) => x - y);
  const withSchedule = p.training?.chosen_with_alltoall_schedule;
  return el("div", { class: "card", id: "plan-alltoall" }, el("h2", {}, "All-to-all schedule"),
    facts([
      ["topology", el("code", {}, a.expr)],
      ["steps", a.steps], ["tau", `${fmtNumber(a.tau, 6)} (${a.tau_exact}) x D/B`],
      ["MCF bound", `tau ${fmtNumber(a.mcf_tau, 6)} (f = ${fmtNumber(a.mcf_throughput)}): the schedule is at ${fmtNumber(a.bandwidth_over_mcf, 5)} x the bound`],
      ["verified", yesNo(a.verified)], ["transfers", a.transfers], ["chunks per block", a.chunks_per_block],
      withSchedule && ["iteration with this schedule", fmtUs(withSchedule.iteration_s * 1e6)],
      ["link loads", el("a", { href: `#/plans/${p.id}/schedule?collective=alltoall` }, "heat map")],
    ]),
    table([
      { label: "bytes per node", value: (s) => fmtBytes(Number(s)) },
      { label: "schedule", class: "num", value: (s) => fmtUs(a.times_us[s].schedule_us) },
      { label: "MCF bound", class: "num", value: (s) => fmtUs(a.times_us[s].mcf_bound_us) },
    ], sizes));
}

function artifacts(p) {
  const link = (label, path, params, filename) => el("a", {
    href: path + (params ? `?${new URLSearchParams(params)}` : ""),
    onclick: (e) => { e.preventDefault(); download(path, params, filename).catch((err) => alert(err.message)); },
  }, label);
  const base = `v1/plans/${p.id}`;
  const rows = Object.keys(p.schedules || {}).map((c) => ({ c, s: p.schedules[c] }));
  return el("div", { class: "card", id: "plan-artifacts" }, el("h2", {}, "Artifacts"),
    el("p", {}, "Topology: ", link("JSON", `${base}/topology`, null, `${p.id}-topology.json`), " · ",
      link("GraphML", `${base}/topology`, { format: "graphml" }, `${p.id}.graphml`)),
    table([
      { label: "collective", value: (r) => r.c },
      { label: "steps", class: "num", value: (r) => r.s.steps },
      { label: "tau", class: "num", value: (r) => fmtNumber(r.s.tau) },
      { label: "transfers", class: "num", value: (r) => r.s.transfers },
      { label: "verified", value: (r) => yesNo(r.s.verified) },
      { label: "schedule", value: (r) => [link("JSON", `${base}/schedules/${r.c}`, null, `${p.id}-${r.c}.json`), " · ",
        link("npz", `${base}/schedules/${r.c}`, { format: "npz" }, `${p.id}-${r.c}.npz`)] },
      { label: "runtime XML", value: (r) => [link("MSCCL", `${base}/schedules/${r.c}`, { format: "msccl" }, `${p.id}-${r.c}-msccl.xml`), " · ",
        link("oneCCL", `${base}/schedules/${r.c}`, { format: "oneccl" }, `${p.id}-${r.c}-oneccl.xml`)] },
      { label: "link loads", value: (r) => el("a", { href: `#/plans/${p.id}/schedule?collective=${r.c}` }, "heat map") },
    ], rows));
}

function fabricBlock(p) {
  const f = p.fabric;
  const panels = Object.entries(f.panels || {});
  return el("div", { class: "card", id: "plan-fabric" }, el("h2", {}, "Fabric"),
    facts([
      ["fabric", el("a", { href: "#/fabrics" }, f.fabric_id)],
      ["hosts", `${f.hosts.length}: ${f.hosts.slice(0, 4).join(", ")}${f.hosts.length > 4 ? `, ... ${f.hosts[f.hosts.length - 1]}` : ""}`],
      ["fabric ready", badge(f.fabric_ready ? "ready" : "pending", f.fabric_ready ? "ready" : "pending")],
      ["released", yesNo(f.released)],
    ]),
    table([{ label: "panel", value: ([id]) => id }, { label: "config version the plan needs", class: "num", value: ([, v]) => v }], panels));
}

function history(events) {
  return el("div", { class: "card" }, el("h2", {}, "Status history"),
    table([
      { label: "at", value: (e) => new Date(e.at).toLocaleTimeString() },
      { label: "status", value: (e) => badge(e.status) },
      { label: "stage", value: (e) => e.stage },
      { label: "progress", class: "num", value: (e) => `${Math.round(100 * e.progress)} %` },
      { label: "message", value: (e) => e.message || "" },
    ], events, (e) => ({ "data-stage": e.stage })));
}

export async function render(root, { id }, ctx) {
  const draw = async () => {
    const [p, events] = await Promise.all([get(`v1/plans/${id}`), get(`v1/plans/${id}/events`)]);
    if (!ctx.alive) return null;
    const done = p.status === "done" && p.topology;
    fill(root, header(p),
      el("div", { class: "grid2" }, request(p), done ? chosen(p) : null),
      done ? el("div", { class: "grid2" }, predicted(p), baselines(p)) : null,
      done && p.training ? training(p) : null,
      done && p.alltoall ? alltoall(p) : null,
      done ? artifacts(p) : null,
      p.fabric ? fabricBlock(p) : null,
      history(events));
    root.dataset.status = p.status;
    return p;
  };
  const p = await draw();
  const settled = (q) => q && ["done", "failed"].includes(q.status) && (!q.fabric || q.fabric.fabric_ready || q.fabric.released);
  if (!settled(p)) {
    let last = p;
    ctx.every(REFRESH_MS, async () => {
      if (!settled(last)) last = (await draw()) || last;
    });
  }
}
