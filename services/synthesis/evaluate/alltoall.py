"""All-to-all throughput as a maximum concurrent flow (paper Sections 2.3, 5.4, App. A.5).

Every node s sends the same amount to every other node t (N (N - 1) commodities). With unit capacity per
arc (a link carries B/d), the throughput f is the largest rate every ordered pair can get simultaneously,
the optimum of LP (3) of the paper (source-aggregated formulation of Basu et al.):

    maximize   f
    subject to sum_s y[s, e] <= 1                        for every arc e             (capacity)
               f + out_s(u) <= in_s(u)                   for every source s, u != s  (u absorbs >= f of s)
               y >= 0,   out_s(u) = sum of y[s, e] over arcs e leaving u, in_s(u) over arcs entering u.

Parallel arcs are separate unit-capacity links; here the arcs between the same ordered pair are merged into
one link of capacity = multiplicity (the same LP: any split of a merged flow over the parallel arcs is
feasible). Self-loops are dropped (they can carry nothing). T_a2a = (D/N) / (f B/d) (`alltoall_time_s`).

Methods; every one returns bounds certified independently of what the solver claims (see below):

* ``lp-symmetric`` (exact) for topologies with a `Translation` (Cayley graphs of abelian groups; verified
  from the arcs before use). Proof of the reduction: let tau_u(x) = x + u. Each tau_u is an automorphism,
  tau_u tau_v = tau_{u+v}, and the group acts freely and transitively on the nodes, hence freely on the arcs
  (an arc is moved to an arc with a different tail unless u = 0). (a) Arc orbits are the generator classes:
  the out-arcs of u are exactly u + g for the out-arcs 0 -> g of node 0 (apply tau_u), so the arcs are
  {(x, x + g)} and the orbit of (0, g) is {(x, x + g) : x} -- one orbit per generator g (per lane), N arcs each.
  (b) Invariance: if (y, f) is feasible for LP (3) so is (y^u, f) with y^u[s, e] = y[s - u, tau_{-u}(e)]
  (a relabelling by an automorphism). LP (3) is convex, so the average ybar = (1/N) sum_u y^u is feasible with
  the same f and satisfies ybar[s, e] = ybar[0, tau_{-s}(e)]. So some optimum is translation-invariant and
  determined by z[e] = y[0, e]. (c) Reduced constraints: for e in the orbit of g,
      sum_s y[s, e] = sum_s z[tau_{-s}(e)] = sum over the whole orbit of z = sum_x z[(x, x + g)],
  because s -> tau_{-s}(e) is a bijection onto the orbit (free action). So the N capacity rows of class g
  all become the single row  sum_x z[(x, x + g)] <= c_g  (c_g = multiplicity of generator g). Conservation
  for (s, u) is conservation for (0, u - s) after applying tau_{-s}, so only source 0's N - 1 rows remain:
      f + sum_g z[(u, u + g)] <= sum_g z[(u - g, u)]    for u != 0.
  Conversely every feasible (z, f) lifts (y[s, e] = z[tau_{-s}(e)]) to a feasible point of LP (3) with the
  same f, so both optima are equal. The reduced LP has N d + 1 variables and N - 1 + d rows (torus(50, 50):
  10001 x 2503) and is solved exactly by simplex (GLOP).
  The same proof works for any group H acting freely on the nodes (see `_orbit_lp`): sources reduce to one
  representative per node orbit and capacity rows to one per link orbit. Such groups are derived from the
  canonical expression (line graphs inherit their base's group, de Bruijn digit rotations, x -> -x - 1 on
  generalized Kautz graphs with even m, products and degree expansions) and verified on the arcs; e.g.
  DBJ(4, 4) shrinks 4x and L^3(K_{4,4}) (N = 512) 8x. Also reported as ``lp-symmetric``.
* ``lp`` (exact) for any topology: LP (3) itself, N |E| + 1 variables, N (N - 1) + |E| rows, built with
  vectorised sparse construction and solved through OR-Tools MathOpt with HiGHS: simplex up to
  `SIMPLEX_MAX_VARIABLES`, its first-order PDLP above. PDLP was by far the fastest option measured on this
  2-core machine for N = 256, d = 4 (262k variables, DBJ(4, 4)): HiGHS PDLP 7.5 s, OR-Tools PDLP 25-38 s,
  HiGHS IPM and GLOP/HiGHS simplex well over a minute (GLOP needs 24 s already at N = 128). A first-order
  solution is only accurate to ~1e-6, so the result is reported exact when the certified relative gap is
  at most `EXACT_RTOL` (1e-5; simplex solves close it to ~1e-12). When PDLP leaves a wider gap, the column
  generation below is run for two masters, its pool seeded with the shortest-path trees under PDLP's duals
  (and its own dual-ascent trees): remove(torus(16, 16), 0>1) goes from a 1.8e-5 gap to exact (f =
  31/16384, gap 1e-10; 22 s CPU, 0.65 GB peak, loaded machine). OR-Tools' model_builder HiGHS wrapper
  returns row activities as duals, hence MathOpt.
* ``colgen`` (certified bracket, exact when it closes) for large topologies without a small enough
  symmetric LP (`alltoall_colgen`): LP (3) decomposed by source, columns = shortest-path trees, pricing =
  one Dijkstra per source (per node orbit under a free automorphism group), restricted master by GLOP with
  N + |E| rows (orbit counts under a group). Lower bound = the master's routing, upper = weak duality at
  the priced lengths. "auto" runs it above `exact_limit` until the bracket is at most `BRACKET_RTOL`
  (0.5 %) wide or `COLGEN_SECONDS` of CPU; when its first master would exceed `COLGEN_MAX_NONZEROS`
  nonzeros (genkautz(4, 1024), debruijn(4, 5), L^2(DistReg(4, 32))) its columns aggregate the
  representatives into `COLGEN_LARGE_BLOCKS` blocks and its pool is seeded with more dual-ascent steps
  (`_colgen_options`). `throughput` is then the lower end (an achieved routing), so an all-to-all time
  computed from it is the upper end of the time bracket.
* ``approx`` (bounded; forced only, "auto" used it before ``colgen``) (`_approx`): an upper bound from
  exponentiated-gradient ascent on the Lagrangian dual (certified by weak duality, never worse than the
  distance-sum bound f <= sum_e c_e / sum_{s != t} dist(s, t)) and a lower bound from a feasible routing
  (shortest-path DAG routing with even splits, improved by pairwise Frank-Wolfe over shortest-path trees
  on a smoothed max congestion). `throughput` is then the lower bound (an achieved routing).
  genkautz(4, 1024): [7.918e-4, 8.072e-4] (1.9 %) in ~7 s.

Certificates. Lower bound: any nonnegative y whose per-source net inflow at every u != s is >= f_s carries
f_s from s to every node (flow decomposition: s is the only node with a deficit); scaling by the worst
capacity violation makes it feasible, so  f >= min_s f_s / max(1, max_e load_e / c_e).  Upper bound (weak
duality of LP (3)): for any lengths l >= 0, every feasible flow has  sum_e c_e l_e >= sum_e l_e load_e >=
f sum_{s != t} dist_l(s, t),  so  f <= sum_e c_e l_e / sum_{s != t} dist_l(s, t)  (one all-pairs Dijkstra;
with translation-invariant lengths one single-source run suffices). With l = 1 this is the distance-sum
bound, and with the LP's optimal duals it is tight.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import dijkstra, shortest_path

from services.synthesis.evaluate.alltoall_colgen import colgen_throughput
from services.synthesis.evaluate.flow_links import Links as _Links
from services.synthesis.evaluate.flow_links import positive_lengths as _positive_lengths
from services.synthesis.evaluate.flow_links import tree_loads as _tree_loads
from services.synthesis.evaluate.lp import solve_lp as _solve_lp
from services.synthesis.topology.graph import Topology

__all__ = ["AllToAllResult", "alltoall_throughput", "alltoall_time_s", "distance_sum_bound", "BRACKET_RTOL",
           "free_automorphism_group", "moore_throughput_bound", "EXACT_RTOL", "METHODS"]

EXACT_RTOL = 1e-5          # certified relative gap at which an LP solve counts as exact
SIMPLEX_MAX_VARIABLES = 5_000   # LP (3) up to this size goes to HiGHS simplex (exact vertex), else PDLP
METHODS = ("auto", "lp", "lp-symmetric", "colgen", "approx")
COLGEN_SECONDS = 60.0      # CPU time limit of the column generation (method "colgen"); bounds are certified anyway
COLGEN_SEED_STEPS = 24     # the column generation's seeding steps (its default)
COLGEN_MAX_NONZEROS = 4_000_000   # "auto" runs the column generation only when its first master is this small
COLGEN_LARGE_BLOCKS = 2    # above COLGEN_MAX_NONZEROS: columns aggregate the representatives into this many blocks
COLGEN_LARGE_SEED_STEPS = 120   # ... and the pool is seeded with this many dual-ascent steps
COLGEN_SEED_BYTES = 512 * 2 ** 20   # ... at most (the seeds' trees are kept: N x representatives x 4 bytes each)
BRACKET_RTOL = 5e-3        # "auto" above exact_limit: column generation until the bracket is this narrow


@dataclass(frozen=True)
class AllToAllResult:
    """All-to-all throughput f: the rate (in units of one link's capacity B/d) that every ordered pair of
    nodes gets simultaneously. `lower` <= optimum <= `upper` are certified; `exact` means the gap is at most
    EXACT_RTOL (the LP was solved to optimality), in which case `throughput` is the LP optimum (clipped into
    [lower, upper]); for "colgen" and "approx" it is `lower`, the value of an actual routing (so times
    derived from it are the upper end of the time bracket until the bracket closes)."""

    throughput: float
    lower: float
    upper: float
    exact: bool
    method: str
    relative_error: float
    seconds: float
    expr: str = ""
    nodes: int = 0
    degree: int = 0

    def time_s(self, bytes_per_node: float, node_bandwidth_Bps: float) -> float:
        """All-to-all time for this topology (see `alltoall_time_s`)."""
        return alltoall_time_s(self, self.nodes, self.degree, bytes_per_node, node_bandwidth_Bps)

    def to_dict(self) -> dict:
        return {"expr": self.expr, "nodes": self.nodes, "degree": self.degree, "throughput": self.throughput,
                "lower": self.lower, "upper": self.upper, "exact": self.exact, "method": self.method,
                "relative_error": self.relative_error, "seconds": self.seconds}


# ----- closed forms ---------------------------------------------------------------------------------------

def moore_throughput_bound(nodes: int, degree: int) -> float:
    """f* = d / sum_i i n_i with the Moore-tree profile n_i = d^i until all N - 1 other nodes are covered:
    no d-regular N-node topology has a larger all-to-all throughput (each source's distance sum is at least
    the Moore tree's, and N d links must carry f times the sum of all distances). Table 7's bounds."""
    if not isinstance(nodes, (int, np.integer)) or nodes < 2:
        raise ValueError(f"moore_throughput_bound: nodes must be an integer >= 2, got {nodes!r}")
    if not isinstance(degree, (int, np.integer)) or degree < 1:
        raise ValueError(f"moore_throughput_bound: degree must be a positive integer, got {degree!r}")
    left, level, layer, total = nodes - 1, 0, 1, 0
    while left > 0:
        level += 1
        layer *= degree
        n = min(layer, left)
        total += level * n
        left -= n
    return degree / total


def alltoall_time_s(result_or_f, nodes: int, degree: int, bytes_per_node: float,
                    node_bandwidth_Bps: float) -> float:
    """T_a2a = (D/N) / (f B/d): every node holds D bytes and sends D/N to every node; every ordered pair
    gets f links' worth (f B/d) of bandwidth (App. A.5; no alpha term, as in Table 4)."""
    f = result_or_f.throughput if isinstance(result_or_f, AllToAllResult) else float(result_or_f)
    if not f > 0:
        raise ValueError(f"alltoall_time_s: throughput must be positive, got {f}")
    if nodes < 2 or degree < 1 or node_bandwidth_Bps <= 0 or bytes_per_node < 0:
        raise ValueError("alltoall_time_s: needs nodes >= 2, degree >= 1, bandwidth > 0, bytes >= 0")
    return (bytes_per_node / nodes) / (f * node_bandwidth_Bps / degree)


def distance_sum_bound(topology: Topology) -> float:
    """f <= (number of non-loop arcs) / sum_{s != t} dist(s, t): the bandwidth-tax bound (LP dual with l = 1)."""
    links = _Links.of(topology)
    if topology.translation is not None and _cayley_generators(topology) is not None:
        total = float(topology.distances_from([0]).sum()) * topology.nodes
    else:
        total = float(topology.distance_matrix.sum(dtype=np.float64))
    return float(links.cap.sum()) / total


# ----- links and certificates -----------------------------------------------------------------------------

def _lagrangian_bound(links: _Links, lengths: np.ndarray, *, sources=None, scale: float = 1.0) -> float:
    """Upper bound on f from weak duality with the given link lengths. With `sources`, only those rows are
    computed and `scale` multiplies their distance sum (translation-invariant lengths)."""
    lengths = _positive_lengths(lengths)
    total = 0.0
    for _, dist, _ in _shortest_path_trees(links, lengths, sources, predecessors=False):
        total += float(dist.sum())
    total *= scale
    if not np.isfinite(total) or total <= 0:
        return np.inf
    return float(links.cap @ lengths) / total


def _shortest_path_trees(links: _Links, lengths: np.ndarray, sources=None, *, predecessors: bool = True,
                         chunk: int = 256):
    """Yield (sources, dist, pred) for chunks of sources (bounded memory); lengths must be positive."""
    matrix = links.matrix(lengths)
    sources = np.arange(links.nodes) if sources is None else np.asarray(sources)
    for start in range(0, sources.size, chunk):
        part = sources[start:start + chunk]
        if predecessors:
            dist, pred = dijkstra(matrix, directed=True, indices=part, return_predecessors=True)
        else:
            dist, pred = dijkstra(matrix, directed=True, indices=part), None
        yield part, dist, pred


def _certified_lower(links: _Links, src: np.ndarray, link: np.ndarray, flow: np.ndarray, target: float) -> float:
    """Lower bound on f from an approximately optimal source-aggregated flow y[s, link] (first-order
    solvers leave ~1e-7 violations). Repair: every node u whose net inflow from s is below `target` gets the
    missing amount sent along a hop-shortest path from s; then f >= target / max(1, max load / capacity)
    (module docstring). The repair costs ~violation x path length, far less than taking the worst node."""
    flow = np.maximum(np.asarray(flow, dtype=np.float64), 0.0)
    n = links.nodes
    net = np.bincount(src * n + links.head[link], weights=flow, minlength=n * n)
    net -= np.bincount(src * n + links.tail[link], weights=flow, minlength=n * n)
    deficit = np.maximum(target - net.reshape(n, n), 0.0)
    np.fill_diagonal(deficit, 0.0)
    load = np.bincount(link, weights=flow, minlength=links.size)
    if deficit.any():
        sources = np.flatnonzero(deficit.any(axis=1))
        load = load + _repair_loads(links, sources, deficit[sources])
    return max(0.0, target / max(1.0, float((load / links.cap).max())))


def _repair_loads(links: _Links, sources: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Link loads of sending demand[i, u] from sources[i] to u along hop-shortest-path trees."""
    adjacency = csr_matrix((np.ones(links.size), (links.tail, links.head)), shape=(links.nodes, links.nodes))
    _, pred = shortest_path(adjacency, unweighted=True, indices=sources, return_predecessors=True)
    return _tree_loads(links, pred, demand)


# ----- method 1: LP (3) -----------------------------------------------------------------------------------

def _full_lp(topology: Topology, solver: str | None = None):
    """Returns (f, certified lower, certified upper) of LP (3) with one variable per (source, link) (links into the source are useless and omitted) plus f.
    Rows: capacity per link, then conservation per (s, u != s) at index L + s (N - 1) + u - [u > s]."""
    links = _Links.of(topology)
    n, nl = topology.nodes, links.size
    src = np.repeat(np.arange(n, dtype=np.int64), nl)
    link = np.tile(np.arange(nl, dtype=np.int64), n)
    keep = links.head[link] != src
    src, link = src[keep], link[keep]
    nv = src.size
    col = np.arange(nv, dtype=np.int64)

    def cons(s, u):
        return nl + s * (n - 1) + u - (u > s)

    tail, head = links.tail[link], links.head[link]
    out = tail != src
    ss, uu = np.nonzero(~np.eye(n, dtype=bool))
    rows = np.concatenate([link, cons(src[out], tail[out]), cons(src, head), cons(ss, uu)])
    cols = np.concatenate([col, col[out], col, np.full(ss.size, nv)])
    vals = np.concatenate([np.ones(nv), np.ones(int(out.sum())), -np.ones(nv), np.ones(ss.size)])
    n_row = nl + n * (n - 1)
    a = coo_matrix((vals, (rows, cols)), shape=(n_row, nv + 1))
    c = np.zeros(nv + 1)
    c[-1] = -1.0
    row_hi = np.concatenate([links.cap, np.zeros(n * (n - 1))])
    if solver is None:
        solver = "simplex" if nv + 1 <= SIMPLEX_MAX_VARIABLES else "pdlp"
    obj, x, y = _solve_lp(c, a, row_hi, solver=solver)
    lower = _certified_lower(links, src, link, x[:nv], -obj)
    upper = _lagrangian_bound(links, -y[:nl])
    upper = min(upper, distance_sum_bound(topology))
    return -obj, lower, upper, np.maximum(-y[:nl], 0.0)


# ----- method 2: translation-reduced LP -------------------------------------------------------------------

def _cayley_generators(topology: Topology) -> np.ndarray | None:
    """The out-neighbours of node 0 (a multiset of group elements) if every node u has out-arcs exactly
    u + g (so the translation acts on the arcs), else None."""
    t = topology.translation
    if t is None or t.size != topology.nodes:
        return None
    n, d = topology.nodes, topology.degree
    heads = topology.heads.reshape(n, d).astype(np.int64)    # arcs are sorted by tail, d per node
    gens = heads[0].copy()
    if not np.array_equal(topology.tails.reshape(n, d)[:, 0], np.arange(n)):
        return None
    expected = t.add(np.arange(n, dtype=np.int64)[:, None], gens[None, :])
    if not np.array_equal(np.sort(heads, axis=1), np.sort(expected, axis=1)):
        return None
    return gens


def _symmetric_lp(topology: Topology, gens: np.ndarray):
    """The translation-reduced LP (module docstring): source 0's flow z on every link, one capacity row per
    generator class. Returns (f, certified lower, certified upper)."""
    t = topology.translation
    n = topology.nodes
    g, mult = np.unique(gens[gens != 0], return_counts=True)     # generator classes; 0 = self-loop
    k = g.size
    x = np.arange(n, dtype=np.int64)
    tail = np.tile(x, k)                                   # variable j = class (j // n), tail (j % n)
    head = t.add(tail, np.repeat(g, n))
    cls = np.repeat(np.arange(k), n)
    keep = head != 0                                       # flow back into the source is useless
    tail, head, cls = tail[keep], head[keep], cls[keep]
    nv = tail.size
    col = np.arange(nv, dtype=np.int64)
    # rows: capacity per class 0..k-1, conservation for u = 1..n-1 at k + u - 1
    out = tail != 0
    rows = np.concatenate([cls, k + tail[out] - 1, k + head - 1, k + x[1:] - 1])
    cols = np.concatenate([col, col[out], col, np.full(n - 1, nv)])
    vals = np.concatenate([np.ones(nv), np.ones(int(out.sum())), -np.ones(nv), np.ones(n - 1)])
    a = coo_matrix((vals, (rows, cols)), shape=(k + n - 1, nv + 1))
    c = np.zeros(nv + 1)
    c[-1] = -1.0
    row_hi = np.concatenate([mult.astype(np.float64), np.zeros(n - 1)])
    obj, z, y = _solve_lp(c, a, row_hi, solver="glop")
    f = -obj
    # certificates. Lower: source 0's flow (every source is a translate), class loads = orbit sums.
    zf = np.maximum(z[:nv], 0.0)
    net = np.bincount(head, weights=zf, minlength=n) - np.bincount(tail, weights=zf, minlength=n)
    load = np.bincount(cls, weights=zf, minlength=k) / mult
    lower = max(0.0, float(net[1:].min()) / max(1.0, float(load.max())))
    # Upper: class lengths lambda_g on every link of class g; sum_{s,t} dist = N * sum_t dist(0, t).
    lam = np.maximum(-y[:k], 0.0)
    link_tail = np.tile(x, k)
    links = _Links(n, link_tail, t.add(link_tail, np.repeat(g, n)), np.repeat(mult.astype(np.float64), n))
    upper = _lagrangian_bound(links, np.repeat(lam, n), sources=[0], scale=n)
    return f, lower, upper


# ----- method 2b: orbit LP under a free automorphism group ------------------------------------------------
#
# The same argument as for translations works for any group H of automorphisms acting freely on the nodes
# (hence on the links): average a solution over H; then y[h(s), h(e)] = y[s, e], only the sources in a set R
# of orbit representatives keep variables, the capacity row of a link becomes one row per link orbit O,
#     sum_{r in R} sum_{e' in O} y[r, e'] <= c_O     (the load of every link of O in the lifted solution),
# and conservation is kept for the sources in R. Size |R| |E| instead of N |E|. Many topologies that carry no
# translation still have such a group, derived here from their canonical expression and then verified on the
# arcs: a line graph L^k(G) inherits G's group (acting on arcs), de Bruijn graphs have the digit rotations
# x_i -> x_i + c (mod d), generalized Kautz graphs on an even number of nodes have x -> -x - 1, products and
# degree expansions combine their factors' groups (plus the copy rotation of a degree expansion).

MAX_GROUP_TABLE = 1 << 22          # |H| * N entries of explicit permutations


def free_automorphism_group(topology: Topology) -> np.ndarray | None:
    """An explicit group of automorphisms acting freely on the nodes (rows = permutations, row 0 =
    identity), verified on the topology's arcs; None when only the trivial group is known."""
    from services.synthesis.topology.expr import parse

    try:
        tree = parse(topology.expr)
        group = _group_of(tree, topology)
    except (ValueError, RecursionError):
        return None
    if group is None or group.shape[0] < 2 or not _is_free_automorphism_group(topology, group):
        return None
    return group


def _translation_table(topology: Topology) -> np.ndarray | None:
    if _cayley_generators(topology) is None or topology.nodes ** 2 > MAX_GROUP_TABLE:
        return None
    x = np.arange(topology.nodes, dtype=np.int64)
    return topology.translation.add(x[None, :], x[:, None]).astype(np.int64)     # row u: x -> x + u


def _group_of(tree, topology: Topology) -> np.ndarray | None:
    from services.synthesis.topology.catalog import build
    from services.synthesis.topology.expansions import line

    name, args, n = tree.name, tree.args, topology.nodes
    table = _translation_table(topology)
    if table is not None:
        return table
    if name == "line":
        base = build(args[0])
        group = _group_of(args[0], base)
        if group is None:
            return None
        times = args[1] if len(args) > 1 else 1
        cur = base
        if group.shape[0] * base.degree ** times * base.nodes > MAX_GROUP_TABLE:
            return None
        for _ in range(times):
            # node i of L(G) is arc i of G; a group element maps arc (t, h, lane) to (pi t, pi h, lane)
            group = np.stack([cur.arc_index(p[cur.tails], p[cur.heads], cur.lanes) for p in group])
            if (group < 0).any():
                return None
            cur = line(cur)
        return group
    if name == "debruijn" and len(args) == 2:
        d, k = args
        digits = [(np.arange(n) // d ** i) % d for i in range(k)]
        return np.stack([sum(((dig + c) % d) * d ** i for i, dig in enumerate(digits)) for c in range(d)])
    if name in ("genkautz", "kautz") and n % 2 == 0:
        x = np.arange(n, dtype=np.int64)
        return np.stack([x, (-x - 1) % n])
    if name in ("product", "power"):
        factors = [build(a) for a in args] if name == "product" else [build(args[0])] * args[1]
        trees = list(args) if name == "product" else [args[0]] * args[1]
        groups = []
        for f, t in zip(factors, trees):
            g = _group_of(t, f)
            groups.append(np.arange(f.nodes, dtype=np.int64)[None, :] if g is None else g)
        size = int(np.prod([g.shape[0] for g in groups]))
        if size < 2 or size * n > MAX_GROUP_TABLE:
            return None
        coords = np.unravel_index(np.arange(n), [f.nodes for f in factors])   # first factor most significant
        out = np.zeros((size, n), dtype=np.int64)
        for idx, combo in enumerate(np.ndindex(*[g.shape[0] for g in groups])):
            label = np.zeros(n, dtype=np.int64)
            for axis, (f, g) in enumerate(zip(factors, groups)):
                label = label * f.nodes + g[combo[axis]][coords[axis]]
            out[idx] = label
        return out
    if name == "degree" and len(args) == 2:
        base = build(args[0])
        copies = args[1]
        group = _group_of(args[0], base)
        if group is None:
            group = np.arange(base.nodes, dtype=np.int64)[None, :]
        if group.shape[0] * copies * n > MAX_GROUP_TABLE:
            return None
        v, i = np.arange(n) // copies, np.arange(n) % copies       # node v_i has label v * n + i
        return np.stack([p[v] * copies + (i + c) % copies for p in group for c in range(copies)])
    return None


def _is_free_automorphism_group(topology: Topology, group: np.ndarray) -> bool:
    n = topology.nodes
    if group.ndim != 2 or group.shape[1] != n or group.shape[0] > n or n % group.shape[0]:
        return False
    if not np.array_equal(group[0], np.arange(n)):
        return False
    if (group[1:] == np.arange(n)[None, :]).any():                   # a fixed point: not free
        return False
    key = np.sort(topology.tails.astype(np.int64) * n + topology.heads)
    for p in group[1:]:
        if not np.array_equal(np.sort(p[topology.tails].astype(np.int64) * n + p[topology.heads]), key):
            return False
    orbit_min = group.min(axis=0)
    return int((orbit_min == np.arange(n)).sum()) * group.shape[0] == n


def _orbit_lp(topology: Topology, group: np.ndarray, solver: str | None = None):
    """LP (3) reduced by a free automorphism group (rows of `group`): variables for the orbit representatives'
    flows only, one capacity row per link orbit. Returns (f, certified lower, certified upper)."""
    links = _Links.of(topology)
    n, nl, order = topology.nodes, links.size, group.shape[0]
    reps = np.flatnonzero(group.min(axis=0) == np.arange(n))
    nr = reps.size
    key = links.tail * n + links.head
    images = np.searchsorted(key, group[:, links.tail] * n + group[:, links.head])       # order x L
    orbit_of = np.unique(images.min(axis=0), return_inverse=True)[1].ravel()
    k = int(orbit_of.max()) + 1
    orbit_cap = np.zeros(k)
    orbit_cap[orbit_of] = links.cap
    rep = np.repeat(np.arange(nr), nl)
    link = np.tile(np.arange(nl), nr)
    keep = links.head[link] != reps[rep]
    rep, link = rep[keep], link[keep]
    nv = rep.size
    col = np.arange(nv, dtype=np.int64)

    def cons(i, u):
        return k + i * (n - 1) + u - (u > reps[i])

    tail, head = links.tail[link], links.head[link]
    out = tail != reps[rep]
    ii = np.repeat(np.arange(nr), n)
    uu = np.tile(np.arange(n), nr)
    m = uu != reps[ii]
    ii, uu = ii[m], uu[m]
    rows = np.concatenate([orbit_of[link], cons(rep[out], tail[out]), cons(rep, head), cons(ii, uu)])
    cols = np.concatenate([col, col[out], col, np.full(ii.size, nv)])
    vals = np.concatenate([np.ones(nv), np.ones(int(out.sum())), -np.ones(nv), np.ones(ii.size)])
    a = coo_matrix((vals, (rows, cols)), shape=(k + nr * (n - 1), nv + 1))
    c = np.zeros(nv + 1)
    c[-1] = -1.0
    row_hi = np.concatenate([orbit_cap, np.zeros(nr * (n - 1))])
    if solver is None:
        solver = "simplex" if nv + 1 <= SIMPLEX_MAX_VARIABLES else "pdlp"
    obj, x, y = _solve_lp(c, a, row_hi, solver=solver)
    f = -obj
    # lower certificate: repair the representatives' flows, then orbit loads = lifted link loads
    flow = np.maximum(x[:nv], 0.0)
    net = np.bincount(rep * n + head, weights=flow, minlength=nr * n)
    net -= np.bincount(rep * n + tail, weights=flow, minlength=nr * n)
    deficit = np.maximum(f - net.reshape(nr, n), 0.0)
    deficit[np.arange(nr), reps] = 0.0
    load = np.bincount(link, weights=flow, minlength=nl)
    if deficit.any():
        load = load + _repair_loads(links, reps, deficit)
    orbit_load = np.bincount(orbit_of, weights=load, minlength=k)
    lower = max(0.0, f / max(1.0, float((orbit_load / orbit_cap).max())))
    # upper certificate: invariant lengths; sum over all sources = |H| * sum over the representatives
    upper = _lagrangian_bound(links, np.maximum(-y[:k], 0.0)[orbit_of], sources=reps, scale=order)
    return f, lower, upper


# ----- method 3: bounded approximation --------------------------------------------------------------------

def _ecmp_loads(links: _Links, sources: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """Link loads of shortest-path (hop) DAG routing with even splits (by capacity) for `sources`,
    one unit to every other node. dist: hop distances from `sources` (rows)."""
    n, b = links.nodes, sources.size
    dist = dist.astype(np.int64)
    rows = np.arange(b)
    dag = dist[:, links.head] == dist[:, links.tail] + 1            # b x L
    r, l = np.nonzero(dag)
    head_key = r * n + links.head[l]
    in_cap = np.bincount(head_key, weights=links.cap[l], minlength=b * n)
    through = np.ones(b * n)                                       # flow through (source, node)
    through[rows * n + sources] = 0.0
    level = dist[r, links.head[l]]
    order = np.argsort(-level, kind="stable")
    r, l, head_key, level = r[order], l[order], head_key[order], level[order]
    loads = np.zeros(links.size)
    starts = np.flatnonzero(np.concatenate([[True], level[1:] != level[:-1], [True]]))
    for a, z in zip(starts[:-1], starts[1:]):
        amount = through[head_key[a:z]] * links.cap[l[a:z]] / in_cap[head_key[a:z]]
        loads += np.bincount(l[a:z], weights=amount, minlength=links.size)
        through += np.bincount(r[a:z] * n + links.tail[l[a:z]], weights=amount, minlength=b * n)
    return loads


def _approx(topology: Topology, *, dual_iters: int | None = None, phases: int | None = None, sweeps: int = 10,
            block_size: int | None = None, eta: float = 0.2, beta0: float = 5.0, growth: float = 1.2,
            beta_max: float = 4000.0):
    """Certified bounds without solving LP (3) (module docstring). Deterministic for a given topology.

    1. Upper bound: exponentiated-gradient ascent on the Lagrangian dual, max g(l) = sum_{s,t} dist_l(s,t)
       over c.l = 1 (a supergradient is the link load of shortest-path-tree routing under l); every iterate
       is certified with weak duality and the best is kept (the first iterate, l = 1, is the distance-sum
       bound).
    2. Lower bound: sources are split into blocks; each block's routing is a convex combination of atoms
       (its ECMP routing, its shortest-path trees under every dual iterate, and new trees), optimised by
       pairwise Frank-Wolfe on a smoothed max congestion (log-sum-exp with growing sharpness beta), first
       over the stored atoms only, then with new shortest-path-tree atoms. Any such routing is feasible
       after scaling, so f >= 1 / max_e (load_e / c_e).
    """
    links = _Links.of(topology)
    n, cap, nl = topology.nodes, links.cap, links.size
    # iteration budget: calibrated for ~7 s at N = 1024, d = 4 on 2 cores; smaller graphs get more rounds
    scale = min(3.0, max(1.0, 1024 / n))
    dual_iters = round(16 * scale) if dual_iters is None else dual_iters
    phases = round(20 * scale) if phases is None else phases
    block_size = max(16, -(-n // 64)) if block_size is None else block_size      # at most 64 blocks
    rng = np.random.default_rng(0)
    blocks = [np.sort(b) for b in np.array_split(rng.permutation(n), max(1, -(-n // block_size)))]
    nb = len(blocks)
    block_of = np.empty(n, dtype=np.int64)
    for i, b in enumerate(blocks):
        block_of[b] = i
    atoms = [[_ecmp_loads(links, b, shortest_path(topology.adjacency, unweighted=True, indices=b))]
             for b in blocks]
    weights = [[1.0] for _ in blocks]

    # 1. dual ascent (also collects per-block tree atoms)
    p = cap / cap.sum()                    # p_e = c_e l_e, on the simplex
    upper = np.inf
    for _ in range(dual_iters):
        lengths = _positive_lengths(p / cap)
        total, per_block = 0.0, np.zeros((nb, nl))
        for part, dist, pred in _shortest_path_trees(links, lengths):
            total += float(dist.sum())
            per_block += _tree_loads(links, pred, group=block_of[part], groups=nb)
        upper = min(upper, float(cap @ lengths) / total)
        for i in range(nb):
            atoms[i].append(per_block[i])
            weights[i].append(0.0)
        congestion = per_block.sum(axis=0) / cap
        p = p * np.exp(eta * (congestion / congestion.max() - 1.0))
        p /= p.sum()
    if not np.isfinite(upper):
        upper = _lagrangian_bound(links, np.ones(nl))            # the distance-sum bound

    # 2. primal: pairwise Frank-Wolfe over the atoms, then with fresh trees
    xb = np.stack([a[0] for a in atoms])
    x = xb.sum(axis=0)
    lower = 1.0 / float((x / cap).max())
    beta = beta0
    for phase in range(sweeps + phases):
        fresh = phase >= sweeps
        if phase == sweeps:              # keep only the atoms in use before adding fresh trees (memory)
            for i in range(nb):
                keep = [k for k, a in enumerate(weights[i]) if a > 0]
                atoms[i] = [atoms[i][k] for k in keep]
                weights[i] = [weights[i][k] for k in keep]
        for i, b in enumerate(blocks):
            w, z = _softmax_lengths(x, cap, beta)
            scores = np.array([w @ a for a in atoms[i]])
            if fresh:
                dist, pred = dijkstra(links.matrix(_positive_lengths(w)), directed=True, indices=b,
                                      return_predecessors=True)
                atoms[i].append(_tree_loads(links, pred))
                weights[i].append(0.0)
                toward = len(atoms[i]) - 1
            else:
                toward = int(np.argmin(scores))
            active = [k for k, a in enumerate(weights[i]) if a > 0]
            away = max(active, key=lambda k: scores[k])
            if away == toward:
                continue
            step = atoms[i][toward] - atoms[i][away]
            gamma = _line_search(x, step, cap, beta, z, weights[i][away])
            if gamma > 0:
                weights[i][away] -= gamma
                weights[i][toward] += gamma
                xb[i] += gamma * step
                x = xb.sum(axis=0)
                lower = max(lower, 1.0 / float((x / cap).max()))
                if fresh and weights[i][away] <= 0.0:         # a drop step: forget the atom
                    del atoms[i][away], weights[i][away]
        beta = min(beta * growth, beta_max)
    return lower, upper


def _softmax_lengths(x: np.ndarray, cap: np.ndarray, beta: float):
    """Gradient of the smoothed max congestion (z / beta) log sum_e exp(beta (x_e / c_e) / z), z = max."""
    y = x / cap
    z = float(y.max())
    w = np.exp(beta * (y / z - 1.0)) / cap
    return w / float(cap @ w), z


def _line_search(x, step, cap, beta, z, gmax: float = 1.0) -> float:
    """argmin over gamma in [0, gmax] of the smoothed max congestion along x + gamma step (convex: golden)."""
    def phi(gamma):
        y = (x + gamma * step) / cap / z
        m = float(y.max())
        return m + np.log(np.exp(beta * (y - m)).sum()) / beta

    lo, hi = 0.0, float(gmax)
    inv = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - inv * (hi - lo), lo + inv * (hi - lo)
    fa, fb = phi(a), phi(b)
    for _ in range(24):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - inv * (hi - lo)
            fa = phi(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + inv * (hi - lo)
            fb = phi(b)
    gamma = (lo + hi) / 2.0
    return gamma if phi(gamma) < phi(0.0) else 0.0


# ----- entry point ----------------------------------------------------------------------------------------

def _colgen_fits(topology: Topology, group: np.ndarray | None) -> bool:
    """Whether the column generation's seeded master (its first pool: one tree per representative and
    seed step, N - 1 links each) stays within `COLGEN_MAX_NONZEROS`: genkautz(4, 1024), 512 representatives,
    would start at 13 M nonzeros (over 2.5 GB; it gets aggregated columns instead, `_colgen_options`);
    L^3(C(16, {3, 4})) (64) and a degraded 256-node torus at 1.6 M."""
    reps = topology.nodes // (group.shape[0] if group is not None else 1)
    return reps * (topology.nodes - 1) * (COLGEN_SEED_STEPS + 1) <= COLGEN_MAX_NONZEROS


def _colgen_options(topology: Topology, group: np.ndarray | None) -> dict:
    """The column generation's configuration: per-representative columns and 24 seeding steps when the
    seeded master fits (`_colgen_fits`); otherwise `COLGEN_LARGE_BLOCKS` aggregated blocks (a master of a few
    hundred columns, exact in the limit: the module `alltoall_colgen` docstring) seeded with up to
    `COLGEN_LARGE_SEED_STEPS` dual-ascent steps, as many as `COLGEN_SEED_BYTES` of trees allow. Measured
    (loaded machine): genkautz(4, 1024) 0.50 % in 44 s CPU, debruijn(4, 5) 0.49 % in 17 s, L^2(DistReg(4, 32))
    0.27 % in 15 s, each under 1 GB peak."""
    if _colgen_fits(topology, group):
        return {}
    reps = topology.nodes // (group.shape[0] if group is not None else 1)
    steps = min(COLGEN_LARGE_SEED_STEPS, max(1, COLGEN_SEED_BYTES // (4 * reps * topology.nodes)))
    return {"blocks": COLGEN_LARGE_BLOCKS, "seed_steps": steps}


def alltoall_throughput(topology: Topology, *, exact_limit: int = 256, method: str = "auto") -> AllToAllResult:
    """Maximum concurrent all-to-all flow f of LP (3) (see the module docstring).

    method "auto": a topology with a translation (Cayley graph) gets the exact translation-reduced LP
    ("lp-symmetric"); one with another free automorphism group (line graphs, de Bruijn, ...) gets the exact
    orbit LP ("lp-symmetric") when N <= exact_limit or the reduced LP is at most half the size of LP (3) at
    N = exact_limit; otherwise LP (3) itself ("lp") up to `exact_limit` nodes, and column generation
    ("colgen", stopped at a `BRACKET_RTOL`-wide bracket; aggregated columns when its master would not fit
    `COLGEN_MAX_NONZEROS`) above. "lp-symmetric", "lp", "colgen" (run to
    EXACT_RTOL or `COLGEN_SECONDS` of CPU) and "approx" force a method ("lp" at any size).
    """
    if method not in METHODS:
        raise ValueError(f"alltoall_throughput: method must be one of {', '.join(METHODS)}, got {method!r}")
    t0 = time.perf_counter()
    n = topology.nodes
    auto = method == "auto"
    gens = group = None
    if method in ("auto", "lp-symmetric"):
        gens = _cayley_generators(topology)
        if gens is None:
            group = free_automorphism_group(topology)
    if method == "lp-symmetric" and gens is None and group is None:
        raise ValueError(f"alltoall_throughput: no free automorphism group is known for {topology.expr}; "
                         "use 'lp' or 'approx'")
    if method == "auto":
        if gens is not None:
            method = "lp-symmetric"
        elif group is not None and (n <= exact_limit or (n // group.shape[0]) * _Links.of(topology).size
                                    <= exact_limit * exact_limit * topology.degree // 2):
            method = "lp-symmetric"
        else:
            method = "lp" if n <= exact_limit else "colgen"
    if method == "lp-symmetric":
        f, lower, upper = _symmetric_lp(topology, gens) if gens is not None else _orbit_lp(topology, group)
    elif method == "lp":
        f, lower, upper, lengths = _full_lp(topology)
        if (upper - lower) > EXACT_RTOL * upper:          # first-order solve: tighten with its own lengths
            sol = colgen_throughput(topology, rtol=EXACT_RTOL, time_limit_s=COLGEN_SECONDS, seed_lengths=lengths,
                                    max_iterations=2)
            lower, upper = max(lower, sol.lower), min(upper, sol.upper)
    elif method == "colgen":
        group = free_automorphism_group(topology)
        sol = colgen_throughput(topology, group=group, rtol=BRACKET_RTOL if auto else EXACT_RTOL,
                                time_limit_s=COLGEN_SECONDS, **_colgen_options(topology, group))
        f, lower, upper = sol.lower, sol.lower, sol.upper
    else:
        lower, upper = _approx(topology)
        f = lower
    if upper < lower:     # float noise on an exactly solved LP
        upper = lower = max(lower, upper)
    rel = (upper - lower) / upper if upper > 0 else 0.0
    exact = method != "approx" and rel <= EXACT_RTOL
    f = min(max(f, lower), upper)
    return AllToAllResult(throughput=float(f), lower=float(lower), upper=float(upper), exact=bool(exact),
                          method=method, relative_error=float(max(rel, 0.0)), seconds=time.perf_counter() - t0,
                          expr=topology.expr, nodes=n, degree=topology.degree)
