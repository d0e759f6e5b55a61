"""Breadth-First-Broadcast schedules (paper section 6, LP (1), Eq. (2), App. E).

For each receiver u and step t, the sources v at distance t from u must each be delivered whole, split over
u's in-arcs (w, u) with d(v, w) = t - 1 (every such w holds all of v's shard after step t - 1). LP (1)
minimises the largest in-arc load U_{u,t}. It is a fractional restricted assignment, so (Hall / max-flow
min-cut, Theorem 19) its optimum is exactly

    U*_{u,t} = max over sets S of in-arcs of |{v : every eligible arc of v is in S}| / |S|,

a fraction a/b with b <= d. We compute U* exactly (a subset-sum "zeta" transform over in-arc masks, or
Dinkelbach iterations with min cuts for large d), then an optimal x from one integer max-flow (OR-Tools)
with demand b per source and capacity a per arc, so every chunk is a multiple of 1/b of a shard. Sources
with the same set of eligible arcs are interchangeable, so the flow runs on these "types", not on sources.

Variants: the discrete chunked BFB of App. E.2 (P equal chunks per shard; the integer program (13) is
solved exactly: capacity ceil(P U*) is feasible by the integrality of max-flow, so no rounding loss beyond
it), and heterogeneous links (App. E.3, LP (14), solved with OR-Tools GLOP).

T_B = tau M/B with tau = (d/N) sum_t max_u U_{u,t} (Eq. (2)); T_L = alpha D(G) (Theorem 15). Nothing here needs
regularity: on any strongly connected digraph (e.g. one with failed links removed) the LPs are the same, d is
the nominal degree (every link carries B/d) and a receiver's in-arc slots are its in-arcs (padding slots of
`Topology.in_arcs` are never eligible).
Receivers are independent, so blocks of receivers are solved in parallel (`solve_block` is the unit of work
a Celery task runs on a slice); vertex-transitive topologies solve node 0 and map by translation.
"""
from __future__ import annotations

import math
import os
import pickle
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from fractions import Fraction
import multiprocessing

import numpy as np
from ortools.graph.python import max_flow

from services.synthesis.schedule.ir import Collective, Op, Schedule, allreduce
from services.synthesis.schedule.limits import ScheduleTooLarge, check_schedule_size
from services.synthesis.topology.graph import Topology

ZETA_MAX_DEGREE = 12
BFB_MAX_DEGREE = 62


def check_bfb_degree(topology: Topology) -> None:
    """A source's eligible in-arcs are a 64-bit mask: BFB handles in-degrees up to BFB_MAX_DEGREE."""
    if topology.max_in_degree > BFB_MAX_DEGREE:
        raise ScheduleTooLarge(f"{topology.expr} has degree {topology.max_in_degree}; BFB schedules are built for "
                               f"degree at most {BFB_MAX_DEGREE} (each source's eligible in-arcs are one 64-bit mask)")


# ---------------------------------------------------------------------------------------------------
# one (u, t) problem on source types
# ---------------------------------------------------------------------------------------------------
def _bits(mask: int, d: int) -> list[int]:
    return [k for k in range(d) if mask >> k & 1]


@lru_cache(maxsize=None)
def _popcounts(d: int) -> np.ndarray:
    """popcount of every d-bit mask (1 for the empty mask, which never wins)."""
    pop = np.zeros(1 << d, dtype=np.int64)
    for i in range(d):
        pop[1 << i:1 << (i + 1)] = pop[:1 << i] + 1
    pop[0] = 1
    return pop


