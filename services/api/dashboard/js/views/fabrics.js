// Fabrics and panels, live (every 3 s): each fabric's hosts, capital cost and panels; each panel's config
// version against the version its agent applied, its last report, the pending diff, and the plans bound to
// it (with their ready estimate and capital cost).
import { get, list } from "../api.js";
import { age, badge, el, facts, fill, fmtSeconds, shortId, table, yesNo } from "../util.js";

export const NAME = "fabrics";
const REFRESH_MS = 3000;
const PANEL_PAGE = 200;
const PLAN_PAGE = 50;
const DIFF_ROWS = 100;

function syncBadge(p) {
  if (p.status === "failed") return badge("failed");
  if (p.status === "degraded") return badge("degraded");   // applied, but some cross-connects carry no light
  if (p.in_sync) return badge("applied");
  return p.status === null ? badge("never reported", "never") : badge("pending");
}

function panelTable(panels, onPick) {
  return table([
    { label: "panel", value: (p) => el("a", { href: "#", onclick: (e) => { e.preventDefault(); onPick(p.id); } }, p.id) },
    { label: "kind", value: (p) => p.kind },
    { label: "ports", class: "num", value: (p) => p.ports },
    { label: "config version", class: "num", value: (p) => p.version },
    { label: "applied version", class: "num", value: (p) => p.applied_version },
    { label: "state", value: syncBadge },
    { label: "last report", value: (p) => (p.reported_at ? `${p.status}, ${age(p.reported_at)} ago${p.message ? `: ${p.message}` : ""}` : "-") },
    { label: "pending diff", class: "num", value: (p) => `+${p.pending_add} / -${p.pending_remove}` },
    { label: "cross-connects", class: "num", value: (p) => p.cross_connects },
    { label: "plans", value: (p) => Object.entries(p.plans).map(([id, v]) => [el("a", { href: `#/plans/${id}`, class: "mono" }, shortId(id)), ` v${v} `]) },
  ], panels, (p) => ({ "data-panel": p.id, "data-version": p.version, "data-applied": p.applied_version }));
}

function planTable(plans) {
  return table([
    { label: "plan", value: (p) => el("a", { href: `#/plans/${p.id}`, class: "mono" }, shortId(p.id)) },
    { label: "job", value: (p) => p.job_id },
    { label: "status", value: (p) => badge(p.status) },
    { label: "hosts", value: (p) => (p.fabric ? `${p.fabric.hosts.length}: ${p.fabric.hosts[0]}..${p.fabric.hosts[p.fabric.hosts.length - 1]}` : "-") },
    { label: "fabric ready", value: (p) => (p.fabric ? [badge(p.fabric.fabric_ready ? "ready" : "pending"),
      !p.fabric.fabric_ready && p.fabric.ready_estimate_s != null ? ` in about ${fmtSeconds(p.fabric.ready_estimate_s)}` : ""] : "-") },
    { label: "capital cost", class: "num", value: (p) => (p.fabric?.cost ? money(p.fabric.cost.plan_usd) : "-") },
    { label: "released", value: (p) => (p.fabric ? yesNo(p.fabric.released) : "-") },
  ], plans, (p) => ({ "data-plan-id": p.id }));
}

function money(usd) {
  return `$${Math.round(usd).toLocaleString("en-US")}`;
}

const costs = new Map();   // fabric id -> its capital cost (GET /v1/fabrics/<id>/cost): a fabric's hardware does not change

function costOf(f) {
  if (!costs.has(f.id)) costs.set(f.id, get(`v1/fabrics/${encodeURIComponent(f.id)}/cost`).catch((e) => ({ error: e })));
  return costs.get(f.id);
}

function connectionList(conns) {
  const shown = conns.slice(0, DIFF_ROWS);
  return [table([
    { label: "ingress", class: "num", value: (c) => c.ingress },
    { label: "egress", class: "num", value: (c) => c.egress },
    { label: "arc", value: (c) => (c.tx_host ? `${c.tx_host}:${c.tx_port} → ${c.rx_host}:${c.rx_port}` : "") },
    { label: "plan", value: (c) => (c.plan_id ? shortId(c.plan_id) : "") },
  ], shown), conns.length > shown.length ? el("p", { class: "muted" }, `... and ${conns.length - shown.length} more`) : null];
}

async function panelDetail(box, panelId) {
  const cfg = await get(`v1/panels/${encodeURIComponent(panelId)}/config`);
  fill(box, el("h2", {}, `Panel ${panelId}: pending diff to version ${cfg.version}`),
    facts([["reason", cfg.reason], ["applied version", cfg.applied_version], ["cross-connects", cfg.cross_connects.length],
      ["to add", cfg.diff.add.length], ["to remove", cfg.diff.remove.length]]),
    el("div", { class: "grid2" },
      el("div", { id: "diff-add" }, el("h2", {}, "Add"), connectionList(cfg.diff.add)),
      el("div", { id: "diff-remove" }, el("h2", {}, "Remove"), connectionList(cfg.diff.remove))));
}

async function fabricCard(f, pick) {
  const [panels, plans, cost] = await Promise.all([
    list("v1/panels", { fabric_id: f.id, limit: PANEL_PAGE }),
    list("v1/plans", { fabric_id: f.id, view: "summary", limit: PLAN_PAGE }),
    costOf(f),
  ]);
  const reserved = Object.keys(f.reserved).length;
  return el("div", { class: "card", "data-fabric": f.id },
    el("h2", {}, `Fabric ${f.id}`),
    facts([["hosts", `${f.hosts} (${reserved} reserved, ${f.hosts - reserved} free)`], ["ports per host", f.ports_per_host],
      ["panels", panels.total],
      ["capital cost", cost.error ? el("span", { class: "error" }, cost.error.message)
        : el("span", { class: "fabric-cost", dataset: { usd: cost.total_usd } }, el("b", {}, money(cost.total_usd)),
          ` (${money(cost.per_host_usd)} per host, links of ${cost.link_gbps} Gbit/s; a plan's card prices it at its own B/d)`)]]),
    el("h2", {}, "Panels"), panelTable(panels.items, pick),
    panels.total > panels.items.length ? el("p", { class: "muted" }, `first ${panels.items.length} of ${panels.total} panels`) : null,
    el("h2", {}, "Plans bound to it"),
    plans.items.length ? planTable(plans.items) : el("p", { class: "muted" }, "none"),
    plans.total > plans.items.length ? el("p", {}, el("a", { href: `#/plans?fabric_id=${encodeURIComponent(f.id)}` },
      `all ${plans.total} plans`)) : null);
}

export async function render(root, _route, ctx) {
  const body = el("div", { id: "fabrics" });
  const detail = el("div", { class: "card", id: "panel-detail", hidden: true });
  let picked = null;
  const pick = async (panelId) => {
    picked = panelId;
    detail.hidden = false;
    await panelDetail(detail, panelId);
  };
  root.append(el("h1", {}, "Fabrics and panels"), body, detail);
  const draw = async () => {
    const fabrics = await list("v1/fabrics", {});
    const cards = await Promise.all(fabrics.items.map((f) => fabricCard(f, pick)));
    if (!ctx.alive) return;
    fill(body, cards.length ? cards : el("p", { class: "muted" }, "No fabric is registered (POST /v1/fabrics)."),
      fabrics.total > cards.length ? el("p", { class: "muted" }, `first ${cards.length} of ${fabrics.total} fabrics`) : null);
    if (picked) await panelDetail(detail, picked);
  };
  await draw();
  ctx.every(REFRESH_MS, draw);
}
