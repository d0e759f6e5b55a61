"""Tree packings run event-driven: every arc forwards the pieces its trees route through it the moment it is free,
batching whatever has arrived into one message.

A step-pipelined tree schedule (`pipeline`) puts block c of every tree into step c + depth: every (arc, step) group
then waits for pieces of many trees at many depths, so as the runtimes run it (`schedule.dependency`) the groups
stay in lockstep and the pipeline's fill costs about (H - 1) / (2 P) of the cut bound on top of P alpha (8 x 8
torus, 1 GiB: 1.7-3 %). Here the same trees (`packing`, the rate x* wherever it is reached) are simulated on the
links' own latencies and bandwidths, as TACOS simulates its matches (Won's dissertation, section 5.4: a link takes
its next useful chunk the moment it is free), but along the trees' fixed routes:

- each tree's share of its root's shard is cut into P pieces (equal, or tapered: the last few halve one after
  another, `taper_units`); a piece held by a node becomes ready on the arcs to that node's children in the tree;
- a free arc takes, as one message (alpha_l + bytes / b_l), the pieces ready on it, those whose receiver has the
  largest subtree in its tree first (they feed the most arcs; or the most work below it, the sum of 1 / b_l
  over the subtree's arcs, so pieces bound for slow arcs go first), up to a cap of seconds of data (at least one
  piece): a bottleneck arc, whose pieces pile up while it sends, sends few large messages (few latencies), an arc
  with slack forwards small ones at once (short fill). The cap may also grow with the time since the start and
  shrink towards the expected end, so the first and last messages are small;
- fed runs also cap a message into v at `feed` times the smallest backlog (ready seconds plus the rest of the
  message in flight) among v's out-arcs that still await data: a large message holds every piece in it until
  its end, so an out-arc of v with a thin backlog would go idle behind it;
- a node holds a piece when the message carrying it arrives.

Where every arc is tight (the two-tier torus(8, 8): each node's four in-links are its cut), an arc's time is its
load plus one alpha per message plus its idle time, so the makespan is the cut bound plus the worst arc's
messages x alpha plus its idle time. Without the feed limit, messages large enough for few latencies starve
some arcs in mid-run (their own root's data spent, the next pieces held in a neighbour's large message); with
it they stay large where the backlogs allow (20-60 messages per arc instead of 54-118), and the tapered
pieces and the work-first order shorten the drain (the last pieces a slow arc sends are small and rarely bound
for another slow arc). Chunk counts per tree (more pieces for heavier trees) add nothing here: the messages
batch pieces of many trees per arc, and splitting every tree into weight-1 copies (pieces of equal bytes) gives
the same makespan (1.00433x against 1.00434x the cut bound on the two-tier torus, 1 GiB).

The messages are emitted as a step schedule (the tuple IR, App. B): each message is one (arc, step) group, in the
step after the previous message on its arc and after every message that brought one of its pieces to the sender,
so the model checker's holding rule holds by construction and the dependency-driven time of the schedule is the
simulation's makespan (each group starts when its link is free and its pieces have arrived, exactly as
simulated). Every arc still carries exactly its trees' load, so the bandwidth term stays the packing's
(M/N) / (x unit); what the simulation adds is only latency and fill, which is what P, `batch`, `feed` and the
taper trade. Piece c of a tree of weight mu_j covers [p U_c + o_j u_c, p U_c + (o_j + mu_j) u_c) on a grid of
p U units per shard (u_c the piece's relative size, U_c the sizes before it, U their sum, o_j the weights of
the root's trees before j: block c holds every tree of the root side by side, as in `pipeline`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from services.synthesis.forest.packing import Packing
from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.event_heap import heap_pop, heap_push

__all__ = ["StreamResult", "stream_allgather", "stream_options", "fastest_stream", "stream_grid", "PRIORITIES",
           "MAX_STREAM_DELIVERIES", "STREAM_BUDGET", "FED_BUDGET", "FED_OPTIONS", "taper_units"]

MAX_STREAM_DELIVERIES = 1 << 22
"""Pieces delivered over all trees (trees x (N - 1) x P): the schedule's transfers, 4.2 M as the pipeline's."""
STREAM_BUDGET = 3 << 20
"""Deliveries simulated over all the options `fastest_stream` tries (3.1 M: the whole grid at 64 nodes, three
options at N = 1024)."""
BATCH_FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 128)
"""Message caps tried, as fractions of the packing's bandwidth term, most often best first."""
GROWTHS = (np.inf, 0.25, 0.1)
"""Cap growth tried: a message starting at time t may also be at most `grow` times min(t, T - t) long (T the
bandwidth term), so messages start small, grow, and shrink again towards the end (inf: the cap alone)."""


