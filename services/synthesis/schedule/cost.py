"""Alpha-beta cost model (paper section 3.2).

T_L = alpha * (number of comm steps); T_B = sum over steps of (max bytes on any link) / (B/d), where B is
a node's total egress bandwidth and a link carries B/d. With shard size M/N, T_B = tau * M/B and
tau = (d / N) * sum_t maxload_t, maxload_t measured in shards. Everything here is computed from the
schedule itself; theorems only predict it.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from services.synthesis.schedule.ir import Collective, Schedule


def step_max_loads(schedule: Schedule) -> np.ndarray:
    """Per step, the largest amount (in grid units of a shard) carried by one link (sender, receiver, lane)."""
    out = np.zeros(schedule.steps, dtype=np.int64)
    n = schedule.nodes
    for t in range(1, schedule.steps + 1):
        s = schedule.step_slice(t)
        if s.start == s.stop:
            continue
        key = ((schedule.sender[s].astype(np.int64) * n + schedule.receiver[s]) << 16) | schedule.lane[s]
        size = schedule.hi[s] - schedule.lo[s]
        order = np.argsort(key, kind="stable")
        k = key[order]
        starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
        out[t - 1] = int(np.add.reduceat(size[order], starts).max())
    return out


def link_loads(schedule: Schedule, topology) -> np.ndarray:
    """loads[t - 1, a]: what arc `a` of `topology` (its arc order) carries in comm step t, in grid units of a
    shard (1/schedule.grid of M/N bytes). Row maxima are step_max_loads(schedule), so
    tau = d / (N * grid) * sum_t max_a loads[t - 1, a] (section 3.2).

    Arcs are sorted by tail. When every node has out-degree d the arcs out of u are u*d .. u*d + d - 1 and a
    transfer's arc is found among its sender's d arcs; otherwise (a degraded topology: arcs removed) by a
    binary search of its (sender, receiver, lane) among the arc keys. O(transfers * d + steps * arcs) time,
    one step's transfers times d of working memory, steps * arcs integers out.

    >>> from services.synthesis.topology.catalog import build
    >>> ring = build("ring(3)")
    >>> s = Schedule.from_tuples(Collective.ALLGATHER, 3, [((u, (0, 1)), (u, (u + 1) % 3), 1) for u in range(3)]
    ...                          + [(((u + 2) % 3, (0, 1)), (u, (u + 1) % 3), 2) for u in range(3)])
    >>> link_loads(s, ring).tolist()
    [[1, 1, 1], [1, 1, 1]]
    """
    n, d = topology.nodes, topology.degree
    regular = topology.arcs == n * d and bool((np.bincount(topology.tails, minlength=n) == d).all())
    if regular:
        heads, lanes = topology.heads.reshape(n, d), topology.lanes.reshape(n, d)
    loads = np.zeros((schedule.steps, topology.arcs), dtype=np.int64)
    for t in range(1, schedule.steps + 1):
        s = schedule.step_slice(t)
        u = schedule.sender[s]
        if u.size and (u.min() < 0 or u.max() >= n):
            raise ValueError(f"step {t}: a sender outside 0..{n - 1}")
        if regular:
            hit = (heads[u] == schedule.receiver[s][:, None]) & (lanes[u] == schedule.lane[s][:, None])
            found = hit.any(axis=1)
            arc = u.astype(np.int64) * d + hit.argmax(axis=1)
        else:
            arc = topology.arc_index(u, schedule.receiver[s], schedule.lane[s])
            found = arc >= 0
        if not found.all():
            i = s.start + int(np.flatnonzero(~found)[0])
            raise ValueError(f"transfer {i} uses the link {schedule.sender[i]}->{schedule.receiver[i]} lane "
                             f"{schedule.lane[i]}, which {topology.expr} does not have")
        size = (schedule.hi[s] - schedule.lo[s]).astype(np.float64)     # exact: grid units stay below 2**53
        loads[t - 1] = np.rint(np.bincount(arc, weights=size, minlength=topology.arcs))
    return loads


def measured_tau(schedule: Schedule, degree: int) -> Fraction:
    """tau with T_B = tau * M/B, computed from the schedule's link loads (exact). M is the collective's size
    per node: N shards for allgather, reduce-scatter and allreduce (the grid divides one shard), the whole
    input buffer D for an all-to-all (the grid divides the buffer; see `ir`)."""
    total = int(step_max_loads(schedule).sum())
    shards = 1 if schedule.collective is Collective.ALLTOALL else schedule.nodes
    return Fraction(degree * total, shards * schedule.grid)


@dataclass(frozen=True)
class LinkModel:
    """alpha (seconds per comm step) and B (bytes/second of total node egress)."""

    alpha_s: float
    node_bandwidth_Bps: float

    @classmethod
    def from_units(cls, alpha_us: float, bandwidth_gbps: float) -> "LinkModel":
        return cls(alpha_us * 1e-6, bandwidth_gbps * 1e9 / 8)

    def time(self, steps: int, tau: Fraction | float, size_bytes: float) -> float:
        """T = T_L + T_B = steps * alpha + tau * M / B (seconds)."""
        return steps * self.alpha_s + float(tau) * size_bytes / self.node_bandwidth_Bps

    def collective_time(self, collective: Collective, steps: int, tau, size_bytes: float) -> float:
        """Runtime of `collective` from an allgather's (steps, tau) on a topology whose reduce-scatter costs
        what its allgather does (reverse-symmetric ones, e.g. bidirectional rings: Theorem 1); allreduce =
        RS + AG = 2 (T_L + T_B) (section 3, App. B). Other topologies are priced per collective
        (search.candidates.Candidate.cost: reduce-scatter by BFB on the transpose)."""
        t = self.time(steps, tau, size_bytes)
        return 2 * t if collective is Collective.ALLREDUCE else t


def moore_nodes(d: int, k: int) -> int:
    """Moore bound M_{d,k} = sum_{i<=k} d^i (Definition 9)."""
    return k + 1 if d == 1 else (d ** (k + 1) - 1) // (d - 1)


def moore_steps(nodes: int, d: int) -> int:
    """k*(N, d) = min{k : M_{d,k} >= N}: T_L*(N, d) = alpha * k* (Definition 10)."""
    if d < 1:
        raise ValueError(f"degree must be at least 1, got {d}")
    k = 0
    while moore_nodes(d, k) < nodes:
        k += 1
    return k


def undirected_moore_steps(nodes: int, d: int) -> int:
    """T_L** of Table 8: min{k : 1 + d * sum_{i<k} (d-1)^i >= N}."""
    if d < 1:
        raise ValueError(f"degree must be at least 1, got {d}")
    k, reach, layer = 0, 1, d
    while reach < nodes:
        reach += layer
        layer *= d - 1
        k += 1
        if d == 1 and k > nodes:
            raise ValueError("an undirected degree-1 graph has at most 2 nodes")
    return k


def optimal_tau(nodes: int) -> Fraction:
    """T_B*(N) = (M/B)(N-1)/N (Theorem 4)."""
    return Fraction(nodes - 1, nodes)


def tau_lower_bound(nodes: int, degree: int, min_in_links: int) -> Fraction:
    """Theorem 4 on a given topology: a node with delta in-links from other nodes, of B/d each, must receive
    M(N-1)/N bytes, so T_B >= (M/B) (N-1)/N * d/delta with delta the smallest such count. Equals
    T_B*(N) = (M/B)(N-1)/N on a d-regular topology without self-loops; on an irregular one it is larger
    (sum of in-degrees = sum of out-degrees <= N d, so delta < d)."""
    if min_in_links < 1 or degree < 1:
        raise ValueError(f"degrees must be at least 1, got d = {degree}, fewest in-links = {min_in_links}")
    return optimal_tau(nodes) * Fraction(degree, min_in_links)


def is_moore_optimal(nodes: int, d: int, steps: int) -> bool:
    """Moore optimal iff N > M_{d,k-1} (Definition 10)."""
    return steps == 0 or nodes > moore_nodes(d, steps - 1)



def grid_unit_fraction(schedule: Schedule) -> float:
    """Bytes of one grid unit per byte of the collective's size M: a shard is M/N bytes on a grid of `grid` units
    (1 / (N grid)); an all-to-all's grid divides the whole buffer, D = M bytes per node (1 / grid; `ir`)."""
    if schedule.collective is Collective.ALLTOALL:
        return 1.0 / schedule.grid
    return 1.0 / (schedule.nodes * schedule.grid)


def heterogeneous_time(schedule: Schedule, topology, link_alpha_s, link_bandwidth_Bps, size_bytes: float) -> float:
    """sum_t max over used links (alpha_link + bytes_link / B_link): App. E.3's cost, from the schedule (the
    step-synchronous price, `barrier_time_us`). A grid unit is `grid_unit_fraction` of M bytes."""
    alpha = np.asarray(link_alpha_s, dtype=float)
    bw = np.asarray(link_bandwidth_Bps, dtype=float)
    arc = topology.arc_index(schedule.sender, schedule.receiver, schedule.lane)
    if (arc < 0).any():
        raise ValueError("the schedule uses a link the topology does not have")
    unit = size_bytes * grid_unit_fraction(schedule)
    total = 0.0
    for t in range(1, schedule.steps + 1):
        s = schedule.step_slice(t)
        if s.start == s.stop:
            continue
        load = np.bincount(arc[s], weights=(schedule.hi[s] - schedule.lo[s]) * unit, minlength=topology.arcs)
        used = np.flatnonzero(np.bincount(arc[s], minlength=topology.arcs))      # used, even at M = 0
        total += float((alpha[used] + load[used] / bw[used]).max())
    return total
