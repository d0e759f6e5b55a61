// One plan: request, stage timeline, the revision selector (revision 0 is the plan as made; failure reports
// and repairs add revisions: GET /v1/plans/<id>/revisions, and the page shows the current one unless
// ?revision=n picks another), the selected revision's topology with T_L/T_B, predicted times, the failure's
// cost, artifacts and heat-map links; the baselines, a training job's iteration on every entry, the
// all-to-all schedule and the fabric block (capital cost, ready estimate). Refreshed every 2 s until the plan,
// its revisions and its fabric settle.
import { get, list } from "../api.js";
import { downloadLink, runtimeLinks } from "../artifacts.js";
import { COLLECTIVES } from "../cost.js";
import { timelineCard } from "../timeline.js";
import { age, badge, bandLabels, el, facts, fill, fmtBytes, fmtNumber, fmtSeconds, fmtUs, intParam, PLOT_STYLE, progressBar,
  table, timeUnit, titleTicks, yesNo } from "../util.js";

export const NAME = "plan";
const REFRESH_MS = 2000;

/** Where the plan's sub-pages go for revision n (revision 0 needs no parameter). */
function revQuery(n, extra = {}) {
  const q = new URLSearchParams(extra);
  if (n) q.set("revision", n);
  const s = q.toString();
  return s ? `?${s}` : "";
}

function header(p, n) {
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
      el("a", { href: `#/plans/${p.id}/topology${revQuery(n)}` }, n ? `Topology (revision ${n})` : "Topology"), " · ",
      el("a", { href: `#/plans/${p.id}/schedule${revQuery(n)}` }, "Schedule link loads"), " · ",
      el("a", { href: `#/compare?plans=${p.id}` }, "Compare with other plans")) : null);
}

