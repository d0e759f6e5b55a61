// The dashboard's only way to the service: the public REST API, relative to the page (so a reverse proxy
// prefix keeps working). When the service requires keys, a 401 opens the key dialog once; the key is kept
// in sessionStorage (this tab, until it closes) and sent as `Authorization: Bearer <key>`.

const KEY_STORAGE = "fabricplan.apiKey";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

let keyPrompt = null;   // one dialog for all the requests that got a 401 at the same time

export function askForKey(reason) {
  if (keyPrompt) return keyPrompt;
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  document.getElementById("key-reason").textContent = reason ||
    "Enter an API key. A viewer key is enough: the dashboard only reads.";
  input.value = apiKey() || "";
  keyPrompt = new Promise((resolve) => {
    const done = (value) => {
      dialog.close();
      keyPrompt = null;
      resolve(value);
    };
    document.getElementById("key-ok").onclick = (e) => {
      e.preventDefault();
      const key = input.value.trim();
      setApiKey(key);
      done(Boolean(key));
    };
    document.getElementById("key-cancel").onclick = () => done(false);
    document.getElementById("key-forget").onclick = () => {
      setApiKey(null);
      done(false);
    };
    dialog.oncancel = () => done(false);
  });
  dialog.showModal();
  input.focus();
  return keyPrompt;
}

function errorMessage(body, status) {
  const detail = body && body.detail;
  if (Array.isArray(detail)) return detail.map((d) => `${d.field || (d.loc || []).join(".")}: ${d.msg}`).join("\n");
  if (typeof detail === "string") return detail;
  return `HTTP ${status}`;
}

export function url(path, params = {}) {
  const u = new URL(path, document.baseURI);
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") continue;
    for (const item of Array.isArray(v) ? v : [v]) u.searchParams.append(k, String(item));
  }
  return u;
}

let keyCheck = null;   // once per page load: GET /healthz says whether the service requires keys

function ensureKey() {
  keyCheck ??= fetch(url("healthz"), { headers: { Accept: "application/json" } })
    .then((r) => r.json())
    .then((h) => (h.api_keys_required && !apiKey() ? askForKey(null) : true))
    .catch(() => true);
  return keyCheck;
}

async function send(path, { method = "GET", params, body, accept = "application/json" } = {}) {
  await ensureKey();
  for (let attempt = 0; ; attempt++) {
    const headers = { Accept: accept };
    const key = apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(url(path, params), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (r.status === 401 && attempt < 3) {
      const reason = errorMessage(await r.json().catch(() => null), 401);
      if (await askForKey(`${reason}. A viewer key is enough: the dashboard only reads.`)) continue;
    }
    if (!r.ok) {
      const parsed = await r.json().catch(() => null);
      throw new ApiError(r.status, errorMessage(parsed, r.status));
    }
    return r;
  }
}

/** GET a JSON document. */
export async function get(path, params) {
  return (await send(path, { params })).json();
}

/** GET a paginated list: {items, total} (total from X-Total-Count). */
export async function list(path, params) {
  const r = await send(path, { params });
  return { items: await r.json(), total: Number(r.headers.get("X-Total-Count")) };
}

/** POST a JSON body, JSON answer. */
export async function post(path, body) {
  return (await send(path, { method: "POST", body })).json();
}

/** POST /v1/topologies/evaluate. An evaluation still running after the server's wait answers 202 with its
 * URL: `onWait(accepted)` is called and the URL is polled (Retry-After apart; with_arcs as the body asked) until
 * the evaluation is done (its result is returned) or failed (thrown as the 422 the POST would have answered). */
export async function evaluate(body, onWait = () => {}) {
  let r = await send("v1/topologies/evaluate", { method: "POST", body });
  if (r.status !== 202) return r.json();
  const accepted = await r.json();
  onWait(accepted);
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 1000 * Math.min(10, Number(r.headers.get("Retry-After")) || 1)));
    r = await send(accepted.url, { params: { with_arcs: body.with_arcs ? "true" : null } });
    const ev = await r.json();
    if (ev.status === "done") return { ...ev.result, id: ev.id, url: accepted.url };
    if (ev.status === "failed") throw new ApiError(422, ev.reason || "the evaluation failed");
    onWait(ev);
  }
}

/** Download an artifact with the key in the header (a plain link could not carry it). A runtime's XML not
 * compiled yet answers 202 with a URL: `onWait(accepted)` is called (the caller shows a spinner) and the URL
 * is polled (its Retry-After apart) until the file is there, then it is downloaded; a refusal (422) throws. */
export async function download(path, params, filename, onWait = () => {}) {
  let r = await send(path, { params, accept: "*/*" });
  if (r.status === 202) {
    const accepted = await r.json();
    onWait(accepted);
    while (r.status === 202) {
      await new Promise((resolve) => setTimeout(resolve, 1000 * Math.min(10, Number(r.headers.get("Retry-After")) || 2)));
      r = await send(accepted.url, { accept: "*/*" });
    }
  }
  const blob = await r.blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

/** GET /readyz: not behind a key; 503 still carries the checks. */
export async function readiness() {
  const r = await fetch(url("readyz"), { headers: { Accept: "application/json" } });
  return { ok: r.ok, ...(await r.json().catch(() => ({ status: `HTTP ${r.status}`, checks: {} }))) };
}
