"""All-to-all schedules that run: the time-stepped all-to-all LP, rounded to chunks and decomposed into
hop-by-hop paths (Basu et al.'s alltoall note sections 1.3 and 3; reference topoopt-and-alltoall.md B.3, B.4,
B.9; paper section 7 for the all-to-all throughput f it is measured against).

Problem. Node s's buffer is N blocks of D/N bytes; block t goes to node t (`ir` describes the encoding). A
schedule in the paper's step model costs  T = steps * alpha + sum_t (max bytes on a link in step t) / (B/d)
(section 3.2), so a schedule is good when every step is balanced, not only the total. Routing the
throughput-optimal flow of LP (3) (or of the hop-bounded path LP, note 1.3) one hop per step does not
balance the steps; the note's time-stepped LP (section 3) does:

    minimize  sum_t U_t
    s.t.      load of every link in step t <= U_t                                       (bandwidth-time)
              what u forwards of commodity (s, d) by step t <= what it received before t   (causality)
              every source emits and every destination absorbs one block.

With T steps its optimum is the best bandwidth cost of any T-step schedule (in blocks), and the schedule
takes T_B = (d/N) sum_t U_t * D/B, i.e. tau = (d/N) sum_t U_t. Every feasible schedule also defines a flow
with f >= 1 / sum_t U_t, so sum_t U_t >= 1/f (the MCF bound of LP (3)); it is reached at T = D(G) on
tori, hypercubes and circulants and at D(G) + 1 on de Bruijn and Kautz graphs (see the tests). Replacing the
per-step rows by one row per link over all steps gives the hop-bounded LP of note 1.3 in link form
(`hop_bounded_throughput`): paths of at most T hops, throughput f(T) >= 1 / sum_t U_t.

Formulation used (exact, and much smaller than the note's per-commodity one). Data of one source s for
different destinations is interchangeable until it is delivered, so the commodities of s aggregate into one
single-commodity flow over time: a flow in the time-expanded network with nodes (v, t), t = 0..T, an arc
(v, t-1) -> (w, t) per link v -> w and step t, and holdover arcs (v, t) -> (v, t+1) (a node keeps data
for a later step); s supplies N - 1 blocks at (s, 0) and every other node absorbs one at (v, T). Flow
conservation at (v, t) is the note's causality (a node sends in step t + 1 only what it holds after step
t), and a path decomposition of the flow delivers exactly one block to each destination (paths ending at
(v, T) carry v's block), so the aggregated LP has the same optimum as the note's. Arcs into s are useless
and (v, t) exists only when dist(s, v) <= t.

Symmetry. Let H be a group of automorphisms acting freely on the nodes (`alltoall.free_automorphism_group`:
translations of Cayley graphs, the groups line graphs, de Bruijn, Kautz graphs, products and degree
expansions inherit; verified on the arcs). As for LP (3) (module `alltoall`, method 2b), averaging an optimal
solution over H keeps it optimal, so some optimum has y[h s, h a, t] = y[s, a, t]: only one source per node
orbit (the representatives R) keeps variables, and the load of link a in step t is the sum over R of the
flows on the links of a's orbit (the action is free on the links too), one capacity row per (link orbit,
step). A Cayley graph has one representative: N d T + N T variables, N = 256 in well under a second.

Too large an LP (more than `MAX_LP_VARIABLES` variables, e.g. a degraded 256-node torus: no symmetry, 2.6 M)
falls back on the tree routing of LP (3) by column generation (`alltoall_colgen`), pipelined over K rounds
(`alltoall_trees`): verified the same way, its tau measured (about 1.2x the MCF bound at K = 11-32).

Schedule. The LP is solved by HiGHS interior point with crossover (a vertex; HiGHS simplex stalls for
minutes on these degenerate LPs). Each representative's flow is decomposed into paths through the
time-expanded network (widest arc first); the paths ending at (v, T) share v's block in proportion to their
flow, rounded to Q chunks per block by largest remainder (note 1.3.2, with the rounding made to sum to
exactly Q). Q is the common denominator of the path fractions when that is at most `EXACT_CHUNKS_MAX`
(then the schedule costs exactly the LP optimum), else `chunks` (default `DEFAULT_CHUNKS`): each link-step
load then moves by less than one chunk per path through it. A chunk on path (v_0, ..., v_L) is copied hop by
hop in the path's steps (source buffer -> scratch of the relays -> v_L's output): no chunk depends on another,
so the rounding can only change the cost, never validity. The paths of a representative r are mapped to
every source h(r) by the group. Steps in which nothing moves are dropped. The schedule is model-checked
(`verify`) and its cost measured from the schedule itself.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.sparse import coo_matrix

from services.synthesis.evaluate.alltoall import (
    EXACT_RTOL,
    AllToAllResult,
    alltoall_throughput,
    free_automorphism_group,
)
from services.synthesis.evaluate.lp import solve_lp
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.schedule.verify import VerificationReport, verify
from services.synthesis.topology.graph import Topology

__all__ = ["AllToAllSchedule", "alltoall_schedule", "hop_bounded_throughput", "DEFAULT_CHUNKS",
           "EXACT_CHUNKS_MAX", "MAX_EXTRA_STEPS", "MCF_TOLERANCE", "MAX_LP_VARIABLES", "MAX_NODES", "TREE_TRANSFERS"]

DEFAULT_CHUNKS = 32            # chunks per block when the LP's path fractions have no small common denominator
EXACT_CHUNKS_MAX = 64          # largest common denominator used as the chunk count
MAX_EXTRA_STEPS = 2            # steps=None tries T = D(G) .. D(G) + this
MCF_TOLERANCE = 1e-3           # steps=None stops at the first T this close to the MCF bound
MAX_LP_VARIABLES = 400_000     # the interior point method takes ~30 s on 2 cores at 115k variables
MAX_NODES = 1024               # a schedule has at least N (N - 1) transfers
MAX_TRANSFERS = 24_000_000     # schedule arrays (about 40 bytes a transfer) and the model checker's work
TREE_TRANSFERS = 6_000_000    # transfer budget of a tree-routing schedule (its rounds K); N = 256: 1.5-2 GiB peak
TREE_MIN_ROUNDS = 4           # fewer rounds split the blocks too coarsely over the trees: refused
TREE_RTOL = 1e-3              # column generation gap for a tree-routing schedule (its tau is measured anyway)
TREE_SECONDS = 60.0           # column generation time limit for a tree-routing schedule
_EPSILON = 1e-7                # objective weight on total traffic: among optimal schedules, fewest bytes moved
_TOL = 1e-9


@dataclass(frozen=True)
class _Symmetry:
    """The free group as explicit permutations (row 0 = identity), its orbit representatives, the
    non-loop arcs and the orbit of each."""

    group: np.ndarray          # |H| x N
    reps: np.ndarray           # R representatives
    arc: np.ndarray            # topology arc index of each non-loop arc
    tail: np.ndarray
    head: np.ndarray
    lane: np.ndarray
    orbit: np.ndarray          # orbit id of each non-loop arc, 0..K-1

    @classmethod
    def of(cls, topology: Topology) -> "_Symmetry":
        n = topology.nodes
        group = free_automorphism_group(topology)
        if group is None:
            group = np.arange(n, dtype=np.int64)[None, :]
        arc = np.flatnonzero(topology.tails != topology.heads)
        tail = topology.tails[arc].astype(np.int64)
        head = topology.heads[arc].astype(np.int64)
        lane = topology.lanes[arc].astype(np.int64)
        position = np.full(topology.arcs, -1, dtype=np.int64)
        position[arc] = np.arange(arc.size)
        images = position[topology.arc_index(group[:, tail], group[:, head], lane[None, :])]
        orbit = np.unique(images.min(axis=0), return_inverse=True)[1].ravel()
        reps = np.flatnonzero(group.min(axis=0) == np.arange(n))
        return cls(group.astype(np.int64), reps, arc, tail, head, lane, orbit)

    @property
    def orbits(self) -> int:
        return int(self.orbit.max()) + 1


@dataclass
class _TimeLp:
    """The aggregated time-stepped LP of the representatives (module docstring) and its variables."""

    steps: int
    per_step: bool
    c: np.ndarray
    a: coo_matrix
    rhs: np.ndarray
    cap_rows: int
    x_rep: np.ndarray          # transfer variables: representative index, arc (into _Symmetry), step
    x_arc: np.ndarray
    x_step: np.ndarray
    h_rep: np.ndarray          # holdover variables (v, t) -> (v, t + 1)
    h_node: np.ndarray
    h_step: np.ndarray

    @property
    def variables(self) -> int:
        return int(self.c.size)

    def solve(self):
        lo = np.concatenate([self.rhs, np.full(self.cap_rows, -np.inf)])
        hi = np.concatenate([self.rhs, np.zeros(self.cap_rows)])
        _, x, _ = solve_lp(self.c, self.a, hi, row_lo=lo, solver="ipm")
        nx, nh = self.x_rep.size, self.h_rep.size
        return np.maximum(x[:nx], 0.0), np.maximum(x[nx:nx + nh], 0.0), x[nx + nh:]


def _variable_count(topology: Topology, sym: _Symmetry, dist: np.ndarray, steps: int) -> int:
    """Variables of the T-step LP, counted before building it."""
    reach = np.stack([(dist <= t).sum(axis=1) for t in range(steps + 1)])          # (T + 1) x R
    out_arcs = topology.degree                                                     # per reachable node
    return int(reach[:steps].sum() * (out_arcs + 1)) + steps


def _build_lp(topology: Topology, sym: _Symmetry, dist: np.ndarray, steps: int, per_step: bool) -> _TimeLp:
    n, T = topology.nodes, steps
    R, A, K = sym.reps.size, sym.arc.size, sym.orbits
    ii, aa, tt = (x.ravel() for x in np.meshgrid(np.arange(R), np.arange(A), np.arange(1, T + 1), indexing="ij"))
    keep = (dist[ii, sym.tail[aa]] <= tt - 1) & (sym.head[aa] != sym.reps[ii])
    ii, aa, tt = ii[keep], aa[keep], tt[keep]
    hr, hv, ht = (x.ravel() for x in np.meshgrid(np.arange(R), np.arange(n), np.arange(T), indexing="ij"))
    keep = dist[hr, hv] <= ht
    hr, hv, ht = hr[keep], hv[keep], ht[keep]
    nx, nh = ii.size, hr.size
    nu = T if per_step else 1

    def node_row(i, v, t):
        return (i * n + v) * (T + 1) + t

    rows = np.concatenate([node_row(ii, sym.tail[aa], tt - 1), node_row(ii, sym.head[aa], tt),
                           node_row(hr, hv, ht), node_row(hr, hv, ht + 1)])
    cols = np.concatenate([np.arange(nx), np.arange(nx), nx + np.arange(nh), nx + np.arange(nh)])
    vals = np.concatenate([-np.ones(nx), np.ones(nx), -np.ones(nh), np.ones(nh)])
    rhs = np.zeros(R * n * (T + 1))
    rhs[node_row(np.arange(R), sym.reps, 0)] = -(n - 1)             # inflow - outflow = -supply
    ri, rv = (x.ravel() for x in np.meshgrid(np.arange(R), np.arange(n), indexing="ij"))
    other = rv != sym.reps[ri]
    rhs[node_row(ri[other], rv[other], T)] = 1.0                    # every other node absorbs one block
    used, inverse = np.unique(np.concatenate([rows, np.flatnonzero(rhs)]), return_inverse=True)
    rows, rhs = inverse[:rows.size], rhs[used]
    nr = used.size
    cap = sym.orbit[aa] * nu + ((tt - 1) if per_step else 0)
    u_rows = np.arange(K * nu)
    a = coo_matrix((np.concatenate([vals, np.ones(nx), -np.ones(K * nu)]),
                    (np.concatenate([rows, nr + cap, nr + u_rows]),
                     np.concatenate([cols, np.arange(nx), nx + nh + u_rows % nu]))),
                   shape=(nr + K * nu, nx + nh + nu))
    c = np.zeros(nx + nh + nu)
    c[nx + nh:] = 1.0
    c[:nx] = _EPSILON
    return _TimeLp(T, per_step, c, a, rhs, K * nu, ii, aa, tt, hr, hv, ht)


def _check_size(topology: Topology) -> None:
    if topology.nodes > MAX_NODES:
        raise ValueError(f"{topology.expr}: all-to-all schedules are limited to {MAX_NODES} nodes "
                         f"(at least N (N - 1) transfers); got {topology.nodes}")


def _prepare(topology: Topology, steps: int, sym: _Symmetry | None = None) -> tuple[_Symmetry, np.ndarray]:
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    _check_size(topology)
    sym = sym or _Symmetry.of(topology)
    dist = topology.distances_from(sym.reps).astype(np.int64)
    ecc = int(dist.max())
    if steps < ecc:
        raise ValueError(f"{topology.expr}: an all-to-all needs at least {ecc} steps (the diameter), got {steps}")
    count = _variable_count(topology, sym, dist, steps)
    if count > MAX_LP_VARIABLES:
        raise ValueError(f"{topology.expr}: the {steps}-step all-to-all LP would have about {count} variables "
                         f"({sym.reps.size} source orbits under the automorphisms found; limit {MAX_LP_VARIABLES})")
    return sym, dist


def hop_bounded_throughput(topology: Topology, hops: int) -> float:
    """All-to-all throughput f(L) with every path at most L hops (note 1.3, reference B.3), in units of one
    link's capacity, exact (the path LP in link form on the L-layer time-expanded network; see the module
    docstring). f(L) is non-decreasing in L, equals LP (3)'s f for L large enough, and needs L >= D(G).

    >>> from services.synthesis.topology.catalog import build
    >>> round(hop_bounded_throughput(build("bipartite(4)"), 2), 9)      # reference B.6: n / (3n - 4), n = 8
    0.4
    >>> round(1 / hop_bounded_throughput(build("debruijn(2, 3)"), 3), 9)  # reference B.11: 1/9
    9.0
    """
    sym, dist = _prepare(topology, hops)
    lp = _build_lp(topology, sym, dist, hops, per_step=False)
    _, _, u = lp.solve()
    return 1.0 / float(u[0])


# ----- from the LP's flow to a schedule ---------------------------------------------------------------------

def _paths(lp: _TimeLp, x: np.ndarray, h: np.ndarray, sym: _Symmetry, rep: int, nodes: int):
    """Decompose representative `rep`'s flow over time into paths (widest arc first). Returns a list of
    (destination, amount, [(step, arc), ...] transfer hops)."""
    T, r = lp.steps, int(sym.reps[rep])
    out: dict[tuple[int, int], list[list]] = {}
    for j in np.flatnonzero((lp.x_rep == rep) & (x > _TOL)):
        a, t = int(lp.x_arc[j]), int(lp.x_step[j])
        out.setdefault((int(sym.tail[a]), t - 1), []).append([float(x[j]), int(sym.head[a]), a])
    for j in np.flatnonzero((lp.h_rep == rep) & (h > _TOL)):
        v, t = int(lp.h_node[j]), int(lp.h_step[j])
        out.setdefault((v, t), []).append([float(h[j]), v, -1])
    paths = []
    supply = sum(e[0] for e in out.get((r, 0), []))
    while supply > 1e-7:
        node, t, hops, edges = r, 0, [], []
        while t < T:
            options = out.get((node, t))
            best = max(options, key=lambda e: e[0]) if options else None
            if best is None or best[0] <= _TOL:
                break
            edges.append(best)
            if best[2] >= 0:
                hops.append((t + 1, best[2]))
            node, t = best[1], t + 1
        if t < T or not edges:
            break                              # numerical residue of the solver: nothing left to route
        amount = min(e[0] for e in edges)
        for e in edges:
            e[0] -= amount
        supply -= amount
        if node != r:
            paths.append((node, amount, hops))
    return paths


def _chunk_counts(paths_by_dest: dict[int, list], chunks: int | None) -> tuple[int, dict[int, list[int]]]:
    """Chunks per block Q and each path's chunk count (largest remainder, summing to Q per destination)."""
    fractions = {v: np.array([p[1] for p in ps]) / sum(p[1] for p in ps) for v, ps in paths_by_dest.items()}
    if chunks is None:
        dens, exact = [], True
        for f in fractions.values():
            for value in f.tolist():
                q = Fraction(value).limit_denominator(EXACT_CHUNKS_MAX)
                if abs(float(q) - value) > 1e-9:
                    exact = False
                    break
                dens.append(q.denominator)
            if not exact:
                break
        chunks = math.lcm(*dens) if exact and dens else DEFAULT_CHUNKS
        if chunks > EXACT_CHUNKS_MAX:
            chunks = DEFAULT_CHUNKS
    counts = {}
    for v, f in fractions.items():
        ideal = f * chunks
        base = np.floor(ideal + 1e-9).astype(np.int64)
        short = chunks - int(base.sum())
        if short > 0:
            base[np.argsort(-(ideal - base), kind="stable")[:short]] += 1
        counts[v] = base.tolist()
    return chunks, counts


