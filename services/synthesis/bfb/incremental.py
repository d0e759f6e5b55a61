"""BFB on a topology that differs from a vertex-transitive one in a few arcs (a degraded torus or circulant):
solve only the receivers whose LPs changed (paper section 6, LP (1); DESIGN section 8).

Receiver u's LP (1) problems, for every step t, are fixed by u's in-arcs (their tails and lanes), the
distances d(v, u) of every source and the distances d(v, w) to u's in-neighbours w (Definition 15: v's shard
may come over (w, u) at step t iff d(v, u) = d(v, w) + 1 = t). A removed arc changes the distances of the
pairs whose every shortest path used it; a receiver none of whose columns of the distance matrix (its own,
its in-neighbours') changed, and whose in-arcs all survive, has exactly the problems it had in the intact
topology. There, x -> x + u is an automorphism, so its optimal solution is node 0's, translated. One failed
link of a 1024-node circulant or torus leaves 30 to 50 of the 1024 receivers to solve.
"""
from __future__ import annotations

import time

import numpy as np

from services.synthesis.bfb.lp import (BfbContext, BfbResult, BlockResult, bfb_allgather, check_schedule_size,
                                       merge_blocks, solve_block)
from services.synthesis.topology.graph import Topology

__all__ = ["affected_receivers", "bfb_allgather_near"]


def affected_receivers(topology: Topology, reference: Topology) -> np.ndarray:
    """Receivers of `topology` whose LP (1) problems may differ from those in `reference` (same nodes): a
    changed distance column of theirs or of an in-neighbour, or different in-arcs. Boolean mask (N,).

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> g = build("torus(6, 6)")
    >>> int(affected_receivers(build("remove(torus(6, 6), 0>1)"), g).sum())
    8
    """
    if topology.nodes != reference.nodes:
        raise ValueError(f"{topology.expr} and {reference.expr} have different node counts")
    if topology.in_arcs.shape[1] != reference.in_arcs.shape[1]:
        return np.ones(topology.nodes, dtype=bool)
    changed = (topology.distance_matrix != reference.distance_matrix).any(axis=0)
    hit = changed.copy()
    for k in range(topology.max_in_degree):
        hit |= changed[topology.in_predecessors[:, k]]
    # the in-arc slots (tail and lane of each, in order) must be the same
    mine, theirs = topology.in_arcs, reference.in_arcs
    same = ((mine >= 0) == (theirs >= 0)).all(axis=1)
    tails_m = np.where(mine >= 0, topology.tails[mine], -1)
    tails_r = np.where(theirs >= 0, reference.tails[theirs], -1)
    lanes_m = np.where(mine >= 0, topology.lanes[mine], -1)
    lanes_r = np.where(theirs >= 0, reference.lanes[theirs], -1)
    same &= (tails_m == tails_r).all(axis=1) & (lanes_m == lanes_r).all(axis=1)
    return hit | ~same


def bfb_allgather_near(topology: Topology, reference: Topology, **kw) -> BfbResult:
    """The optimal BFB allgather of `topology`, solving only the receivers whose problems differ from those
    of the vertex-transitive `reference` (the others take node 0's solution of `reference`, translated).

    Falls back to `bfb_allgather(topology)` when `reference` has no translation. The result is the same
    optimum (every receiver's LP optimum, hence tau) as solving every receiver; `kw` goes to `bfb_allgather`
    (chunks, method; workers for the fallback).

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> g = build("torus(8, 8)")
    >>> bfb_allgather_near(build("remove(torus(8, 8), 0>1)"), g).tau
    Fraction(21, 16)
    """
    tr = reference.translation
    if tr is None or reference.nodes != topology.nodes:
        return bfb_allgather(topology, **kw)
    check_schedule_size(topology)
    t0 = time.perf_counter()
    chunks, method = kw.get("chunks"), kw.get("method", "auto")
    ctx = BfbContext.create(topology, shortcut=False, chunks=chunks, method=method)
    affected = affected_receivers(topology, reference)
    ref = solve_block(BfbContext.create(reference, shortcut=True, chunks=chunks, method=method), np.array([0]))
    kept = np.flatnonzero(~affected)
    blocks = [solve_block(ctx, np.flatnonzero(affected))]
    if kept.size:
        block = _translated(ref, reference, topology, kept, ctx.diameter)
        if block is None:                       # an in-arc of a kept receiver is missing: solve it too
            blocks = [solve_block(ctx, np.arange(topology.nodes))]
        else:
            blocks.append(block)
    result = merge_blocks(ctx, blocks)
    result.seconds = time.perf_counter() - t0
    return result


def _translated(ref: BlockResult, reference: Topology, topology: Topology, receivers: np.ndarray,
                diameter: int) -> BlockResult | None:
    """Node 0's transfers moved to each receiver u by x -> x + u, on `topology`'s arcs."""
    tr = reference.translation
    k = ref.step.size
    u = np.repeat(receivers, k)
    tail = tr.add(np.tile(reference.tails[ref.arc].astype(np.int64), receivers.size), u)
    arc = topology.arc_index(tail, u, np.tile(reference.lanes[ref.arc], receivers.size))
    if (arc < 0).any():
        return None
    width = ref.u_num.shape[1]
    u_num = np.zeros((receivers.size, diameter), dtype=np.int64)
    u_den = np.ones((receivers.size, diameter), dtype=np.int64)
    u_num[:, :width], u_den[:, :width] = ref.u_num[0], ref.u_den[0]
    return BlockResult(receivers, step=np.tile(ref.step, receivers.size),
                       source=tr.add(np.tile(ref.source.astype(np.int64), receivers.size), u), arc=arc,
                       lo=np.tile(ref.lo, receivers.size), hi=np.tile(ref.hi, receivers.size),
                       den=np.tile(ref.den, receivers.size), u_num=u_num, u_den=u_den)
