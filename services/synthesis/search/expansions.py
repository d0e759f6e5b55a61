"""Expansion schedules (paper section 5, Definitions 1, 2, 14; App. A.6): the allgather of an expanded topology
built from an allgather of its base. The expanded graphs themselves are services.synthesis.topology.expansions.
"""
from __future__ import annotations

import math

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology

__all__ = ["bidir_schedule", "line_schedule", "degree_schedule", "power_schedule"]


def bidir_schedule(g: Topology, ag: Schedule, ag_transpose: Schedule, gb: Topology) -> Schedule:
    """App. A.6: the first half of every shard follows an allgather of G, the second an allgather of G^T;
    they use disjoint arcs of G u G^T (lane offsets separate G's and G^T's parallel arcs)."""
    grid = math.lcm(ag.grid, ag_transpose.grid)
    a, b = ag.regrid(grid), ag_transpose.regrid(grid)
    # an arc u->v of G^T is placed after the m_G(u, v) parallel arcs u->v that G itself has
    offset = g.multiplicity(b.sender, b.receiver)
    steps = max(a.steps, b.steps)
    cols = {k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in ("source", "sender", "receiver")}
    return _schedule(gb, 2 * grid, np.concatenate([a.step_of, b.step_of]), steps, **cols,
                     lane=np.concatenate([a.lane, b.lane + offset]),
                     lo=np.concatenate([a.lo, b.lo + grid]), hi=np.concatenate([a.hi, b.hi + grid]))


# ---------------------------------------------------------------------------------------------------
# expansion schedules (allgather); reduce-scatter via the transpose (Cor. 1.2), see construct.py
# ---------------------------------------------------------------------------------------------------
def _schedule(topo: Topology, grid: int, step, steps: int, **cols) -> Schedule:
    return Schedule.from_arrays(Collective.ALLGATHER, topo.nodes, grid, step, [Op.COPY] * steps, topo.expr, **cols)


def line_schedule(g: Topology, ag: Schedule, lg: Topology) -> Schedule:
    """Definition 1: the allgather of L(G) from an allgather of G (node i of L(G) = arc i of G).

    1. every node v'v sends its whole shard to each out-neighbour vu (vu != v'v) in step 1;
    2. each ((v, C), (u, w), t) of A_G becomes ((v'v, C), (uw, ww'), t + 1) for every in-arc v'v of v and
       every out-arc ww' of w with v'v != ww'.
    Theorem 7: T_L + alpha and T_B <= T_B(A_G) + (M/B)/N (equality for optimal BFB bases, Theorem 10).
    """
    d = g.degree
    e = np.repeat(np.arange(g.arcs, dtype=np.int64), d)                       # step 1
    f = (g.heads.astype(np.int64)[:, None] * d + np.arange(d)[None, :]).ravel()
    keep = e != f
    e, f = e[keep], f[keep]
    parts = [dict(step=np.ones(e.size, np.int64), source=e, sender=e, receiver=f, lo=np.zeros(e.size, np.int64),
                  hi=np.full(e.size, ag.grid, np.int64))]
    a = g.arc_index(ag.sender, ag.receiver, ag.lane)                           # lifted tuples
    if (a < 0).any():
        raise ValueError("the base schedule uses a link its topology does not have")
    src_in = g.in_arcs[ag.source.astype(np.int64)]                             # (T, d) in-arcs v'v of v
    w_out = g.heads.astype(np.int64)[a][:, None] * d + np.arange(d)[None, :]   # (T, d) out-arcs ww' of w
    S = np.broadcast_to(src_in[:, :, None], (a.size, d, d)).ravel()
    F = np.broadcast_to(w_out[:, None, :], (a.size, d, d)).ravel()
    rep = np.repeat(np.arange(a.size), d * d)
    keep = S != F
    rep, S, F = rep[keep], S[keep], F[keep]
    parts.append(dict(step=ag.step_of[rep] + 1, source=S, sender=a[rep], receiver=F, lo=ag.lo[rep], hi=ag.hi[rep]))
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return _schedule(lg, ag.grid, cols.pop("step"), ag.steps + 1, lane=np.zeros(cols["source"].size, np.int32),
                     **cols)


