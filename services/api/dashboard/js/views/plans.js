// Plans: a live list (GET /v1/plans?view=summary, paginated, filtered), refreshed every 2 s. Ticking 2 to 4
// plans and pressing Compare opens them side by side (#/compare).
import { list } from "../api.js";
import { MAX_PLANS, MIN_PLANS } from "./compare.js";
import { age, badge, el, fill, intParam, progressBar, shortId, table } from "../util.js";

export const NAME = "plans";
const PAGE = 50;
const REFRESH_MS = 2000;

function filterForm(query) {
  const status = query.get("status") || "";
  const input = (name, label, attrs = {}) =>
    el("label", {}, label, el("input", { name, value: query.get(name) || "", ...attrs }));
  return el("form", { class: "filters", id: "plan-filters" },
    el("label", {}, "status", el("select", { name: "status" },
      ["", "queued", "running", "done", "failed"].map((s) => el("option", { value: s, selected: s === status }, s || "any")))),
    input("job_id", "job", { size: 16 }),
    input("nodes", "N", { type: "number", min: 2, max: 4096 }),
    input("degree", "d", { type: "number", min: 1, max: 16 }),
    input("fabric_id", "fabric", { size: 10 }),
    el("button", { type: "submit" }, "Filter"),
    el("a", { href: "#/plans" }, "clear"));
}

const BASE_COLUMNS = [
  { label: "status", value: (p) => badge(p.status) },
  { label: "stage", value: (p) => p.progress.stage },
  { label: "progress", value: (p) => progressBar(p.progress.fraction, p.status) },
  { label: "job", value: (p) => p.job_id },
  { label: "plan", value: (p) => el("a", { href: `#/plans/${p.id}`, class: "mono" }, shortId(p.id)) },
  { label: "N", class: "num", value: (p) => p.request.nodes },
  { label: "d", class: "num", value: (p) => p.request.degree },
  { label: "topology", value: (p) => (p.topology ? el("code", {}, p.topology.expr) : p.reason ? el("span", { class: "error" }, p.reason.slice(0, 80)) : "-") },
  { label: "age", class: "num", value: (p) => age(p.created_at) },
];

/** The compare bar and the tick column; the ticked ids survive the list's refreshes. */
function comparing() {
  const picked = new Set();
  const button = el("button", { type: "button", id: "compare-button", disabled: true,
    onclick: () => { location.hash = `#/compare?plans=${[...picked].join(",")}`; } }, "Compare");
  const note = el("span", { class: "muted" });
  const sync = () => {
    button.disabled = picked.size < MIN_PLANS || picked.size > MAX_PLANS;
    button.textContent = `Compare ${picked.size ? `${picked.size} ` : ""}plans`;
    note.textContent = picked.size > MAX_PLANS ? ` at most ${MAX_PLANS}` : ` tick ${MIN_PLANS} to ${MAX_PLANS} plans`;
  };
  sync();
  const column = { label: "", value: (p) => el("input", { type: "checkbox", class: "compare-pick", "aria-label": `compare ${p.id}`,
    checked: picked.has(p.id), onchange: (e) => { if (e.target.checked) picked.add(p.id); else picked.delete(p.id); sync(); } }) };
  return { bar: el("div", { class: "pager", id: "compare-bar" }, button, note), column };
}

export async function render(root, { query }, ctx) {
  const page = Math.max(0, intParam(query, "page") ?? 0);
  const params = {
    view: "summary", limit: PAGE, offset: page * PAGE, status: query.get("status"), job_id: query.get("job_id"),
    nodes: intParam(query, "nodes"), degree: intParam(query, "degree"), fabric_id: query.get("fabric_id"),
  };
  const form = filterForm(query);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = new URLSearchParams([...new FormData(form)].filter(([, v]) => v !== ""));
    location.hash = `#/plans?${q}`;
  });
  const pager = el("div", { class: "pager" });
  const body = el("div", { id: "plan-table" });
  const pick = comparing();
  const COLUMNS = [pick.column, ...BASE_COLUMNS];
  root.append(el("h1", {}, "Plans"), form, pick.bar, pager, body);

  const pageLink = (p, text) => {
    const q = new URLSearchParams(query);
    q.set("page", p);
    return el("a", { href: `#/plans?${q}` }, text);
  };
  const draw = async () => {
    const { items, total } = await list("v1/plans", params);
    if (!ctx.alive) return;
    const first = total ? page * PAGE + 1 : 0;
    fill(pager, page > 0 ? pageLink(page - 1, "← newer") : null,
      el("span", { "data-total": total }, `${first}-${page * PAGE + items.length} of ${total}`),
      (page + 1) * PAGE < total ? pageLink(page + 1, "older →") : null);
    fill(body, items.length ? table(COLUMNS, items, (p) => ({
      class: "clickable", "data-plan-id": p.id, "data-status": p.status,
      onclick: (e) => { if (!["A", "INPUT"].includes(e.target.tagName)) location.hash = `#/plans/${p.id}`; },
    })) : el("p", { class: "muted" }, "No plans match."));
  };
  await draw();
  ctx.every(REFRESH_MS, draw);
}
