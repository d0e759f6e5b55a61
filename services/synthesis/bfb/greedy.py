"""TACOS: event-driven greedy link-chunk matching on the time-expanded network (Won's dissertation, chapter 5,
Algorithms 1 and 2 and section 5.4.7; digest `collective-synthesis-dissertation.md` section 4).

The time-expanded network (TEN) has a copy of every node at every instant; a link (w, u) of latency alpha_l
and bandwidth b_l becomes TEN edges from (w, t) to (u, t + alpha_l + m / b_l) for a chunk of m bytes, and a
**link-chunk match** puts one chunk on one TEN edge (at most one chunk per edge: no link is congested). As
TACOS's released synthesizer does (digest 4.3, implementation notes), time is real-valued and advances from
event to event: a link is busy for the whole alpha_l + m / b_l of its chunk, a chunk is held by its receiver
when it arrives (possession changes on arrival, never when the match is made), and **a link takes its next
useful chunk the moment it is free** (link-centric matching: the chunk its tail holds, its head lacks and no
other link is already bringing). When a tail holds nothing useful its link waits for the next arrival at the
tail. Which useful chunk (section 5.4.7 lets the choice follow the links' costs; TACOS itself draws at random):
- the widest (`ChunkLayout` cuts shards into chunks of several widths, "chunking per shard": the narrow ones,
  left for last, let the links finish together);
- one no other in-neighbour of the head holds or is receiving (only this link can bring it soon);
- held by the fewest nodes (rare chunks first keep every tail holding something its heads lack), then at
  random from a seeded generator.
A link declines when its chunk would arrive after the head's other, busy in-links could bring everything the
head still lacks (the end game: a slow link must not carry the last chunk), and waits for the next arrival at
its head. Links free at the same instant are matched cheapest first ("choose the lowest-cost link").

The matches are emitted as a step schedule in the paper's tuple IR so that the model checker (App. B,
Definition 4) and the compilers take it like any other: transfers in order of their start times, each in
the step after both the transfer that brought its chunk to the sender and the previous transfer on its link
(so every link sends in step order = start order, and the sender holds the chunk at the start of the step).
Replayed the way the runtimes run a schedule (every link a FIFO in step order, a transfer starting when its
link is free and its chunk has arrived), every transfer starts no later than in the simulation (exactly then,
unless its link waited, below): the result's `time_s` is that replay's, `schedule.dependency`'s
dependency-driven time. Each node receives every chunk once.

Reduce-scatter is the reverse of the allgather synthesized on G^T (section 5.4.6): reversing time maps a
valid timed allgather onto a valid timed reduce-scatter of the same length; allreduce is reduce-scatter then
allgather, as for BFB. `tacos_allgather` picks the chunk layout on the dependency-driven time;
`services.synthesis.bfb.compare` prices every scheduler the same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from services.synthesis.bfb.kernels import _ctpop
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.ir import Collective, Op, Schedule, allreduce
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.topology.graph import Topology
from services.synthesis.schedule.event_heap import heap_pop, heap_push

__all__ = ["GreedyResult", "greedy_allgather", "greedy_schedule", "tacos_allgather", "chunk_options", "ChunkLayout",
           "SIMULATION_BUDGET", "MAX_GREEDY_TRANSFERS"]

MAX_GREEDY_TRANSFERS = 1 << 22     # N (N - 1) P transfers: 4.2 M rows (N = 2048 at P = 1)
SCAN = 256
"""Useful chunks a link weighs per choice (from a random word of the bitset on), bounding a choice's cost."""


@dataclass
class GreedyResult:
    """A TACOS allgather: the step schedule, its dependency-driven time (`schedule.dependency`: as the runtimes
    run it) and the event simulation's (seconds; shard times without link costs: equal unless a link waited in
    the simulation, which the replay does not), its chunk layout, the seed and the build seconds.
    `start_s`/`finish_s` are per transfer of `schedule` (its row order), from the event simulation."""

    schedule: Schedule
    time_s: float
    simulated_s: float
    layout: "ChunkLayout"
    seed: int
    seconds: float
    start_s: np.ndarray | None = None
    finish_s: np.ndarray | None = None
    waits: int = 0              # times a link declined a chunk and waited (none: time_s == simulated_s)

    @property
    def steps(self) -> int:
        return self.schedule.steps


