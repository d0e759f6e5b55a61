// A plan's stage timeline, computed in the browser from its status history (GET /v1/plans/<id>/events: each
// event's time, status, stage and progress): a stage lasts from its first event to the next event of another
// stage (consecutive events of one stage are merged), or, where the API recorded it (the event that closes a
// stage carries started_at and ended_at), exactly that span. The terminal event closes the run, including the
// stage it belongs to (a plan's `done` event is its compile stage's end). While the plan runs, the
// last stage is open (it lasts until now) and an ETA extrapolates the elapsed time linearly in the progress
// fraction the worker reports. Events after the plan finished (revisions) are not part of its making.
import { el, fmtClock, fmtSeconds, PLOT_STYLE, table } from "./util.js";

const TERMINAL = ["done", "failed"];

/** [{stage, status, start_s, end_s, duration_s, progress_from, progress_to, open}] from the events; times in
 * seconds after the first event. `now` (ms since the epoch) closes the last stage of a running plan. */
export function stageSegments(events, now = Date.now()) {
  const evs = [...events].sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  const end = evs.findIndex((e) => TERMINAL.includes(e.status));
  const making = end >= 0 ? evs.slice(0, end + 1) : evs;
  if (!making.length) return [];
  const t0 = Date.parse(making[0].at);
  const rel = (iso) => (Date.parse(iso) - t0) / 1000;
  const segments = [];
  for (const e of making) {
    const t = rel(e.at);
    let last = segments[segments.length - 1];
    if (!last || last.stage !== e.stage) {
      if (last && last.ended_s === null) last.ended_s = t;
      last = { stage: e.stage, status: e.status, start_s: t, end_s: null, ended_s: null, progress_from: e.progress,
        progress_to: e.progress, open: false, last_s: t };
      segments.push(last);
    }
    last.progress_to = e.progress;
    last.status = e.status;
    last.last_s = t;
    // the API's own record of the stage (the event that closes it carries started_at, ended_at, duration_s)
    if (e.started_at) last.start_s = Math.min(last.start_s, rel(e.started_at));
    if (e.ended_at) last.ended_s = rel(e.ended_at);
  }
  const last = segments[segments.length - 1];
  for (const s of segments) s.end_s = s.ended_s;
  if (last.end_s === null) {
    if (TERMINAL.includes(last.status)) {
      last.end_s = last.last_s;       // the terminal event closes the run
    } else {
      last.end_s = Math.max(last.start_s, (now - t0) / 1000);
      last.open = true;
    }
  }
  segments.forEach((s) => { s.duration_s = Math.max(0, s.end_s - s.start_s); delete s.ended_s; delete s.last_s; });
  return segments;
}

/** Seconds left, extrapolated linearly in the progress fraction; null when it cannot be told. */
export function eta_s(elapsed_s, fraction) {
  if (!(fraction > 0) || fraction >= 1 || !(elapsed_s >= 0)) return null;
  return (elapsed_s * (1 - fraction)) / fraction;
}

function chart(segments) {
  const rows = segments.filter((s) => s.duration_s > 0 || s.open);
  if (!rows.length) return null;
  const total = Math.max(...rows.map((s) => s.end_s), 1e-3);
  return Plot.plot({
    style: PLOT_STYLE, width: 760, height: 70 + 30 * rows.length, marginLeft: 110, marginRight: 90, marginBottom: 45,
    x: { label: "seconds since the plan was queued →", grid: true, domain: [0, total * 1.02] },
    y: { label: null, domain: rows.map((s) => s.stage) },
    marks: [
      Plot.barX(rows, { x1: "start_s", x2: "end_s", y: "stage", fill: (s) => (s.open ? "#1565c0" : "#1f4e79"),
        fillOpacity: (s) => (s.open ? 0.55 : 1), className: "stage-bar",
        title: (s) => `${s.stage}: ${fmtSeconds(s.duration_s)}${s.open ? " so far" : ""}` }),
      Plot.text(rows, { x: "end_s", y: "stage", text: (s) => fmtSeconds(s.duration_s) + (s.open ? " …" : ""), dx: 4,
        textAnchor: "start" }),
    ],
  });
}

/** The card: chart, table of stages with durations, ETA while running, and the raw history (ms precision). */
export function timelineCard(plan, events, now = Date.now()) {
  const segments = stageSegments(events, now);
  const running = !TERMINAL.includes(plan.status);
  const first = events.length ? Math.min(...events.map((e) => Date.parse(e.at))) : Date.parse(plan.created_at);
  const elapsed = running || !segments.length ? (now - first) / 1000 : segments[segments.length - 1].end_s;
  const eta = running ? eta_s(elapsed, plan.progress.fraction) : null;
  const summary = running
    ? [`running for ${fmtSeconds(elapsed)}, ${Math.round(100 * plan.progress.fraction)} % done`,
      el("span", { class: "eta", id: "plan-eta", dataset: { etaS: eta ?? "" } },
        eta === null ? "; ETA: not known yet (no progress reported)" : `; ETA ≈ ${fmtSeconds(eta)}`),
      el("span", { class: "muted" }, " (elapsed time extrapolated linearly in the progress)")]
    : [`${plan.status} after ${fmtSeconds(elapsed)}`];
  return el("div", { class: "card timeline", id: "plan-timeline" }, el("h2", {}, "Stage timeline"),
    el("p", { id: "timeline-summary", dataset: { elapsedS: elapsed.toFixed(6) } }, summary),
    el("div", { class: "chart", id: "timeline-chart" }, chart(segments)),
    table([
      { label: "stage", value: (s) => s.stage },
      { label: "started", class: "num", value: (s) => `+${fmtSeconds(s.start_s)}` },
      { label: "duration", class: "num", value: (s) => fmtSeconds(s.duration_s) + (s.open ? " so far" : "") },
      { label: "progress", class: "num", value: (s) => `${Math.round(100 * s.progress_from)} → ${Math.round(100 * s.progress_to)} %` },
    ], segments, (s) => ({ "data-stage": s.stage, "data-duration-s": s.duration_s.toFixed(6) })),
    el("details", {}, el("summary", {}, `Status history (${events.length} events)`),
      table([
        { label: "at", value: (e) => fmtClock(e.at) },
        { label: "status", value: (e) => e.status },
        { label: "stage", value: (e) => e.stage },
        { label: "progress", class: "num", value: (e) => `${Math.round(100 * e.progress)} %` },
        { label: "message", value: (e) => e.message || "" },
      ], events, (e) => ({ "data-stage": e.stage }))));
}