@dataclass
class StreamResult:
    """The event-driven tree schedule and its simulated makespan (= its dependency-driven time)."""

    schedule: Schedule | None          # None when only simulated
    time_s: float
    pieces: int
    batch_s: float
    messages: int
    priority: str
    grow: float = np.inf
    feed: float = np.inf
    taper: int = 0


@njit(cache=True, nogil=True)
def _qpush(qk, qi, lo, size, key, item):
    """Push onto the heap qk/qi[lo : lo + size] (smallest key first); returns the new size."""
    i = size
    qk[lo + i], qi[lo + i] = key, item
    while i > 0:
        p = (i - 1) >> 1
        if qk[lo + p] <= qk[lo + i]:
            break
        qk[lo + p], qk[lo + i] = qk[lo + i], qk[lo + p]
        qi[lo + p], qi[lo + i] = qi[lo + i], qi[lo + p]
        i = p
    return size + 1


@njit(cache=True, nogil=True)
def _qpop(qk, qi, lo, size):
    item = qi[lo]
    size -= 1
    qk[lo], qi[lo] = qk[lo + size], qi[lo + size]
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < size and qk[lo + a] < qk[lo + m]:
            m = a
        if b < size and qk[lo + b] < qk[lo + m]:
            m = b
        if m == i:
            break
        qk[lo + m], qk[lo + i] = qk[lo + i], qk[lo + m]
        qi[lo + m], qi[lo + i] = qi[lo + i], qi[lo + m]
        i = m
    return item, size