@dataclass
class AllToAllSchedule:
    """A verified all-to-all schedule with its measured cost and the MCF bound it is compared with.

    T = steps * alpha + tau * D/B for D bytes per node (tau measured from the schedule, `cost.measured_tau`);
    the MCF bound is T_MCF = (D/N) / (f B/d) = mcf_tau * D/B with mcf_tau = d / (N f) (no alpha term).
    `lp_tau` is the LP optimum (d/N) sum_t U_t; the rounding to `chunks` chunks per block can only add to it.
    """

    topology: Topology
    schedule: Schedule
    report: VerificationReport
    lp_steps: int              # T of the LP (steps in which nothing moves are dropped from the schedule)
    lp_tau: float
    chunks: int                # chunks per block (the schedule's grid is N * chunks)
    mcf: AllToAllResult
    representatives: int       # sources with LP variables (N / |H|)
    lp_variables: int
    seconds: float

    @property
    def steps(self) -> int:
        return self.report.steps

    @property
    def tau(self) -> Fraction:
        return self.report.tau

    @property
    def mcf_tau(self) -> float:
        """tau of the MCF bound: d / (N f), f = the LP (3) optimum (`mcf.throughput`)."""
        return self.topology.degree / (self.topology.nodes * self.mcf.throughput)

    def time_s(self, link: LinkModel, bytes_per_node: float) -> float:
        """steps * alpha + tau * D/B."""
        return link.time(self.steps, self.tau, bytes_per_node)

    def mcf_time_s(self, link: LinkModel, bytes_per_node: float) -> float:
        """(D/N) / (f B/d): the bandwidth-only time of the MCF throughput (paper section 7)."""
        return self.mcf_tau * bytes_per_node / link.node_bandwidth_Bps

    def to_dict(self) -> dict:
        return {"expr": self.topology.expr, "collective": Collective.ALLTOALL.value, "nodes": self.topology.nodes,
                "degree": self.topology.degree, "diameter": self.topology.diameter, "steps": self.steps,
                "tau": float(self.tau), "tau_exact": str(self.tau), "lp_steps": self.lp_steps,
                "lp_tau": self.lp_tau, "mcf_throughput": self.mcf.throughput, "mcf_exact": self.mcf.exact,
                "mcf_tau": self.mcf_tau, "bandwidth_over_mcf": float(self.tau) / self.mcf_tau,
                "chunks_per_block": self.chunks, "representatives": self.representatives,
                "lp_variables": self.lp_variables, "verified": self.report.ok, "transfers": self.report.transfers,
                "seconds": round(self.seconds, 6)}


