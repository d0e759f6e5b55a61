// The alpha-beta cost model of services.synthesis.schedule.cost.LinkModel, for the frontier's time chart:
// T = T_L + T_B = steps * alpha + tau * M / B (B = a node's total egress bandwidth, M = message bytes).
// Frontier entries carry every collective's exact (steps, tau) in `costs` (reduce-scatter by BFB on the
// transpose, allreduce = reduce-scatter + allgather: not always twice the allgather); `entryTime_s` prices
// an entry from them. `collectiveTime_s` is the reverse-symmetric shortcut from an allgather's (steps, tau)
// (allreduce twice both terms); tests/api/test_dashboard_browser.py checks it against
// LinkModel.collective_time in the browser.

export function linkModel(alphaUs, bandwidthGbps) {
  return { alpha_s: alphaUs * 1e-6, node_bandwidth_Bps: (bandwidthGbps * 1e9) / 8 };
}

export function time_s(model, steps, tau, sizeBytes) {
  return steps * model.alpha_s + (tau * sizeBytes) / model.node_bandwidth_Bps;
}

export function collectiveTime_s(model, collective, steps, tau, sizeBytes) {
  const t = time_s(model, steps, tau, sizeBytes);
  return collective === "allreduce" ? 2 * t : t;
}

/** Predicted time of `collective` on a frontier entry: its own per-collective cost when the entry has it. */
export function entryTime_s(model, collective, entry, sizeBytes) {
  const c = entry.costs && entry.costs[collective];
  return c ? time_s(model, c.steps, c.tau, sizeBytes) : collectiveTime_s(model, collective, entry.steps, entry.tau, sizeBytes);
}

/** Message sizes from 1 KiB to 1 GiB, four per factor of two (81 points). */
export const SIZES = Array.from({ length: 81 }, (_, i) => 2 ** (10 + i / 4));

export const COLLECTIVES = ["allgather", "reducescatter", "allreduce"];