@njit(cache=True, nogil=True)
def _simulate(n, arcs, tails, heads, parent, root, key, seg, piece_bytes, inv_bw, pieces, alpha, batch_s, grow,
              horizon, feed):
    """Event-driven run of the trees (`parent[j, v]` arc into v in tree j, -1 at its root `root[j]`); piece c of
    tree j has piece_bytes[j, c] bytes, arc e takes inv_bw[e] seconds per byte; arc e's ready pieces wait in a
    heap in seg[e] .. seg[e + 1] (its deliveries), smallest (key[j * pieces + c, receiver], arrival) first; with
    a finite `feed` a message into v carries at most feed x the smallest backlog among v's out-arcs still
    awaiting data (at least one piece). Returns (makespan, messages, per delivery (tree, piece, node, message),
    per message (arc, step))."""
    trees = parent.shape[0]
    first = np.full((trees, n), -1, np.int64)          # children lists per tree
    nxt = np.full((trees, n), -1, np.int64)
    for j in range(trees):
        for v in range(n):
            e = parent[j, v]
            if e >= 0:
                u = tails[e]
                nxt[j, v] = first[j, u]
                first[j, u] = v
    total = trees * (n - 1) * pieces
    it_tree = np.empty(total, np.int64)
    it_piece = np.empty(total, np.int64)
    it_node = np.empty(total, np.int64)
    it_msg = np.full(total, -1, np.int64)
    it_next2 = np.full(total, -1, np.int64)          # deliveries of one message, chained
    mhead = np.full(total, -1, np.int64)
    qk = np.empty(total, np.int64)
    qi = np.empty(total, np.int64)
    qsize = np.zeros(arcs, np.int64)
    busy = np.zeros(arcs, np.bool_)
    last_step = np.zeros(arcs, np.int64)
    piece_step = np.zeros((trees * pieces, n), np.int64)     # step of the message that brought piece (j, c) to v
    hk = np.empty(total + 2 * arcs + 4, np.float64)
    hv = np.empty(total + 2 * arcs + 4, np.int64)
    size = 0
    count = 0
    msg_arc = np.empty(total, np.int64)
    msg_step = np.empty(total, np.int64)
    messages = 0
    rem = np.zeros(arcs, np.float64)                    # seconds of data arc e has still to send
    for j in range(trees):
        for v in range(n):
            e = parent[j, v]
            if e >= 0:
                rem[e] += piece_bytes[j].sum() * inv_bw[e]
    qsec = np.zeros(arcs, np.float64)                   # seconds of data ready on arc e
    until = np.zeros(arcs, np.float64)                  # when arc e's last message ends
    optr = np.zeros(n + 1, np.int64)                    # out-arcs per node
    for e in range(arcs):
        optr[tails[e] + 1] += 1
    for v in range(n):
        optr[v + 1] += optr[v]
    oarc = np.empty(arcs, np.int64)
    ofill = optr[:-1].copy()
    for e in range(arcs):
        oarc[ofill[tails[e]]] = e
        ofill[tails[e]] += 1
    for j in range(trees):                              # every root holds its pieces at time 0
        r = root[j]
        for c in range(pieces):
            v = first[j, r]
            while v >= 0:
                e = parent[j, v]
                it_tree[count], it_piece[count], it_node[count] = j, c, v
                qsize[e] = _qpush(qk, qi, seg[e], qsize[e], key[j * pieces + c, v] * total + count, count)
                qsec[e] += piece_bytes[j, c] * inv_bw[e]
                count += 1
                v = nxt[j, v]
    for e in range(arcs):
        if qsize[e] > 0:
            size = heap_push(hk, hv, size, 0.0, e)
    makespan = 0.0
    while size > 0:
        t, e, size = heap_pop(hk, hv, size)
        if e >= arcs:                                   # a message arrives: its pieces are held by its head
            m = e - arcs
            a = msg_arc[m]
            busy[a] = False
            i = mhead[m]
            while i >= 0:
                j, c, v = it_tree[i], it_piece[i], it_node[i]
                piece_step[j * pieces + c, v] = msg_step[m]
                w = first[j, v]
                while w >= 0:
                    f = parent[j, w]
                    it_tree[count], it_piece[count], it_node[count] = j, c, w
                    qsize[f] = _qpush(qk, qi, seg[f], qsize[f], key[j * pieces + c, w] * total + count, count)
                    qsec[f] += piece_bytes[j, c] * inv_bw[f]
                    if not busy[f] and qsize[f] == 1:
                        size = heap_push(hk, hv, size, t, f)
                    count += 1
                    w = nxt[j, w]
                i = it_next2[i]
            if t > makespan:
                makespan = t
            if qsize[a] > 0:
                size = heap_push(hk, hv, size, t, a)
            continue
        if busy[e] or qsize[e] == 0:
            continue
        # a free arc with ready pieces: one message of the ready pieces by priority, up to batch_s seconds
        m = messages
        messages += 1
        dur = 0.0
        step = last_step[e] + 1
        prev = -1
        cap_s = batch_s
        if grow < np.inf:
            edge = max(min(t, horizon - t), 0.0)
            if grow * edge < cap_s:
                cap_s = grow * edge
        if feed < np.inf:                               # do not starve the arcs this message feeds
            h = heads[e]
            for k in range(optr[h], optr[h + 1]):
                f = oarc[k]
                if rem[f] > qsec[f] * (1 + 1e-9):       # f still awaits data
                    backlog = qsec[f] + max(until[f] - t, 0.0)
                    if feed * backlog < cap_s:
                        cap_s = feed * backlog
        while qsize[e] > 0:
            i = qi[seg[e]]
            j, c = it_tree[i], it_piece[i]
            d = piece_bytes[j, c] * inv_bw[e]
            if prev >= 0 and dur + d > cap_s:
                break
            i, qsize[e] = _qpop(qk, qi, seg[e], qsize[e])
            dur += d
            rem[e] -= d
            qsec[e] -= d
            s = piece_step[j * pieces + c, tails[e]] + 1
            if s > step:
                step = s
            it_msg[i] = m
            if prev < 0:
                mhead[m] = i
            else:
                it_next2[prev] = i
            prev = i
        last_step[e] = step
        msg_arc[m], msg_step[m] = e, step
        busy[e] = True
        until[e] = t + alpha[e] + dur
        size = heap_push(hk, hv, size, t + alpha[e] + dur, arcs + m)
    return makespan, messages, it_tree[:count], it_piece[:count], it_node[:count], it_msg[:count], \
        msg_arc[:messages], msg_step[:messages]


