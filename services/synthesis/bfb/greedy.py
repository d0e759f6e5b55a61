"""Greedy link-chunk matching on the time-expanded network: a TACOS-style second scheduler (Won's
dissertation, chapter 5, Algorithms 1 and 2).

The time-expanded network (TEN) copies every node at each comm step t = 1, 2, ...; a link (w, u) becomes a
TEN edge from w at t - 1 to u at t, and a **link-chunk match** puts one chunk on one TEN edge: at most one
chunk per link per step, so no step is congested. Shards are cut into P equal chunks (chunk c = (v, p) is
[p/P, (p+1)/P) of v's shard). At every step each node u that still lacks chunks matches its in-links to
chunks it lacks that the link's tail held at the start of the step (possession changes on arrival, at the
end of the step: the dissertation's note on Algorithm 1 as released). Algorithm 1 matches in random order;
here the match of u's in-links is also made maximum (augmenting paths over u's at most 62 in-links), which
is what "utilization-maximizing" asks for, and with per-link costs the cheapest link is offered a chunk
first (section 5.4.7: "choose the lowest-cost link"). Algorithm 2 repeats until every node holds every
chunk. Random choices come from a seeded generator, so a schedule is reproducible.

The result is an allgather schedule in the paper's tuple IR: step t's transfers are the matches at step t.
Each used link carries one chunk, so every step costs alpha + (M/(N P)) / (B/d) and
T = S alpha + tau M/B with tau = d S / (N P) for S steps; each node receives every chunk exactly once.
Reduce-scatter is the reverse of the allgather synthesized on G^T (section 5.4.6) and allreduce is
reduce-scatter then allgather, as for BFB. Unlike BFB, nothing here uses shortest paths or regularity, and
S >= max(D(G), (N - 1) P / delta_in) (delta_in the smallest in-degree), so TACOS trades latency (more
steps) for a schedule that keeps every link busy; `services.synthesis.bfb.compare` prices both.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from services.synthesis.bfb.kernels import _ctpop
from services.synthesis.schedule.ir import Collective, Op, Schedule, allreduce
from services.synthesis.topology.graph import Topology

__all__ = ["GreedyResult", "greedy_allgather", "greedy_schedule", "MAX_GREEDY_TRANSFERS"]

MAX_GREEDY_TRANSFERS = 1 << 22     # N (N - 1) P transfers: 4.2 M rows (N = 2048 at P = 1)
MAX_GREEDY_DEGREE = 62


@dataclass
class GreedyResult:
    """A greedy allgather schedule and its cost as built: `steps` S and tau = d S / (N P)."""

    schedule: Schedule
    steps: int
    tau: Fraction
    chunks: int
    seed: int
    seconds: float


def greedy_allgather(topology: Topology, *, chunks: int = 1, seed: int = 0, link_cost=None) -> GreedyResult:
    """TACOS-style allgather of any strongly connected topology (Algorithms 1 and 2 of the dissertation).

    Parameters
    ----------
    topology : Topology
        Any strongly connected digraph (regular or not).
    chunks : int
        P, the number of equal chunks each shard is cut into (one chunk per link per step).
    seed : int
        Seed of the random choices (which chunk a link carries, ties between equally cheap links).
    link_cost : array of float, optional
        A cost per arc (e.g. alpha + chunk bytes / bandwidth, seconds): cheaper in-links are matched first.

    Returns
    -------
    GreedyResult

    Raises
    ------
    ValueError
        Bad `chunks`, a `link_cost` of the wrong shape, or a schedule beyond MAX_GREEDY_TRANSFERS.

    Notes
    -----
    O(S N d (N P / 64)) word operations for S steps: every node's in-links scan bitsets of the N P chunks.

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> r = greedy_allgather(build("ring(5)"))
    >>> r.steps, r.tau                    # a ring is filled link by link: N - 1 steps, tau (N-1)/N
    (4, Fraction(4, 5))
    """
    if not isinstance(chunks, (int, np.integer)) or isinstance(chunks, bool) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    g = topology
    n = g.nodes
    if n * (n - 1) * chunks > MAX_GREEDY_TRANSFERS:
        raise ValueError(f"{g.expr}: a greedy allgather with {chunks} chunk(s) per shard has "
                         f"{n * (n - 1) * chunks} transfers; the limit is {MAX_GREEDY_TRANSFERS}")
    if g.max_in_degree > MAX_GREEDY_DEGREE:
        raise ValueError(f"{g.expr}: in-degree {g.max_in_degree} exceeds {MAX_GREEDY_DEGREE}")
    in_arcs = g.in_arcs
    if link_cost is None:
        slot_cost = np.zeros(in_arcs.shape)
    else:
        cost = np.asarray(link_cost, dtype=float)
        if cost.shape != (g.arcs,) or not np.isfinite(cost).all():
            raise ValueError(f"link_cost needs one finite number per arc ({g.arcs} arcs)")
        slot_cost = np.where(in_arcs >= 0, cost[in_arcs], np.inf)
    t0 = time.perf_counter()
    real = (in_arcs >= 0).astype(np.int8)
    preds = np.ascontiguousarray(g.in_predecessors, dtype=np.int64)
    step, chunk, receiver, slot = _tacos(preds, real, np.ascontiguousarray(slot_cost, dtype=np.float64),
                                         int(chunks), int(seed))
    steps = int(step.max()) if step.size else 0
    arc = in_arcs[receiver, slot]
    source, part = chunk // chunks, chunk % chunks
    sched = Schedule.from_arrays(Collective.ALLGATHER, n, int(chunks), step, [Op.COPY] * steps, g.expr,
                                 source=source, sender=g.tails[arc], receiver=receiver, lane=g.lanes[arc],
                                 lo=part, hi=part + 1)
    tau = Fraction(g.degree * steps, n * int(chunks))
    return GreedyResult(sched, steps, tau, int(chunks), int(seed), time.perf_counter() - t0)


def greedy_schedule(topology: Topology, collective: Collective = Collective.ALLGATHER, *,
                    allgather: Schedule | None = None, link_cost=None, **kw) -> Schedule:
    """Greedy schedule of any collective: reduce-scatter = the greedy allgather of G^T reversed (dissertation
    section 5.4.6, paper Def. 5), allreduce = reduce-scatter then allgather. `link_cost` is per arc of
    `topology`; G^T's arcs take the cost of the arc of G they reverse."""
    ag = allgather if allgather is not None else greedy_allgather(topology, link_cost=link_cost, **kw).schedule
    if collective is Collective.ALLGATHER:
        return ag
    if topology.bidirectional and link_cost is None:
        base = ag
    else:
        gt = topology.transpose()
        cost_t = None
        if link_cost is not None:
            cost_t = np.asarray(link_cost, dtype=float)[topology.arc_index(gt.heads, gt.tails, gt.lanes)]
        base = greedy_allgather(gt, link_cost=cost_t, **kw).schedule
    rs = base.reverse(topology=topology.expr)
    return rs if collective is Collective.REDUCESCATTER else allreduce(rs, ag)