def _schedule_from_flow(topology: Topology, sym: _Symmetry, lp: _TimeLp, x, h, chunks: int | None):
    n = topology.nodes
    per_rep = [_paths(lp, x, h, sym, i, n) for i in range(sym.reps.size)]
    by_dest = {}
    for i, paths in enumerate(per_rep):
        for p in paths:
            by_dest.setdefault((i, p[0]), []).append(p)
    q, counts = _chunk_counts(by_dest, chunks)
    cols = {k: [] for k in ("rep", "step", "arc", "dest", "lo", "hi")}
    for (i, v), paths in by_dest.items():
        offset = 0
        for p, k in zip(paths, counts[(i, v)]):
            if k == 0:
                continue
            for step, arc in p[2]:
                for key, val in (("rep", i), ("step", step), ("arc", arc), ("dest", v), ("lo", offset),
                                 ("hi", offset + k)):
                    cols[key].append(val)
            offset += k
    c = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}
    order = sym.group.shape[0]
    total = int(c["rep"].size) * order
    if total > MAX_TRANSFERS:
        raise ValueError(f"{topology.expr}: the all-to-all schedule would have {total} transfers "
                         f"(limit {MAX_TRANSFERS}); use fewer chunks")
    g = sym.group                                                  # |H| x N; rows map representatives
    source = g[:, sym.reps[c["rep"]]]
    dest = g[:, c["dest"]]
    used = np.unique(c["step"])                                    # drop steps in which nothing moves
    step = np.searchsorted(used, c["step"]) + 1
    sched = Schedule.from_arrays(
        Collective.ALLTOALL, n, n * q, np.tile(step, order), [Op.COPY] * used.size, topology.expr,
        source=source.ravel(), sender=g[:, sym.tail[c["arc"]]].ravel(), receiver=g[:, sym.head[c["arc"]]].ravel(),
        lane=np.tile(sym.lane[c["arc"]], order), lo=(dest * q + c["lo"][None, :]).ravel(),
        hi=(dest * q + c["hi"][None, :]).ravel())
    return sched, q


