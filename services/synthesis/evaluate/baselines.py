"""Baselines of the paper's evaluation (section 8.2, App. F.1, Theorem 13, Table 4, Fig. 7) and
TopoOpt's TotientPerms rings (TopoOpt Algorithms 2-3).

Every baseline is a topology of degree d plus a schedule, with T_L = steps * alpha and T_B = tau * M/B
(B = a node's total egress bandwidth, a link carries B/d). Reduce-scatter and allgather cost the same;
allreduce = reduce-scatter then allgather = 2 * steps, 2 * tau (section 3, App. B). Whenever a schedule exists it
is built as a real `Schedule` (tests model-check it with `verify` and compare the measured (steps, tau)
with the formulas below).

| baseline | topology | allgather steps | allgather tau | BW-opt. |
|---|---|---|---|---|
| `ring` | UniRing(d, N) = `ring(N, d)` | N - 1 | (N-1)/N | yes |
| `shifted_ring` | rings +-1 and +-s = `circulant(N, 1, s)`, d = 4 | N - 1 | (N-1)/N | yes |
| `shifted_bfb_ring` | the same, BFB ring schedule on each ring | floor(N/2) | (N-1)/N | yes |
| `double_binary_tree` | NCCL's two binary trees, d = 4 | 2H + k - 1 per pass | d(2H+k-1)/(2k) | no |
| `torus_classic` | torus(n_1, ..., n_m) | sum (n_i - 1) | `torus_classic_tau` | iff n_i equal |
| `torus_bfb` | torus(n_1, ..., n_m) | sum floor(n_i/2) | (N-1)/N | yes (Thm 13) |
| `totient_perms` | d rings x -> x + p_i (`dcirculant`) or d/2 rings +-p_i | N - 1 | (N-1)/N | yes |

Classic ring schedule (App. F.1): on a directed cycle x -> x + g, chunk C of shard v travels
v, v+g, ..., v+(N-1)g, one hop per step (allgather); for reduce-scatter the partial sum of C travels
v+g -> v+2g -> ... -> v+Ng = v, each receiver adding its own contribution. A superposition of c cycles
(parallel arcs, both directions of a bidirectional ring, or several permutation rings) gives every cycle
1/c of every shard: each link then carries 1/c shard per step over B/d, so tau = (d/N)(N-1)/c = (N-1)/N
when c = d (every port used).

ShiftedRing (TopoOpt's topology for data parallelism): ring +-1 and ring +-s, each allreducing half of
the data, half clockwise and half counter-clockwise -> four directed cycles with a quarter shard each:
allreduce T_L = 2(N-1) alpha, T_B = 2(N-1)/N M/B (BW-optimal). The paper does not give the shift.
TopoOpt's TotientPerms (Algorithm 2) offers every p with gcd(p, N) = 1 (each one a Hamiltonian ring,
Theorem 2 of TopoOpt). Default here: s = the TotientPerms candidate closest to N/2 (the smaller one on a
tie), i.e. s = N/2 - 1 for N = 0 mod 4, which is the ring "shifted by half". It is the choice that
reproduces Table 4's ShiftedRing all-to-all time (see below); the allreduce does not depend on s.
`shift="select"` uses TopoOpt's SelectPermutations instead (geometric spacing, s ~ sqrt(N): s = 31 at
N = 1024), a much better all-to-all topology (1366 us instead of 10738 us at N = 1024).

ShiftedBFBRing: BFB ring schedule (App. F.1) per bidirectional ring: every node sends its
whole part both ways, half way round; for even N the antipode gets one half from each side in the
last step: floor(N/2) steps per allgather, BW-optimal.

Torus (Theorem 13 and the arXiv version's section 5.3, [57]): the traditional schedule splits every
shard into m parts (m = number of dimensions); part j does a traditional bidirectional ring allgather
(half clockwise, half counter-clockwise; a size-2 dimension is one duplex link and sends whole blocks)
along dimensions j, j+1, ..., j-1 (cyclic order), gathering blocks dimension by dimension. Steps:
sum (n_i - 1). With equal dimensions the parts use disjoint links in every step and tau = (N-1)/N;
with unequal ones two parts can meet on the same dimension and the loads add (`torus_classic_tau`,
computed step by step). BFB: sum floor(n_i/2) steps, BW-optimal for every torus.

Double binary tree (NCCL 2.4, Sanders et al.): tree 0 is NCCL's `ncclGetBtree` on ranks 0..N-1
(root 0 with the single child 2^ceil(log2 N)/2), tree 1 is tree 0 shifted by one rank (`ncclGetDtree`;
NCCL 2.4 mirrors instead for odd N, which would need 6 ports, so odd N are shifted too, as later NCCL
versions do). Shifting turns leaves into interior nodes (for even N every non-root node has 3 links in one
tree and 1 in the other), so the union has at most 4 links per node (checked for every N <= 2048; an edge
of both trees is two parallel links). Nodes with fewer links (the roots) get self-loops for their unused
ports (section 3: a self-loop takes a port and carries nothing), which makes it a degree-4 topology.
Each tree reduces and then broadcasts half of the vector, pipelined in k chunks: a chunk moves one tree
level per comm step, reduce up H levels (H = tree depth, 10 for N = 1024) and broadcast down H levels.
With reduce and broadcast overlapped (opposite link directions) one pass takes 2H + k - 1 steps, each
carrying (M/2)/k over a link of B/d:
    T_pass(k) = (2H + k - 1) (alpha + (M/2) / (k B/d)),   steps = 2H + k - 1,  tau = d(2H + k - 1)/(2k).
Table 4 (N = 1024, d = 4, alpha = 10 us, M/B = 2^20 B / 100 Gbps): the paper reports DBT allreduce
1434 us. This is reproduced exactly by the paper's table convention "allreduce = 2 (T_L + T_B)" applied to
one pass, with the pipelining degree swept over powers of two:
    2 * min_{k = 2^j} T_pass(k) = 2 * T_pass(16) = 2 * 35 * (10 + 167.77/16) us = 1434.003 us.
(All integer k would give k = 18 and 1429.7 us; no other natural model we tried gives 1434.) Physically one
overlapped pass already is a complete allreduce (717.0 us); `dbt_cost(..., model="pipelined")` reports
that, and `model="phased"` the schedule this module builds (the schedule IR has one op per step, so the
reduce phase (REDUCE steps) and the broadcast phase (COPY steps) cannot overlap: 2(H + k - 1) steps,
tau = d(H + k - 1)/k). `baseline_costs` uses the Table 4 convention: allgather / reduce-scatter = one pass,
allreduce = two passes.

All-to-all (App. A.5): T_a2a = (D/N) / (f B/d), f the MCF throughput (LP (3)), D bytes per node.
- ShiftedRing, Table 4: 10738 us. For a Cayley graph x -> x + g the MCF LP can be symmetrised over
  translations (averaging any feasible solution over the N translates keeps it feasible and keeps f), so
  one source with the capacity of every arc class g shared by all N sources is exact:
  `cayley_alltoall_throughput`. For N = 1024 and s = 511 (= N/2 - 1) it gives 1/f = 32768.5 exactly,
  T = 10737.58 us -> 10738 us (reproduced). Other shifts: s = 3 or 341 give 1/f = 32768 -> 10737.42 us
  (10737), s = 31/33 give 1365.8 us; s = N/2 +- 1 are the only shifts matching the table.
- Double binary tree, Table 4: 21475 us. For N a power of two, the MCF of the NCCL DBT topology is
  f = 16/N^2: the bisection {1, ..., N/2} is crossed by exactly 4 tree edges, so f <= 4/(N/2)^2 = 16/N^2,
  and the full LP attains it (checked for N = 16, 32, 64, 128, 256; the cut up to N = 1024). For
  N = 1024: T = 1024 B / (2^-16 * 25 Gbps) = 21474.84 us -> 21475 us (reproduced). It coincides with the
  MCF of a ring with two parallel links to each neighbour and is about half of
  the ShiftedRing's f.
- Anything else: `alltoall.alltoall_throughput(topology)` (another module, imported lazily).

ShiftedRing allreduce, Table 4: 20640 us. NOT reproduced: the model of the text (2(N-1) alpha +
2 (N-1)/N M/B) gives 20627.6 us, 12.4 us (0.06%) lower. We found no consistent model giving 20640:
matching it needs M = 10^6 bytes (2N alpha + 2 M/B = 20640.0 us) or M/B scaled by 2^30/10^9
(20640.1 us), both at odds with the units that reproduce every other Table 4 entry (M = 2^20 bytes).
We keep the paper's stated model; tests compare with a 0.1% tolerance.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np

from services.synthesis.schedule.cost import LinkModel
from services.synthesis.topology.families import circulant, dcirculant, ring as uniring, torus
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective, Op, Schedule, allreduce
from services.synthesis.topology.graph import Topology, TopologyError, Translation

DEFAULT_DEGREE = 4
MAX_CHUNK_EXPONENT = 20     # DBT pipelining degrees swept: 1, 2, 4, ..., 2^20


# ---------------------------------------------------------------------------------------------------
# TopoOpt: TotientPerms (Algorithm 2) and SelectPermutations (Algorithm 3)
# ---------------------------------------------------------------------------------------------------
def totient_candidates(nodes: int) -> list[int]:
    """TotientPerms (TopoOpt Algorithm 2): every p in 1..N-1 with gcd(p, N) = 1, ascending. Each gives the
    Hamiltonian ring x -> x + p (TopoOpt Theorem 2); +p and +(N-p) are the same ring reversed."""
    _check_nodes(nodes, 2)
    return [p for p in range(1, nodes) if math.gcd(p, nodes) == 1]


def select_permutations(nodes: int, count: int, candidates: list[int] | None = None) -> list[int]:
    """SelectPermutations (TopoOpt Algorithm 3, as we read it): start from the smallest candidate
    (p = 1) and repeatedly take the unused candidate closest to (previous choice) * r, r = max(2, N^(1/count)),
    the smaller one on ties. When every candidate is used, candidates are reused (parallel rings)."""
    _check_nodes(nodes, 2)
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"select_permutations: count must be a positive integer, got {count!r}")
    pool = sorted(candidates if candidates is not None else totient_candidates(nodes))
    if not pool:
        raise ValueError("select_permutations: no candidates")
    ratio = max(2.0, nodes ** (1.0 / count))
    chosen = [pool[0]]
    q = float(pool[0])
    while len(chosen) < count:
        unused = [x for x in pool if x not in chosen] or pool
        target = q * ratio
        pick = min(unused, key=lambda x: (abs(x - target), x))
        chosen.append(pick)
        q = float(pick)
    return chosen


def table4_shift(nodes: int) -> int:
    """The ShiftedRing shift used by default: the TotientPerms candidate closest to N/2 (smaller on ties)."""
    _check_nodes(nodes, 3)
    return min(totient_candidates(nodes), key=lambda p: (abs(2 * p - nodes), p))


# ---------------------------------------------------------------------------------------------------
# Baseline container
# ---------------------------------------------------------------------------------------------------
@dataclass
class Baseline:
    """A baseline topology with its schedule. `steps`/`tau` are the allgather (= reduce-scatter) figures."""

    name: str
    topology: Topology
    steps: int
    tau: Fraction
    bw_optimal: bool
    builder: Callable[[Collective], Schedule] = field(repr=False)
    details: dict = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        return self.topology.nodes

    @property
    def degree(self) -> int:
        return self.topology.degree

    def cost(self, collective: Collective = Collective.ALLGATHER) -> tuple[int, Fraction]:
        """(steps, tau) of `collective`; allreduce = reduce-scatter + allgather."""
        _allgather_family(collective)
        if collective is Collective.ALLREDUCE:
            return 2 * self.steps, 2 * self.tau
        return self.steps, self.tau

    def time(self, link_model: LinkModel, size_bytes: float,
             collective: Collective = Collective.ALLGATHER) -> float:
        steps, tau = self.cost(collective)
        return link_model.time(steps, tau, size_bytes)

    def schedule(self, collective: Collective = Collective.ALLGATHER) -> Schedule:
        return self.builder(_allgather_family(Collective.parse(collective) if isinstance(collective, str)
                                              else collective))


def _allgather_family(collective: Collective) -> Collective:
    if collective not in ALLGATHER_FAMILY:
        raise ValueError("baseline schedules are allgather, reduce-scatter and allreduce; a baseline's all-to-all "
                         "is priced by `baseline_alltoall_time` (MCF throughput)")
    return collective


def _check_nodes(nodes, minimum: int) -> int:
    if not isinstance(nodes, (int, np.integer)) or isinstance(nodes, bool) or nodes < minimum:
        raise ValueError(f"need an integer number of nodes >= {minimum}, got {nodes!r}")
    return int(nodes)


# ---------------------------------------------------------------------------------------------------
# ring schedules on translation cycles x -> x + g of Z_N
# ---------------------------------------------------------------------------------------------------
def _lanes_for(gens: list[int], nodes: int) -> list[int]:
    """Lane of each generator's arcs: parallel copies of the same generator take lanes 0, 1, ..."""
    seen: dict[int, int] = {}
    lanes = []
    for g in gens:
        g %= nodes
        lanes.append(seen.get(g, 0))
        seen[g] = seen.get(g, 0) + 1
    return lanes


