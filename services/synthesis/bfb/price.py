"""(D(G), tau) of the optimal BFB schedule without building it: the finder's evaluator (Eq. (2)).

tau = (d/N) sum_t max_u U*_{u,t}, where U*_{u,t} is LP (1)'s optimum for receiver u at step t (see `bfb`):

    U*_{u,t} = max over sets S of u's in-arcs of |{v at distance t : every eligible arc of v is in S}| / |S|.

Vertex-transitive topologies with a translation solve node 0 alone (its problems are every node's). The
others use bitsets and never form the N x N x d table of eligibility masks. With the reverse balls
B_t(u) = {v : d(v, u) <= t} (`Topology.balls(reverse=True)`), the sources v at distance t that may use
in-arc k = (w_k, u) (Definition 15: d(v, w_k) = t - 1) are

    E_k(u, t) = (B_t(u) minus B_{t-1}(u)) intersected with B_{t-1}(w_k),

and a compiled kernel (`kernels.step_types`) refines each receiver's sphere by its E_k into source types
(sources with the same eligible in-arcs). From the types:
- when no source has two eligible arcs, U* is the largest count (S = {k}; any S averages its arcs);
- otherwise U* is at least the largest count of sources eligible on k alone (S = {k}) and at least
  |sources| / |arcs used| (S = all), and at most the largest |E_k| (every source in S's load has an arc
  in S, so load(S) <= sum over k in S of |E_k|).
Only problems whose upper bound exceeds the step's best lower bound over all receivers can change
max_u U*_{u,t}; those are solved exactly: by windows when every type is a run of the in-arc cycle
(`kernels.interval_u_star`), otherwise by subset sums (`kernels.zeta_u_star`) or batched min-cut
Dinkelbach started at that lower bound.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from services.synthesis.bfb.lp import BfbContext, _batched_min_max_load, check_bfb_degree, eligibility_masks
from services.synthesis.bfb.kernels import interval_u_star, step_types, type_bounds, zeta_u_star
from services.synthesis.topology.graph import Topology

ZETA_MAX_DEGREE = 12          # subset sums cost d 2^d per problem: for small d, and batches of at most
ZETA_WORK = 1 << 24           # this many operations; min cuts otherwise


def bfb_tau(topology: Topology, *, method: str = "auto") -> tuple[int, Fraction]:
    """(D(G), tau) of the optimal BFB allgather (Eq. (2), Theorem 15: it takes D(G) steps). `method` picks
    how problems that no shortcut prices are solved: "zeta" (subset sums), "cut" (min cuts) or "auto"
    (subset sums up to ZETA_MAX_DEGREE in-arcs and ZETA_WORK operations per batch, min cuts beyond)."""
    if method not in ("auto", "zeta", "cut"):
        raise ValueError(f"method must be auto, zeta or cut, got {method!r}")
    check_bfb_degree(topology)
    if topology.translation is not None:
        return _tau_by_translation(topology, method)
    return _tau_by_bitsets(topology, method)


def _exact_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, method: str,
                  floor: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
    """U* = num/den of each problem given its source types (problem p: masks[offsets[p]:offsets[p + 1]]
    with their counts); with `floor` and min cuts, max(U*, floor) (cuts settle problems below it at once)."""
    problems = offsets.size - 1
    if method == "zeta" or (method == "auto" and d <= ZETA_MAX_DEGREE and problems * d << d <= ZETA_WORK):
        return zeta_u_star(offsets, masks, counts, d)
    solved = _batched_min_max_load([(masks[a:b], counts[a:b]) for a, b in zip(offsets[:-1], offsets[1:])], d, floor)
    return np.array([a for a, _ in solved], dtype=np.int64), np.array([b for _, b in solved], dtype=np.int64)


def _tau_by_translation(g: Topology, method: str) -> tuple[int, Fraction]:
    """Node 0's problems are every node's (x -> x + u is an automorphism): U*_{0,t} for each t."""
    ctx = BfbContext.create(g, shortcut=True)
    D = ctx.diameter
    if D == 0:
        return 0, Fraction(0)
    dcol, dw = ctx.receiver_distances(np.array([0]))
    dc = dcol[:, 0].astype(np.int64)
    masks = eligibility_masks(dc, dw[:, 0, :])
    sel = dc > 0
    d = g.degree
    # (step, mask) types sorted by step; a packed key t * 2^d + mask would overflow int64 for d near 62
    types, counts = np.unique(np.stack([dc[sel], masks[sel]], axis=1), axis=0, return_counts=True)
    offsets = np.searchsorted(types[:, 0], np.arange(1, D + 2)).astype(np.int64)   # problem t - 1: one step
    masks = np.ascontiguousarray(types[:, 1])
    alone, _, _, _, multi = type_bounds(offsets, masks, counts, d)
    total = Fraction(int(alone[~multi].sum()))          # no source with two arcs: U* is the largest count
    hard = np.flatnonzero(multi)
    if hard.size:
        num, den = _multi_u_star(offsets, masks, counts, d, method, hard)
        total += sum(Fraction(int(a), int(b)) for a, b in zip(num, den))
    return D, Fraction(d, g.nodes) * total


def _tau_by_bitsets(g: Topology, method: str) -> tuple[int, Fraction]:
    n, d = g.nodes, g.max_in_degree               # in-arc slots; tau uses the nominal degree
    preds = np.ascontiguousarray(g.in_predecessors, dtype=np.int64)
    total_u = Fraction(0)
    D = 0
    for t, prev, ball in g.balls(reverse=True):
        D = t
        offsets, masks, counts = step_types(prev, ball, preds)
        total_u += _step_max_u_star(offsets, masks, counts, d, method)
    return D, Fraction(g.degree, n) * total_u


def _step_max_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, method: str) -> Fraction:
    """max over receivers of U*_{u,t}, given every receiver's source types (offsets, masks, counts)."""
    alone, sources, used, upper, multi = type_bounds(offsets, masks, counts, d)
    if not multi.any():                                      # every U* is its largest in-arc count
        return Fraction(int(alone.max()))
    i = int(np.argmax(sources / np.maximum(used, 1)))       # the step's best lower bound, exactly
    best = max(Fraction(int(alone.max())), Fraction(int(sources[i]), int(used[i])))
    open_ = np.flatnonzero(multi & (upper * best.denominator > best.numerator))
    if open_.size:          # U* values have denominators <= d, so floats order them exactly
        num, den = _multi_u_star(offsets, masks, counts, d, method, open_, best)
        j = int(np.argmax(num / den))
        best = max(best, Fraction(int(num[j]), int(den[j])))
    return best


def _multi_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, method: str,
                  which: np.ndarray, floor: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
    """U* = num/den of the problems `which` (some source has two eligible arcs): by windows where every type
    is a run of the slot cycle, otherwise by subset sums or min cuts (max(U*, floor) there, with a floor)."""
    num, den, ok = interval_u_star(offsets, masks, counts, d, which)
    rest = np.flatnonzero(~ok)
    if rest.size:
        lo, hi = offsets[which[rest]], offsets[which[rest] + 1]
        idx = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())])
        sub = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
        num[rest], den[rest] = _exact_u_star(sub, masks[idx], counts[idx], d, method, floor)
    return num, den