def degree_schedule(g: Topology, n: int, ag: Schedule, gn: Topology) -> Schedule:
    """Definition 2: the allgather of G*n (node v_i = v*n + i) from an allgather of G.

    1. each ((v, C), (u, w), t) of A_G becomes ((v_j, C), (u_j, w_i), t) for all copies i, j;
    2. one extra step: for every ordered pair u_i != u_j, the nd in-arcs (x_a, u_j) of u_j each send the a-th
       of nd equal slices of u_i's shard.
    Theorem 11: T_L + alpha, T_B + (M/B)(n-1)/(nN).
    """
    d = g.degree
    T = ag.transfers
    i = np.tile(np.repeat(np.arange(n), n), T)
    j = np.tile(np.tile(np.arange(n), n), T)
    rep = np.repeat(np.arange(T), n * n)
    phase1 = dict(step=ag.step_of[rep], source=ag.source[rep].astype(np.int64) * n + j,
                  sender=ag.sender[rep].astype(np.int64) * n + j, receiver=ag.receiver[rep].astype(np.int64) * n + i,
                  lane=ag.lane[rep], lo=ag.lo[rep], hi=ag.hi[rep])
    nd = n * d
    grid = math.lcm(ag.grid, nd)
    scale = grid // ag.grid
    phase1["lo"], phase1["hi"] = phase1["lo"] * scale, phase1["hi"] * scale
    u = np.repeat(np.arange(g.nodes), n * (n - 1))
    ii = np.tile([a for a in range(n) for b in range(n) if a != b], g.nodes)
    jj = np.tile([b for a in range(n) for b in range(n) if a != b], g.nodes)
    target = u * n + jj                                                        # u_j
    arcs = gn.in_arcs[target]                                                  # (pairs, nd)
    slot = np.tile(np.arange(nd), target.size)
    rep2 = np.repeat(np.arange(target.size), nd)
    phase2 = dict(step=np.full(rep2.size, ag.steps + 1), source=(u * n + ii)[rep2], sender=gn.tails[arcs.ravel()],
                  receiver=target[rep2], lane=gn.lanes[arcs.ravel()], lo=slot * (grid // nd),
                  hi=(slot + 1) * (grid // nd))
    cols = {k: np.concatenate([phase1[k], phase2[k]]) for k in phase1}
    return _schedule(gn, grid, cols.pop("step"), ag.steps + 1, **cols)


def power_schedule(g: Topology, n: int, ag: Schedule, gp: Topology) -> Schedule:
    """Definition 14: the allgather of G^{box n} (node label = mixed radix of (c_1..c_n), c_1 first).

    A^(1) runs A_G along dimension 1, then 2, ... (phase j: source (x, w, z), sender (y, u, z), receiver
    (y, v, z) for all x, y in V^{j-1}, z in V^{n-j}); A^(i) is A^(1) with coordinates rotated by i-1 and
    carries the i-th of n sub-shards. The n sub-schedules use disjoint links at every step.
    Theorem 12: T_L = n T_L(A_G), T_B = T_B(A_G) N/(N-1) (N^n - 1)/N^n.
    """
    N, T, k = g.nodes, ag.transfers, ag.steps
    grid = ag.grid * n
    base = dict(step=ag.step_of.astype(np.int64), w=ag.source.astype(np.int64), u=ag.sender.astype(np.int64),
                v=ag.receiver.astype(np.int64), lane=ag.lane, lo=ag.lo, hi=ag.hi)
    phases = []
    for j in range(1, n + 1):
        X, Z = N ** (j - 1), N ** (n - j)
        x = np.arange(X, dtype=np.int64)
        z = np.arange(Z, dtype=np.int64)
        # index (base transfer, x, y, z) -> flattened
        shape = (T, X, X, Z)
        bt = np.broadcast_to(np.arange(T)[:, None, None, None], shape).ravel()
        xs = np.broadcast_to(x[None, :, None, None], shape).ravel()
        ys = np.broadcast_to(x[None, None, :, None], shape).ravel()
        zs = np.broadcast_to(z[None, None, None, :], shape).ravel()

        def node(prefix, mid):
            return (prefix * N + mid) * Z + zs
        phases.append(dict(step=base["step"][bt] + (j - 1) * k, source=node(xs, base["w"][bt]),
                           sender=node(ys, base["u"][bt]), receiver=node(ys, base["v"][bt]),
                           lane=base["lane"][bt], lo=base["lo"][bt], hi=base["hi"][bt]))
    a1 = {key: np.concatenate([p[key] for p in phases]) for key in phases[0]}
    subs = []
    for i in range(n):                     # rotate coordinates by i: last i coordinates move to the front
        r = N ** i

        def rot(idx):
            return (idx % r) * (N ** (n - i)) + idx // r
        subs.append(dict(step=a1["step"], source=rot(a1["source"]), sender=rot(a1["sender"]),
                         receiver=rot(a1["receiver"]), lane=a1["lane"], lo=a1["lo"] + i * ag.grid,
                         hi=a1["hi"] + i * ag.grid))
    cols = {key: np.concatenate([s[key] for s in subs]) for key in subs[0]}
    return _schedule(gp, grid, cols.pop("step"), n * k, **cols)
