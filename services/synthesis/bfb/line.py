"""The optimal BFB cost of an iterated line digraph L^k(G), priced from G alone (Definition 12, LP (1),
Eq. (2)).

Theorem 10 says that lifting G's optimal BFB schedule by Definition 1 gives L(G)'s optimal BFB schedule with
tau + 1/N. The lift is a BFB schedule, but not always an optimal one: for line(dcirculant(50, 1, 32)) it
costs 1 and the LP optimum is 99/100. This module computes the optimum exactly, without building L^k(G):

A node of L^k(G) is a walk J = (f_1, ..., f_k) of k arcs of G from a = tail(f_1) through b_1, ..., b_k.
Paths in L^k(G) are walks in G, so d(I, J) is the smallest m at which I overlaps J (I's last k - m arcs
are J's first k - m), or k + d_G(head(I), a) when there is none. J's in-neighbours are the walks
(e, f_1, ..., f_{k-1}) for the d in-arcs e of a, so J's in-slots are a's. Hence:

- step T <= k: the sources are the walks that overlap J first at m = T; each one may use only the in-slot
  its arc into a takes, so U* is the largest slot count (`kernels.walk_overlaps`, d^(T-1) unless J winds
  around a);
- step T = k + t: every node v with d_G(v, a) = t stands for the d^k walks ending at v, all eligible on
  v's eligible in-slots of a in G; the walks overlapping J (their heads are b_1..b_k) are not sources.
  So J's problem is G's (a, t) problem with every count times d^k, minus J's exclusions E_J(t), and
  U*_J <= d^k U*_G(a, t) with equality when no b_j is at distance t from a. The step's maximum over J is
  d^k max U*_G when some walk from a maximising receiver avoids that sphere; otherwise the distinct
  exclusions of the walks are solved exactly (`price.u_star`).

D(L^k(G)) = D(G) + k (d >= 2), and tau = (d / (d^k N)) times the sum of the step maxima. With a translation
(Cayley graphs: circulants, tori, rings, ...) only the walks from node 0 are distinct receivers.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from services.synthesis.bfb.kernels import excluded_u_star, step_types, walk_overlaps
from services.synthesis.bfb.lp import check_bfb_degree
from services.synthesis.bfb.price import (ZETA_MAX_DEGREE, StepProblems, bfb_step_maxima, full_tree,
                                         translation_types, u_star)
from services.synthesis.topology.graph import Topology

__all__ = ["line_step_maxima", "line_tau"]


def line_tau(g: Topology, times: int = 1, *, method: str = "auto") -> tuple[int, Fraction]:
    """(D, tau) of the optimal BFB allgather of L^times(G), computed from G.

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> line_tau(build("dcirculant(50, 1, 32)"))
    (12, Fraction(99, 100))
    """
    steps, maxima = line_step_maxima(g, times, method=method)
    return steps, Fraction(g.degree, g.nodes * g.degree ** times) * sum(maxima, Fraction(0))


def line_step_maxima(g: Topology, times: int = 1, *, method: str = "auto") -> tuple[int, tuple[Fraction, ...]]:
    """(D(L^k(G)), per-step max_J U*_{J,t}) of the optimal BFB allgather of L^k(G), k = times, in shards of
    L^k(G) (tau = (d / |L^k(G)|) times their sum)."""
    if not isinstance(times, int) or times < 1:
        raise ValueError(f"times must be a positive integer, got {times!r}")
    check_bfb_degree(g)
    d, k = g.degree, times
    if d == 1:                      # L(cycle) is the same cycle
        return bfb_step_maxima(g, method=method)
    out_arcs = np.arange(g.arcs, dtype=np.int64).reshape(g.nodes, d)     # arcs are sorted by tail
    in_slot = np.empty(g.arcs, dtype=np.int64)
    in_slot[g.in_arcs.ravel()] = np.tile(np.arange(d), g.nodes)
    starts = np.array([0]) if g.translation is not None else np.arange(g.nodes)
    heads, late, early = walk_overlaps(out_arcs, g.heads.astype(np.int64), in_slot, starts.astype(np.int64), k)
    maxima = [Fraction(int(x)) for x in early[1:]]
    scale = d ** k
    if g.translation is not None:
        maxima += _late_by_translation(g, heads[0], late[0], scale, method)
    else:
        maxima += _late_by_bitsets(g, heads, late, scale, method)
    return len(maxima), tuple(maxima)


def _excluded_u_star(masks: np.ndarray, counts: np.ndarray, scale: int, d: int, bad: np.ndarray,
                     head_masks: np.ndarray, late: np.ndarray, method: str, memo: dict | None = None) -> Fraction:
    """max over walks (rows) of U*(scale * counts - E_walk), where E_walk puts late[w, j] on head_masks[w, j]
    for every position with bad[w, j]; the walks' distinct exclusions are solved once each (and, with `memo`,
    problems met before at this step are not solved again: symmetric graphs repeat them)."""
    keys = np.unique(np.concatenate([np.where(bad, head_masks, -1), np.where(bad, late, 0)], axis=1), axis=0)
    k = bad.shape[1]
    best = Fraction(0)
    order = np.argsort(masks, kind="stable")
    masks, counts = masks[order], counts[order]
    for row in keys:
        c = scale * counts
        for mask, weight in zip(row[:k].tolist(), row[k:].tolist()):
            if mask >= 0:
                c = c - weight * (masks == mask)
        key = None if memo is None else (masks.tobytes(), c.tobytes())
        u = None if key is None else memo.get(key)
        if u is None:
            u = u_star(masks, c, d, method)
            if memo is not None:
                memo[key] = u
        best = max(best, u)
    return best


_BASES: dict[tuple[str, str], tuple] = {}        # Cayley bases: node 0's problems and G's step maxima


def _translation_base(g: Topology, method: str) -> tuple:
    """Node 0's problems and U*_G(0, t) of a Cayley G, computed once for all its line digraphs."""
    key = (g.expr, method)
    if key not in _BASES:
        if len(_BASES) >= 1024:
            _BASES.pop(next(iter(_BASES)))
        _BASES[key] = (translation_types(g), bfb_step_maxima(g, method=method)[1])
    return _BASES[key]


