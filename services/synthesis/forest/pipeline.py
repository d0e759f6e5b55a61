"""Tree packings as step schedules: each tree's share of its root's shard pipelined down the tree.

Root r's shard is laid out as P blocks (the pipeline chunks), block c holding every tree of r side by side:
tree j of weight mu_j owns [c p + o_j, c p + o_j + mu_j) on a grid of P p units per shard (o_j the weights
of r's trees before j, p their sum). Block c crosses a tree arc into a node at depth l in step c + l
(c = 0 .. P-1), so the parent holds it from the step before (the root from the start) and the schedule has
P + H - 1 steps for trees of height at most H. In every step from H to P each arc carries 1/P of everything
it carries overall, at most q c_e / (p P) shards (`packing`), so each such step costs the same time on every
used arc: (M/N) / (P x* unit), and the bandwidth term is at most (P + H - 1) / P times the cut bound
(fewer arcs are busy in the first and last H - 1 steps). Pieces of one root that cross one arc at the same
depth with touching ranges are sent as one transfer.

P trades latency (one alpha per step) against the pipeline's fill: on uniform alpha the time is about
(P + H - 1) alpha + (1 + (H - 1)/P) T_B*, smallest near P = sqrt((H - 1) T_B* / alpha) (`best_chunks`). As the
runtimes run it (no barrier between steps; `schedule.dependency`) the trade differs: the schedule sets offer P
= 1, 2, 4, ... and pick on that time (`bfb.schedule_sets.fastest_trees`).
"""
from __future__ import annotations

import math

import numpy as np

from services.synthesis.forest.packing import Packing
from services.synthesis.schedule.ir import Collective, Op, Schedule

__all__ = ["pipelined_allgather", "best_chunks", "max_chunks", "MAX_TREE_TRANSFERS"]

MAX_TREE_TRANSFERS = 1 << 22
"""Rows of a pipelined schedule before merging (tree arcs x chunks): 4.2 M, as the greedy scheduler's."""


def max_chunks(packing: Packing) -> int:
    """The most pipeline chunks within MAX_TREE_TRANSFERS rows."""
    rows = len(packing.trees) * (packing.topology.nodes - 1)
    return max(1, MAX_TREE_TRANSFERS // rows)


def best_chunks(packing: Packing, alpha_s: float, size_bytes: float) -> int:
    """P minimising (P + H - 1) alpha + (1 + (H - 1)/P) T_B* (see the module docstring), within max_chunks."""
    h = packing.height
    tb = packing.bandwidth_seconds(size_bytes)
    if h <= 1 or tb <= 0:
        return 1
    if alpha_s <= 0:
        return max_chunks(packing)
    p = math.sqrt((h - 1) * tb / alpha_s)
    lo, hi = max(1, math.floor(p)), max(1, math.ceil(p))
    cost = lambda k: (k + h - 1) * alpha_s + (1 + (h - 1) / k) * tb
    return min(min(lo, hi, key=cost), max_chunks(packing))


def pipelined_allgather(packing: Packing, chunks: int) -> Schedule:
    """The allgather schedule of `packing` with `chunks` pipeline chunks per tree (see the module docstring).

    >>> from services.synthesis.topology.catalog import build
    >>> from services.synthesis.forest.packing import pack_trees
    >>> g = build("ring(4)")
    >>> s = pipelined_allgather(pack_trees(g, np.ones(g.arcs)), 2)
    >>> s.steps, s.transfers, s.grid
    (4, 24, 2)
    """
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    if chunks > max_chunks(packing):
        raise ValueError(f"{chunks} chunks: at most {max_chunks(packing)} keep the schedule within "
                         f"{MAX_TREE_TRANSFERS} transfers")
    g = packing.topology
    n, p, P = g.nodes, packing.per_root, int(chunks)
    offset = np.zeros(n, np.int64)
    arcs, depth, source, lo0, width = [], [], [], [], []
    for t in packing.trees:
        v = np.flatnonzero(t.parent_arc >= 0)
        arcs.append(t.parent_arc[v])
        depth.append(t.depth[v])
        source.append(np.full(v.size, t.root))
        lo0.append(np.full(v.size, offset[t.root]))
        width.append(np.full(v.size, t.weight))
        offset[t.root] += t.weight
    if not (offset == p).all():
        raise ValueError("every root's tree weights must sum to the packing's per-root weight")
    arc, dep, src, off, wid = (np.concatenate(x).astype(np.int64) for x in (arcs, depth, source, lo0, width))
    order = np.lexsort((off, src, arc, dep))           # pieces of one root on one arc at one depth, by offset
    arc, dep, src, off, wid = arc[order], dep[order], src[order], off[order], wid[order]
    start = np.ones(arc.size, bool)                    # touching pieces travel together in every block
    start[1:] = (dep[1:] != dep[:-1]) | (arc[1:] != arc[:-1]) | (src[1:] != src[:-1]) | (off[1:] != (off + wid)[:-1])
    first = np.flatnonzero(start)
    last = np.concatenate([first[1:], [arc.size]]) - 1
    end = off[last] + wid[last]
    arc, dep, src, off = arc[first], dep[first], src[first], off[first]
    wid = end - off
    c = np.arange(P, dtype=np.int64)
    step = (c[:, None] + dep[None, :]).ravel()
    lo = (c[:, None] * p + off[None, :]).ravel()
    hi = lo + np.tile(wid, P)
    arc, src = np.tile(arc, P), np.tile(src, P)
    grid = P * p
    common = math.gcd(p, int(np.gcd.reduce(off)), int(np.gcd.reduce(wid)))     # divides every lo and hi
    steps = int(step.max())
    return Schedule.from_arrays(Collective.ALLGATHER, n, grid // common, step, [Op.COPY] * steps, g.expr,
                                source=src, sender=g.tails[arc], receiver=g.heads[arc], lane=g.lanes[arc],
                                lo=lo // common, hi=hi // common)