# ---------------------------------------------------------------------------------------------------
# the compiled matcher
# ---------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _pick_bit(cand: np.ndarray, total: int, r: int) -> int:
    """Index of the r-th set bit (0-based) of the bitset `cand` holding `total` bits."""
    for j in range(cand.size):
        c = _ctpop(cand[j])
        if r < c:
            x = cand[j]
            for b in range(64):
                if (x >> np.uint64(b)) & np.uint64(1):
                    if r == 0:
                        return j * 64 + b
                    r -= 1
        else:
            r -= c
    return -1


@njit(cache=True, nogil=True)
def _free_candidates(snap_w: np.ndarray, held_u: np.ndarray, taken: np.ndarray, out: np.ndarray) -> int:
    """out = chunks w held at the step's start, u lacks and no in-link of u carries yet; returns how many."""
    total = 0
    for j in range(out.size):
        x = snap_w[j] & ~held_u[j] & ~taken[j]
        out[j] = x
        total += _ctpop(x)
    return total


@njit(cache=True, nogil=True)
def _tacos(preds: np.ndarray, real: np.ndarray, slot_cost: np.ndarray, chunks: int, seed: int):
    """Steps of maximum link-chunk matchings until every node holds every chunk.

    preds (N, k): in-arc tails per slot (padding slots point at the node itself, real[u, s] = 0).
    Returns (step, chunk, receiver, slot) per transfer."""
    np.random.seed(seed)
    n, k = preds.shape
    total_chunks = n * chunks
    words = (total_chunks + 63) // 64
    held = np.zeros((n, words), dtype=np.uint64)
    for v in range(n):
        for p in range(chunks):
            c = v * chunks + p
            held[v, c // 64] |= np.uint64(1) << np.uint64(c % 64)
    missing = np.full(n, total_chunks - chunks, dtype=np.int64)
    transfers = n * (n - 1) * chunks
    out_step = np.empty(transfers, dtype=np.int32)
    out_chunk = np.empty(transfers, dtype=np.int64)
    out_recv = np.empty(transfers, dtype=np.int32)
    out_slot = np.empty(transfers, dtype=np.int16)
    snap = np.empty_like(held)
    taken = np.zeros(words, dtype=np.uint64)
    cand = np.empty(words, dtype=np.uint64)
    owner_chunk = np.full(k, -1, dtype=np.int64)       # the chunk each slot of u carries this step
    order = np.empty(k, dtype=np.int64)
    keys = np.empty(k, dtype=np.float64)
    parent = np.empty(k, dtype=np.int64)
    queue = np.empty(k, dtype=np.int64)
    seen = np.zeros(k, dtype=np.bool_)
    done = 0
    t = 0
    remaining = int(missing.sum())
    while remaining > 0:
        t += 1
        snap[:, :] = held
        progress = 0
        for u in range(n):
            if missing[u] == 0:
                continue
            taken[:] = 0
            m = 0
            for s in range(k):
                owner_chunk[s] = -1
                if real[u, s]:
                    order[m] = s
                    keys[m] = slot_cost[u, s] + 1e-9 * np.random.random()   # cheapest first, ties random
                    m += 1
            idx = np.argsort(keys[:m])
            sorted_slots = order[:m][idx]
            matched = 0
            for i in range(m):
                if matched >= missing[u]:
                    break
                s = sorted_slots[i]
                free = _free_candidates(snap[preds[u, s]], held[u], taken, cand)
                if free > 0:
                    c = _pick_bit(cand, free, np.random.randint(free))
                    owner_chunk[s] = c
                    taken[c // 64] |= np.uint64(1) << np.uint64(c % 64)
                    matched += 1
                    continue
                # augmenting path: s takes a chunk another slot carries, which moves to a free chunk
                seen[:] = False
                seen[s] = True
                head, tail = 0, 1
                queue[0] = s
                end = -1
                end_chunk = -1
                while head < tail and end < 0:
                    a = queue[head]
                    head += 1
                    w = preds[u, a]
                    for b in range(k):
                        cb = owner_chunk[b]
                        if cb < 0 or seen[b] or b == a:
                            continue
                        bit = np.uint64(1) << np.uint64(cb % 64)
                        if (snap[w, cb // 64] & bit) == 0:
                            continue                    # a cannot carry b's chunk
                        seen[b] = True
                        parent[b] = a
                        queue[tail] = b
                        tail += 1
                        free_b = _free_candidates(snap[preds[u, b]], held[u], taken, cand)
                        if free_b > 0:
                            end = b
                            end_chunk = _pick_bit(cand, free_b, np.random.randint(free_b))
                            break
                if end < 0:
                    continue
                # shift along the path: end takes end_chunk, each parent takes its child's old chunk
                b = end
                c = end_chunk
                taken[c // 64] |= np.uint64(1) << np.uint64(c % 64)
                while True:
                    old = owner_chunk[b]
                    owner_chunk[b] = c
                    if b == s:
                        break
                    c = old
                    b = parent[b]
                matched += 1
            for s in range(k):
                c = owner_chunk[s]
                if c < 0:
                    continue
                out_step[done] = t
                out_chunk[done] = c
                out_recv[done] = u
                out_slot[done] = s
                done += 1
                held[u, c // 64] |= np.uint64(1) << np.uint64(c % 64)
                missing[u] -= 1
                remaining -= 1
                progress += 1
        if progress == 0:          # impossible on a strongly connected topology; never loop forever
            break
    return out_step[:done], out_chunk[:done], out_recv[:done], out_slot[:done]


def warm() -> None:
    """Compile (or load from numba's cache) the matcher on a tiny input."""
    preds = np.array([[1], [0]], dtype=np.int64)
    _tacos(preds, np.ones((2, 1), dtype=np.int8), np.zeros((2, 1)), 1, 0)