function workloadFacts(w) {
  const t = w.training;
  if (!t) {
    return [["collectives", (w.collectives || [w.collective || "allreduce"]).join(", ")],
      ["sizes", (w.sizes_bytes || []).map(fmtBytes).join(", ")],
      w.alltoall_bytes && ["all-to-all", `${fmtBytes(w.alltoall_bytes)} per node, weight ${w.alltoall_weight}`]];
  }
  const device = t.device && typeof t.device === "object" ? t.device.name : t.device;
  if (t.transformer_spec || (t.gpus_per_host || 1) > 1 || t.strategy || t.global_batch) {   // hybrid parallelism
    return [["training job", t.model || `${t.transformer_spec.name} (inline transformer)`],
      ["GPUs per host", t.gpus_per_host || 1], ["device", device || "a100"],
      t.global_batch && ["global batch", t.global_batch], ["strategy", t.strategy || "auto"]];
  }
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

/** The selected revision as the page shows it: revision 0 from the plan itself, others from their view. */
function shown(p, rev) {
  if (!rev) {
    return { number: 0, kind: "original", topology: p.topology, schedules: p.schedules, compiled: p.compiled,
      alltoall: p.alltoall, predicted: p.predicted_time_us, workload_us: p.topology.workload_time_us, base: `v1/plans/${p.id}`, stem: p.id };
  }
  return { number: rev.number, kind: rev.kind, topology: rev.topology, schedules: rev.schedules, compiled: rev.compiled,
    alltoall: rev.alltoall, predicted: rev.predicted_time_us, workload_us: rev.workload_time_us, failure_cost: rev.failure_cost, rev,
    base: `v1/plans/${p.id}/revisions/${rev.number}`, stem: `${p.id}-r${rev.number}` };
}

function chosen(p, v) {
  const t = v.topology;
  const title = v.number ? `Topology of revision ${v.number} (${v.kind})` : "Chosen topology";
  if (v.number === 0) {
    return el("div", { class: "card", id: "plan-topology", "data-revision": 0 }, el("h2", {}, title),
      facts([
        ["expression", el("code", {}, t.expr)],
        ["T_L", `${t.steps} steps x alpha = ${fmtUs(t.t_l_us)}`],
        ["T_B", `tau = ${fmtNumber(t.tau)} (${t.tau_exact}) x M/B${t.t_b_us_per_mib != null ? ` = ${fmtUs(t.t_b_us_per_mib)} per MiB` : ""}`],
        ["diameter", t.diameter], ["BW-optimal", yesNo(t.bw_optimal)], ["Moore-optimal", yesNo(t.moore_optimal)],
        ["duplex cabling", yesNo(t.bidirectional)],
        t.workload_time_us != null && [p.training || p.training_hybrid ? "iteration time" : "workload time", fmtUs(t.workload_time_us)],
      ]));
  }
  const sched = Object.entries(v.schedules || {});
  return el("div", { class: "card", id: "plan-topology", "data-revision": v.number }, el("h2", {}, title),
    facts([
      ["expression", el("code", {}, t.expr)],
      ["removed links", (t.removed || []).map(([a, b, l]) => `${a}→${b}${l ? ` lane ${l}` : ""}`).join(", ") || "none"],
      ["arcs", `${t.nodes * t.degree - (t.removed || []).length} of ${t.nodes * t.degree}`],
      ["diameter", t.diameter], ["mean distance", t.mean_distance != null ? fmtNumber(t.mean_distance) : "-"],
      ["duplex cabling", yesNo(t.bidirectional)],
      v.workload_us != null && ["workload time", fmtUs(v.workload_us)],
    ]),
    table([
      { label: "collective", value: ([c]) => c },
      { label: "steps (T_L / alpha)", class: "num", value: ([, s]) => s.steps },
      { label: "tau (T_B / (M/B))", class: "num", value: ([, s]) => `${fmtNumber(s.tau)} (${s.tau_exact})` },
      { label: "scheduler", value: ([, s]) => s.scheduler || "-" },
    ], sched));
}

function predicted(p, v) {
  const pt = v.predicted || {};
  const sizes = Object.keys(pt.allgather || pt.allreduce || Object.values(pt)[0] || {}).sort((a, b) => a - b);
  const columns = [{ label: "message size", value: (s) => fmtBytes(Number(s)) },
    ...COLLECTIVES.filter((c) => pt[c]).map((c) => ({ label: c, class: "num", value: (s) => fmtUs(pt[c]?.[s]) }))];
  return el("div", { class: "card", id: "plan-predicted" },
    el("h2", {}, `Predicted time per size and collective${v.number ? ` (revision ${v.number})` : ""}`),
    el("p", { class: "legend-note" }, "From the verified schedules' measured steps and tau: T = steps x alpha + tau x M/B."
      + (p.training ? " Sizes: the DDP bucket capacities." : "")),
    table(columns, sizes));
}

function baselines(p, v) {
  const rows = [{ name: `fabricplan: ${p.topology.expr}`, time: p.topology.workload_time_us, kind: "ours" },
    v.number ? { name: `revision ${v.number}: ${v.topology.expr}`, time: v.workload_us, kind: "revision" } : null,
    ...Object.entries(p.baselines_time_us || {}).map(([name, time]) => ({ name, time, kind: "baseline" }))]
    .filter((r) => r && r.time != null);
  const unit = timeUnit(Math.max(...rows.map((r) => r.time)));
  const names = rows.map((r) => r.name);
  const ticks = bandLabels(names, 340);
  const chart = titleTicks(Plot.plot({
    style: PLOT_STYLE, marginLeft: ticks.marginLeft, marginRight: 90, marginBottom: 45, width: 340 + ticks.marginLeft + 90,
    height: 70 + 30 * rows.length,
    x: { label: `${p.training || p.training_hybrid ? "iteration" : "workload"} time (${unit.unit}) →`, grid: true },
    y: { label: null, domain: names, tickFormat: ticks.tickFormat },
    color: { domain: ["ours", "revision", "baseline"], range: ["#f4a261", "#c62828", "#1f4e79"] },
    marks: [
      Plot.barX(rows, { x: (r) => r.time * unit.per_us, y: "name", fill: "kind", className: "baseline-bar",
        title: (r) => `${r.name}: ${fmtUs(r.time)}` }),
      Plot.text(rows, { x: (r) => r.time * unit.per_us, y: "name", text: (r) => unit.fmt(r.time), dx: 4, textAnchor: "start" }),
      Plot.ruleX([0]),
    ],
  }), names);
  return el("div", { class: "card" }, el("h2", {}, "Against today's topologies"),
    el("p", { class: "legend-note" }, "The workload on the chosen topology and on the baselines (same N, d, alpha, B)"
      + (v.number ? `; in red, revision ${v.number} after its failed links.` : ".")),
    el("div", { class: "chart", id: "baseline-chart", "data-unit": unit.unit }, chart));
}

const PARTS = [["compute_s", "compute"], ["exposed_allreduce_s", "exposed allreduce"], ["alltoall_s", "all-to-all"]];

function entryLabel(e, best) {
  if (e.kind === "baseline") return `${e.name} (${e.expr})`;
  return e.expr === best ? `${e.expr} (chosen)` : e.expr;
}

function training(p) {
  const t = p.training;
  const labels = t.entries.map((e) => entryLabel(e, t.best));
  const unit = timeUnit(1e6 * Math.max(...t.entries.map((e) => e.iteration_s)));
  const scale = 1e6 * unit.per_us;                       // seconds -> the chart's unit
  const bars = t.entries.flatMap((e, i) => PARTS.map(([key, part]) => ({ label: labels[i], part, value: e[key] * scale, s: e[key] })));
  const ticks = bandLabels(labels, 360);
  const chart = titleTicks(Plot.plot({
    style: PLOT_STYLE, marginLeft: ticks.marginLeft, marginRight: 90, width: Math.max(800, 420 + ticks.marginLeft + 90),
    height: 60 + 30 * t.entries.length,
    x: { label: `iteration time (${unit.unit}) →`, grid: true },
    y: { label: null, domain: labels, tickFormat: ticks.tickFormat },
    color: { legend: true, domain: PARTS.map(([, part]) => part), range: ["#1f4e79", "#f4a261", "#c62828"] },
    marks: [
      Plot.barX(bars, { x: "value", y: "label", fill: "part", className: "iteration-bar",
        title: (b) => `${b.label}: ${b.part} ${fmtUs(b.s * 1e6)}` }),
      Plot.text(t.entries, { x: (e) => e.iteration_s * scale, y: (e, i) => labels[i], text: (e) => unit.fmt(e.iteration_s * 1e6), dx: 4, textAnchor: "start" }),
      Plot.ruleX([t.lower_bound_s * scale], { stroke: "#1d2430", strokeDasharray: "4 3" }),
    ],
  }), labels);
  const rows = t.entries.map((e, i) => ({ e, label: labels[i] }));
  return el("div", { class: "card", id: "plan-training" }, el("h2", {}, `Training iteration: ${t.model}`),
    el("p", { class: "legend-note" }, `${t.layers} layers (${t.moe_layers} MoE), ${fmtBytes(t.gradient_bytes)} of gradients; `
      + `every frontier entry and baseline with its best DDP bucket. Dashed: the lower bound ${fmtUs(t.lower_bound_s * 1e6)} `
      + "(no N-node degree-d topology runs the iteration faster)."),
    el("div", { class: "chart", id: "training-chart", "data-unit": unit.unit }, chart),
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

/** A plan whose topology is TopoOpt's co-optimised one (NSDI'23 section 4, Algorithm 1): its rings and matchings,
 * the iteration on its verified schedules beside TopoOpt's own model and the finder's best, and each
 * parallelisation strategy TopoOpt weighed. */
function topologyStrategy(p) {
  const ts = p.topology_strategy;
  return el("div", { class: "card", id: "plan-topology-strategy" }, el("h2", {}, "Topology by TopoOpt's co-optimisation"),
    facts([
      ["parallelisation", ts.parallelisation],
      ["ports per host", `${ts.allreduce_rings} on AllReduce rings (offsets ${ts.generators.join(", ")}), ${ts.mp_matchings} on model-parallel matchings`],
      ["bandwidth tax", `${fmtNumber(ts.bandwidth_tax)} (longest forwarded route ${ts.longest_route} hops)`],
      ["iteration (verified schedules)", fmtUs(ts.iteration_s * 1e6)],
      ["iteration (TopoOpt's model)", fmtUs(ts.topoopt_model_iteration_s * 1e6)],
      ["finder's best", el("span", {}, el("code", {}, ts.finder_best), ` at ${fmtUs(ts.finder_best_iteration_s * 1e6)}`)],
    ]),
    table([
      { label: "strategy", value: (s) => s.name },
      { label: "AllReduce rings", class: "num", value: (s) => s.allreduce_rings },
      { label: "MP matchings", class: "num", value: (s) => s.mp_matchings },
      { label: "iteration (TopoOpt's model)", class: "num", value: (s) => fmtUs(s.topoopt_model_iteration_s * 1e6) },
    ], ts.strategies, (s) => ({ "data-strategy": s.name })));
}

const HYBRID_PARTS = [["compute_s", "compute"], ["bubble_s", "pipeline bubble"], ["exposed_tp_s", "exposed TP"],
  ["exposed_pp_s", "exposed PP"], ["exposed_dp_s", "exposed DP"], ["exposed_ep_s", "exposed EP"],
  ["exposed_cp_s", "exposed CP"], ["exposed_host_s", "host (MoE)"]];

/** A hybrid-parallel training job (multi-GPU hosts): every entry's strategy and iteration breakdown. */
function trainingHybrid(p) {
  const t = p.training_hybrid;
  const ran = t.entries.filter((e) => e.iteration_s != null);
  const labels = ran.map((e) => entryLabel(e, t.best));
  const unit = timeUnit(1e6 * Math.max(...ran.map((e) => e.iteration_s)));
  const scale = 1e6 * unit.per_us;
  const bars = ran.flatMap((e, i) => HYBRID_PARTS.map(([key, part]) => ({ label: labels[i], part, value: (e.breakdown[key] ?? 0) * scale, s: e.breakdown[key] ?? 0 })));
  const ticks = bandLabels(labels, 360);
  const chart = titleTicks(Plot.plot({
    style: PLOT_STYLE, marginLeft: ticks.marginLeft, marginRight: 90, width: Math.max(800, 420 + ticks.marginLeft + 90),
    height: 60 + 30 * ran.length,
    x: { label: `iteration time (${unit.unit}) →`, grid: true },
    y: { label: null, domain: labels, tickFormat: ticks.tickFormat },
    color: { legend: true, domain: HYBRID_PARTS.map(([, part]) => part) },
    marks: [
      Plot.barX(bars, { x: "value", y: "label", fill: "part", className: "iteration-bar",
        title: (b) => `${b.label}: ${b.part} ${fmtUs(b.s * 1e6)}` }),
      Plot.text(ran, { x: (e) => e.iteration_s * scale, y: (e, i) => labels[i], text: (e) => unit.fmt(e.iteration_s * 1e6), dx: 4, textAnchor: "start" }),
    ],
  }), labels);
  const rows = t.entries.map((e) => ({ e, label: entryLabel(e, t.best), s: e.parallelism || {} }));
  return el("div", { class: "card", id: "plan-training-hybrid" }, el("h2", {}, `Training iteration: ${t.model}`),
    el("p", { class: "legend-note" }, `${t.hosts} hosts x ${t.gpus_per_host} ${t.device} (${t.gpus} GPUs), global batch `
      + `${t.global_batch}; every frontier entry and baseline with its fastest strategy. ${t.why}`),
    el("div", { class: "chart", id: "training-hybrid-chart", "data-unit": unit.unit }, chart),
    table([
      { label: "topology", value: (r) => r.label },
      { label: "iteration", class: "num", value: (r) => r.e.iteration_s == null ? r.e.refused : fmtUs(r.e.iteration_s * 1e6) },
      { label: "TFLOP/s per GPU", class: "num", value: (r) => r.e.achieved_tflops_per_gpu == null ? "" : fmtNumber(r.e.achieved_tflops_per_gpu) },
      { label: "MFU", class: "num", value: (r) => r.e.mfu == null ? "" : fmtNumber(r.e.mfu) },
      { label: "tp / pp / dp / ep", class: "num", value: (r) => r.e.parallelism ? `${r.s.tp} / ${r.s.pp} / ${r.s.dp} / ${r.s.ep}` : "" },
      { label: "cp / sp", class: "num", value: (r) => r.e.parallelism ? `${r.s.cp ?? 1} / ${r.s.sp ? "on" : "off"}` : "" },
      { label: "MoE overlap, dispatch", value: (r) => r.e.parallelism && r.s.ep > 1 ? `${r.s.moe_overlap}, ${r.s.moe_dispatch}` : "" },
      { label: "ZeRO", class: "num", value: (r) => r.s.zero ?? "" },
      { label: "micro-batch", class: "num", value: (r) => r.s.micro_batch ?? "" },
      { label: "interleave", class: "num", value: (r) => r.s.interleave ?? "" },
      { label: "recompute", value: (r) => r.s.recompute ?? "" },
      { label: "memory per GPU", class: "num", value: (r) => r.e.memory_per_gpu_bytes ? fmtBytes(r.e.memory_per_gpu_bytes.total) : "" },
    ], rows, (r) => ({ "data-kind": r.e.kind, "data-expr": r.e.expr })));
}

/** The shown revision's all-to-all (revision 0: the plan's): its verified schedule, or for a revision whose
 * all-to-all LP is too large the throughput bracket it is priced with (approximate), or the refusal. */
function alltoall(p, v) {
  const a = v.alltoall;
  const title = v.number ? `All-to-all schedule (revision ${v.number})` : "All-to-all schedule";
  const sizes = Object.keys(a.times_us || {}).sort((x, y) => x - y);
  if (a.status === "approximate") {
    return el("div", { class: "card", id: "plan-alltoall", "data-status": a.status }, el("h2", {}, title),
      el("p", { class: "note-warn" }, `No all-to-all schedule for ${a.expr}: ${a.reason}`),
      facts([["throughput f", `[${fmtNumber(a.mcf_lower, 6)}, ${fmtNumber(a.mcf_upper, 6)}] (${a.mcf_method})`]]),
      table([
        { label: "bytes per node", value: (s) => fmtBytes(Number(s)) },
        { label: "charged (f = lower)", class: "num", value: (s) => fmtUs(a.times_us[s].mcf_bound_us) },
        { label: "at f = upper", class: "num", value: (s) => fmtUs(a.times_us[s].mcf_bound_low_us) },
      ], sizes));
  }
  if (a.status !== "built") {
    return el("div", { class: "card", id: "plan-alltoall", "data-status": a.status }, el("h2", {}, title),
      el("p", { class: "error" }, `No all-to-all schedule for ${a.expr}: ${a.reason}`));
  }
  const withSchedule = v.number ? null : p.training?.chosen_with_alltoall_schedule;
  return el("div", { class: "card", id: "plan-alltoall", "data-status": a.status }, el("h2", {}, title),
    facts([
      ["topology", el("code", {}, a.expr)],
      ["steps", a.steps], ["tau", `${fmtNumber(a.tau, 6)} (${a.tau_exact}) x D/B`],
      ["MCF bound", `tau ${fmtNumber(a.mcf_tau, 6)} (f = ${fmtNumber(a.mcf_throughput)}): the schedule is at ${fmtNumber(a.bandwidth_over_mcf, 5)} x the bound`],
      ["verified", yesNo(a.verified)], ["transfers", a.transfers], ["chunks per block", a.chunks_per_block],
      withSchedule && ["iteration with this schedule", fmtUs(withSchedule.iteration_s * 1e6)],
      ["link loads", el("a", { href: `#/plans/${p.id}/schedule${revQuery(v.number, { collective: "alltoall" })}` }, "heat map")],
    ]),
    table([
      { label: "bytes per node", value: (s) => fmtBytes(Number(s)) },
      { label: "schedule", class: "num", value: (s) => fmtUs(a.times_us[s].schedule_us) },
      { label: "MCF bound", class: "num", value: (s) => fmtUs(a.times_us[s].mcf_bound_us) },
    ], sizes));
}

function artifacts(p, v) {
  const rows = Object.keys(v.schedules || {}).map((c) => ({ c, s: v.schedules[c] }));
  const n = v.number;
  return el("div", { class: "card", id: "plan-artifacts", "data-revision": n },
    el("h2", {}, n ? `Artifacts of revision ${n}` : "Artifacts"),
    el("p", {}, "Topology: ", downloadLink("JSON", `${v.base}/topology`, null, `${v.stem}-topology.json`), " · ",
      downloadLink("GraphML", `${v.base}/topology`, { format: "graphml" }, `${v.stem}.graphml`), " · ",
      el("a", { href: `#/plans/${p.id}/topology${revQuery(n)}` }, "view")),
    el("p", { class: "legend-note" }, "Runtime XML: ✓ compiled with the plan; the others compile on demand in a worker "
      + "(a spinner shows while it runs, then the file downloads)."),
    table([
      { label: "collective", value: (r) => r.c },
      { label: "steps", class: "num", value: (r) => r.s.steps },
      { label: "tau", class: "num", value: (r) => fmtNumber(r.s.tau) },
      { label: "transfers", class: "num", value: (r) => r.s.transfers },
      { label: "verified", value: (r) => yesNo(r.s.verified) },
      { label: "schedule", value: (r) => [downloadLink("JSON", `${v.base}/schedules/${r.c}`, null, `${v.stem}-${r.c}.json`), " · ",
        downloadLink("npz", `${v.base}/schedules/${r.c}`, { format: "npz" }, `${v.stem}-${r.c}.npz`)] },
      { label: "runtime XML", value: (r) => runtimeLinks(v.base, r.c, v.compiled, v.stem) },
      { label: "link loads", value: (r) => el("a", { href: `#/plans/${p.id}/schedule${revQuery(n, { collective: r.c })}` }, "heat map") },
    ], rows, (r) => ({ "data-collective": r.c })));
}

function failureCost(v) {
  const fc = v.failure_cost;
  if (!fc) return null;
  const w = fc.workload_us;
  const rows = Object.entries({ ...fc.collectives, ...(fc.alltoall && Object.keys(fc.alltoall).length ? { alltoall: fc.alltoall } : {}) })
    .flatMap(([c, per]) => Object.entries(per).sort(([a], [b]) => a - b).map(([size, x]) => ({ c, size, ...x })));
  return el("div", { class: "card", id: "plan-failure-cost" },
    el("h2", {}, `Cost of the failure: revision ${v.number} against revision ${fc.compared_with_revision}`),
    facts([
      ["workload before", fmtUs(w.before)], ["workload after", fmtUs(w.after)],
      ["slowdown", w.slowdown != null ? el("b", {}, `${fmtNumber(w.slowdown, 4)} x`) : "-"],
      ["a ring over the surviving links", `${fmtUs(w.ring_fallback)} (${fmtNumber(w.ring_fallback / w.before, 3)} x)`],
    ]),
    table([
      { label: "collective", value: (r) => r.c },
      { label: "size", value: (r) => fmtBytes(Number(r.size)) },
      { label: "before", class: "num", value: (r) => fmtUs(r.before_us) },
      { label: "after", class: "num", value: (r) => fmtUs(r.after_us) },
      { label: "slowdown", class: "num", value: (r) => (r.slowdown != null ? `${fmtNumber(r.slowdown, 4)} x` : "-") },
      { label: "ring fallback", class: "num", value: (r) => fmtUs(r.ring_fallback_us) },
    ], rows),
    el("p", { class: "legend-note" }, fc.note));
}

function revisionsCard(p, revs, v, onPick) {
  const select = el("select", { id: "revision-select", "aria-label": "revision" },
    revs.map((r) => el("option", { value: r.number, selected: r.number === v.number },
      `revision ${r.number}: ${r.kind}${r.current ? " (current)" : ""} - ${r.status}${r.expr ? ` - ${r.expr}` : ""}`)));
  select.addEventListener("change", () => onPick(Number(select.value)));
  const current = revs.find((r) => r.current);
  const note = v.number === current?.number ? el("span", {}, badge("current", "ready"), " the revision the scheduler should run")
    : el("span", { class: "note-warn", id: "revision-not-current" },
      `Revision ${v.number} is not the current one: revision ${current?.number ?? 0} is what runs now.`);
  return el("div", { class: "card", id: "plan-revisions" }, el("h2", {}, `Revisions (${revs.length})`),
    el("div", { class: "revision-bar" }, el("label", {}, "show", select), note),
    table([
      { label: "#", class: "num", value: (r) => (r.number === v.number ? el("b", {}, r.number) : el("a", { href: "#", onclick: (e) => { e.preventDefault(); onPick(r.number); } }, r.number)) },
      { label: "kind", value: (r) => r.kind },
      { label: "status", value: (r) => badge(r.status) },
      { label: "current", value: (r) => (r.current ? badge("current", "ready") : "") },
      { label: "failed links", value: (r) => r.failed.join(", ") || "-" },
      { label: "topology", value: (r) => (r.expr ? el("code", {}, r.expr) : "-") },
      { label: "workload slowdown", class: "num", value: (r) => (r.workload_slowdown != null ? `${fmtNumber(r.workload_slowdown, 4)} x` : "-") },
      { label: "created", value: (r) => `${age(r.created_at)} ago` },
    ], revs, (r) => ({ "data-revision": r.number, class: r.number === v.number ? "selected" : null })));
}

function money(usd) {
  return `$${Number(usd).toLocaleString("en-US", { maximumFractionDigits: 0 })}`;
}

function fabricBlock(p) {
  const f = p.fabric;
  const panels = Object.entries(f.panels || {});
  const cost = f.cost;
  const ready = f.fabric_ready ? "ready now" : f.ready_estimate_s != null ? `in about ${fmtSeconds(f.ready_estimate_s)}` : "-";
  return el("div", { class: "card", id: "plan-fabric" }, el("h2", {}, "Fabric"),
    facts([
      ["fabric", el("a", { href: "#/fabrics" }, f.fabric_id)],
      ["hosts", `${f.hosts.length}: ${f.hosts.slice(0, 4).join(", ")}${f.hosts.length > 4 ? `, ... ${f.hosts[f.hosts.length - 1]}` : ""}`],
      f.plane && ["plane", `${f.plane}${f.side != null ? `, side ${f.side}` : ""}`],
      ["fabric ready", [badge(f.fabric_ready ? "ready" : "pending", f.fabric_ready ? "ready" : "pending"), " ",
        el("span", { id: "fabric-ready-estimate", dataset: { seconds: f.ready_estimate_s ?? "" } }, ready)]],
      ["released", yesNo(f.released)],
      cost && ["capital cost", el("span", { id: "fabric-cost", dataset: { planUsd: cost.plan_usd, fabricUsd: cost.fabric_usd } },
        el("b", {}, money(cost.plan_usd)), ` for this plan's ${f.hosts.length} hosts, of ${money(cost.fabric_usd)} for the whole fabric`,
        el("span", { class: "muted" }, ` (links of ${cost.link_gbps} Gbit/s)`))],
    ]),
    cost ? el("details", {}, el("summary", {}, "cost items (TopoOpt App. G)"),
      table([
        { label: "item", value: (i) => i.item + (i.note ? ` (${i.note})` : "") },
        { label: "count", class: "num", value: (i) => i.count },
        { label: "unit", class: "num", value: (i) => `$${fmtNumber(i.unit_usd, 5)}` },
        { label: "total", class: "num", value: (i) => money(i.usd) },
      ], cost.items),
      el("p", { class: "legend-note" }, "Prices: ", (cost.sources || []).join("; "))) : null,
    table([{ label: "panel", value: ([id]) => id }, { label: "config version the plan needs", class: "num", value: ([, v]) => v }], panels));
}

function revisionStatus(rev) {
  return el("div", { class: "card", id: "plan-topology", "data-revision": rev.number },
    el("h2", {}, `Revision ${rev.number} (${rev.kind}) is ${rev.status}`),
    facts([
      ["progress", [progressBar(rev.progress.fraction, rev.status), ` ${Math.round(100 * rev.progress.fraction)} % - ${rev.progress.stage}`]],
      rev.reason && ["reason", el("span", { class: "error" }, rev.reason)],
      ["failed links", rev.failed_links.map((l) => l.arc).join(", ") || "-"],
    ]));
}

export async function render(root, { id, query }, ctx) {
  let picked = intParam(query, "revision");
  const pick = (n) => {
    const q = new URLSearchParams(query);
    q.set("revision", n);
    history.replaceState(null, "", `#/plans/${id}?${q}`);    // shareable, without re-routing
    picked = n;
    draw().catch((err) => console.warn(err));
  };
  const draw = async () => {
    const [p, events] = await Promise.all([get(`v1/plans/${id}`), get(`v1/plans/${id}/events`)]);
    const done = p.status === "done" && p.topology;
    let revs = null;
    let rev = null;
    if (done && p.revision) {
      revs = (await list(`v1/plans/${id}/revisions`, { limit: 1000 })).items;
      const n = picked ?? p.revision.current;
      if (n !== 0) rev = await get(`v1/plans/${id}/revisions/${n}`);
    }
    if (!ctx.alive) return null;
    const v = done ? shown(p, rev) : null;
    const revDone = !rev || rev.status === "done";
    fill(root, header(p, v?.number ?? 0),
      revs && revs.length > 1 ? revisionsCard(p, revs, v, pick) : null,
      el("div", { class: "grid2" }, request(p), done ? (revDone ? chosen(p, v) : revisionStatus(rev)) : null),
      done && revDone ? el("div", { class: "grid2" }, predicted(p, v), baselines(p, v)) : null,
      done && revDone ? failureCost(v) : null,
      done && revDone && v.number && (p.training || p.training_hybrid)
        ? el("p", { class: "muted" }, "The training iteration below is revision 0's: revisions re-plan allgather, reduce-scatter, allreduce and the all-to-all.") : null,
      done && p.topology_strategy ? topologyStrategy(p) : null,
      done && p.training ? training(p) : null,
      done && p.training_hybrid ? trainingHybrid(p) : null,
      done && revDone && v.alltoall ? alltoall(p, v) : null,
      done && revDone ? artifacts(p, v) : null,
      p.fabric ? fabricBlock(p) : null,
      timelineCard(p, events));
    root.dataset.status = p.status;
    root.dataset.revision = v ? v.number : "";
    return { p, revs };
  };
  const settled = (x) => x && ["done", "failed"].includes(x.p.status) && (!x.p.fabric || x.p.fabric.fabric_ready || x.p.fabric.released)
    && !(x.p.revision?.in_progress > 0);
  let last = await draw();
  ctx.every(REFRESH_MS, async () => {
    if (!settled(last)) last = (await draw()) || last;
  });
}