def _solve_steps(topology: Topology, steps: int, sym: _Symmetry | None = None):
    sym, dist = _prepare(topology, steps, sym)
    lp = _build_lp(topology, sym, dist, steps, per_step=True)
    x, h, u = lp.solve()
    return sym, lp, x, h, float(np.maximum(u, 0.0).sum())


def alltoall_schedule(topology: Topology, *, steps: int | None = None, chunks: int | None = None,
                      mcf: AllToAllResult | None = None) -> AllToAllSchedule:
    """A model-checked all-to-all schedule of `topology` from the time-stepped LP (module docstring).

    steps: the LP's T (at least the diameter). None tries T = D(G), D(G) + 1, ... up to `MAX_EXTRA_STEPS`
    more and stops at the first whose bandwidth cost is within `MCF_TOLERANCE` of the MCF bound (certified by
    the MCF's upper bound); it keeps the cheapest, an extra step only when it saves more than the tolerance. chunks: chunks per block (default: exact when the LP's path fractions
    have a common denominator <= `EXACT_CHUNKS_MAX`, else `DEFAULT_CHUNKS`). When the LP would have more
    than `MAX_LP_VARIABLES` variables (degraded graphs without symmetry, e.g. remove(torus(16, 16), 0>1):
    2.6 M), the schedule pipelines the tree routing of LP (3) found by column generation instead
    (`_tree_based`; `lp_tau` is then the routing's d / (N f), `lp_variables` the trees in the pool, `chunks`
    the rounds K). Raises ValueError for topologies beyond `MAX_NODES`, both routes too large, or fewer
    steps than the diameter.

    >>> from services.synthesis.topology.catalog import build
    >>> s = alltoall_schedule(build("torus(4, 4)"))
    >>> s.report.ok, s.steps, s.tau, s.mcf_tau          # reaches the MCF bound d / (N f) = 4 / (16 / 8)
    (True, 4, Fraction(2, 1), 2.0)
    """
    if chunks is not None and (not isinstance(chunks, (int, np.integer)) or isinstance(chunks, bool)
                               or not 1 <= chunks <= 4096):
        raise ValueError(f"chunks must be an integer in 1..4096, got {chunks!r}")
    t0 = time.perf_counter()
    _check_size(topology)
    n, d = topology.nodes, topology.degree
    sym = _Symmetry.of(topology)
    dist = topology.distances_from(sym.reps).astype(np.int64)
    first = int(dist.max())
    count = _variable_count(topology, sym, dist, max(first, steps or 0))
    if count > MAX_LP_VARIABLES:
        per_round = int(dist.sum()) * sym.group.shape[0]          # hop-shortest paths: the fewest transfers
        if per_round * TREE_MIN_ROUNDS > TREE_TRANSFERS:
            raise ValueError(f"{topology.expr}: the all-to-all LP would have about {count} variables (limit "
                             f"{MAX_LP_VARIABLES}) and a tree-routing schedule at least {per_round} transfers a "
                             f"round (budget {TREE_TRANSFERS} for {TREE_MIN_ROUNDS} rounds)")
        return _tree_based(topology, sym, steps, chunks, mcf, t0)
    _prepare(topology, first if steps is None else steps, sym)          # sizes the LP before any solve
    mcf = mcf if mcf is not None else alltoall_throughput(topology)
    if steps is None:
        best = None
        for t in range(first, first + MAX_EXTRA_STEPS + 1):
            try:
                solved = _solve_steps(topology, t, sym)
            except ValueError:
                if best is None:
                    raise
                break
            if best is None or solved[-1] < best[-1] * (1 - MCF_TOLERANCE):
                best = solved                  # one more step must buy more than the tolerance
            if solved[-1] * mcf.upper <= 1 + MCF_TOLERANCE:
                break
        sym, lp, x, h, total = best
    else:
        sym, lp, x, h, total = _solve_steps(topology, steps, sym)
    sched, q = _schedule_from_flow(topology, sym, lp, x, h, chunks)
    report = verify(sched, topology).raise_if_invalid()
    return AllToAllSchedule(topology, sched, report, lp.steps, d * total / n, q, mcf, int(sym.reps.size),
                            lp.variables, time.perf_counter() - t0)