def _classic_cycles(nodes: int, gens: list[int], collective: Collective, expr: str) -> Schedule:
    """Classic ring schedule on each cycle x -> x + g, cycle i carrying [i/c, (i+1)/c) of every shard."""
    if collective is Collective.ALLREDUCE:
        return allreduce(_classic_cycles(nodes, gens, Collective.REDUCESCATTER, expr),
                         _classic_cycles(nodes, gens, Collective.ALLGATHER, expr))
    n, c = nodes, len(gens)
    lanes = np.array(_lanes_for(gens, n), dtype=np.int64)[None, :, None]
    g = np.array([x % n for x in gens], dtype=np.int64)[None, :, None]
    i = np.arange(c, dtype=np.int64)[None, :, None]
    v = np.arange(n, dtype=np.int64)[None, None, :]
    t = np.arange(1, n, dtype=np.int64)[:, None, None]
    first = 0 if collective is Collective.ALLGATHER else 1   # RS: sender v + t g, receiver v + (t+1) g
    sender = (v + (t - 1 + first) * g) % n                   # (step, cycle, v): already in step order
    shape = sender.shape
    cols = {"source": v, "sender": sender, "receiver": (sender + g) % n, "lane": lanes, "lo": i, "hi": i + 1}
    cat = {k: np.broadcast_to(x, shape).astype(np.int32).ravel() for k, x in cols.items()}
    op = Op.COPY if collective is Collective.ALLGATHER else Op.REDUCE
    return Schedule.from_arrays(collective, n, c, np.broadcast_to(t, shape).ravel(), [op] * (n - 1), expr, **cat)