def _min_max_load_zeta(counts_by_mask: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """For rows of counts indexed by eligibility mask: (numerator, denominator) of U* per row."""
    c = counts_by_mask.astype(np.int64).copy()
    rows = c.shape[0]
    for i in range(d):
        v = c.reshape(rows, -1, 2, 1 << i)
        v[:, :, 1, :] += v[:, :, 0, :]
    pop = _popcounts(d)
    ratio = c / _popcounts(d)
    ratio[:, 0] = 0
    best = ratio.argmax(axis=1)
    num = c[np.arange(rows), best]
    den = np.where(num > 0, pop[best], 1)
    return num, den


def _flow(masks, counts, d: int, demand: int, capacity: int | list[int]):
    """Integer max-flow: counts[i] jobs of type masks[i] each need `demand` units from the arcs in the mask;
    arc k carries at most capacity[k]. Returns (feasible, flows) with flows an int array (types, d)."""
    masks = np.asarray(masks, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    caps = np.full(d, capacity, dtype=np.int64) if np.isscalar(capacity) else np.asarray(capacity, dtype=np.int64)
    bits = ((masks[:, None] >> np.arange(d)) & 1).astype(bool)
    T = masks.size
    if (bits.sum(axis=1) == 1).all():                     # every source has one eligible arc: forced
        flows = bits * (counts * demand)[:, None]
        return bool((flows.sum(axis=0) <= caps).all()), flows
    ii, kk = np.nonzero(bits)
    src, sink = 0, T + d + 1
    tails = np.concatenate([np.zeros(T, np.int64), 1 + ii, 1 + T + np.arange(d)])
    heads = np.concatenate([1 + np.arange(T), 1 + T + kk, np.full(d, sink)])
    cap = np.concatenate([counts * demand, counts[ii] * demand, caps])
    smf = max_flow.SimpleMaxFlow()
    arcs = smf.add_arcs_with_capacity(tails, heads, cap)
    status = smf.solve(src, sink)
    if status != smf.OPTIMAL:
        raise RuntimeError(f"max-flow failed with status {status}")
    flows = np.zeros((T, d), dtype=np.int64)
    flows[ii, kk] = smf.flows(arcs[T:T + ii.size])
    return smf.optimal_flow() == int(counts.sum()) * demand, flows


def _min_max_load_dinkelbach(masks: list[int], counts: list[int], d: int) -> tuple[int, int]:
    """U* = max_S load(S)/|S| by Dinkelbach's method for large d: start from the ratio of all eligible
    arcs and move to the densest set for the current ratio (a max-closure min cut) until none is denser."""
    num, den = sum(counts), bin(int(np.bitwise_or.reduce(np.array(masks, dtype=np.int64)))).count("1")
    while True:
        load, size = _densest_by_cut(masks, counts, d, num, den)
        if size == 0 or load * den <= num * size:
            g = math.gcd(num, den)
            return num // g, den // g
        num, den = load, size


def _batched_min_max_load(problems: list[tuple[np.ndarray, np.ndarray]], d: int,
                          floor: Fraction | None = None) -> list[tuple[int, int]]:
    """U* = max_S load(S)/|S| for many (u, t) problems at once: Dinkelbach iterations where each iteration is
    ONE max-flow over the disjoint union of all unconverged problems' max-closure networks (source -> type
    with capacity count * den, type -> its eligible arcs unbounded, arc -> sink with capacity num), built
    with flat arrays. The source side of the min cut is the densest set for the current ratio num/den.
    With `floor`, the iterations start at that ratio and return max(U*, floor): a problem whose U* is at
    most the floor is settled by the first min cut (the caller only needs the largest U*)."""
    if not problems:
        return []
    sizes = np.array([m.size for m, _ in problems], dtype=np.int64)
    owner = np.repeat(np.arange(len(problems)), sizes)                 # problem of each type
    masks = np.concatenate([np.asarray(m, dtype=np.int64) for m, _ in problems])
    counts = np.concatenate([np.asarray(c, dtype=np.int64) for _, c in problems])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = np.add.reduceat(counts, starts)
    if floor is None:
        num = total.copy()
        den = np.bitwise_count(np.bitwise_or.reduceat(masks, starts)).astype(np.int64)
    else:
        num = np.full(len(problems), floor.numerator, dtype=np.int64)
        den = np.full(len(problems), floor.denominator, dtype=np.int64)
    ti, kk = np.nonzero((masks[:, None] >> np.arange(d)) & 1)            # type -> eligible arc slot
    T = masks.size
    active = np.ones(len(problems), dtype=bool)
    while active.any():
        at = active[owner]
        ae = active[owner[ti]]
        act_p = np.flatnonzero(active)
        type_node = 2 + np.arange(T)
        slot_node = 2 + T + owner[ti] * d + kk
        sink_slots = 2 + T + (act_p[:, None] * d + np.arange(d)[None, :]).ravel()
        tails = np.concatenate([np.zeros(int(at.sum()), np.int64), type_node[ti][ae], sink_slots])
        heads = np.concatenate([type_node[at], slot_node[ae], np.ones(sink_slots.size, np.int64)])
        caps = np.concatenate([(counts * den[owner])[at], (total * den + 1)[owner[ti]][ae],
                               np.repeat(num[act_p], d)])
        smf = max_flow.SimpleMaxFlow()
        smf.add_arcs_with_capacity(tails, heads, caps)
        smf.solve(0, 1)
        side = np.zeros(2 + T + len(problems) * d, dtype=bool)
        side[np.asarray(smf.get_source_side_min_cut())] = True
        chosen = side[type_node] & at
        load = np.bincount(owner, weights=counts * chosen, minlength=len(problems)).astype(np.int64)
        union = np.bitwise_or.reduceat(masks * chosen, starts)
        size = np.bitwise_count(union).astype(np.int64)
        better = active & (size > 0) & (load * den > num * size)
        num[better], den[better] = load[better], size[better]
        active = better
    g = np.gcd(num, den)
    return list(zip((num // g).tolist(), (den // g).tolist()))


def _densest_by_cut(masks, counts, d, num, den) -> tuple[int, int]:
    """The set of types J maximising den*|J| - num*|arcs(J)| (max closure = source side of a min cut);
    returns (|J|, |arcs(J)|)."""
    T = len(masks)
    src, sink = 0, T + d + 1
    big = sum(counts) * den + 1
    tails, heads, cap = [], [], []
    def arc(tail: int, head: int, capacity: int) -> None:
        tails.append(tail)
        heads.append(head)
        cap.append(capacity)

    for i, m in enumerate(masks):
        arc(src, 1 + i, counts[i] * den)
        for k in _bits(m, d):
            arc(1 + i, 1 + T + k, big)
    for k in range(d):
        arc(1 + T + k, sink, num)
    smf = max_flow.SimpleMaxFlow()
    smf.add_arcs_with_capacity(np.array(tails), np.array(heads), np.array(cap))
    smf.solve(src, sink)
    side = set(smf.get_source_side_min_cut())
    chosen = [i for i in range(T) if 1 + i in side]
    arcs_used = 0
    for i in chosen:
        arcs_used |= masks[i]
    return sum(counts[i] for i in chosen), bin(arcs_used).count("1")


def _disaggregate(sources: np.ndarray, flows: np.ndarray, demand: int):
    """Turn type-level flows into chunks. The group's sources, in type order, own consecutive blocks of
    `demand` units of one stream; the nonzero flows (type-major, then arc) are consecutive runs of the same
    stream, and both partitions align at type boundaries because a type's flows sum to count * demand.
    Each piece of the common refinement is one transfer. Returns (source, arc slot, lo, hi)."""
    ii, kk = np.nonzero(flows)
    cum = np.cumsum(flows[ii, kk])
    total = int(cum[-1]) if cum.size else 0
    bp = np.union1d(cum[:-1], np.arange(demand, total, demand, dtype=np.int64))
    starts = np.concatenate([[0], bp])
    ends = np.concatenate([bp, [total]])
    j = starts // demand
    piece = np.searchsorted(cum, starts, side="right")
    return sources[j], kk[piece], starts - j * demand, ends - j * demand


# ---------------------------------------------------------------------------------------------------
# blocks of receivers
# ---------------------------------------------------------------------------------------------------
@dataclass
class BfbContext:
    """What every block needs: the topology and distances (full matrix, or the translation shortcut's
    distances to node 0 and its in-neighbours)."""

    topology: Topology
    shortcut: bool
    chunks: int | None = None
    method: str = "auto"          # "zeta" (subset sums), "cut" (Dinkelbach min cuts) or "auto" by degree
    diameter: int = 0
    _dist: np.ndarray | None = field(default=None, repr=False)
    _dist0: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def create(cls, topology: Topology, shortcut: bool = True, chunks: int | None = None,
               method: str = "auto") -> "BfbContext":
        if method not in ("auto", "zeta", "cut"):
            raise ValueError(f"method must be auto, zeta or cut, got {method!r}")
        check_bfb_degree(topology)
        ctx = cls(topology, bool(shortcut and topology.translation is not None), chunks, method)
        if ctx.shortcut:
            w = topology.in_predecessors[0]
            ctx._dist0 = topology.distances_to(np.concatenate([[0], w]))    # (1 + d, N)
            ctx.diameter = topology.diameter
        else:
            ctx._dist = topology.distance_matrix
            ctx.diameter = int(ctx._dist.max())
        return ctx

    def receiver_distances(self, receivers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dcol[N, B], dw[N, B, d]): distance from every v to each receiver and to its in-arc tails."""
        g = self.topology
        if self.shortcut:
            assert np.all(receivers == 0)
            return self._dist0[0][:, None], self._dist0[1:].T[:, None, :]
        w = g.in_predecessors[receivers]                                   # (B, d)
        return self._dist[:, receivers], self._dist[:, w]


@dataclass
class BlockResult:
    """Transfers for a block of receivers (chunk bounds in units of 1/den) and U_{u,t} = num/den."""

    receivers: np.ndarray
    step: np.ndarray
    source: np.ndarray
    arc: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    den: np.ndarray
    u_num: np.ndarray      # (B, D)
    u_den: np.ndarray      # (B, D)


@dataclass
class StepTypes:
    """The (u, t) problem on source types: sources of `masks[i]` (a bitmask of u's in-arc slots) number
    `counts[i]` and are `sources[starts[i]:starts[i] + counts[i]]`."""

    t: int
    masks: list[int]
    counts: list[int]
    starts: list[int]
    sources: np.ndarray


def eligibility_masks(dc: np.ndarray, dw: np.ndarray) -> np.ndarray:
    """Bit k set iff in-arc k of the receiver is eligible for the source: d(v, w_k) = d(v, u) - 1
    (Definition 15). dc: (...,) distances to the receiver, dw: (..., d) distances to its in-arc tails."""
    target = dc.astype(np.int32) - 1
    mask = np.zeros(dc.shape, dtype=np.int64)
    for k in range(dw.shape[-1]):
        mask |= (dw[..., k] == target).astype(np.int64) << k
    return mask


def receiver_types(dcol: np.ndarray, dw: np.ndarray, d: int, mask: np.ndarray | None = None
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[StepTypes]]:
    """Group the sources of one receiver by (distance t, eligible in-arc mask). Returns the (t, mask) count
    table and the per-step groups."""
    dc = dcol.astype(np.int64)
    if mask is None:
        mask = eligibility_masks(dc, dw)
    v_all = np.flatnonzero(dc > 0)
    # sorted by (t, mask); a packed key t * 2^d + mask would overflow int64 for d near 62
    order = np.lexsort((mask[v_all], dc[v_all]))
    v_sorted, t_sorted, m_sorted = v_all[order], dc[v_all][order], mask[v_all][order]
    run_start = np.flatnonzero(np.concatenate([[True], (t_sorted[1:] != t_sorted[:-1])
                                               | (m_sorted[1:] != m_sorted[:-1])]))
    run_count = np.diff(np.concatenate([run_start, [v_sorted.size]]))
    run_t, run_mask = t_sorted[run_start], m_sorted[run_start]
    groups = []
    for t in np.unique(run_t).tolist():
        sel = run_t == t
        groups.append(StepTypes(t, run_mask[sel].tolist(), run_count[sel].tolist(),
                                run_start[sel].tolist(), v_sorted))
    return (run_t, run_mask, run_count), groups


class _Collector:
    """Accumulates transfers (chunk bounds in units of 1/den) for a block."""

    def __init__(self):
        self.cols = {k: [] for k in ("step", "source", "arc", "lo", "hi", "den")}

    def add(self, g: StepTypes, flows: np.ndarray, demand: int, arcs_u: np.ndarray) -> None:
        first = g.starts[0]
        group = g.sources[first:first + int(sum(g.counts))]      # a group's types are one contiguous run
        src, slot, lo, hi = _disaggregate(group, np.asarray(flows, dtype=np.int64), demand)
        for k, col in (("step", np.full(src.size, g.t)), ("source", src), ("arc", arcs_u[slot]),
                       ("lo", lo), ("hi", hi), ("den", np.full(src.size, demand))):
            self.cols[k].append(col)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in self.cols.items()}


def solve_block(ctx: BfbContext, receivers) -> BlockResult:
    """Solve LP (1) for every (u, t) with u in `receivers` and t = 1..D(G). Pure and picklable: the unit
    of work for a process pool or a Celery task."""
    g = ctx.topology
    d, D = g.max_in_degree, ctx.diameter          # in-arc slots (the nominal degree on regular topologies)
    receivers = np.asarray(receivers, dtype=np.int64)
    dcol, dw = ctx.receiver_distances(receivers)
    zeta = ctx.method == "zeta" or (ctx.method == "auto" and d <= ZETA_MAX_DEGREE)
    out = _Collector()
    u_num = np.zeros((receivers.size, D), dtype=np.int64)
    u_den = np.ones((receivers.size, D), dtype=np.int64)
    for b, u in enumerate(receivers.tolist()):
        (run_t, run_mask, run_count), groups = receiver_types(dcol[:, b], dw[:, b, :], d)
        if zeta:
            counts = np.zeros((D, 1 << d), dtype=np.int64)
            counts[run_t - 1, run_mask] = run_count
            num_t, den_t = _min_max_load_zeta(counts, d)
        for grp in groups:
            t = grp.t
            if zeta:
                num, den = int(num_t[t - 1]), int(den_t[t - 1])
            else:
                num, den = _min_max_load_dinkelbach(grp.masks, grp.counts, d)
            gcd = math.gcd(num, den)
            num, den = num // gcd, den // gcd
            if ctx.chunks:                      # App. E.2: P chunks per shard, exact integer optimum
                demand, capacity = ctx.chunks, -(-ctx.chunks * num // den)
                u_num[b, t - 1], u_den[b, t - 1] = capacity, demand
            else:
                demand, capacity = den, num
                u_num[b, t - 1], u_den[b, t - 1] = num, den
            ok, flows = _flow(grp.masks, grp.counts, d, demand, capacity)
            if not ok:
                raise RuntimeError(f"BFB: infeasible flow at u={u}, t={t} with U={num}/{den}")
            out.add(grp, flows, demand, g.in_arcs[u])
    return BlockResult(receivers, u_num=u_num, u_den=u_den, **out.arrays())


# ---------------------------------------------------------------------------------------------------
# whole schedules
# ---------------------------------------------------------------------------------------------------
@dataclass
class BfbResult:
    """An optimal BFB allgather schedule with its LP optima and the predicted cost (Eq. (2))."""

    schedule: Schedule
    topology: Topology
    u_num: np.ndarray
    u_den: np.ndarray
    tau: Fraction
    steps: int
    seconds: float
    used_shortcut: bool

    def u(self, node: int, step: int) -> Fraction:
        return Fraction(int(self.u_num[node, step - 1]), int(self.u_den[node, step - 1]))


_POOL_CTX: BfbContext | None = None


def _pool_solve(receivers):
    return solve_block(_POOL_CTX, receivers)


def forked_blocks(ctx: BfbContext, parts: list[np.ndarray]) -> list[BlockResult]:
    """`solve_block` of every part, all but the last in a child forked with os.fork (possible where
    multiprocessing refuses a pool: a daemonic process), the last in this process; each child sends its
    pickled result through a pipe. A child that fails (killed, or an error) has its part solved here."""
    children: list[tuple[int, int, np.ndarray]] = []
    try:
        for part in parts[:-1]:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                                    # the child: solve, send, leave without cleanup
                code = 1
                try:
                    os.close(r)
                    signal.setitimer(signal.ITIMER_REAL, 0)     # a parent's time-limit alarm is not the child's
                    data = pickle.dumps(solve_block(ctx, part), protocol=pickle.HIGHEST_PROTOCOL)
                    with os.fdopen(w, "wb") as f:
                        f.write(data)
                    code = 0
                finally:
                    os._exit(code)
            os.close(w)
            children.append((pid, r, part))
        own = solve_block(ctx, parts[-1])
        out = []
        while children:
            pid, r, part = children[0]
            with os.fdopen(r, "rb", closefd=False) as f:
                data = f.read()
            children.pop(0)
            os.close(r)
            _, status = os.waitpid(pid, 0)
            out.append(pickle.loads(data) if status == 0 and data else solve_block(ctx, part))
        return out + [own]
    finally:                                                # stopped early (an error, a time limit): no orphans
        for pid, r, _ in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(r)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def receiver_blocks(nodes: int, parts: int) -> list[np.ndarray]:
    """Split receivers 0..N-1 into `parts` contiguous blocks (the slices Celery tasks get)."""
    return [b for b in np.array_split(np.arange(nodes), max(1, min(parts, nodes))) if b.size]


def bfb_allgather(topology: Topology, *, workers: int | None = None, shortcut: bool = True,
                  chunks: int | None = None, method: str = "auto") -> BfbResult:
    """The optimal BFB allgather schedule of `topology` (Theorem 16), solved in parallel blocks: `workers`
    processes (default: the cores; in a daemonic process, which may not start a pool, one unless `workers` is
    given, then forked children: `forked_blocks`)."""
    global _POOL_CTX
    if chunks is not None and (not isinstance(chunks, int) or chunks < 1):
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    check_schedule_size(topology)
    t0 = time.perf_counter()
    ctx = BfbContext.create(topology, shortcut, chunks, method)
    if ctx.shortcut:
        blocks = [solve_block(ctx, np.array([0]))]
    else:
        asked, workers = workers is not None, workers or default_workers()
        work = topology.nodes * ctx.diameter
        daemonic = multiprocessing.current_process().daemon
        if asked and workers > 1 and work >= 2048 and daemonic:
            # a daemonic process (a Celery prefork child, the embedded worker's job process) may not start a
            # pool: when the caller asks for workers, its blocks are solved in forked children instead
            blocks = forked_blocks(ctx, receiver_blocks(topology.nodes, workers))
        elif workers > 1 and work >= 2048 and not daemonic:
            _POOL_CTX = ctx
            try:
                mp = multiprocessing.get_context("fork")
                with ProcessPoolExecutor(workers, mp_context=mp) as pool:
                    blocks = list(pool.map(_pool_solve, receiver_blocks(topology.nodes, workers * 4)))
            finally:
                _POOL_CTX = None
        else:
            blocks = [solve_block(ctx, np.arange(topology.nodes))]
    result = merge_blocks(ctx, blocks)
    result.seconds = time.perf_counter() - t0
    return result


def merge_blocks(ctx: BfbContext, blocks: list[BlockResult]) -> BfbResult:
    """Combine block results into one schedule on a common grid (the chord step of a Celery plan)."""
    g = ctx.topology
    D = ctx.diameter
    if ctx.shortcut:
        sched, u_num, u_den = _map_by_translation(ctx, blocks[0])
    else:
        cat = {k: np.concatenate([getattr(b, k) for b in blocks]) for k in ("step", "source", "arc", "lo", "hi", "den")}
        grid = math.lcm(*np.unique(cat["den"]).tolist()) if cat["den"].size else 1
        scale = grid // cat["den"]
        arc = cat["arc"]
        sched = Schedule.from_arrays(Collective.ALLGATHER, g.nodes, grid, cat["step"], [Op.COPY] * D, g.expr,
                                     source=cat["source"], sender=g.tails[arc], receiver=g.heads[arc],
                                     lane=g.lanes[arc], lo=cat["lo"] * scale, hi=cat["hi"] * scale)
        u_num = np.zeros((g.nodes, D), dtype=np.int64)
        u_den = np.ones((g.nodes, D), dtype=np.int64)
        for b in blocks:
            u_num[b.receivers], u_den[b.receivers] = b.u_num, b.u_den
    tau = Fraction(0)
    for t in range(D):
        col = [Fraction(int(a), int(b)) for a, b in set(zip(u_num[:, t].tolist(), u_den[:, t].tolist()))]
        tau += max(col)
    tau *= Fraction(g.degree, g.nodes)
    return BfbResult(sched, g, u_num, u_den, tau, D, 0.0, ctx.shortcut)


def _map_by_translation(ctx: BfbContext, ref: BlockResult):
    """Map node 0's solution to every node u by the automorphism x -> x + u."""
    g, tr = ctx.topology, ctx.topology.translation
    n, D = g.nodes, ctx.diameter
    grid = math.lcm(*np.unique(ref.den).tolist()) if ref.den.size else 1
    scale = grid // ref.den
    order = np.argsort(ref.step, kind="stable")
    step, src, arc = ref.step[order], ref.source[order], ref.arc[order]
    lo, hi = (ref.lo * scale)[order], (ref.hi * scale)[order]
    k = step.size
    u = np.arange(n, dtype=np.int64)[:, None]
    # transfers of step t for every u: layout (t, u, reference index within t)
    counts = np.bincount(step, minlength=D + 1)[1:]
    ptr = np.concatenate([[0], np.cumsum(counts * n)]).astype(np.int64)
    cols = {c: [] for c in ("source", "sender", "receiver", "lane", "lo", "hi")}
    starts = np.concatenate([[0], np.cumsum(counts)])
    for t in range(D):
        s = slice(starts[t], starts[t + 1])
        m = s.stop - s.start
        cols["source"].append(tr.add(src[s][None, :], u).ravel())
        cols["sender"].append(tr.add(g.tails[arc[s]][None, :].astype(np.int64), u).ravel())
        cols["receiver"].append(np.repeat(u.ravel(), m))
        cols["lane"].append(np.tile(g.lanes[arc[s]], n))
        cols["lo"].append(np.tile(lo[s], n))
        cols["hi"].append(np.tile(hi[s], n))
    cat = {c: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for c, v in cols.items()}
    sched = Schedule(Collective.ALLGATHER, n, grid, ptr, cat["source"].astype(np.int32),
                     cat["sender"].astype(np.int32), cat["receiver"].astype(np.int32),
                     cat["lane"].astype(np.int32), cat["lo"], cat["hi"],
                     np.full(D, Op.COPY, dtype=np.uint8), g.expr)
    assert k == int(counts.sum())
    return sched, np.repeat(ref.u_num, n, axis=0), np.repeat(ref.u_den, n, axis=0)


def bfb_schedule(topology: Topology, collective: Collective = Collective.ALLGATHER, *,
                 allgather: Schedule | None = None, **kw) -> Schedule:
    """BFB schedule of any collective: reduce-scatter = BFB allgather on G^T, reversed (Cor. 1.1, Def. 5);
    allreduce = reduce-scatter then allgather. On a bidirectional G (G^T = G) the allgather is solved once;
    pass `allgather` when the caller already has G's."""
    if collective is Collective.ALLTOALL:
        raise ValueError("BFB builds allgather, reduce-scatter and allreduce schedules, not all-to-all")
    ag = allgather if allgather is not None else bfb_allgather(topology, **kw).schedule
    if collective is Collective.ALLGATHER:
        return ag
    base = ag if topology.bidirectional else bfb_allgather(topology.transpose(), **kw).schedule
    rs = base.reverse(topology=topology.expr)
    return rs if collective is Collective.REDUCESCATTER else allreduce(rs, ag)