def _tree_based(topology: Topology, sym: _Symmetry, steps: int | None, chunks: int | None,
                mcf: AllToAllResult | None, t0: float) -> AllToAllSchedule:
    """The schedule when the time-stepped LP is beyond `MAX_LP_VARIABLES`: LP (3) by column generation
    (`alltoall_colgen`), its tree routing pipelined over K rounds (`alltoall_trees`; module docstring there).
    K = chunks, or steps - (deepest tree) + 1, else the most rounds (up to `DEFAULT_CHUNKS`) within
    `TREE_TRANSFERS`."""
    from services.synthesis.evaluate.alltoall_colgen import colgen_throughput
    from services.synthesis.evaluate.alltoall_trees import rounds_for, tree_depths, tree_schedule

    n, d = topology.nodes, topology.degree
    group = sym.group if sym.group.shape[0] > 1 else None
    sol = colgen_throughput(topology, group=group, rtol=TREE_RTOL, time_limit_s=TREE_SECONDS)
    depth = int(tree_depths(sol.pred).max())
    if chunks is not None:
        rounds = int(chunks)
    elif steps is not None:
        if steps < depth:
            raise ValueError(f"{topology.expr}: the tree routing needs at least {depth} steps, got {steps}")
        rounds = steps - depth + 1
    else:
        rounds = rounds_for(sol, TREE_TRANSFERS, DEFAULT_CHUNKS)
    most = rounds_for(sol, MAX_TRANSFERS, 1 << 30)          # sized before anything is built
    if rounds > most:
        raise ValueError(f"{topology.expr}: the all-to-all schedule would have more than {MAX_TRANSFERS} "
                         f"transfers at {rounds} rounds (at most {most}); use fewer chunks or steps")
    sched = tree_schedule(topology, sol, rounds)
    report = verify(sched, topology).raise_if_invalid()
    if mcf is None:
        rel = sol.relative_gap
        mcf = AllToAllResult(sol.lower, sol.lower, sol.upper, rel <= EXACT_RTOL, "colgen", rel, sol.seconds,
                             topology.expr, n, d)
    return AllToAllSchedule(topology, sched, report, rounds + depth - 1, d / (n * sol.lower), rounds, mcf,
                            int(np.unique(sol.root).size), sol.columns, time.perf_counter() - t0)