def _bfb_rings(nodes: int, gens: list[int], collective: Collective, expr: str) -> Schedule:
    """BFB ring schedule (App. F.1) on bidirectional rings +-g for g in `gens`, ring i carrying
    [i/r, (i+1)/r) of every shard. Reduce-scatter = the reversed allgather (bidirectional topology)."""
    n, r = nodes, len(gens)
    if collective is not Collective.ALLGATHER:
        ag = _bfb_rings(n, gens, Collective.ALLGATHER, expr)
        rs = ag.reverse(topology=expr)
        return rs if collective is Collective.REDUCESCATTER else allreduce(rs, ag)
    arc_gens = [x for g in gens for x in (g % n, (-g) % n)]
    lanes = _lanes_for(arc_gens, n)
    v = np.arange(n, dtype=np.int64)
    full = (n - 1) // 2                 # steps that carry the whole part
    cols = {k: [] for k in ("step", "source", "sender", "receiver", "lane", "lo", "hi")}

    def add(step, sender, g, lane, lo, hi):
        cols["step"].append(np.full(n, step))
        cols["source"].append(v)
        cols["sender"].append(sender % n)
        cols["receiver"].append((sender + g) % n)
        cols["lane"].append(np.full(n, lane))
        cols["lo"].append(np.full(n, lo))
        cols["hi"].append(np.full(n, hi))

    for i in range(r):
        for side in (0, 1):
            g, lane = arc_gens[2 * i + side], lanes[2 * i + side]
            for t in range(1, full + 1):
                add(t, v + (t - 1) * g, g, lane, 2 * i, 2 * i + 2)
            if n % 2 == 0:              # the antipode gets one half from each side
                add(n // 2, v + (n // 2 - 1) * g, g, lane, 2 * i + side, 2 * i + side + 1)
    cat = {k: np.concatenate(x) for k, x in cols.items()}
    return Schedule.from_arrays(Collective.ALLGATHER, n, 2 * r, cat.pop("step"), [Op.COPY] * (n // 2), expr,
                                **cat)


# ---------------------------------------------------------------------------------------------------
# ring baselines
# ---------------------------------------------------------------------------------------------------
def ring_cost(nodes: int) -> tuple[int, Fraction]:
    """Classic ring allgather on UniRing(d, N) (or any superposition of d rings): N - 1 steps, tau (N-1)/N."""
    return nodes - 1, Fraction(nodes - 1, nodes)


def bfb_ring_cost(nodes: int) -> tuple[int, Fraction]:
    """BFB ring allgather on bidirectional rings: floor(N/2) steps, tau (N-1)/N (App. F.1)."""
    return nodes // 2, Fraction(nodes - 1, nodes)


def ring(nodes: int, degree: int = DEFAULT_DEGREE) -> Baseline:
    """UniRing(d, N): directed ring with d parallel arcs per hop; each shard split over the d arcs."""
    n = _check_nodes(nodes, 2)
    topo = uniring(n, degree)
    gens = [1] * degree
    steps, tau = ring_cost(n)
    return Baseline("ring", topo, steps, tau, True,
                    lambda c: _classic_cycles(n, gens, c, topo.expr), {"generators": gens})


def _resolve_shift(n: int, shift) -> int:
    if shift is None:
        return table4_shift(n)
    if shift == "select":
        return select_permutations(n, 2, [p for p in totient_candidates(n) if 2 * p <= n])[1]
    if not isinstance(shift, int) or isinstance(shift, bool) or not 0 < shift < n or math.gcd(shift, n) != 1:
        raise ValueError(f"shifted ring: the shift must be an integer in 1..N-1 coprime with N = {n} "
                         f"(a TotientPerms candidate), got {shift!r}")
    return shift


def _shifted_topology(n: int, s: int) -> Topology:
    return circulant(n, 1, s)


def shifted_ring(nodes: int, shift: int | str | None = None) -> Baseline:
    """TopoOpt's ShiftedRing (d = 4): bidirectional rings +-1 and +-s, each allreducing half of the data
    with the traditional ring schedule (half clockwise, half counter-clockwise). See the module docstring
    for the shift (default: `table4_shift`, N/2 - 1 for N = 0 mod 4)."""
    n = _check_nodes(nodes, 3)
    s = _resolve_shift(n, shift)
    topo = _shifted_topology(n, s)
    gens = [1, n - 1, s, n - s]
    steps, tau = ring_cost(n)
    return Baseline("shifted_ring", topo, steps, tau, True,
                    lambda c: _classic_cycles(n, gens, c, topo.expr), {"shift": s, "generators": gens})


def shifted_bfb_ring(nodes: int, shift: int | str | None = None) -> Baseline:
    """ShiftedBFBRing: the ShiftedRing topology with the BFB ring schedule on each bidirectional ring."""
    n = _check_nodes(nodes, 3)
    s = _resolve_shift(n, shift)
    topo = _shifted_topology(n, s)
    steps, tau = bfb_ring_cost(n)
    return Baseline("shifted_bfb_ring", topo, steps, tau, True,
                    lambda c: _bfb_rings(n, [1, s], c, topo.expr), {"shift": s, "generators": [1, n - 1, s, n - s]})


@dataclass
class TotientRings:
    """TopoOpt's TotientPerms candidates, the SelectPermutations choice and the resulting ring baseline."""

    nodes: int
    degree: int
    bidirectional: bool
    candidates: list[int]
    generators: list[int]          # one per ring (bidirectional: +-p is one ring using two ports)
    baseline: Baseline


def totient_perms(nodes: int, degree: int = DEFAULT_DEGREE, bidirectional: bool = False) -> TotientRings:
    """TopoOpt's AllReduce sub-topology: SelectPermutations picks `degree` TotientPerms rings x -> x + p
    (directed, topology `dcirculant(N, p_1..p_d)`), or with `bidirectional` degree/2 undirected rings +-p
    from the candidates p <= N/2 (topology `circulant(N, p_1..p_{d/2})`). Allreduce: every ring allreduces
    its share (1/#directed cycles of each shard) with the classic ring schedule: 2(N-1) steps, BW-optimal."""
    n = _check_nodes(nodes, 3 if bidirectional else 2)
    if not isinstance(degree, int) or degree < 1 or (bidirectional and degree % 2):
        raise ValueError(f"totient_perms: degree must be a positive integer (even when bidirectional), got {degree!r}")
    cands = totient_candidates(n)
    if bidirectional:
        half = [p for p in cands if 2 * p <= n]
        gens = select_permutations(n, degree // 2, half)
        topo = circulant(n, *gens)
        cycles = [x for p in gens for x in (p, n - p)]
    else:
        gens = select_permutations(n, degree, cands)
        topo = dcirculant(n, *gens)
        cycles = list(gens)
    steps, tau = ring_cost(n)
    base = Baseline("totient_perms", topo, steps, tau, True,
                    lambda c: _classic_cycles(n, cycles, c, topo.expr),
                    {"generators": gens, "bidirectional": bidirectional})
    return TotientRings(n, degree, bidirectional, cands, gens, base)


# ---------------------------------------------------------------------------------------------------
# torus
# ---------------------------------------------------------------------------------------------------
def _check_dims(dims) -> tuple[int, ...]:
    dims = tuple(int(x) for x in dims)
    if not dims or any(x < 2 for x in dims):
        raise ValueError(f"torus: dimensions must be integers >= 2, got {dims}")
    return dims


def _torus_degree(dims: tuple[int, ...]) -> int:
    return sum(2 if x >= 3 else 1 for x in dims)


def torus_classic_tau(*dims: int) -> Fraction:
    """tau of the traditional torus allgather (module docstring), from the per-step link loads."""
    dims = _check_dims(dims)
    m, n_total = len(dims), math.prod(dims)
    total = sum(x - 1 for x in dims)
    loads = [[Fraction(0)] * m for _ in range(total)]
    for j in range(m):
        order = [(j + p) % m for p in range(m)]
        t0, block = 0, 1
        for axis in order:
            w = Fraction(block, m) / (2 if dims[axis] >= 3 else 1)
            for t in range(t0, t0 + dims[axis] - 1):
                loads[t][axis] += w
            t0 += dims[axis] - 1
            block *= dims[axis]
    return Fraction(_torus_degree(dims), n_total) * sum(max(row) for row in loads)


def torus_classic_cost(*dims: int) -> tuple[int, Fraction]:
    dims = _check_dims(dims)
    return sum(x - 1 for x in dims), torus_classic_tau(*dims)


def torus_bfb_cost(*dims: int) -> tuple[int, Fraction]:
    """BFB on a torus: sum floor(n_i/2) steps, BW-optimal (Theorem 13)."""
    dims = _check_dims(dims)
    n = math.prod(dims)
    return sum(x // 2 for x in dims), Fraction(n - 1, n)


def _torus_classic_schedule(dims: tuple[int, ...], collective: Collective, expr: str) -> Schedule:
    if collective is not Collective.ALLGATHER:
        ag = _torus_classic_schedule(dims, Collective.ALLGATHER, expr)
        rs = ag.reverse(topology=expr)
        return rs if collective is Collective.REDUCESCATTER else allreduce(rs, ag)
    tr = Translation(dims)
    m, n = len(dims), tr.size
    v = np.arange(n, dtype=np.int64)
    vc = tr.coords(v)
    cols = {k: [] for k in ("step", "source", "sender", "receiver", "lane", "lo", "hi")}
    for j in range(m):
        order = [(j + p) % m for p in range(m)]
        t0 = 0
        for p, axis in enumerate(order):
            free = order[:p]
            # holders of shard v at the start of the phase: v with the coordinates in `free` arbitrary
            offsets = np.stack(np.meshgrid(*[np.arange(dims[a]) for a in free], indexing="ij"), -1).reshape(
                -1, len(free)) if free else np.zeros((1, 0), dtype=np.int64)
            hc = [np.broadcast_to(c[:, None], (n, offsets.shape[0])).copy() for c in vc]
            for q, a in enumerate(free):
                hc[a] = (hc[a] + offsets[None, :, q]) % dims[a]
            directions = (1, -1) if dims[axis] >= 3 else (1,)
            for side, dirn in enumerate(directions):
                lo, hi = (2 * j + side, 2 * j + side + 1) if dims[axis] >= 3 else (2 * j, 2 * j + 2)
                for t in range(1, dims[axis]):
                    sc = list(hc)
                    sc[axis] = (hc[axis] + (t - 1) * dirn) % dims[axis]
                    rc = list(hc)
                    rc[axis] = (hc[axis] + t * dirn) % dims[axis]
                    sender, receiver = tr.index(sc).ravel(), tr.index(rc).ravel()
                    k = sender.size
                    cols["step"].append(np.full(k, t0 + t))
                    cols["source"].append(np.repeat(v, offsets.shape[0]))
                    cols["sender"].append(sender)
                    cols["receiver"].append(receiver)
                    cols["lane"].append(np.zeros(k, dtype=np.int64))
                    cols["lo"].append(np.full(k, lo))
                    cols["hi"].append(np.full(k, hi))
            t0 += dims[axis] - 1
    cat = {k: np.concatenate(x) for k, x in cols.items()}
    steps = sum(x - 1 for x in dims)
    return Schedule.from_arrays(Collective.ALLGATHER, n, 2 * m, cat.pop("step"), [Op.COPY] * steps, expr, **cat)


def torus_classic(*dims: int) -> Baseline:
    """Torus n_1 x ... x n_m with the traditional dimension-wise ring schedule: sum (n_i - 1) steps."""
    dims = _check_dims(dims)
    topo = torus(*dims)
    steps, tau = torus_classic_cost(*dims)
    return Baseline("torus_classic", topo, steps, tau, tau == Fraction(topo.nodes - 1, topo.nodes),
                    lambda c: _torus_classic_schedule(dims, c, topo.expr), {"dims": dims})


def torus_bfb(*dims: int) -> Baseline:
    """Torus with the BFB schedule (built by `bfb.bfb_schedule`): sum floor(n_i/2) steps, BW-optimal."""
    from services.synthesis.bfb.lp import bfb_schedule

    dims = _check_dims(dims)
    topo = torus(*dims)
    steps, tau = torus_bfb_cost(*dims)
    return Baseline("torus_bfb", topo, steps, tau, True, lambda c: bfb_schedule(topo, c), {"dims": dims})


def torus_dims(nodes: int, degree: int = DEFAULT_DEGREE) -> tuple[int, ...]:
    """The most balanced torus with N nodes and degree d (d/2 dimensions, each >= 3): the factorisation
    with the fewest classic steps sum (n_i - 1). Raises ValueError when none exists (e.g. prime N, d = 4)."""
    n = _check_nodes(nodes, 3)
    if not isinstance(degree, int) or degree < 2 or degree % 2:
        raise ValueError(f"torus: degree must be an even integer >= 2, got {degree!r}")
    k = degree // 2
    best = None

    def rec(rest: int, left: int, low: int, acc: tuple[int, ...]):
        nonlocal best
        if left == 1:
            if rest >= low:
                cand = acc + (rest,)
                key = (sum(x - 1 for x in cand), cand)
                if best is None or key < best:
                    best = key
            return
        a = low
        while a ** left <= rest:
            if rest % a == 0:
                rec(rest // a, left - 1, a, acc + (a,))
            a += 1

    rec(n, k, 3, ())
    if best is None:
        raise ValueError(f"torus: no {k}-dimensional torus with all dimensions >= 3 has {n} nodes")
    return best[1]


# ---------------------------------------------------------------------------------------------------
# double binary tree (NCCL)
# ---------------------------------------------------------------------------------------------------
def nccl_btree_parents(nodes: int) -> np.ndarray:
    """Parent of every rank in NCCL's `ncclGetBtree` (root 0 has parent -1)."""
    n = _check_nodes(nodes, 2)
    parent = np.full(n, -1, dtype=np.int64)
    for r in range(1, n):
        bit = 1
        while bit < n and not (bit & r):
            bit <<= 1
        up = (r ^ bit) | (bit << 1)
        if up >= n:
            up = r ^ bit
        parent[r] = up
    return parent


def nccl_dtree_parents(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Both trees of NCCL's `ncclGetDtree`: tree 1 is tree 0 shifted by one rank (rank r plays the role of
    r - 1). NCCL 2.4 shifts for even N (the paper's N = 1024) and mirrors for odd N; later NCCL versions
    shift for odd N, because mirroring an odd N keeps the odd ranks leaves in both trees and gives some
    node 6 tree links. Shifting keeps every node at <= 4 links for every N, so it is used throughout."""
    n = _check_nodes(nodes, 2)
    p0 = nccl_btree_parents(n)
    src = (np.arange(n) - 1) % n
    p1 = np.where(p0[src] < 0, -1, (p0[src] + 1) % n)
    return p0, p1


def _depths(parent: np.ndarray) -> np.ndarray:
    n = parent.size
    depth = np.full(n, -1, dtype=np.int64)
    for u in range(n):
        path = []
        x = u
        while depth[x] < 0 and parent[x] >= 0:
            path.append(x)
            x = parent[x]
        if depth[x] < 0:
            depth[x] = 0
        for y in reversed(path):
            depth[y] = depth[parent[y]] + 1
    return depth


def dbt_depth(nodes: int) -> int:
    """H: the larger depth of NCCL's two trees (10 for N = 1024)."""
    if nodes == 1:
        return 0
    p0, p1 = nccl_dtree_parents(nodes)
    return int(max(_depths(p0).max(), _depths(p1).max()))


def dbt_pass_cost(nodes: int, chunks: int, degree: int = DEFAULT_DEGREE) -> tuple[int, Fraction]:
    """One pipelined reduce+broadcast pass over both trees: (2H + k - 1, d(2H + k - 1)/(2k))."""
    h = dbt_depth(nodes)
    steps = 2 * h + chunks - 1
    return steps, Fraction(degree * steps, 2 * chunks)


def dbt_phased_cost(nodes: int, chunks: int, degree: int = DEFAULT_DEGREE) -> tuple[int, Fraction]:
    """The DBT allreduce schedule built here (reduce phase, then broadcast phase):
    (2(H + k - 1), d(H + k - 1)/k)."""
    h = dbt_depth(nodes)
    return 2 * (h + chunks - 1), Fraction(degree * (h + chunks - 1), chunks)


def chunk_choices(max_exponent: int = MAX_CHUNK_EXPONENT) -> list[int]:
    """The swept pipelining degrees: powers of two."""
    return [1 << j for j in range(max_exponent + 1)]


DBT_MODELS = ("table4", "pipelined", "phased")


@dataclass(frozen=True)
class DbtCost:
    model: str
    collective: Collective
    chunks: int
    steps: int
    tau: Fraction
    seconds: float


def dbt_cost(nodes: int, link_model: LinkModel, size_bytes: float,
             collective: Collective = Collective.ALLREDUCE, degree: int = DEFAULT_DEGREE,
             model: str = "table4", chunks: list[int] | int | None = None) -> DbtCost:
    """Best DBT cost over the pipelining degrees `chunks` (default: powers of two up to 2^20).

    model "table4": allgather / reduce-scatter = one pass, allreduce = two passes (Table 4's convention,
    reproduces 1434 us); "pipelined": one overlapped pass is the allreduce (what NCCL runs);
    "phased": the schedule built by `double_binary_tree(...).schedule` (allreduce only)."""
    if model not in DBT_MODELS:
        raise ValueError(f"dbt_cost: model must be one of {DBT_MODELS}, got {model!r}")
    if degree != 4:
        raise ValueError(f"double binary tree: a node uses 4 ports (3 in one tree, 1 in the other); degree must "
                         f"be 4, got {degree}")
    _check_nodes(nodes, 2)
    ks = [chunks] if isinstance(chunks, int) else (chunks or chunk_choices())
    if any(not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"dbt_cost: chunk counts must be positive integers, got {ks}")
    if model == "phased" and collective is not Collective.ALLREDUCE:
        raise ValueError("dbt_cost: the phased DBT schedule is an allreduce only")
    best = None
    for k in ks:
        if model == "phased":
            steps, tau = dbt_phased_cost(nodes, k, degree)
        else:
            steps, tau = dbt_pass_cost(nodes, k, degree)
            if model == "table4" and collective is Collective.ALLREDUCE:
                steps, tau = 2 * steps, 2 * tau
        seconds = link_model.time(steps, tau, size_bytes)
        if best is None or seconds < best.seconds:
            best = DbtCost(model, collective, k, steps, tau, seconds)
    if best is None:
        raise ValueError("dbt_cost: no pipelining degree to try (chunks is empty)")
    return best


def dbt_topology(nodes: int) -> Topology:
    """Union of NCCL's two trees as a degree-4 multigraph (an edge of both trees = two parallel duplex
    links); unused ports (the roots) are self-loops."""
    n = _check_nodes(nodes, 2)
    p0, p1 = nccl_dtree_parents(n)
    tails, heads = [], []
    for p in (p0, p1):
        child = np.flatnonzero(p >= 0)
        tails += [child, p[child]]
        heads += [p[child], child]
    tails, heads = np.concatenate(tails), np.concatenate(heads)
    deg = np.bincount(tails, minlength=n)
    if deg.max() > 4:
        raise TopologyError(f"double binary tree on {n} nodes: a node has {deg.max()} tree links (> 4)")
    pad = np.repeat(np.arange(n), 4 - deg)
    return Topology(n, np.concatenate([tails, pad]), np.concatenate([heads, pad]), f"dbt({n})")


def _dbt_schedule(nodes: int, chunks: int, topo: Topology, collective: Collective) -> Schedule:
    """Phased pipelined DBT allreduce: tree t reduces then broadcasts [t/2, (t+1)/2) of every shard in k
    chunks. Reduce: a node at depth delta sends chunk j to its parent at step j + H - delta (after all its
    children); broadcast: it sends chunk j to its children at step R + j + delta, R = k + H - 1."""
    if collective is not Collective.ALLREDUCE:
        raise ValueError("the double binary tree schedule is an allreduce (reduce + broadcast) only")
    n, k = nodes, chunks
    trees = nccl_dtree_parents(n)
    h = dbt_depth(n)
    r_steps = k + h - 1
    v = np.arange(n, dtype=np.int64)
    seen: dict[tuple[int, int], int] = {}
    cols = {c: [] for c in ("step", "source", "sender", "receiver", "lane", "lo", "hi")}
    for t, parent in enumerate(trees):
        depth = _depths(parent)
        for u in np.flatnonzero(parent >= 0).tolist():
            p = int(parent[u])
            lanes = []
            for a, b in ((u, p), (p, u)):
                lanes.append(seen.get((a, b), 0))
                seen[(a, b)] = lanes[-1] + 1
            dl = int(depth[u])
            for j in range(1, k + 1):
                lo = t * k + j - 1
                for step, a, b, lane in ((j + h - dl, u, p, lanes[0]), (r_steps + j + dl - 1, p, u, lanes[1])):
                    cols["step"].append(np.full(n, step))
                    cols["source"].append(v)
                    cols["sender"].append(np.full(n, a))
                    cols["receiver"].append(np.full(n, b))
                    cols["lane"].append(np.full(n, lane))
                    cols["lo"].append(np.full(n, lo))
                    cols["hi"].append(np.full(n, lo + 1))
    cat = {c: np.concatenate(x) for c, x in cols.items()}
    ops = [Op.REDUCE] * r_steps + [Op.COPY] * r_steps
    return Schedule.from_arrays(Collective.ALLREDUCE, n, 2 * k, cat.pop("step"), ops, topo.expr, **cat)


@dataclass
class DoubleBinaryTree:
    """NCCL's double binary tree on a degree-4 direct-connect topology (see the module docstring)."""

    topology: Topology
    depth: int
    parents: tuple[np.ndarray, np.ndarray]

    @property
    def nodes(self) -> int:
        return self.topology.nodes

    def cost(self, link_model: LinkModel, size_bytes: float, collective: Collective = Collective.ALLREDUCE,
             model: str = "table4", chunks=None) -> DbtCost:
        return dbt_cost(self.nodes, link_model, size_bytes, collective, 4, model, chunks)

    def schedule(self, chunks: int = 1, collective: Collective = Collective.ALLREDUCE) -> Schedule:
        if not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
        return _dbt_schedule(self.nodes, chunks, self.topology, collective)


def double_binary_tree(nodes: int, degree: int = DEFAULT_DEGREE) -> DoubleBinaryTree:
    if degree != 4:
        raise ValueError(f"double binary tree: degree must be 4, got {degree}")
    n = _check_nodes(nodes, 2)
    return DoubleBinaryTree(dbt_topology(n), dbt_depth(n), nccl_dtree_parents(n))


# ---------------------------------------------------------------------------------------------------
# all-to-all
# ---------------------------------------------------------------------------------------------------
def cayley_alltoall_throughput(nodes: int, generators: list[int]) -> float:
    """Exact MCF throughput f (LP (3), unit link capacity) of the Cayley digraph x -> x + g (mod N), one
    arc per listed generator (repeats = parallel links). By translation symmetry one source suffices:
    y[x, g] = flow of source 0 on arc x -> x + g; every node x != 0 absorbs at least f; the N translated
    copies of arc class g share its capacity, so sum_x y[x, g] <= 1."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    n = _check_nodes(nodes, 2)
    gens = [int(g) % n for g in generators]
    k = len(gens)
    nv = n * k + 1
    x = np.arange(1, n)
    rows, cols, vals = [np.arange(n - 1)], [np.full(n - 1, nv - 1)], [np.ones(n - 1)]
    for j, g in enumerate(gens):
        rows += [np.arange(n - 1), np.arange(n - 1)]
        cols += [((x - g) % n) * k + j, x * k + j]
        vals += [-np.ones(n - 1), np.ones(n - 1)]
        rows.append(np.full(n, n - 1 + j))
        cols.append(np.arange(n) * k + j)
        vals.append(np.ones(n))
    a = csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n - 1 + k, nv))
    b = np.concatenate([np.zeros(n - 1), np.ones(k)])
    c = np.zeros(nv)
    c[-1] = -1
    res = linprog(c, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"MCF LP failed: {res.message}")
    return float(-res.fun)


def dbt_alltoall_throughput(nodes: int) -> float:
    """MCF throughput of the DBT topology: 16/N^2 for N a power of two (bisection bound, attained; see the
    module docstring); otherwise solved by `alltoall.alltoall_throughput` on `dbt_topology(N)`."""
    n = _check_nodes(nodes, 2)
    if n >= 16 and n & (n - 1) == 0:
        return 16.0 / (n * n)
    return _alltoall_module().alltoall_throughput(dbt_topology(n)).throughput


def _alltoall_module():
    """`evaluate.alltoall`, imported when first needed (it imports the LP machinery)."""
    return importlib.import_module(".alltoall", __package__)


def alltoall_seconds(f: float, nodes: int, degree: int, bytes_per_node: float, node_bandwidth_Bps: float) -> float:
    """T_a2a = (D/N) / (f B/d) (App. A.5), by `alltoall.alltoall_time_s`."""
    if not f > 0:
        raise ValueError(f"the MCF throughput must be positive, got {f!r}")
    return float(_alltoall_module().alltoall_time_s(f, nodes, degree, bytes_per_node, node_bandwidth_Bps))


# ---------------------------------------------------------------------------------------------------
# one entry point
# ---------------------------------------------------------------------------------------------------
BASELINES = ("ring", "shifted_ring", "shifted_bfb_ring", "double_binary_tree", "torus_classic", "torus_bfb",
             "totient_perms")
ALIASES = {"dbt": "double_binary_tree", "shiftedring": "shifted_ring", "shiftedbfbring": "shifted_bfb_ring",
           "torus": "torus_classic", "uniring": "ring", "totientperms": "totient_perms"}


def _canonical(name: str) -> str:
    key = name.lower().replace("-", "_")
    key = ALIASES.get(key.replace("_", ""), ALIASES.get(key, key))
    if key not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return key


TRAINING_BASELINES = ("shifted_ring", "shifted_bfb_ring", "torus_classic", "torus_bfb")


def training_baseline(name: str, nodes: int, degree: int, known=TRAINING_BASELINES):
    """The baseline a training comparison builds for (N, d): a ShiftedRing (degree 4 only) or a torus of
    `torus_dims(N, d)`; ValueError naming `known` for any other name."""
    if name in ("shifted_ring", "shifted_bfb_ring"):
        if degree != 4:
            raise ValueError(f"{name} needs degree 4")
        return shifted_ring(nodes) if name == "shifted_ring" else shifted_bfb_ring(nodes)
    if name in ("torus_classic", "torus_bfb"):
        dims = torus_dims(nodes, degree)
        return torus_classic(*dims) if name == "torus_classic" else torus_bfb(*dims)
    raise ValueError(f"unknown training baseline {name!r}; known: {', '.join(known)}")


@dataclass(frozen=True)
class BaselineCost:
    name: str
    nodes: int
    degree: int
    collective: Collective
    steps: int                 # T_L = steps * alpha
    tau: Fraction              # T_B = tau * M / B
    seconds: float
    bw_optimal: bool
    details: dict = field(default_factory=dict)


def baseline_costs(name: str, nodes: int, degree: int = DEFAULT_DEGREE, link_model: LinkModel | None = None,
                   size_bytes: float = 1 << 20, collective: Collective | str = Collective.ALLREDUCE,
                   **options) -> BaselineCost:
    """Analytic (steps, tau, seconds) of a baseline (no schedule is built, so any N works).

    options: `shift` (shifted rings), `dims` (tori; default `torus_dims(N, d)`), `bidirectional`
    (totient_perms), `model` / `chunks` (double binary tree, see `dbt_cost`)."""
    key = _canonical(name)
    coll = _allgather_family(Collective.parse(collective) if isinstance(collective, str) else collective)
    lm = link_model or LinkModel.from_units(10, 100)
    n = _check_nodes(nodes, 2)
    details: dict = {}
    if key == "double_binary_tree":
        c = dbt_cost(n, lm, size_bytes, coll, degree, options.get("model", "table4"), options.get("chunks"))
        return BaselineCost(key, n, degree, coll, c.steps, c.tau, c.seconds, False,
                            {"chunks": c.chunks, "depth": dbt_depth(n), "model": c.model})
    if key == "ring":
        steps, tau = ring_cost(n)
    elif key in ("shifted_ring", "shifted_bfb_ring"):
        if degree != 4:
            raise ValueError(f"{key}: two bidirectional rings have degree 4, got {degree}")
        _check_nodes(n, 3)
        details["shift"] = _resolve_shift(n, options.get("shift"))
        steps, tau = ring_cost(n) if key == "shifted_ring" else bfb_ring_cost(n)
    elif key == "totient_perms":
        bidi = bool(options.get("bidirectional", False))
        if bidi and degree % 2:
            raise ValueError(f"totient_perms: bidirectional rings need an even degree, got {degree}")
        cands = totient_candidates(n)
        details["generators"] = (select_permutations(n, degree // 2, [p for p in cands if 2 * p <= n]) if bidi
                                 else select_permutations(n, degree, cands))
        steps, tau = ring_cost(n)
    else:
        dims = _check_dims(options.get("dims") or torus_dims(n, degree))
        if math.prod(dims) != n or _torus_degree(dims) != degree:
            raise ValueError(f"torus {dims} has {math.prod(dims)} nodes and degree {_torus_degree(dims)}, "
                             f"not {n} and {degree}")
        details["dims"] = dims
        steps, tau = torus_classic_cost(*dims) if key == "torus_classic" else torus_bfb_cost(*dims)
    bw_opt = tau == Fraction(n - 1, n)
    if coll is Collective.ALLREDUCE:
        steps, tau = 2 * steps, 2 * tau
    return BaselineCost(key, n, degree, coll, steps, tau, lm.time(steps, tau, size_bytes), bw_opt, details)


def baseline_topology(name: str, nodes: int, degree: int = DEFAULT_DEGREE, **options) -> Topology:
    key = _canonical(name)
    if key == "ring":
        return uniring(_check_nodes(nodes, 2), degree)
    if key in ("shifted_ring", "shifted_bfb_ring"):
        if degree != 4:
            raise ValueError(f"{key}: degree must be 4, got {degree}")
        n = _check_nodes(nodes, 3)
        return _shifted_topology(n, _resolve_shift(n, options.get("shift")))
    if key == "double_binary_tree":
        if degree != 4:
            raise ValueError(f"double binary tree: degree must be 4, got {degree}")
        return dbt_topology(nodes)
    if key == "totient_perms":
        return totient_perms(nodes, degree, bool(options.get("bidirectional", False))).baseline.topology
    return torus(*(options.get("dims") or torus_dims(nodes, degree)))


def baseline_alltoall_throughput(name: str, nodes: int, degree: int = DEFAULT_DEGREE, **options) -> float:
    """MCF throughput f of a baseline topology: exact Cayley LP for the ring/torus-like Cayley baselines,
    16/N^2 for the DBT (N a power of two), otherwise `alltoall.alltoall_throughput`."""
    key = _canonical(name)
    n = _check_nodes(nodes, 2)
    if key == "double_binary_tree":
        if degree != 4:
            raise ValueError(f"double binary tree: degree must be 4, got {degree}")
        return dbt_alltoall_throughput(n)
    if key == "ring":
        return cayley_alltoall_throughput(n, [1] * degree)
    if key in ("shifted_ring", "shifted_bfb_ring"):
        if degree != 4:
            raise ValueError(f"{key}: degree must be 4, got {degree}")
        s = _resolve_shift(n, options.get("shift"))
        return cayley_alltoall_throughput(n, [1, n - 1, s, n - s])
    if key == "totient_perms":
        t = totient_perms(n, degree, bool(options.get("bidirectional", False)))
        gens = [x for p in t.generators for x in (p, n - p)] if t.bidirectional else t.generators
        return cayley_alltoall_throughput(n, gens)
    topo = baseline_topology(key, n, degree, **options)
    return float(_alltoall_module().alltoall_throughput(topo).throughput)


def baseline_alltoall_time(name: str, nodes: int, degree: int = DEFAULT_DEGREE, bytes_per_node: float = 1 << 20,
                           node_bandwidth_Bps: float = 100e9 / 8, f: float | None = None, **options) -> float:
    """All-to-all seconds of a baseline: each node sends bytes_per_node / N to every node. Pass the MCF
    throughput `f` (e.g. from `alltoall.alltoall_throughput`) or let `baseline_alltoall_throughput` find it."""
    if f is None:
        f = baseline_alltoall_throughput(name, nodes, degree, **options)
    return alltoall_seconds(f, nodes, degree, bytes_per_node, node_bandwidth_Bps)
