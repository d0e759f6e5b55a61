"""All-to-all throughput (LP (3)) by column generation over shortest-path trees (Dantzig-Wolfe by source).

LP (3) of the paper (module `alltoall`) routes, for every source s, a flow that leaves f at every other node.
Each source's feasible flows carrying one unit to every node form a polytope whose extreme points (after
removing cycles, which only add load) are out-arborescences rooted at s: a tree T sends one unit to each
node t along its tree path, loading link e with load_T(e) = the number of nodes below e in T. So LP (3) is

    maximize f   s.t.   sum_T lambda_{s,T} >= f                           for every source s
                        sum_s sum_T lambda_{s,T} load_T(e) <= c_e           for every link e,   lambda >= 0

(Dantzig-Wolfe decomposition by source; the path formulation of the all-to-all note with the paths of one
source bundled into trees). The restricted master keeps a pool of trees per source; it has N + |E| rows
(1278 for N = 256, d = 4 against the 65 536 + 1 022 rows of the per-commodity path LP), solved exactly by
GLOP. Pricing (the reduced cost of a tree of s is sum_e w_e load_T(e) - pi_s with w >= 0 the capacity duals
and pi_s the source row's dual): the cheapest tree of s is a shortest-path tree under lengths w, one
single-source Dijkstra per source; every tree with a negative reduced cost joins the pool. Two devices
make it converge in tens of masters rather than hundreds: the pool is seeded with the trees of 24
exponentiated-gradient steps on the lengths (the dual ascent of `alltoall._approx`; on the degraded torus
the first master is already optimal), and pricing is done at a Wentges-smoothed point, 0.8 x the best dual
point so far + 0.2 x the master's duals, as well as at the master's duals (the restricted master's duals are
degenerate and oscillate). Columns unused by 3 consecutive masters leave the pool. With a free
automorphism group H (module `alltoall`, method 2b) only one source per node orbit keeps trees and capacity
rows are per link orbit (a tree of representative r loads the orbit O by the sum of its loads on O's links),
which is the same reduction as `_orbit_lp` and exact for the same reason.

Aggregated columns (`blocks`): the representatives are split into B blocks and a column of block b is one
tree per member, all with the same weight: its load is the sum of the members' tree loads and it sends one
unit from every member, so the master has B convexity rows. Nothing is lost in the limit: the set of a
block's routings is the Minkowski sum of its members' tree polytopes, which is the convex hull of the sums of
their vertices (one tree each), so the aggregated LP has the same optimum as LP (3); pricing a block is its
members' Dijkstra runs under the same lengths (reduced cost = the sum of their tree costs - pi_b). The master
then has a few hundred columns instead of ~10^4 dense ones: genkautz(4, 1024) (13 M nonzeros seeded per
representative, 2.7 GB) is bracketed to 0.5 % with B = 2 (`alltoall._colgen_options`). The seeding steps use
a decaying step eta 0.96^t + 0.01, which brings the dual-ascent bound closer (genkautz(4, 1024), 120 steps:
8.018e-4 against 8.038e-4 at a constant 0.2).

Certificates, every iteration (the module `alltoall` docstring): lower = the master's routing, scaled to the
worst capacity violation (trees route exactly one unit to every node, so it is feasible after scaling);
upper = the weak-duality bound sum_e c_e l_e / sum_{s != t} dist_l(s, t) with l_e = w_e, computed from the
pricing's own Dijkstra runs. When no tree prices out, the master is optimal for LP (3) and the two meet (up
to the solver's tolerance). The solve stops when (upper - lower) / upper <= rtol or at the time limit (CPU
seconds of this process, so a loaded machine does not cut it short); the
best bounds seen are returned, with the trees of the master whose routing gave `lower`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import dijkstra, shortest_path

from services.synthesis.evaluate.flow_links import Links, positive_lengths, tree_loads
from services.synthesis.evaluate.lp import solve_lp
from services.synthesis.topology.graph import Topology

__all__ = ["ColgenSolution", "colgen_throughput", "link_orbits"]

MASTER_SOLVER = "glop"
_POOL_AGE = 3          # a tree unused by this many consecutive masters leaves the pool
_ETA_DECAY, _ETA_FLOOR = 0.96, 0.01   # seeding step t: eta 0.96^t + 0.01 (genkautz(4, 1024), 120 steps: upper
                                      # 8.018e-4 against 8.038e-4 at a constant 0.2)


@dataclass(frozen=True)
class ColgenSolution:
    """Certified bounds lower <= f* <= upper of LP (3) and the routing that achieves `lower`.

    Trees: `pred[j]` (scipy predecessor row, -9999 at the root and unreachable nodes) rooted at node
    `root[j]` (a representative) with weight `weight[j]` (a column's weight for each of its trees); the routing of representative r sends weight[j] /
    sum of r's weights of every block along tree j, and every source h(r) (h in `group`) uses the image trees.
    Scaled by `lower`, the routing of all sources is feasible for unit-capacity links.
    """

    lower: float
    upper: float
    root: np.ndarray
    pred: np.ndarray
    weight: np.ndarray
    group: np.ndarray
    iterations: int
    columns: int
    seconds: float

    @property
    def relative_gap(self) -> float:
        return (self.upper - self.lower) / self.upper if self.upper > 0 else 0.0


def link_orbits(links, group: np.ndarray) -> np.ndarray:
    """Orbit id (0..K-1) of each link under a free automorphism group (rows = permutations)."""
    n = links.nodes
    key = links.tail * n + links.head
    images = np.searchsorted(key, group[:, links.tail] * n + group[:, links.head])
    return np.unique(images.min(axis=0), return_inverse=True)[1].ravel()


def _tree_columns(links, pred: np.ndarray, orbit_of: np.ndarray, k: int, block: np.ndarray, nb: int) -> np.ndarray:
    """Loads on the link orbits of the trees (rows of pred) summed per block (block[i] of row i): nb x K."""
    per_link = tree_loads(links, pred, group=block, groups=nb)                   # nb x L
    fold = csr_matrix((np.ones(orbit_of.size), (np.arange(orbit_of.size), orbit_of)), shape=(orbit_of.size, k))
    return np.asarray((fold.T @ per_link.T).T)


def _price(links, w: np.ndarray, orbit_of: np.ndarray, k: int, reps: np.ndarray, order: int, block: np.ndarray,
           nb: int):
    """Shortest-path trees of the representatives under orbit lengths w: (their orbit loads per block,
    predecessor rows, the weak-duality bound of those lengths, the distance sum)."""
    lengths = positive_lengths(w[orbit_of])
    dist, pred = dijkstra(links.matrix(lengths), directed=True, indices=reps, return_predecessors=True)
    dsum = float(dist.sum()) * order
    bound = float(links.cap @ lengths) / dsum if np.isfinite(dsum) and dsum > 0 else np.inf
    return _tree_columns(links, pred, orbit_of, k, block, nb), pred.astype(np.int32), bound, dsum


def colgen_throughput(topology: Topology, *, group: np.ndarray | None = None, rtol: float = 1e-5,
                      time_limit_s: float | None = None, max_iterations: int = 1000,
                      smoothing: float = 0.8, seed_steps: int = 24, eta: float = 1.0,
                      seed_lengths: np.ndarray | None = None, blocks: int | None = None) -> ColgenSolution:
    """Column generation for LP (3) (module docstring). `group`: a free automorphism group of the topology
    (rows = permutations, row 0 the identity; `alltoall.free_automorphism_group`), or None. The pool starts
    with the hop-shortest-path trees and the trees of `seed_steps` exponentiated-gradient steps (step `eta`)
    on the lengths, or of `seed_lengths` (per orbit; per link without a group) when given; pricing is at
    `smoothing` x (best dual point) + (1 - smoothing) x (master duals) and at the master duals. Step t of
    the seeding uses eta x 0.96^t + 0.01. `blocks`:
    aggregate the representatives into this many blocks (a column = one tree per member, module docstring);
    None = one block per representative."""
    t0, c0 = time.perf_counter(), time.process_time()
    links = Links.of(topology)
    n = topology.nodes
    group = np.arange(n, dtype=np.int64)[None, :] if group is None else np.asarray(group, dtype=np.int64)
    order = group.shape[0]
    reps = np.flatnonzero(group.min(axis=0) == np.arange(n))
    nr = reps.size
    nb = nr if blocks is None else max(1, min(int(blocks), nr))
    block = np.arange(nr) % nb                      # block of each representative (strided)
    members = [np.flatnonzero(block == b) for b in range(nb)]
    orbit_of = link_orbits(links, group)
    k = int(orbit_of.max()) + 1
    ocap = np.zeros(k)
    ocap[orbit_of] = links.cap
    batches: list[np.ndarray | None] = []           # predecessor rows of every pricing (nr x N), by batch id

    def price(lengths):
        load, pred, bound, dsum = _price(links, lengths, orbit_of, k, reps, order, block, nb)
        batches.append(pred)
        return load, np.full(nb, len(batches) - 1), bound, dsum

    # seed: hop-shortest-path trees, then exponentiated-gradient steps on the lengths (the dual ascent of
    # `alltoall._approx`), whose trees join the pool and whose best point is the first stability centre
    _, pred0 = shortest_path(topology.adjacency, unweighted=True, indices=reps, return_predecessors=True)
    batches.append(pred0.astype(np.int32))
    loads = [_tree_columns(links, pred0, orbit_of, k, block, nb)]
    batch_ids = [np.zeros(nb, dtype=np.int64)]
    p = ocap / ocap.sum()
    upper, center = np.inf, None
    if seed_lengths is not None:            # lengths from elsewhere (an LP's duals): their trees too
        new_load, bid, upper, dsum = price(np.asarray(seed_lengths, dtype=np.float64))
        center = positive_lengths(np.asarray(seed_lengths, dtype=np.float64)) / dsum * order
        loads.append(new_load)
        batch_ids.append(bid)
    for step in range(seed_steps):
        new_load, bid, bound, dsum = price(p / ocap)
        if bound < upper:
            upper, center = bound, positive_lengths(p / ocap) / dsum * order
        loads.append(new_load)
        batch_ids.append(bid)
        congestion = new_load.sum(axis=0) / ocap
        p = p * np.exp((eta * _ETA_DECAY ** step + _ETA_FLOOR) * (congestion / congestion.max() - 1.0))
        p /= p.sum()
    pool_load = np.concatenate(loads)
    pool_batch = np.concatenate(batch_ids)
    pool_blk = np.tile(np.arange(nb), len(loads))
    pool_age = np.zeros(pool_blk.size, dtype=np.int64)
    lower, best = 0.0, None
    for iterations in range(1, max_iterations + 1):
        m = pool_blk.size
        cols = coo_matrix(pool_load)
        rows = np.concatenate([pool_blk, nb + cols.col, np.arange(nb)])
        colid = np.concatenate([np.arange(m), cols.row, np.full(nb, m)])
        vals = np.concatenate([-np.ones(m), cols.data, np.ones(nb)])
        a = coo_matrix((vals, (rows, colid)), shape=(nb + k, m + 1))
        c = np.zeros(m + 1)
        c[-1] = -1.0
        _, x, y = solve_lp(c, a, np.concatenate([np.zeros(nb), ocap]), solver=MASTER_SOLVER)
        lam = np.maximum(x[:m], 0.0)
        # certified lower bound of the master's routing
        total = np.bincount(pool_blk, weights=lam, minlength=nb)
        congestion = float(((lam @ pool_load) / ocap).max())
        if total.min() > 0 and congestion > 0:
            value = float(total.min()) / max(1.0, congestion)
            if value > lower:
                lower = value
                used = np.flatnonzero(lam > 0)
                best = [(batches[pool_batch[j]][members[pool_blk[j]]], members[pool_blk[j]], lam[j])
                        for j in used]
        # pricing (Wentges smoothing: at a point between the best dual point so far and the master's
        # duals, which damps the duals' oscillation) and the dual bound at the priced point
        pi = np.maximum(-y[:nb], 0.0)
        w = np.maximum(-y[nb:], 0.0)
        w = w / max(float(pi.sum()), 1e-300)              # the master's duals scaled so that sum pi = 1
        pi = pi / max(float(pi.sum()), 1e-300)
        point = smoothing * center + (1.0 - smoothing) * w
        new_load, new_batch = [], []
        for lengths in (point, w):                         # the smoothed point, then the master's duals
            load_l, bid, bound, _ = price(lengths)
            if bound < upper:
                upper, center = bound, lengths
            new_load.append(load_l)
            new_batch.append(bid)
        new_load, new_batch = np.concatenate(new_load), np.concatenate(new_batch)
        cost = new_load @ w
        improving = cost < np.tile(pi, 2) * (1.0 - 1e-9) - 1e-15
        done = upper <= lower or (upper - lower) / upper <= rtol or not improving.any()
        out_of_time = time_limit_s is not None and time.process_time() - c0 > time_limit_s
        if done or out_of_time:
            break
        pool_age = np.where(lam > 0, 0, pool_age + 1)
        keep = pool_age < _POOL_AGE
        add = np.flatnonzero(improving)
        pool_load = np.concatenate([pool_load[keep], new_load[add]])
        pool_blk = np.concatenate([pool_blk[keep], add % nb])
        pool_batch = np.concatenate([pool_batch[keep], new_batch[add]])
        pool_age = np.concatenate([pool_age[keep], np.zeros(add.size, dtype=np.int64)])
        live = set(pool_batch.tolist())
        batches = [b if i in live else None for i, b in enumerate(batches)]   # forget unreferenced trees
    if upper < lower:                    # float noise at the optimum
        upper = lower
    if best is None:
        raise ValueError(f"{topology.expr}: no all-to-all routing found (is the topology strongly connected?)")
    preds = np.concatenate([tree for tree, _, _ in best])
    roots = reps[np.concatenate([who for _, who, _ in best])]
    weights = np.concatenate([np.full(who.size, lam) for _, who, lam in best])
    return ColgenSolution(float(lower), float(upper), roots, preds, weights, group, iterations,
                          int(pool_blk.size), time.perf_counter() - t0)