@njit(cache=True, nogil=True)
def _subtrees(parent, depth, tails, inv_bw, n):
    """Per tree and node: the nodes in its subtree, the longest path below it (hops) and the work below it (the
    sum of inv_bw over the arcs of its subtree)."""
    trees = parent.shape[0]
    size = np.ones((trees, n), np.int64)
    below = np.zeros((trees, n), np.int64)
    work = np.zeros((trees, n), np.float64)
    for j in range(trees):
        order = np.argsort(-depth[j], kind="mergesort")
        for k in range(n):
            v = order[k]
            e = parent[j, v]
            if e >= 0:
                u = tails[e]
                size[j, u] += size[j, v]
                work[j, u] += work[j, v] + inv_bw[e]
                if below[j, v] + 1 > below[j, u]:
                    below[j, u] = below[j, v] + 1
    return size, below, work


def stream_options(packing: Packing) -> list[int]:
    """Pieces per tree share offered: 1, 2, 4, ... within MAX_STREAM_DELIVERIES deliveries, at most 64."""
    rows = len(packing.trees) * (packing.topology.nodes - 1)
    out, p = [], 1
    while p <= 64 and p * rows <= MAX_STREAM_DELIVERIES:
        out.append(p)
        p *= 2
    return out


PRIORITIES = ("subtree", "height", "piece", "work")
"""Which ready piece a free arc sends first: the one whose receiver has the largest subtree in its tree (feeds
the most arcs), the longest path below it, the lowest piece index (then all by piece index), or the most work
below it (the sum of 1 / b_l over the arcs of the receiver's subtree: a piece bound for slow arcs goes first)."""


def taper_units(pieces: int, taper: int) -> np.ndarray:
    """Relative piece sizes of a tree share: the last `taper` pieces halve one after another (2^taper for the
    others), so the last pieces an arc sends are small (see the module docstring).

    >>> taper_units(6, 2).tolist()
    [4, 4, 4, 4, 2, 1]
    """
    if isinstance(taper, bool) or not isinstance(taper, (int, np.integer)) or not 0 <= taper < pieces:
        raise ValueError(f"taper must be an integer in [0, pieces), got {taper!r}")
    u = np.full(int(pieces), 1 << int(taper), np.int64)
    u[int(pieces) - int(taper):] = 1 << np.arange(int(taper) - 1, -1, -1)
    return u


def stream_allgather(packing: Packing, costs: LinkCosts, size_bytes: float, pieces: int,
                     batch_s: float, priority: str = "subtree", grow: float = np.inf, feed: float = np.inf,
                     taper: int = 0) -> StreamResult:
    """The trees of `packing` run event-driven on `costs` at `size_bytes` (see the module docstring): `pieces` per
    tree share (the last `taper` of them halving in size, `taper_units`), messages of at most `batch_s` seconds
    of data (with a finite `grow`, of at most grow x min(t, T - t) for a message starting at t, T the packing's
    bandwidth term; with a finite `feed`, of at most feed x the smallest backlog among the receiver's out-arcs
    still awaiting data; always at least one piece), `priority` one of PRIORITIES, as a step schedule whose
    dependency-driven time is the returned makespan.

    >>> from services.synthesis.topology.catalog import build
    >>> from services.synthesis.forest.packing import pack_trees
    >>> from services.synthesis.schedule.dependency import dependency_time
    >>> g = build("ring(4)")
    >>> costs = LinkCosts(g, np.full(g.arcs, 1e-5), np.full(g.arcs, 1e9))
    >>> r = stream_allgather(pack_trees(g, costs.bandwidth_Bps), costs, 1 << 20, 2, 1.0)
    >>> round(r.time_s * 1e6, 3) == round(dependency_time(r.schedule, costs, 1 << 20) * 1e6, 3)
    True
    """
    return _Run(packing, costs).run(size_bytes, pieces, batch_s, priority, emit=True, grow=grow, feed=feed,
                                    taper=taper)