def _late_by_translation(g: Topology, heads: np.ndarray, late: np.ndarray, scale: int,
                         method: str) -> list[Fraction]:
    """Steps k + 1 .. k + D of a Cayley G: every receiver is a walk from node 0."""
    (D, offsets, masks, counts, dist, mask_of), u_g = _translation_base(g, method)
    d = g.degree
    head_dist = dist[heads]
    trapped = np.flatnonzero((head_dist[:, :, None] == np.arange(1, D + 1)).any(axis=1).all(axis=0)) + 1
    out = [scale * u for u in u_g]              # a walk from 0 avoids the sphere: nothing excluded
    for t in trapped.tolist():
        tm, tc = masks[offsets[t - 1]:offsets[t]], counts[offsets[t - 1]:offsets[t]]
        out[t - 1] = _excluded_u_star(tm, tc, scale, d, head_dist == t, mask_of[heads], late, method)
    return out


def _bits(rows: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Whether node v is in bitset row a (vectorised over equal-shaped a, v)."""
    return ((rows[a, v >> 6] >> (v & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)


def _late_by_bitsets(g: Topology, heads: np.ndarray, late: np.ndarray, scale: int, method: str) -> list[Fraction]:
    """Steps k + 1 .. k + D of any G: G's problems by bitsets (`price.StepProblems`); per step, exact U*_G only
    for receivers whose bound can beat the best walk that avoids its sphere, and exclusions only for
    trapped ones."""
    n, d = g.nodes, g.degree
    preds = np.ascontiguousarray(g.in_predecessors, dtype=np.int64)
    owner = np.broadcast_to(np.arange(n)[:, None, None], heads.shape)     # receiver a of every walk position
    out = []
    for t, prev, ball in g.balls(reverse=True):
        memo: dict = {}
        bad = _bits(ball, owner, heads) & ~_bits(prev, owner, heads)     # b_j at distance t from a
        free_mask = (~bad.any(axis=2)).any(axis=1)
        if (full_tree(prev, ball, d, t) & free_mask).any():         # the largest possible U*, no exclusion
            out.append(scale * Fraction(d ** (t - 1)))
            continue
        step = StepProblems(prev, ball, preds, method)
        free = np.flatnonzero(free_mask)
        floor = step.lower(int(free[np.argmax(step.lo[free])])) if free.size else Fraction(0)
        candidates = step.open_above(floor)
        step.solve(candidates)
        known = np.intersect1d(candidates, free)                  # exact now; floats order them exactly
        best = scale * (max(floor, step.u(int(known[np.argmax(step.lo[known])]))) if known.size else floor)
        trapped = np.setdiff1d(candidates, free)
        trapped = trapped[step.lo[trapped] * scale > best * (1 - 1e-12)]       # only these can beat `best`
        if trapped.size and d <= ZETA_MAX_DEGREE:          # all at once by subset sums
            offsets, masks, counts = step_types(prev, ball, preds, trapped)
            hb = heads[trapped]                                                # (receivers, walks, k)
            eligible = _bits(prev, np.broadcast_to(preds[trapped][:, None, None, :], hb.shape + (d,)),
                             np.repeat(hb[..., None], d, axis=3))
            head_masks = np.where(bad[trapped], (eligible.astype(np.int64) << np.arange(d)).sum(axis=3), -1)
            num, den = excluded_u_star(offsets, masks, counts, scale, d, head_masks, late[trapped])
            j = int(np.argmax(num / den))
            out.append(max(best, Fraction(int(num[j]), int(den[j]))))
            continue
        for a in trapped[np.argsort(-step.lo[trapped], kind="stable")].tolist():
            if scale * step.u(a) <= best:
                break
            hb = heads[a]                                                      # (walks, k)
            eligible = _bits(prev, np.broadcast_to(preds[a], hb.shape + (d,)), np.repeat(hb[..., None], d, axis=2))
            head_masks = (eligible.astype(np.int64) << np.arange(d)).sum(axis=2)
            masks, counts = step.types(a)
            best = max(best, _excluded_u_star(masks, counts, scale, d, bad[a], head_masks, late[a], method, memo))
        out.append(best)
    return out
