// The health strip: /readyz, the queue depth and plans by status (GET /v1/stats), refreshed every 5 s.
import { get, readiness } from "./api.js";
import { badge, el, fill } from "./util.js";

const STATUSES = ["queued", "running", "done", "failed"];

async function refresh(strip) {
  const [ready, stats] = await Promise.all([readiness(), get("v1/stats").catch((e) => ({ error: e }))]);
  const checks = Object.entries(ready.checks || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
  const items = [
    el("span", { class: "item", "data-health": "ready", title: checks },
      badge(ready.ok ? "ready" : "not ready", ready.ok ? "ok" : "error"), " ", el("span", { class: "muted" }, checks)),
  ];
  if (stats.error) {
    items.push(el("span", { class: "item error" }, `stats: ${stats.error.message}`));
  } else {
    items.push(el("span", { class: "item", "data-health": "queue" }, "queue depth ", el("b", {}, stats.queue_depth)));
    for (const s of STATUSES) {
      items.push(el("span", { class: "item", "data-health": `plans-${s}` }, `${s} `, el("b", {}, stats.plans[s] ?? 0)));
    }
    items.push(el("span", { class: "item", "data-health": "panels" }, "panels out of sync ",
      el("b", {}, stats.panels_out_of_sync), el("span", { class: "muted" }, ` / ${stats.panels}`)));
  }
  fill(strip, items);
}

export function startHealth(strip) {
  const loop = async () => {
    if (!document.hidden) await refresh(strip).catch((e) => fill(strip, el("span", { class: "error" }, e.message)));
    setTimeout(loop, 5000);
  };
  loop();
}