class _Run:
    """One packing on one set of links, prepared once for several simulations."""

    def __init__(self, packing: Packing, costs: LinkCosts):
        g = packing.topology
        if costs.topology is not g and costs.topology.expr != g.expr:
            raise ValueError("the link costs are for another topology")
        self.packing, self.g = packing, g
        self.parent = np.array([t.parent_arc for t in packing.trees], dtype=np.int64)
        self.root = np.array([t.root for t in packing.trees], dtype=np.int64)
        self.weight = np.array([t.weight for t in packing.trees], dtype=np.int64)
        self.tails = g.tails.astype(np.int64)
        self.heads = g.heads.astype(np.int64)
        self.alpha = np.asarray(costs.alpha_s, dtype=np.float64)
        self.inv_bw = 1.0 / np.asarray(costs.bandwidth_Bps, dtype=np.float64)
        depth = np.array([t.depth for t in packing.trees], dtype=np.int64)
        sub, below, work = _subtrees(self.parent, depth, self.tails, self.inv_bw, g.nodes)
        work = np.round(work / max(float(work.max()), 1e-300), 9)        # equal up to rounding: one level
        levels = np.unique(work)                                       # most work below first
        self.ranks = {"subtree": (g.nodes - sub).astype(np.int64), "height": (g.nodes - below).astype(np.int64),
                      "piece": np.zeros_like(sub),
                      "work": (levels.size - 1 - np.searchsorted(levels, work)).astype(np.int64)}
        self.load = np.bincount(self.parent[self.parent >= 0], minlength=g.arcs).astype(np.int64)

    def run(self, size_bytes: float, pieces: int, batch_s: float, priority: str, emit: bool,
            grow: float = np.inf, feed: float = np.inf, taper: int = 0) -> StreamResult:
        g, p = self.g, self.packing.per_root
        if isinstance(pieces, bool) or not isinstance(pieces, (int, np.integer)) or pieces < 1:
            raise ValueError(f"pieces must be a positive integer, got {pieces!r}")
        if not (size_bytes > 0 and np.isfinite(size_bytes)) or not batch_s >= 0 or not grow >= 0 \
                or not feed > 0:
            raise ValueError("need a positive finite size, a non-negative batch and growth and a positive feed")
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}, got {priority!r}")
        if self.parent.shape[0] * (g.nodes - 1) * pieces > MAX_STREAM_DELIVERIES:
            raise ValueError(f"{pieces} pieces: more than {MAX_STREAM_DELIVERIES} deliveries")
        P = int(pieces)
        units = taper_units(P, taper)
        piece_bytes = np.outer(self.weight / p * (size_bytes / g.nodes), units / units.sum())
        seg = np.concatenate([[0], np.cumsum(self.load * P)]).astype(np.int64)
        rank = self.ranks[priority]
        key = (rank[:, None, :] * P + np.arange(P)[None, :, None]).reshape(-1, g.nodes)
        makespan, messages, tree, piece, node, msg, msg_arc, msg_step = _simulate(
            g.nodes, g.arcs, self.tails, self.heads, self.parent, self.root, key, seg, piece_bytes, self.inv_bw, P,
            self.alpha, float(batch_s), float(grow), self.packing.bandwidth_seconds(size_bytes), float(feed))
        out = StreamResult(None, float(makespan), P, float(batch_s), int(messages), priority, float(grow),
                           float(feed), int(taper))
        if not emit:
            return out
        offset = np.zeros(len(self.packing.trees), np.int64)           # tree j's place in its root's share
        seen = np.zeros(g.nodes, np.int64)
        for j, t in enumerate(self.packing.trees):
            offset[j] = seen[t.root]
            seen[t.root] += t.weight
        start = np.concatenate([[0], np.cumsum(units)[:-1]])          # piece c's block: p units[c] grid units
        arc = self.parent[tree, node]
        lo = start[piece] * p + offset[tree] * units[piece]
        step = msg_step[msg]
        out.schedule = Schedule.from_arrays(
            Collective.ALLGATHER, g.nodes, int(units.sum()) * p, step, [Op.COPY] * int(step.max()), g.expr,
            source=self.root[tree], sender=g.tails[arc], receiver=node, lane=g.lanes[arc], lo=lo,
            hi=lo + self.weight[tree] * units[piece])
        return out


