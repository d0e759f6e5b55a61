"""TopoOpt's own topology for a job with model-parallel traffic (Wang et al., NSDI'23, section 4 and App. E):
TopologyFinder (Algorithm 1) with TotientPerms / SelectPermutations (Algorithms 2-3), CoinChangeMod routing
(Algorithm 4, App. E.3), the MP utility (App. E.4, Eq. 1-2) and host-based forwarding (App. I).

TopologyFinder(n, d, AllReduce bytes, MP demand T):
1. split the degree by traffic (Algorithm 1, line 2): d_A = max(1, ceil(d * AR / (AR + MP))) ports to AllReduce,
   the rest to MP, AR and MP the sums of the two traffic matrices over all hosts: a ring allreduce of M gradient
   bytes has every host send 2 (n-1)/n M to its successor, AR = 2 (n-1) M; MP = the sum of the MP demand;
2. the AllReduce sub-topology: SelectPermutations picks d_A TotientPerms rings x -> x + p (a directed
   circulant, every ring Hamiltonian: TopoOpt Theorem 2);
3. the MP sub-topology: d - d_A rounds of a maximum-weight perfect matching (Edmonds' blossom, networkx; greedy
   above 128 hosts) on the symmetrised unsatisfied demand w(i, j) = T(i, j) + T(j, i); every matched pair gets a
   link each way, and the demand of a matched pair is halved (the utility's diminishing return,
   Discount(l) = 1 - 2^-l, Eq. 2); with an odd number of hosts (no perfect matching) the round's port is one more
   TotientPerms ring instead, so every host keeps degree d;
4. routing: AllReduce traffic rides its own rings (one hop); MP traffic between hosts without a direct link is
   forwarded by hosts along shortest paths of the whole topology, split evenly over all of them (the
   min-hop ECMP rule; App. I forwards in the NIC or kernel). CoinChangeMod gives the shortest route on the
   AllReduce circulant alone (translation-invariant coin change over the generators).

Prices (the iteration model of `iteration.py`, node bandwidth B = d b, b one link): an allreduce of M is
split over the d_A rings, each a classic ring allreduce of M / d_A, so tau = 2 (n-1)/n * d / d_A on 2 (n-1)
steps; an all-to-all of D bytes per node (D/n to each node) loads each arc with the demand routed through it,
so it takes (max arc load) / b: tau = d * (max arc load in units of D), steps = the longest route; the bandwidth
tax (TopoOpt section 5.4) is the carried traffic over the demand.

The co-optimisation (TopoOpt section 4, "alternating optimization"): for each parallelisation strategy the
caller offers (e.g. DLRM's tables model-parallel, or data-parallel), build the topology for its traffic and
price the iteration; keep the fastest. With one topology per strategy the alternation settles in one round.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
import numpy as np

from services.synthesis.evaluate.baselines import select_permutations, totient_candidates
from services.synthesis.evaluate.iteration import CollectiveCost, TopologyCosts, best_bucket
from services.synthesis.evaluate.training_job import ModelSpec
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.topology.families import edges
from services.synthesis.topology.graph import Topology

__all__ = ["MAX_TOPOOPT_NODES", "Strategy", "TopoOptDesign", "co_optimise", "coin_change", "coin_route",
           "forwarded_loads", "strategies_for", "topology_finder"]

MAX_TOPOOPT_NODES = 1024


def coin_change(n: int, coins: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """CoinChangeMod (TopoOpt Algorithm 4, as repaired in the reference notes): fewest coins (hops) to make
    every offset delta in Z_n from the generators, and the last coin of one such route (-1: unreachable).

    >>> dist, last = coin_change(16, [1, 3, 7])
    >>> int(dist[15]), int(dist[13])
    (3, 3)
    """
    dist = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    dist[0] = 0
    frontier = [0]
    while frontier:                       # breadth-first over Z_n: dist is the fewest coins
        nxt = []
        for delta in frontier:
            for c in coins:
                t = (delta + c) % n
                if dist[t] > dist[delta] + 1:
                    dist[t] = dist[delta] + 1
                    nxt.append(t)
        frontier = nxt
    for delta in range(1, n):             # the last coin: the first in the given order on a shortest route
        for c in coins:                   # (Algorithm 4's strict comparison keeps the earliest coin)
            if dist[delta] < np.iinfo(np.int64).max and dist[(delta - c) % n] == dist[delta] - 1:
                last[delta] = c
                break
    return dist, last


def coin_route(n: int, coins: list[int], src: int, dst: int) -> list[int]:
    """The route src -> dst on the circulant of `coins`: hosts visited, src first (TopoOpt App. E.3).

    >>> coin_route(16, [1, 3, 7], 0, 15), coin_route(16, [1, 3, 7], 5, 2)
    ([0, 7, 14, 15], [5, 12, 15, 2])
    """
    _, last = coin_change(n, coins)
    delta, hops = (dst - src) % n, []
    while delta:
        c = int(last[delta])
        if c < 0:
            raise ValueError(f"{dst} is unreachable from {src} on the circulant of {coins}")
        hops.append(c)
        delta = (delta - c) % n
    path = [src]
    for c in reversed(hops):          # the coins in the order they were added: smallest offsets first
        path.append((path[-1] + c) % n)
    return path


@dataclass(frozen=True)
class TopoOptDesign:
    """A TopologyFinder result: the rings (generators), the MP links, the topology and its routing figures."""

    nodes: int
    degree: int
    allreduce_degree: int
    generators: tuple[int, ...]
    mp_links: tuple[tuple[int, int], ...]
    topology: Topology
    max_arc_load: float           # of the MP demand routed with forwarding, in units of D (bytes per node)
    bandwidth_tax: float
    longest_route: int

    def costs(self, name: str = "topoopt") -> TopologyCosts:
        n, d = self.nodes, self.degree
        ar = CollectiveCost(2 * (n - 1), Fraction(2 * (n - 1) * d, n * self.allreduce_degree))
        a2a = CollectiveCost(max(1, self.longest_route), Fraction(self.max_arc_load * d).limit_denominator(10 ** 9))
        return TopologyCosts(name, n, d, ar, alltoall_schedule=a2a)


def forwarded_loads(n: int, tails: np.ndarray, heads: np.ndarray, demand: np.ndarray) -> tuple[np.ndarray, int]:
    """Per-arc traffic when every pair's demand is split evenly over all shortest paths (Brandes' dependency
    accumulation per source), and the longest route in hops. O(n * arcs).

    >>> t, h = np.array([0, 1, 2]), np.array([1, 2, 0])         # the directed 3-cycle
    >>> loads, far = forwarded_loads(3, t, h, np.ones((3, 3)) - np.eye(3))
    >>> loads.tolist(), far
    ([3.0, 3.0, 3.0], 2)
    """
    out = [[] for _ in range(n)]
    for a, (u, v) in enumerate(zip(tails.tolist(), heads.tolist())):
        out[u].append((v, a))
    loads = np.zeros(len(tails))
    far = 0
    for s in range(n):
        dist = np.full(n, -1)
        sigma = np.zeros(n)
        dist[s], sigma[s] = 0, 1.0
        order, queue = [], [s]
        while queue:
            nxt = []
            for u in queue:
                order.append(u)
                for v, _ in out[u]:
                    if dist[v] < 0:
                        dist[v] = dist[u] + 1
                        nxt.append(v)
                    if dist[v] == dist[u] + 1:
                        sigma[v] += sigma[u]
            queue = nxt
        if (dist < 0).any():
            raise ValueError("the topology is not strongly connected")
        far = max(far, int(dist.max()))
        delta = np.zeros(n)
        for u in reversed(order):
            for v, a in out[u]:
                if dist[v] == dist[u] + 1:
                    share = sigma[u] / sigma[v] * (demand[s, v] + delta[v])
                    loads[a] += share
                    delta[u] += share
    return loads, far


BLOSSOM_MAX_NODES = 128


def _matching(w: np.ndarray) -> list[tuple[int, int]]:
    """A perfect matching of maximum weight (n even): Edmonds' blossom on the complete graph (weights w + 1, so
    pairs without demand fill the matching) up to BLOSSOM_MAX_NODES nodes, greedy by weight above (O(n^2 log n);
    a 1/2-approximation of the weight)."""
    n = len(w)
    if n <= BLOSSOM_MAX_NODES:
        g = nx.Graph()
        g.add_weighted_edges_from((i, j, float(w[i, j]) + 1.0) for i in range(n) for j in range(i + 1, n))
        return sorted(tuple(sorted(e)) for e in nx.max_weight_matching(g, maxcardinality=True))
    iu, ju = np.triu_indices(n, 1)
    free, out = np.ones(n, dtype=bool), []
    for k in np.argsort(-w[iu, ju], kind="stable"):
        i, j = int(iu[k]), int(ju[k])
        if free[i] and free[j]:
            free[i] = free[j] = False
            out.append((i, j))
    return out


def topology_finder(n: int, d: int, allreduce_bytes: float, mp_demand: np.ndarray) -> TopoOptDesign:
    """TopologyFinder (module docstring) for n hosts of degree d; `allreduce_bytes`: the gradient bytes M each
    host allreduces per iteration; `mp_demand[i, j]`: MP bytes i sends j per iteration."""
    if not isinstance(n, int) or not 2 <= n <= MAX_TOPOOPT_NODES:
        raise ValueError(f"topology_finder: n must be an integer in 2..{MAX_TOPOOPT_NODES}, got {n!r}")
    if not isinstance(d, int) or not 1 <= d <= 64:
        raise ValueError(f"topology_finder: d must be an integer in 1..64, got {d!r}")
    demand = np.asarray(mp_demand, dtype=np.float64)
    if demand.shape != (n, n) or (demand < 0).any() or not np.isfinite(demand).all():
        raise ValueError(f"topology_finder: the MP demand must be a non-negative {n} x {n} matrix")
    mp = float(demand.sum() - np.trace(demand))
    ar = 2.0 * (n - 1) * allreduce_bytes              # the AllReduce traffic matrix's sum (module docstring)
    total = ar + mp
    d_a = d if total <= 0 else max(1, min(d, math.ceil(d * ar / total)))
    cands = totient_candidates(n)
    extra_rings = 0
    unsat = demand.copy()
    np.fill_diagonal(unsat, 0.0)
    links: list[tuple[int, int]] = []
    for _ in range(d - d_a):
        if n % 2:                           # no perfect matching: this port is one more ring for everyone
            extra_rings += 1
            continue
        matching = _matching(unsat + unsat.T)
        for i, j in matching:
            links += [(i, j), (j, i)]
            unsat[i, j] /= 2
            unsat[j, i] /= 2
    gens = select_permutations(n, d_a + extra_rings, cands)
    arcs = [(x, (x + p) % n) for p in gens for x in range(n)] + links
    topo = edges(n, *arcs)
    tails = np.array([a for a, _ in arcs])
    heads = np.array([b for _, b in arcs])
    unit = np.zeros((n, n)) if mp <= 0 else demand / max(demand.sum(axis=1).max(), 1e-300)
    loads, far = forwarded_loads(n, tails, heads, unit)
    carried = loads.sum()
    asked = unit.sum() - np.trace(unit)
    return TopoOptDesign(n, d, d_a + extra_rings, tuple(gens), tuple(links), topo,
                         float(loads.max()) if len(loads) else 0.0, float(carried / asked) if asked else 1.0, far)


@dataclass(frozen=True)
class Strategy:
    """A parallelisation strategy the co-optimisation may choose: the model as trained under it (its layers'
    allreduce and all-to-all bytes) and the MP demand matrix it induces (bytes per iteration between hosts)."""

    name: str
    model: ModelSpec
    mp_demand: np.ndarray


def co_optimise(strategies: list[Strategy], n: int, d: int, link: LinkModel) -> tuple[Strategy, TopoOptDesign, float]:
    """TopoOpt's alternating optimisation (module docstring): (strategy, topology, iteration seconds) of the
    fastest strategy on the topology built for its own traffic."""
    if not strategies:
        raise ValueError("co_optimise: no strategy to choose from")
    best = None
    for st in strategies:
        design = topology_finder(n, d, float(st.model.gradient_bytes), st.mp_demand)
        t = best_bucket(st.model, design.costs(st.name), link).iteration_s
        if best is None or t < best[2]:
            best = (st, design, t)
    assert best is not None                            # strategies is not empty
    return best


def strategies_for(model: ModelSpec, n: int) -> list[Strategy]:
    """The strategies TopoOpt weighs for a model with model-parallel layers (DLRM's tables, MoE experts):
    `model-parallel` (as catalogued: the layers' parameters stay on their hosts, their tokens cross an
    all-to-all: four of `moe_tokens_bytes` per layer and iteration, D/n to each host) and `data-parallel` (every
    parameter allreduced, no all-to-all). A model without such layers has one strategy, data-parallel."""
    moe = [l for l in model.layers if l.is_moe]
    uniform = np.ones((n, n)) - np.eye(n)
    if not moe:
        return [Strategy("data-parallel", model, np.zeros((n, n)))]
    per_node = 4.0 * sum(l.moe_tokens_bytes for l in moe)
    dp_layers = [l.model_copy(update={"params_bytes": l.params_bytes + l.expert_params_bytes,
                                      "expert_params_bytes": 0, "moe_tokens_bytes": None}) for l in model.layers]
    dp = model.model_copy(update={"layers": dp_layers, "name": f"{model.name} (data-parallel)"})
    return [Strategy("model-parallel", model, uniform * per_node / n), Strategy("data-parallel", dp, np.zeros((n, n)))]
