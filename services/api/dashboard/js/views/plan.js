// One plan: request, status history, chosen topology with T_L/T_B and predicted times, the baselines,
// artifact links and the fabric block. Refreshed every 2 s until the plan (and its fabric) settle.
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

function request(p) {
  const r = p.request;
  const w = r.workload || {};
  const kinds = w.collectives || [w.collective || "allreduce"];
  return el("div", { class: "card" }, el("h2", {}, "Request"),
    facts([
      ["hosts N", r.nodes], ["ports d", r.degree], ["alpha", `${r.alpha_us} µs`], ["bandwidth B", `${r.bandwidth_gbps} Gbit/s`],
      ["bidirectional only", yesNo(r.bidirectional_only)], ["collectives", kinds.join(", ")],
      ["sizes", (w.sizes_bytes || []).map(fmtBytes).join(", ")],
      w.alltoall_bytes && ["all-to-all", `${fmtBytes(w.alltoall_bytes)} x ${w.alltoall_weight}`],
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
      t.workload_time_us != null && ["workload time", fmtUs(t.workload_time_us)],
    ]));
}

function predicted(p) {
  const pt = p.predicted_time_us || {};
  const sizes = Object.keys(pt.allgather || pt.allreduce || {}).sort((a, b) => a - b);
  const columns = [{ label: "message size", value: (s) => fmtBytes(Number(s)) },
    ...COLLECTIVES.map((c) => ({ label: c, class: "num", value: (s) => fmtUs(pt[c]?.[s]) }))];
  return el("div", { class: "card" }, el("h2", {}, "Predicted time per size and collective"),
    el("p", { class: "legend-note" }, "From the verified schedules' measured steps and tau: T = steps x alpha + tau x M/B."),
    table(columns, sizes));
}

function baselines(p) {
  const rows = [{ name: `fabricplan: ${p.topology.expr}`, time: p.topology.workload_time_us, ours: true },
    ...Object.entries(p.baselines_time_us || {}).map(([name, time]) => ({ name, time, ours: false }))]
    .filter((r) => r.time != null);
  const chart = Plot.plot({
    marginLeft: 230, marginRight: 70, width: 640, height: 40 + 28 * rows.length,
    x: { label: "workload time (µs)", grid: true },
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