FED_OPTIONS = ((24, 0.85, 3), (24, 0.7, 3), (16, 0.7, 3), (16, 0.85, 3))
"""(pieces, feed, taper) of the fed options `stream_grid` adds (receivers with the most work below first, cap
1/16 of the bandwidth term, no growth), most often best first."""
FED_BUDGET = 1 << 20
"""Deliveries simulated for the fed options on top of STREAM_BUDGET (1 M: all four at 64 nodes, none at 256)."""

Option = tuple[str, int, float, float, float, int]


def stream_grid(packing: Packing) -> list[Option]:
    """(priority, pieces, batch fraction, growth, feed, taper) options `fastest_stream` tries, most promising
    first: within STREAM_BUDGET simulated deliveries (at least one), pieces 1, 4, 16 (as `stream_options`
    allows), every cap growth and fraction, receivers with the largest subtree first, unfed and untapered; then,
    within FED_BUDGET more, the FED_OPTIONS."""
    rows = len(packing.trees) * (packing.topology.nodes - 1)
    out: list[Option] = []
    spent = 0
    for p in (x for x in stream_options(packing) if x in (1, 4, 16)):
        for grow in GROWTHS:
            for frac in BATCH_FRACTIONS:
                if spent + rows * p > STREAM_BUDGET and out:
                    break
                out.append(("subtree", p, frac, grow, np.inf, 0))
                spent += rows * p
    spent = 0
    for p, feed, taper in FED_OPTIONS:
        if spent + rows * p <= FED_BUDGET and rows * p <= MAX_STREAM_DELIVERIES:
            out.append(("work", p, 1 / 16, np.inf, feed, taper))
            spent += rows * p
    return out


def fastest_stream(packing: Packing, costs: LinkCosts, size_bytes: float) -> StreamResult:
    """The `stream_allgather` of `packing` with the smallest makespan at `size_bytes` among `stream_grid`'s options
    (the message cap is the fraction times the packing's bandwidth term at that size); the earlier option on a
    tie."""
    tb = packing.bandwidth_seconds(size_bytes)
    run = _Run(packing, costs)
    best = None
    for pr, p, frac, grow, feed, taper in stream_grid(packing):
        r = run.run(size_bytes, p, frac * tb, pr, emit=False, grow=grow, feed=feed, taper=taper)
        if best is None or r.time_s < best.time_s:
            best = r
    assert best is not None
    return run.run(size_bytes, best.pieces, best.batch_s, best.priority, emit=True, grow=best.grow,
                   feed=best.feed, taper=best.taper)


def warm() -> None:
    """Compile (or load from numba's cache) the simulation on a tiny input."""
    from services.synthesis.forest.packing import pack_trees
    from services.synthesis.topology.catalog import build

    g = build("ring(3)")
    costs = LinkCosts(g, np.full(g.arcs, 1e-5), np.full(g.arcs, 1e9))
    stream_allgather(pack_trees(g, costs.bandwidth_Bps), costs, 1 << 10, 1, 0.0)