def _check_chunks(chunks) -> int:
    if not isinstance(chunks, (int, np.integer)) or isinstance(chunks, bool) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    return int(chunks)


@dataclass(frozen=True)
class ChunkLayout:
    """How shards are cut (TACOS's chunks; "chunking per shard"): every shard into P equal blocks, and the
    blocks of every `every`-th shard (v % every == 0) further into a half, a quarter, ... down to two pieces of
    1/2^h of the block (h + 1 pieces). Few wide chunks keep the latencies paid per transfer few; the narrow
    ones, taken last (links prefer wide chunks), balance the links at the end."""

    chunks: int = 1
    halvings: int = 0
    every: int = 1

    def __post_init__(self):
        _check_chunks(self.chunks)
        for name, lo, hi in (("halvings", 0, 20), ("every", 1, 1 << 30)):
            x = getattr(self, name)
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not lo <= x <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {x!r}")

    @property
    def grid(self) -> int:
        return self.chunks << self.halvings

    def pieces(self, split: bool) -> np.ndarray:
        """(lo, hi) of one shard's chunks on the grid, split further or not."""
        block = 1 << self.halvings
        widths = ([block >> k for k in range(1, self.halvings + 1)] + [1]) if split and self.halvings else [block]
        edges = np.concatenate([[0], np.cumsum(widths)])
        return np.array([[i * block + edges[k], i * block + edges[k + 1]] for i in range(self.chunks)
                         for k in range(len(widths))], dtype=np.int64)

    def table(self, nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source, lo, hi) of every chunk of every shard, by source.

        >>> src, lo, hi = ChunkLayout(1, 2, every=2).table(3)
        >>> src.tolist(), lo.tolist(), hi.tolist()
        ([0, 0, 0, 1, 2, 2, 2], [0, 2, 3, 0, 0, 2, 3], [2, 3, 4, 4, 2, 3, 4])
        """
        split, whole = self.pieces(True), self.pieces(False)
        parts = [split if v % self.every == 0 else whole for v in range(nodes)]
        src = np.repeat(np.arange(nodes, dtype=np.int64), [len(x) for x in parts])
        both = np.concatenate(parts)
        return src, both[:, 0].copy(), both[:, 1].copy()

    def count(self, nodes: int) -> int:
        """Chunks over all shards."""
        split = (nodes + self.every - 1) // self.every
        per = self.chunks * (self.halvings + 1)
        return split * per + (nodes - split) * self.chunks


def greedy_allgather(topology: Topology, *, chunks: int = 1, halvings: int = 0, every: int = 1, seed: int = 0,
                     costs=None, size_bytes: float | None = None) -> GreedyResult:
    """TACOS allgather of any strongly connected topology, shards cut by `ChunkLayout(chunks, halvings, every)`.

    Parameters
    ----------
    topology : Topology
        Any strongly connected digraph (regular or not, parallel arcs and self-loops allowed).
    chunks, halvings, every : int
        The chunk layout (`ChunkLayout`).
    seed : int
        Seed of the tie-breaking among equally good chunks.
    costs : LinkCosts, optional
        Per-arc latency and bandwidth; a chunk of m bytes occupies arc l for alpha_l + m / b_l. Without it every
        arc carries a whole shard in one unit of time (no latency).
    size_bytes : float
        M, the collective's size (required with `costs`).

    Raises
    ------
    ValueError
        A bad layout, `costs` on another topology or without a size, or a schedule beyond MAX_GREEDY_TRANSFERS.

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> r = greedy_allgather(build("ring(5)"))
    >>> r.schedule.transfers, r.time_s        # a ring is filled link by link: N - 1 shard times
    (20, 4.0)
    """
    layout = ChunkLayout(chunks, halvings, every)
    g = topology
    n = g.nodes
    count = layout.count(n)
    if (n - 1) * count > MAX_GREEDY_TRANSFERS:
        raise ValueError(f"{g.expr}: a TACOS allgather with {count} chunks has {(n - 1) * count} transfers; "
                         f"the limit is {MAX_GREEDY_TRANSFERS}")
    if costs is None:
        alpha, shard_time = np.zeros(g.arcs), np.ones(g.arcs)
    else:
        if not isinstance(size_bytes, (int, float, np.integer, np.floating)) or isinstance(size_bytes, bool) \
                or not np.isfinite(size_bytes) or size_bytes <= 0:
            raise ValueError(f"size_bytes must be a positive number with costs, got {size_bytes!r}")
        if costs.topology is not g and costs.topology.expr != g.expr:
            raise ValueError(f"costs are for {costs.topology.expr}, not {g.expr}")
        alpha, shard_time = costs.alpha_s, size_bytes / n / costs.bandwidth_Bps
    t0 = time.perf_counter()
    src, lo, hi = layout.table(n)
    grid = layout.grid
    useful = g.tails != g.heads                       # a self-loop carries nothing useful
    arcs = np.flatnonzero(useful)
    tails = g.tails[arcs].astype(np.int64)
    heads = g.heads[arcs].astype(np.int64)
    out_ptr, out_arcs = _csr(tails, n)
    in_ptr, in_arcs = _csr(heads, n)
    shard_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
    arc, chunk, start, finish, complete, waits = _simulate(
        tails, heads, np.ascontiguousarray(alpha[arcs], np.float64),
        np.ascontiguousarray(shard_time[arcs] / grid, np.float64), hi - lo, shard_ptr, grid, out_ptr, out_arcs,
        in_ptr, in_arcs, n, int(seed))
    if not complete:
        raise ValueError(f"{g.expr}: not every node can be reached (the topology is not strongly connected)")
    step = _steps(arc, chunk, heads, tails, count, n, arcs.size)
    arc_g = arcs[arc]
    steps = int(step.max()) if step.size else 0
    order = np.argsort(step, kind="stable")
    sched = Schedule.from_arrays(Collective.ALLGATHER, n, grid, step, [Op.COPY] * steps, g.expr,
                                 source=src[chunk], sender=g.tails[arc_g], receiver=g.heads[arc_g],
                                 lane=g.lanes[arc_g], lo=lo[chunk], hi=hi[chunk])
    if costs is None:                                 # unit costs: a shard of 1 byte per second, no latency
        costs, size_bytes = LinkCosts(g, np.zeros(g.arcs), np.ones(g.arcs)), float(n)
    simulated = float(finish.max()) if finish.size else 0.0
    return GreedyResult(sched, dependency_time(sched, costs, size_bytes), simulated, layout, int(seed),
                        time.perf_counter() - t0, start[order], finish[order], int(waits))


SIMULATION_BUDGET = 1 << 21
"""Transfers simulated over all the layouts `tacos_allgather` tries (2.1 M: every layout up to N = 256, only
the first at N = 1024, about 6 s unloaded)."""


def chunk_options(nodes: int, chunks: int = 1) -> list[ChunkLayout]:
    """The layouts `tacos_allgather` tries, in order: P = `chunks` blocks per shard whole; every 16th shard's
    halved three times, every 32nd's four times, every one's twice; 2P and 4P blocks, 4P blocks halved once; as
    many as fit SIMULATION_BUDGET transfers in all (at least the first) and MAX_GREEDY_TRANSFERS each."""
    p = _check_chunks(chunks)
    out, spent = [], 0
    for layout in (ChunkLayout(p), ChunkLayout(p, 3, 16), ChunkLayout(p, 4, 32), ChunkLayout(p, 2),
                   ChunkLayout(2 * p), ChunkLayout(4 * p), ChunkLayout(4 * p, 1)):
        rows = (nodes - 1) * layout.count(nodes)
        if rows > MAX_GREEDY_TRANSFERS or (out and spent + rows > SIMULATION_BUDGET):
            continue
        out.append(layout)
        spent += rows
    return out


def tacos_allgather(topology: Topology, costs, size_bytes: float, *, layouts=None, seed: int = 0) -> GreedyResult:
    """The TACOS allgather fastest at `size_bytes` on `costs` (a `LinkCosts`) among `layouts` (ChunkLayout;
    default `chunk_options`): each simulated, the shortest dependency-driven time kept (ties: the earlier
    layout)."""
    options = chunk_options(topology.nodes) if layouts is None else list(layouts)
    if not options:
        raise ValueError(f"{topology.expr}: even one chunk per shard exceeds {MAX_GREEDY_TRANSFERS} transfers")
    best: GreedyResult | None = None
    t0 = time.perf_counter()
    for lay in options:
        r = greedy_allgather(topology, chunks=lay.chunks, halvings=lay.halvings, every=lay.every, seed=seed,
                             costs=costs, size_bytes=size_bytes)
        if best is None or r.time_s < best.time_s * (1 - 1e-12):
            best = r
    assert best is not None                # options is not empty
    best.seconds = time.perf_counter() - t0
    return best


def greedy_schedule(topology: Topology, collective: Collective = Collective.ALLGATHER, *,
                    allgather: Schedule | None = None, costs=None, **kw) -> Schedule:
    """TACOS schedule of any collective: reduce-scatter = the TACOS allgather of G^T reversed (dissertation
    section 5.4.6, paper Def. 5; the reversed timed schedule is a valid timed reduce-scatter of the same
    length), allreduce = reduce-scatter then allgather. `costs` (a `LinkCosts` of `topology`) go to G^T as
    the arcs of G they reverse; `kw` to `greedy_allgather`."""
    ag = allgather if allgather is not None else greedy_allgather(topology, costs=costs, **kw).schedule
    if collective is Collective.ALLGATHER:
        return ag
    gt = topology.transpose()
    base = greedy_allgather(gt, costs=None if costs is None else costs.transposed(gt), **kw).schedule
    rs = base.reverse(topology=topology.expr)
    return rs if collective is Collective.REDUCESCATTER else allreduce(rs, ag)


def _csr(tails: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(tails, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(tails, minlength=n))]).astype(np.int64)
    return ptr, order.astype(np.int64)


# ---------------------------------------------------------------------------------------------------
# the compiled event simulation
# ---------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _pick(held, pend, w, u, b, in_ptr, in_arcs, tails, holders, width, narrow, scratch, rng):
    """The chunk link b = (w, u) takes: useful (held by w, neither held by u nor on its way to u); the widest
    (the narrowest when `narrow`), then one no other in-neighbour of u holds or is receiving (no other link can
    bring it soon), then the one held by the fewest nodes; ties at random (at most SCAN candidates weighed).
    -1 when there is none."""
    any_useful = False
    for j in range(scratch.shape[1]):
        x = held[w, j] & ~held[u, j] & ~pend[u, j]
        scratch[0, j] = x
        if x:
            any_useful = True
            others = np.uint64(0)
            for i in range(in_ptr[u], in_ptr[u + 1]):
                e = in_arcs[i]
                if e != b:
                    others |= held[tails[e], j] | pend[tails[e], j]
            scratch[1, j] = x & ~others
        else:
            scratch[1, j] = np.uint64(0)
    if not any_useful:
        return -1
    words = scratch.shape[1]
    rng[0] ^= rng[0] << np.uint64(13)                       # xorshift64: the tie-breaks' random numbers
    rng[0] ^= rng[0] >> np.uint64(7)
    rng[0] ^= rng[0] << np.uint64(17)
    offset = int(rng[0] % np.uint64(words))
    best, best_w, best_x, best_count, best_key, seen = -1, -1 << 62, -1, 1 << 62, np.uint64(0), 0
    for jj in range(words):                                 # from a random word on, at most SCAN candidates
        j = (jj + offset) % words
        x = scratch[0, j]
        ex = scratch[1, j]
        while x:
            low = x & (~x + np.uint64(1))
            bit = _ctpop(low - np.uint64(1))
            x ^= low
            c = j * 64 + bit
            wc = -width[c] if narrow else width[c]
            xc = 1 if (ex & low) else 0
            k = holders[c]
            key = (np.uint64(c) * np.uint64(0x9E3779B97F4A7C15)) ^ rng[0]
            if wc > best_w or (wc == best_w and (xc > best_x or (xc == best_x and (
                    k < best_count or (k == best_count and key < best_key))))):
                best, best_w, best_x, best_count, best_key = c, wc, xc, k, key
            seen += 1
        if seen >= SCAN:
            break
    return best


@njit(cache=True, nogil=True)
def _others_deliver(x, b, t, until, in_ptr, in_arcs, free_at, alpha, unit_time):
    """Grid units the busy in-links of x other than b can bring by `until`, continuing from when each is free
    (an estimate: it assumes they keep finding something useful). Idle links count nothing, so two idle links
    never wait for each other, and a link only waits while another is busy (whose arrival wakes it)."""
    units = 0.0
    for i in range(in_ptr[x], in_ptr[x + 1]):
        e = in_arcs[i]
        if e == b or free_at[e] <= t:
            continue
        s = free_at[e]
        if until > s + alpha[e]:
            units += (until - s - alpha[e]) / unit_time[e]
    return units


@njit(cache=True, nogil=True)
def _simulate(tails, heads, alpha, unit_time, width, shard_ptr, grid, out_ptr, out_arcs, in_ptr, in_arcs, n,
              seed):
    """Event-driven link-chunk matching. Chunks shard_ptr[v] .. shard_ptr[v + 1] - 1 are shard v's, chunk c is
    `width[c]` grid units wide (a shard is `grid` units) and occupies arc a for alpha[a] + width[c] *
    unit_time[a]. A link declines a chunk that would arrive after the head's other in-links could bring
    everything the head still lacks (it tries its narrowest useful chunk first, then waits for the next event at
    its head). Returns per transfer (arc, chunk, start,
    finish) in start order, whether every node got every chunk and how many times a link waited."""
    rng = np.array([np.uint64(seed) * np.uint64(0x2545F4914F6CDD1D) + np.uint64(0x9E3779B97F4A7C15)])
    m = tails.size
    total = width.size
    words = (total + 63) // 64
    held = np.zeros((n, words), dtype=np.uint64)
    pend = np.zeros((n, words), dtype=np.uint64)
    holders = np.ones(total, dtype=np.int64)
    lacking = np.zeros(n, dtype=np.float64)                 # grid units neither held nor on their way
    for v in range(n):
        lacking[v] = (n - 1) * grid
        for c in range(shard_ptr[v], shard_ptr[v + 1]):
            held[v, c >> 6] |= np.uint64(1) << np.uint64(c & 63)
    transfers = (n - 1) * total
    out_arc = np.empty(transfers, dtype=np.int64)
    out_chunk = np.empty(transfers, dtype=np.int64)
    out_start = np.empty(transfers, dtype=np.float64)
    out_finish = np.empty(transfers, dtype=np.float64)
    carrying = np.full(m, -1, dtype=np.int64)
    free_at = np.zeros(m, dtype=np.float64)
    ht = np.empty(m + 1, dtype=np.float64)
    ha = np.empty(m + 1, dtype=np.int64)
    size = 0
    done = 0
    cand = np.empty(2 * m + 1, dtype=np.int64)
    scratch = np.empty((2, words), dtype=np.uint64)
    speed = alpha + unit_time                                # orders links cheapest first
    t = 0.0
    k = 0
    waits = 0
    first = np.argsort(speed, kind="mergesort")
    for a in range(m):                                       # t = 0: every link may start
        cand[k] = first[a]
        k += 1
    while True:
        for i in range(1, k):                                # cheapest first (insertion sort: k is small)
            b = cand[i]
            j = i - 1
            while j >= 0 and speed[cand[j]] > speed[b]:
                cand[j + 1] = cand[j]
                j -= 1
            cand[j + 1] = b
        for i in range(k):
            b = cand[i]
            x = heads[b]
            if carrying[b] >= 0 or lacking[x] <= 0:
                continue
            c = _pick(held, pend, tails[b], x, b, in_ptr, in_arcs, tails, holders, width, False, scratch, rng)
            if c < 0:
                continue
            f = t + (alpha[b] + width[c] * unit_time[b])
            if _others_deliver(x, b, t, f, in_ptr, in_arcs, free_at, alpha, unit_time) >= lacking[x]:
                c = _pick(held, pend, tails[b], x, b, in_ptr, in_arcs, tails, holders, width, True, scratch, rng)
                f = t + (alpha[b] + width[c] * unit_time[b])
                if _others_deliver(x, b, t, f, in_ptr, in_arcs, free_at, alpha, unit_time) >= lacking[x]:
                    waits += 1
                    continue                                 # the others finish x sooner: wait
            pend[x, c >> 6] |= np.uint64(1) << np.uint64(c & 63)
            lacking[x] -= width[c]
            holders[c] += 1
            carrying[b] = c
            free_at[b] = f
            out_arc[done], out_chunk[done], out_start[done], out_finish[done] = b, c, t, f
            done += 1
            size = heap_push(ht, ha, size, f, b)
        if size == 0:
            break
        t, a, size = heap_pop(ht, ha, size)
        u = heads[a]
        c = carrying[a]
        carrying[a] = -1
        bit = np.uint64(1) << np.uint64(c & 63)
        held[u, c >> 6] |= bit
        pend[u, c >> 6] &= ~bit
        # links that may start now: u's idle in-links (this one, and any that waited for u's others) and
        # u's idle out-links (u holds something new)
        k = 0
        for i in range(in_ptr[u], in_ptr[u + 1]):
            b = in_arcs[i]
            if carrying[b] < 0:
                cand[k] = b
                k += 1
        for i in range(out_ptr[u], out_ptr[u + 1]):
            b = out_arcs[i]
            if carrying[b] < 0:
                cand[k] = b
                k += 1
    complete = done == transfers
    return out_arc[:done], out_chunk[:done], out_start[:done], out_finish[:done], complete, waits


@njit(cache=True, nogil=True)
def _steps(arc, chunk, heads, tails, total, n, m):
    """Step of every transfer (given in start order): one after the step of the transfer that brought its chunk
    to the sender and one after the previous transfer on its link."""
    arrived_step = np.zeros((n, total), dtype=np.int32)     # 0: held from the start (own shard)
    last = np.zeros(m, dtype=np.int32)
    out = np.empty(arc.size, dtype=np.int64)
    for i in range(arc.size):
        a = arc[i]
        s = max(arrived_step[tails[a], chunk[i]], last[a]) + 1
        out[i] = s
        last[a] = s
        arrived_step[heads[a], chunk[i]] = s
    return out


def warm() -> None:
    """Compile (or load from numba's cache) the simulation on a tiny input."""
    tails = np.array([0, 1], dtype=np.int64)
    heads = np.array([1, 0], dtype=np.int64)
    ptr, arcs = _csr(tails, 2)
    arc, chunk, start, finish, _, _ = _simulate(tails, heads, np.zeros(2), np.ones(2), np.ones(2, np.int64), ptr, 1,
                                             ptr, arcs, ptr, arcs, 2, 0)
    _steps(arc, chunk, heads, tails, 2, 2, 2)
