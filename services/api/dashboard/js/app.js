// The dashboard's router: views live in the URL fragment (#/plans, #/plans/<id>, #/frontier?nodes=..),
// so every view has a link that can be shared and reloaded. Each view renders into <main> and may poll;
// its timers stop when another view is shown.
import { askForKey } from "./api.js";
import { startHealth } from "./health.js";
import { errorBox, fill } from "./util.js";
import * as cluster from "./views/cluster.js";
import * as compare from "./views/compare.js";
import * as fabrics from "./views/fabrics.js";
import * as frontier from "./views/frontier.js";
import * as plan from "./views/plan.js";
import * as plans from "./views/plans.js";
import * as schedule from "./views/schedule.js";
import * as topology from "./views/topology.js";

const ROUTES = [
  [/^\/?$/, plans, "plans"],
  [/^\/plans$/, plans, "plans"],
  [/^\/plans\/([0-9a-f]+)$/, plan, "plans"],
  [/^\/plans\/([0-9a-f]+)\/frontier$/, frontier, "frontier"],
  [/^\/plans\/([0-9a-f]+)\/topology$/, topology, "topology"],
  [/^\/plans\/([0-9a-f]+)\/schedule$/, schedule, "plans"],
  [/^\/compare$/, compare, "compare"],
  [/^\/frontier$/, frontier, "frontier"],
  [/^\/topology$/, topology, "topology"],
  [/^\/fabrics$/, fabrics, "fabrics"],
  [/^\/cluster$/, cluster, "cluster"],
];

/** What a view gets besides its root: polling that stops when the view goes away. */
class ViewContext {
  constructor() {
    this.cleanups = [];
    this.alive = true;
  }

  /** Run fn every ms milliseconds (after the previous run finished), paused while the tab is hidden. */
  every(ms, fn) {
    let timer = null;
    const tick = async () => {
      if (!this.alive) return;
      if (!document.hidden) {
        try {
          await fn();
        } catch (err) {
          console.warn("refresh failed:", err.message);
        }
      }
      if (this.alive) timer = setTimeout(tick, ms);
    };
    timer = setTimeout(tick, ms);
    this.cleanups.push(() => clearTimeout(timer));
  }

  close() {
    this.alive = false;
    this.cleanups.forEach((f) => f());
  }
}

let current = null;

async function route() {
  const [path, search = ""] = location.hash.replace(/^#/, "").split("?");
  const query = new URLSearchParams(search);
  current?.close();
  const ctx = (current = new ViewContext());
  const root = document.getElementById("view");
  for (const [pattern, view, nav] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    document.querySelectorAll("header nav a[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
    root.dataset.view = view.NAME;
    root.dataset.ready = "false";
    fill(root);
    try {
      await view.render(root, { id: m[1], query }, ctx);
    } catch (err) {
      if (ctx.alive) root.append(errorBox(err));
    }
    if (ctx.alive) root.dataset.ready = "true";
    return;
  }
  fill(root, errorBox(`no such page: #${path}`));
  root.dataset.ready = "true";
}

document.getElementById("key-button").addEventListener("click", async () => {
  if (await askForKey(null)) route();
});
window.addEventListener("hashchange", route);
startHealth(document.getElementById("health"));
route();
