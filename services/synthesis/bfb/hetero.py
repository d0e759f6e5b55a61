"""Heterogeneous BFB (paper App. E.3, LP (14)): links with their own latency alpha_{w,u} and bandwidth.

Per receiver u and step t:

    min U  s.t.  alpha_{w,u} + (M/N) / B_{w,u} * sum_v x_{v,(w,u),t} <= U   for every used in-link (w, u)
                 sum_w x_{v,(w,u),t} = 1                                  for every v at distance t

U is in seconds and the schedule takes sum_t max_u U_{u,t}. Sources with the same eligible in-links are
interchangeable, so the LP runs on source types (one variable per type and link). A link whose latency alone
exceeds the optimum would be charged although it carries nothing: as the paper prescribes, such a link is
deleted and the LP solved again. The fractional optimum is then put on a grid of `chunks` units per shard by
rounding each type's split (largest remainders, so no link gets more than one extra unit per type); the cost
measured from the resulting schedule is reported beside the LP's. Reduce-scatter and allreduce, and the
comparison with LP (1) and the greedy scheduler, are in `compare` (`fabricplan bfb --links FILE`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from services.synthesis.bfb.lp import BfbContext, ScheduleTooLarge, _Collector, check_schedule_size, receiver_types
from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology


__all__ = ["HeteroResult", "bfb_heterogeneous", "MAX_HETERO_PROBLEMS"]

MAX_HETERO_PROBLEMS = 1 << 16      # (receiver, step) LPs, each a small GLOP model built in Python (~1 ms)


@dataclass
class HeteroResult:
    schedule: Schedule
    lp_seconds_per_step: np.ndarray     # max_u U_{u,t} from the LP, seconds
    predicted_time_s: float             # sum over steps, LP optimum
    chunks: int
    solve_seconds: float


def _solve_lp(masks, counts, d, alpha, inv_rate):
    """Aggregated LP (14) with link deletion; returns (U seconds, z[type][slot] shards)."""
    active = 0
    for m in masks:
        active |= m
    while True:
        solver = pywraplp.Solver.CreateSolver("GLOP")
        U = solver.NumVar(0, solver.infinity(), "U")
        z = [[solver.NumVar(0, solver.infinity(), "") if (m >> k & 1) and (active >> k & 1) else None
               for k in range(d)] for m in masks]
        for i, c in enumerate(counts):
            solver.Add(sum(x for x in z[i] if x is not None) == c)
        for k in range(d):
            if active >> k & 1:
                load = [z[i][k] for i in range(len(masks)) if z[i][k] is not None]
                solver.Add(alpha[k] + inv_rate[k] * sum(load) <= U)
        solver.Minimize(U)
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            raise RuntimeError("heterogeneous BFB LP failed")
        u = U.solution_value()
        vals = [[x.solution_value() if x is not None else 0.0 for x in row] for row in z]
        idle = [k for k in range(d) if active >> k & 1 and sum(v[k] for v in vals) <= 1e-12
                and alpha[k] >= u - 1e-12 * max(1.0, u)]
        still_needed = all(any((m >> k & 1) and (active >> k & 1) and k not in idle for k in range(d)) for m in masks)
        if not idle or not still_needed:
            return u, vals
        for k in idle:
            active &= ~(1 << k)


def _round(z_row: list[float], count: int, chunks: int, mask: int) -> list[int]:
    """Integers summing to count*chunks, each below z*chunks + 1 (largest remainders)."""
    target = count * chunks
    scaled = [x * chunks if mask >> k & 1 else 0.0 for k, x in enumerate(z_row)]
    base = [int(math.floor(x + 1e-9)) for x in scaled]
    rest = target - sum(base)
    order = sorted((k for k in range(len(z_row)) if mask >> k & 1), key=lambda k: base[k] - scaled[k])
    for k in order[:max(0, rest)]:
        base[k] += 1
    if rest < 0:
        for k in sorted(range(len(base)), key=lambda k: scaled[k] - base[k])[: -rest]:
            base[k] -= 1
    return base


def bfb_heterogeneous(topology: Topology, link_alpha_s, link_bandwidth_Bps, size_bytes: float,
                      chunks: int = 840) -> HeteroResult:
    """BFB allgather for per-arc latencies (s) and bandwidths (bytes/s), indexed like topology arcs."""
    check_schedule_size(topology)
    alpha = np.asarray(link_alpha_s, dtype=float)
    bw = np.asarray(link_bandwidth_Bps, dtype=float)
    if alpha.shape != (topology.arcs,) or bw.shape != (topology.arcs,):
        raise ValueError(f"need one latency and one bandwidth per arc ({topology.arcs} arcs)")
    if (bw <= 0).any() or (alpha < 0).any():
        raise ValueError("bandwidths must be positive and latencies non-negative")
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    t0 = time.perf_counter()
    g = topology
    ctx = BfbContext.create(g, shortcut=False)
    D, d = ctx.diameter, g.max_in_degree          # in-arc slots (padding slots are never eligible)
    if g.nodes * D > MAX_HETERO_PROBLEMS:
        raise ScheduleTooLarge(f"{g.expr}: heterogeneous BFB solves one LP per receiver and step, "
                               f"{g.nodes} x {D} = {g.nodes * D} here; the limit is {MAX_HETERO_PROBLEMS}")
    shard = size_bytes / g.nodes
    receivers = np.arange(g.nodes)
    dcol, dw = ctx.receiver_distances(receivers)
    worst = np.zeros(D)
    out = _Collector()
    for u in range(g.nodes):
        arcs_u = g.in_arcs[u]
        real = arcs_u >= 0
        alpha_u = np.where(real, alpha[arcs_u], 0.0)
        inv_rate_u = np.where(real, shard / bw[arcs_u], 0.0)
        _, groups = receiver_types(dcol[:, u], dw[:, u, :], d)
        for grp in groups:
            u_s, z = _solve_lp(grp.masks, grp.counts, d, alpha_u, inv_rate_u)
            worst[grp.t - 1] = max(worst[grp.t - 1], u_s)
            flows = [_round(z[i], grp.counts[i], chunks, grp.masks[i]) for i in range(len(grp.masks))]
            out.add(grp, flows, chunks, arcs_u)
    cols = out.arrays()
    arc = cols["arc"]
    sched = Schedule.from_arrays(Collective.ALLGATHER, g.nodes, chunks, cols["step"], [Op.COPY] * D, g.expr,
                                 source=cols["source"], sender=g.tails[arc], receiver=g.heads[arc],
                                 lane=g.lanes[arc], lo=cols["lo"], hi=cols["hi"])
    return HeteroResult(sched, worst, float(worst.sum()), chunks, time.perf_counter() - t0)

