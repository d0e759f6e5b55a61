// Artifact links: a plan's (or a revision's) files downloaded with the API key. A runtime's XML that is not
// compiled yet answers 202: the link shows a spinner with the time waited while the page polls the URL the
// 202 gives, then the file downloads; a refusal (422, the limit named) shows beside the link.
import { download } from "./api.js";
import { el, fmtSeconds, spinner } from "./util.js";

/** The runtimes a schedule's XML can be asked for: [key, label, query]. */
export const RUNTIMES = [
  ["executor", "MSCCL executor", { format: "msccl", runtime: "executor" }],
  ["rccl", "RCCL", { format: "msccl", runtime: "rccl" }],
  ["legacy", "MSCCL legacy", { format: "msccl", runtime: "legacy" }],
  ["oneccl", "oneCCL", { format: "oneccl" }],
];

/** A link that downloads `path?params` as `filename`, with a spinner while a worker compiles it. */
export function downloadLink(label, path, params, filename, attrs = {}) {
  const status = el("span", { class: "download-status" });
  const a = el("a", {
    href: path + (params ? `?${new URLSearchParams(params)}` : ""), ...attrs,
    onclick: async (e) => {
      e.preventDefault();
      if (a.dataset.busy === "true") return;
      a.dataset.busy = "true";
      status.replaceChildren();
      let timer = null;
      try {
        await download(path, params, filename, (accepted) => {
          const t0 = Date.now();
          const text = el("span", {}, `compiling ${accepted.runtime} XML (${accepted.status})`);
          status.replaceChildren(spinner(text, { "data-compiling": filename }));
          timer = setInterval(() => { text.textContent = `compiling ${accepted.runtime} XML: ${fmtSeconds((Date.now() - t0) / 1000)}`; }, 500);
        });
        status.replaceChildren();
      } catch (err) {
        status.replaceChildren(el("span", { class: "inline-error", role: "note", "data-download-error": filename }, err.message));
      } finally {
        clearInterval(timer);
        a.dataset.busy = "false";
      }
    },
  }, label);
  return el("span", { class: "download" }, a, status);
}

/** The XML links of one collective: one per runtime, a check mark on those compiled with the plan. */
export function runtimeLinks(base, collective, compiled, fileStem) {
  return RUNTIMES.map(([key, label, params], i) => {
    const done = compiled?.[key]?.[collective];
    const mark = done ? (done.status === "failed" ? " ✗" : " ✓") : "";
    const title = done ? (done.status === "failed" ? `refused: ${done.reason || done.limit || ""}` : "compiled with the plan")
      : "compiled on demand in a worker";
    return [i ? " · " : "", downloadLink(label + mark, `${base}/schedules/${collective}`, params,
      `${fileStem}-${collective}-${key}.xml`, { title, "data-runtime": key, "data-collective": collective })];
  });
}
