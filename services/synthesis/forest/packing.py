"""Throughput-optimal allgather on heterogeneous links: spanning out-tree (arborescence) packing.

Cut bound. In an allgather every node v holds a shard of M/N bytes that every other node must receive. For
any nonempty node set S != V, the N - |S| shards held outside S must each cross into S at least once, over
the arcs entering S, whose bandwidths sum to b(delta_in(S)). So the bandwidth term is at least

    T_B* = (M/N) * max_S (N - |S|) / b(delta_in(S))                                   (cut bound)

Reaching it (ForestColl, Zhao et al. 2024). Give every root r a set of spanning out-arborescences with
integer multiplicities mu summing to p, each arc e used by trees of total multiplicity at most q c_e (c_e the
arc's bandwidth in integer units); send fraction mu/p of r's shard down each of its trees. Every arc then
carries at most q c_e / p shards, i.e. the time (M/N) q / (p * unit) on every arc, which is T_B* when
p/q = x* = min_S c(delta_in S) / (N - |S|). Such trees exist by Edmonds' branching theorem: arc-disjoint
spanning arborescences with root sets R_j (using arc e at most its capacity times) exist iff for every
nonempty S, cap(delta_in S) >= #{j : R_j disjoint from S}; with p trees rooted at each node and capacities
q c_e this is exactly p (N - |S|) <= q c(delta_in S).

Construction (max flows only, no LP):

1. x* exactly, by Dinkelbach's iteration on the ratio: with a super source s and arcs s -> v of capacity p
   (and q c_e on the arcs of G), every minimum s-v cut is at least p N iff the condition holds for p/q; a
   smaller cut's sink side S is a set of smaller ratio, which becomes the next p/q (`optimal_rate`).
2. Trees from `reroute`: shortest-path trees rerouted one parent at a time towards x*, K = 2p trees of weight 1
   per root while the schedule stays small (fewer beyond: 8 at 256 nodes, 1 at 1024). Where they reach x* exactly
   they are served as they are (shallow: height 8 on an 8 x 8 torus, so the pipeline fills fast).
3. Where they miss x* (usually by integrality: one tree per root cannot split a node's 1023 entries 5:5:5:1),
   `repair` makes the packing exact with trees of unequal integer weights: every root's trees weigh
   W = lcm(K, p), each rerouted tree W/K; it cuts the subtrees below arcs over their bound (W/x*) c_e off the
   trees using them (and, where Edmonds' condition fails on what is left, off trees entering the violated set
   more often than they must), and regrows the partial trees by the constructive proof of Edmonds' theorem (Lovasz 1976, compiled in
   `lovasz`: one max flow per arc attempt, trees split where an arc has less room than their weight). The result
   is checked in exact arithmetic (`_check_exact`): rate x*, every root's weights summing to W, every arc within
   its bound. On torus(32, 32) with six 5 Gbps arcs it cuts 17 of 1024 trees, regrows 18 nodes and ends with
   1042 trees (height 33 against the diameter 32).

So every packing up to MAX_TREE_NODES reaches x* (`Packing.method`: "rerouted", "repaired", or "exact" when every
tree was cut to its root); `pack_trees(max_nodes=...)` can switch the repair off above a size, and then the rerouted
trees are served at the rate they reach with x* beside it (`Packing.optimal`, `Packing.gap`). The repair's cost
is about one max flow per regrown node (plus N per failed attempt, to find the violated set): small when the
rerouted trees are close, about N^2 flows when every tree is cut to its root.

Bandwidths are put on an integer grid first: exactly when they are small rational multiples of the
largest (e.g. 25, 12.5 and 5 Gbps), otherwise rounded down to 2^-20 of the largest (the trees then use at
most the real bandwidth; the schedule is priced with the real one).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from services.synthesis.forest.flow import max_flow
from services.synthesis.forest.repair import repaired_trees
from services.synthesis.forest.reroute import rerouted_trees
from services.synthesis.schedule.limits import ScheduleTooLarge
from services.synthesis.topology.graph import Topology

__all__ = ["Tree", "Packing", "integer_capacities", "optimal_rate", "pack_trees", "cut_bound_seconds",
           "MAX_PACKING_NODES", "MAX_TREE_NODES", "MAX_TREE_ROWS", "trees_per_root"]

MAX_PACKING_NODES = 128
"""Largest topology whose revision and plan schedule sets add the tree packing and the greedy scheduler
(`jobs.stages.size_sets`: the sets' build time); the packing itself is exact up to MAX_TREE_NODES."""
MAX_TREE_NODES = 2048
MAX_TREE_ROWS = 1 << 19
"""Tree arcs of one pipeline chunk (trees x (N - 1)) the rerouted packing may have: 8 chunks within the pipeline's
transfer limit (`pipeline.MAX_TREE_TRANSFERS`)."""
_FINE = 1 << 20


@dataclass
class Tree:
    """A spanning out-arborescence of `root` taken `weight` times: parent_arc[v] is the arc into v (-1 at
    the root), depth[v] its depth."""

    root: int
    weight: int
    parent_arc: np.ndarray
    depth: np.ndarray

    @property
    def height(self) -> int:
        return int(self.depth.max())


@dataclass
class Packing:
    """Trees of every root: each root's weights sum to `per_root` (p); arc e is used by trees of total weight
    at most `scale` * capacity[e] (q c_e); `unit` is the bandwidth (bytes/s) of one capacity unit."""

    topology: Topology
    capacity: np.ndarray
    unit: float
    rate: Fraction
    trees: list[Tree]
    flows: int = 0
    seconds: float = 0.0
    critical_set: np.ndarray = field(default=None, repr=False)
    optimal: Fraction | None = None         # x*, exactly (`optimal_rate`)
    method: str = "exact"                   # "rerouted" (`reroute`), "repaired" (`repair`) or "exact" (every tree
                                            # from Lovasz's construction, `lovasz`)
    weight_sum: int | None = None           # each root's tree weights (default: the rate's numerator)
    cut: int = 0                            # rerouted trees the repair cut (`repair`)
    regrown: int = 0                        # nodes it regrew into them
    rebuilt: int = 0                        # trees Lovasz's construction made of them

    @property
    def per_root(self) -> int:
        return self.rate.numerator if self.weight_sum is None else self.weight_sum

    @property
    def scale(self) -> Fraction:
        """q: every arc carries trees of total weight at most q c_e (an integer unless `weight_sum` is set)."""
        return Fraction(self.rate.denominator) if self.weight_sum is None else self.weight_sum / self.rate

    @property
    def gap(self) -> Fraction:
        """x* / x: how far the trees' rate is from the optimum (1 when they reach it)."""
        return Fraction(1) if self.optimal is None else self.optimal / self.rate

    @property
    def height(self) -> int:
        return max(t.height for t in self.trees)

    def arc_weights(self) -> np.ndarray:
        """Per arc, the total weight of the trees that use it."""
        used = np.zeros(self.topology.arcs, np.int64)
        for t in self.trees:
            a = t.parent_arc[t.parent_arc >= 0]
            np.add.at(used, a, t.weight)
        return used

    def bandwidth_seconds(self, size_bytes: float) -> float:
        """The bandwidth term the trees reach: (M/N) / (x* unit), the cut bound on the integer capacities."""
        return size_bytes / self.topology.nodes / (float(self.rate) * self.unit)


def integer_capacities(bandwidth_Bps) -> tuple[np.ndarray, float]:
    """(c, unit) with c_e = b_e / unit integral: exact when every b_e / max b is a fraction of denominator at
    most 1024 (and c stays below 2^20), else c_e = floor(b_e / unit) with unit = max b / 2^20."""
    b = np.asarray(bandwidth_Bps, dtype=float)
    top = float(b.max())
    fracs = [Fraction(float(x) / top).limit_denominator(1024) for x in b]
    if all(abs(float(f) - float(x) / top) <= 1e-12 * float(x) / top for f, x in zip(fracs, b)):
        lcm = math.lcm(*{f.denominator for f in fracs})
        if lcm <= _FINE:
            return np.array([f.numerator * (lcm // f.denominator) for f in fracs], np.int64), top / lcm
    return np.floor(b / top * _FINE).astype(np.int64), top / _FINE


def _arcs(g: Topology, capacity: np.ndarray):
    keep = (g.tails != g.heads) & (capacity > 0)
    return g.tails[keep].astype(np.int64), g.heads[keep].astype(np.int64), capacity[keep].astype(np.int64)


def optimal_rate(g: Topology, capacity: np.ndarray) -> tuple[Fraction, np.ndarray, int]:
    """x* = min over nonempty S != V of c(delta_in S) / (N - |S|), exactly (Dinkelbach's iteration on max
    flows); returns (x*, a set S reaching it as a boolean mask, max flows computed)."""
    n = g.nodes
    tails, heads, caps = _arcs(g, capacity)
    inflow = np.bincount(heads, weights=caps, minlength=n).astype(np.int64)
    v0 = int(np.argmin(inflow))
    best = np.zeros(n, bool)
    best[v0] = True
    x = Fraction(int(inflow[v0]), n - 1)
    if x == 0:
        raise ValueError(f"{g.expr}: node {v0} has no usable in-link")
    src = np.full(n, n, np.int64)
    dst = np.arange(n, dtype=np.int64)
    flows = 0
    while True:
        p, q = x.numerator, x.denominator
        t = np.concatenate([tails, src])
        h = np.concatenate([heads, dst])
        c = np.concatenate([caps * q, np.full(n, p, np.int64)])
        low, low_set = p * n, None
        for v in range(n):
            f, side = max_flow(n + 1, t, h, c, n, v, p * n)
            flows += 1
            if f < low:
                low, low_set = f, ~side[:n]
        if low_set is None:
            return x, best, flows
        best = low_set
        cut = int(caps[best[heads] & ~best[tails]].sum())
        x = Fraction(cut, n - int(best.sum()))


def cut_bound_seconds(g: Topology, bandwidth_Bps, size_bytes: float) -> float:
    """The cut bound T_B* = (M/N) max_S (N - |S|) / b(delta_in S) of an allgather (seconds), evaluated at
    the set the exact optimisation on the integer capacities finds (equal to the bound itself whenever the
    bandwidths are exact rational multiples of each other, see `integer_capacities`)."""
    cap, _unit = integer_capacities(bandwidth_Bps)
    _x, s, _ = optimal_rate(g, cap)
    b = np.asarray(bandwidth_Bps, dtype=float)
    entering = s[g.heads] & ~s[g.tails]
    return size_bytes / g.nodes * (g.nodes - int(s.sum())) / float(b[entering].sum())


def trees_per_root(n: int, optimum: Fraction) -> int:
    """K for the rerouted trees: twice x*'s numerator p (K / x* an integer, so x* is reachable; two trees per unit
    of rate give each node more routes from each root: on the two-tier 8 x 8 torus, whose every arc is tight, the
    event-driven run takes 1.0100x the cut bound at K = 2p against 1.0142 at p, 1.0136 at 3p, 1.0132 at 4p); p when
    2p trees per root would pass MAX_TREE_ROWS tree arcs (K N (N - 1)), else as many as fit (at least 1)."""
    fit = MAX_TREE_ROWS // (n * (n - 1))
    for k in (2 * optimum.numerator, optimum.numerator):
        if k <= fit:
            return k
    return max(1, fit)


def pack_trees(g: Topology, bandwidth_Bps, *, max_nodes: int = MAX_TREE_NODES) -> Packing:
    """Spanning out-trees of every root reaching the cut bound exactly on arcs of the given bandwidths (bytes/s, one
    per arc of g, in arc order); see the module docstring: the rerouted trees where they reach x*, else the repaired
    ones (`repair`) up to `max_nodes` nodes, else the rerouted trees at the rate they reach.

    >>> from services.synthesis.topology.catalog import build
    >>> g = build("ring(4)")
    >>> pk = pack_trees(g, np.ones(g.arcs))
    >>> pk.rate, pk.method, len(pk.trees), [t.height for t in pk.trees]
    (Fraction(1, 3), 'rerouted', 4, [3, 3, 3, 3])
    """
    t0 = time.perf_counter()
    n = g.nodes
    if n < 2:
        raise ValueError("an allgather needs at least 2 nodes")
    if n > MAX_TREE_NODES:
        raise ScheduleTooLarge(f"{g.expr}: tree packing handles at most {MAX_TREE_NODES} nodes, got {n}")
    b = np.asarray(bandwidth_Bps, dtype=float)
    if b.shape != (g.arcs,) or not (np.isfinite(b).all() and (b > 0).all()):
        raise ValueError(f"need one finite positive bandwidth per arc ({g.arcs} arcs)")
    capacity, unit = integer_capacities(b)
    optimum, critical, flows = optimal_rate(g, capacity)
    k = trees_per_root(n, optimum)
    rate, parent, depth = rerouted_trees(g, capacity, k)
    if rate == optimum or n > max_nodes:
        trees = _merged(np.repeat(np.arange(n), k), np.ones(n * k, np.int64), parent, depth)
        return Packing(g, capacity, unit, rate, trees, flows, time.perf_counter() - t0, critical, optimum,
                       "rerouted", k)
    rep = repaired_trees(g, capacity, optimum, k, parent, depth)
    trees = _merged(rep.root, rep.weight, rep.parent, rep.depth)
    pk = Packing(g, capacity, unit, optimum, trees, flows + rep.flows, 0.0, critical, optimum,
                 "exact" if rep.scratch else "repaired", rep.weight_sum, rep.cut, rep.regrown, rep.rebuilt)
    _check_exact(pk)
    pk.seconds = time.perf_counter() - t0
    return pk


def _check_exact(pk: Packing) -> None:
    """Every root's weights sum to W and every arc carries at most (W / x*) c_e, in exact arithmetic (a failure is
    a bug of the construction, not of the input)."""
    weights = np.zeros(pk.topology.nodes, np.int64)
    for t in pk.trees:
        weights[t.root] += t.weight
    scale = Fraction(pk.per_root) / pk.rate
    if not ((weights == pk.per_root).all() and all(Fraction(int(u)) <= scale * int(c)
                                                    for u, c in zip(pk.arc_weights(), pk.capacity))):
        raise RuntimeError(f"{pk.topology.expr}: the repaired trees miss x* (a bug)")


def _merged(root: np.ndarray, weight: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> list[Tree]:
    """Trees from rows (root[i], weight[i], parent[i], depth[i]), equal ones of one root merged into one of their
    total weight; ordered by root."""
    trees = []
    seen: dict[tuple[int, bytes], Tree] = {}
    for i in np.argsort(root, kind="stable"):
        key = (int(root[i]), parent[i].tobytes())
        if key in seen:
            seen[key].weight += int(weight[i])
        else:
            seen[key] = Tree(int(root[i]), int(weight[i]), parent[i].copy(), depth[i].copy())
            trees.append(seen[key])
    return trees


def warm() -> None:
    """Compile (or load from numba's cache) the max flows, the rerouted trees and the repair's construction on a
    tiny input (pack_trees alone skips the repair wherever the rerouted trees reach x*)."""
    from services.synthesis.forest.lovasz import warm as warm_lovasz
    from services.synthesis.topology.catalog import build

    g = build("ring(4)")
    pack_trees(g, np.ones(g.arcs))
    warm_lovasz()
