"""(D(G), tau) of the optimal BFB schedule without building it: the finder's evaluator (Eq. (2)).

tau = (d/N) sum_t max_u U*_{u,t}, where U*_{u,t} is LP (1)'s optimum for receiver u at step t (see `bfb`):

    U*_{u,t} = max over sets S of u's in-arcs of |{v at distance t : every eligible arc of v is in S}| / |S|.

Vertex-transitive topologies with a translation solve node 0 alone (its problems are every node's). The
others use bitsets and never form the N x N x d table of eligibility masks. With the reverse balls
B_t(u) = {v : d(v, u) <= t} (B_t(u) = B_{t-1}(u) united with B_{t-1}(w) over u's in-neighbours w), the
sources v at distance t that may use in-arc k = (w_k, u) (Definition 15: d(v, w_k) = t - 1) are

    E_k(u, t) = (B_t(u) minus B_{t-1}(u)) intersected with B_{t-1}(w_k),

so a whole step costs N d N/64 word operations. Popcounts of the E_k give, per (u, t), everything needed
to price most problems exactly and to bound the rest:
- when no source has two eligible arcs, U* is the largest |E_k| (S = {k}; any S averages its arcs);
- otherwise U* is at least the largest count of sources eligible on k alone (S = {k}) and at least
  |sources| / |arcs used| (S = all), and at most the largest |E_k| (every source in S's load has an arc
  in S, so load(S) <= sum over k in S of |E_k|).
Only problems whose upper bound exceeds the step's best lower bound over all receivers can change
max_u U*_{u,t}; those alone are expanded to source types and solved exactly (`bfb` subset sums or
batched min-cut Dinkelbach).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .bfb import BfbContext, _batched_min_max_load, _min_max_load_zeta, eligibility_masks
from .kernels import interval_u_star, step_types, type_bounds
from .topology import Topology

ZETA_PRICE_MAX_DEGREE = 8     # subset sums cost 2^d per problem; above this, min cuts on the few source types

def bfb_tau(topology: Topology, *, method: str = "auto") -> tuple[int, Fraction]:
    """(D(G), tau) of the optimal BFB allgather (Eq. (2), Theorem 15: it takes D(G) steps)."""
    if method not in ("auto", "zeta", "cut"):
        raise ValueError(f"method must be auto, zeta or cut, got {method!r}")
    zeta = method == "zeta" or (method == "auto" and topology.degree <= ZETA_PRICE_MAX_DEGREE)
    if topology.translation is not None:
        return _tau_by_translation(topology, zeta)
    return _tau_by_bitsets(topology, zeta)


def _exact_u_star(masks: np.ndarray, owner: np.ndarray, counts: np.ndarray, problems: int, d: int,
                  zeta: bool, floor: Fraction | None = None) -> list[Fraction]:
    """U* of each problem given its source types: masks[i] (eligible in-arcs) of counts[i] sources of
    problem owner[i]; with `floor`, max(U*, floor) (min cuts settle problems below it at once)."""
    if zeta:
        out = []
        per = max(1, (1 << 22) >> d)
        for lo in range(0, problems, per):
            sel = (owner >= lo) & (owner < lo + per)
            rows = min(per, problems - lo)
            table = np.bincount((owner[sel] - lo) * (1 << d) + masks[sel], weights=counts[sel],
                                minlength=rows << d).astype(np.int64).reshape(rows, 1 << d)
            num, den = _min_max_load_zeta(table, d)
            out += [Fraction(int(a), int(b)) for a, b in zip(num, den)]
        return out
    key, inverse = np.unique(owner.astype(np.int64) * (1 << d) + masks, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=counts).astype(np.int64)
    kp, km = key >> d, key & ((1 << d) - 1)
    starts = np.flatnonzero(np.concatenate([[True], kp[1:] != kp[:-1]]))
    ends = np.concatenate([starts[1:], [kp.size]])
    out = [Fraction(0)] * problems
    solved = _batched_min_max_load([(km[a:b], summed[a:b]) for a, b in zip(starts, ends)], d, floor)
    for p, (num, den) in zip(kp[starts].tolist(), solved):
        out[p] = Fraction(num, den)
    return out


def _tau_by_translation(g: Topology, zeta: bool) -> tuple[int, Fraction]:
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
    key, counts = np.unique(dc[sel] * (1 << d) + masks[sel], return_counts=True)      # sorted by step
    offsets = np.searchsorted(key >> d, np.arange(1, D + 2)).astype(np.int64)   # problem t - 1: one step
    masks = key & ((1 << d) - 1)
    alone, _, _, _, multi = type_bounds(offsets, masks, counts, d)
    total = Fraction(int(alone[~multi].sum()))          # no source with two arcs: U* is the largest count
    hard = np.flatnonzero(multi)
    if hard.size:
        num, den = _multi_u_star(offsets, masks, counts, d, zeta, hard)
        total += sum(Fraction(int(a), int(b)) for a, b in zip(num, den))
    return D, Fraction(d, g.nodes) * total


def _reverse_balls(g: Topology):
    """Yield (t, B_{t-1}, B_t) for t = 1..D(G): row u of B_t is the bitset of {v : d(v, u) <= t}."""
    n = g.nodes
    words = (n + 63) // 64
    preds = g.in_predecessors
    everyone = np.arange(n)
    ball = np.zeros((n, words), dtype=np.uint64)
    ball[everyone, everyone // 64] = np.left_shift(np.uint64(1), (everyone % 64).astype(np.uint64))
    t = 0
    while True:
        grown = ball.copy()
        for k in range(g.degree):
            grown |= ball[preds[:, k]]
        if np.array_equal(grown, ball):
            return
        t += 1
        yield t, ball, grown
        ball = grown


def _tau_by_bitsets(g: Topology, zeta: bool) -> tuple[int, Fraction]:
    n, d = g.nodes, g.degree
    preds = np.ascontiguousarray(g.in_predecessors, dtype=np.int64)
    total_u = Fraction(0)
    D = 0
    for t, prev, ball in _reverse_balls(g):
        D = t
        offsets, masks, counts = step_types(prev, ball, preds)
        total_u += _step_max_u_star(offsets, masks, counts, d, zeta)
    return D, Fraction(d, n) * total_u


def _step_max_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, zeta: bool) -> Fraction:
    """max over receivers of U*_{u,t}, given every receiver's source types (offsets, masks, counts)."""
    alone, sources, used, upper, multi = type_bounds(offsets, masks, counts, d)
    if not multi.any():                                      # every U* is its largest in-arc count
        return Fraction(int(alone.max()))
    i = int(np.argmax(sources / np.maximum(used, 1)))       # the step's best lower bound, exactly
    best = max(Fraction(int(alone.max())), Fraction(int(sources[i]), int(used[i])))
    open_ = np.flatnonzero(multi & (upper * best.denominator > best.numerator))
    if open_.size:          # U* values have denominators <= d, so floats order them exactly
        num, den = _multi_u_star(offsets, masks, counts, d, zeta, open_, best)
        j = int(np.argmax(num / den))
        best = max(best, Fraction(int(num[j]), int(den[j])))
    return best


def _multi_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, zeta: bool,
                  which: np.ndarray, floor: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
    """U* = num/den of the problems `which` (some source has two eligible arcs): by windows where every type
    is a run of the slot cycle, otherwise by subset sums or min cuts (max(U*, floor) there, with a floor)."""
    num, den, ok = interval_u_star(offsets, masks, counts, d, which)
    rest = np.flatnonzero(~ok)
    if rest.size:
        owner = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        sel = np.isin(owner, which[rest])
        local = np.searchsorted(which[rest], owner[sel])
        exact = _exact_u_star(masks[sel], local, counts[sel], rest.size, d, zeta, floor)
        num[rest] = [f.numerator for f in exact]
        den[rest] = [f.denominator for f in exact]
    return num, den
