"""A runnable all-to-all schedule from a tree routing of LP (3) (column generation, `alltoall_colgen`), for
topologies whose time-stepped LP (`alltoall_schedule`) is too large: degraded graphs without symmetry.

Routing. The column generation's optimum routes every source's data over a few shortest-path trees with
weights; representative r's trees (and their images h(T) for the sources h(r), h in the free group) carry
the fraction weight_T / sum_r weights of every block. Scaled by the certified throughput f, the routing
loads no link beyond its capacity: the MCF bound's tau = d / (N f) (module `alltoall_schedule`).

Pipelined schedule (K rounds). Every block is split into K chunks; round rho moves chunk rho of every block.
Representative r's K chunk positions are dealt to its trees by largest remainder (tree T gets ~ K weight_T /
sum weights of them), spread evenly (stride order, rotated by r); the chunk of round rho for node v takes the
tree at position (rho + v) mod K, so every block is split over the trees in the routing's proportions and
in every round the destinations use the trees in those proportions too (balanced steps). In round rho a chunk
for node v travels v's path r = u_0 -> ... -> u_L = v in its tree, hop i in step rho + i (source buffer, relays' scratch, v's output: every hop copies a chunk its
sender received in an earlier step, so the schedule is valid by construction and model-checked anyway).
Steps: K + L_max - 1. In every step each link carries hop-i traffic of round rho - i for all i, so its load
over all steps is exactly its load in the routing (times 1/K per round); the sum over steps of the most
loaded link is the MCF bound's K * (1/K) / f when the per-step loads are balanced, more when they are not
(measured from the schedule, never assumed). Parallel arcs take the rounds in turn (lane = (rho + v) mod
multiplicity). More rounds: finer rounding of the tree weights and better balance, but more steps (alpha
each) and K N (N - 1) x (mean depth) transfers; `rounds_for` picks the largest K within a transfer budget.
"""
from __future__ import annotations

import numpy as np

from services.synthesis.evaluate.alltoall_colgen import ColgenSolution
from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology

__all__ = ["rounds_for", "tree_schedule", "tree_depths"]


def tree_depths(pred: np.ndarray) -> np.ndarray:
    """Depth of every node in each tree (rows of scipy predecessor rows; root and unreachable: 0)."""
    par = np.where(pred >= 0, pred, np.arange(pred.shape[1])[None, :]).astype(np.int64)
    rows = np.arange(pred.shape[0])[:, None]
    depth = (pred >= 0).astype(np.int64)
    jump = par
    while True:
        step = depth[rows, jump]
        if not step.any():
            return depth
        depth = depth + step
        jump = jump[rows, jump]


def _round_counts(weights: np.ndarray, rounds: int) -> np.ndarray:
    """Largest-remainder split of `rounds` in proportion to `weights` (sums to `rounds`)."""
    ideal = weights / weights.sum() * rounds
    base = np.floor(ideal + 1e-12).astype(np.int64)
    short = rounds - int(base.sum())
    if short > 0:
        base[np.argsort(-(ideal - base), kind="stable")[:short]] += 1
    return base


def _deal_rounds(counts: np.ndarray, rounds: int, rotate: int) -> np.ndarray:
    """Tree index (into counts) of each round: each tree's rounds at evenly spaced positions (stride order)."""
    owner = np.repeat(np.arange(counts.size), counts)
    position = np.concatenate([(np.arange(c) + 0.5) / c for c in counts if c > 0])
    sequence = owner[np.argsort(position, kind="stable")]
    return np.roll(sequence, rotate % rounds)


def _positions(sol: ColgenSolution, rounds: int) -> list[np.ndarray]:
    """For each tree j, the positions i in 0..K-1 of its representative's round sequence that it owns."""
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * sol.root.size
    for i, r in enumerate(np.unique(sol.root)):
        mine = np.flatnonzero(sol.root == r)
        seq = mine[_deal_rounds(_round_counts(sol.weight[mine], rounds), rounds, i)]
        for j in mine:
            out[j] = np.flatnonzero(seq == j)
    return out


def rounds_for(sol: ColgenSolution, budget: int, most: int = 64) -> int:
    """Largest K <= most whose schedule has at most `budget` transfers (at least 1): a round moves one chunk
    per block along its tree path, at most the deepest tree's depth sum per source."""
    per_round = float(tree_depths(sol.pred).sum(axis=1).max()) * sol.group.shape[0] * np.unique(sol.root).size
    return int(max(1, min(most, budget // max(per_round, 1.0))))


def tree_schedule(topology: Topology, sol: ColgenSolution, rounds: int) -> Schedule:
    """The K-round pipelined all-to-all schedule of the tree routing `sol` (module docstring)."""
    if not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    n = topology.nodes
    depth = tree_depths(sol.pred)
    positions = _positions(sol, rounds)
    cols = {k: [] for k in ("rep", "step", "sender", "receiver", "dest", "round")}
    for j, own in enumerate(positions):
        if own.size == 0:
            continue
        par = sol.pred[j].astype(np.int64)
        dest = np.flatnonzero(par >= 0)                 # every node but the root (the tree spans the graph)
        hops_v, hops_u = [], []
        cur = dest.copy()
        while cur.size:                                 # (destination, node on its path) pairs, node != root
            hops_v.append(dest)
            hops_u.append(cur)
            keep = par[cur] != sol.root[j]
            dest, cur = dest[keep], par[cur[keep]]
        v, u = np.concatenate(hops_v), np.concatenate(hops_u)
        rho = (own[None, :] - v[:, None]) % rounds      # destination v's chunks on this tree (m x c)
        m, k = rho.shape
        cols["rep"].append(np.full(m * k, sol.root[j], dtype=np.int32))
        cols["step"].append((rho + depth[j][u][:, None]).ravel().astype(np.int32))
        cols["sender"].append(np.repeat(par[u], k).astype(np.int32))
        cols["receiver"].append(np.repeat(u, k).astype(np.int32))
        cols["dest"].append(np.repeat(v, k).astype(np.int32))
        cols["round"].append(rho.ravel().astype(np.int32))
    c = {key: np.concatenate(cols.pop(key)) for key in list(cols)}
    mult = topology.multiplicity(c["sender"], c["receiver"])
    lane = ((c["round"] + c["dest"]) % mult).astype(np.int32)
    g = sol.group.astype(np.int32)
    order = g.shape[0]
    used = np.unique(c["step"])                          # steps in which something moves
    step = np.searchsorted(used, c["step"]) + 1
    dest = g[:, c["dest"]].astype(np.int64)
    return Schedule.from_arrays(
        Collective.ALLTOALL, n, n * rounds, np.tile(step, order), [Op.COPY] * used.size, topology.expr,
        source=g[:, c["rep"]].ravel(), sender=g[:, c["sender"]].ravel(), receiver=g[:, c["receiver"]].ravel(),
        lane=np.tile(lane, order), lo=(dest * rounds + c["round"][None, :]).ravel(),
        hi=(dest * rounds + c["round"][None, :] + 1).ravel())
