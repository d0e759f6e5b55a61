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

from services.synthesis.bfb.lp import (BFB_MAX_DEGREE, ScheduleTooLarge, _batched_min_max_load, check_bfb_degree,
                                      eligibility_masks)
from services.synthesis.bfb.kernels import (interval_u_star, balanced_upper, cyclic_distances, sphere_sizes,
                                             step_types, step_u_star_by_runs, type_bounds, zeta_u_star)
from services.synthesis.topology.graph import Topology, bitset_balls

__all__ = ["bfb_tau", "bfb_step_maxima", "cyclic_step_maxima", "u_star", "translation_types", "StepProblems"]

BALANCE_SWEEPS = 4            # water-filling rounds for the upper bounds (`kernels.balanced_upper`)
ZETA_MAX_DEGREE = 12          # subset sums cost d 2^d per problem: for small d, and batches of at most
ZETA_WORK = 1 << 24           # this many operations; min cuts otherwise


def bfb_tau(topology: Topology, *, method: str = "auto") -> tuple[int, Fraction]:
    """(D(G), tau) of the optimal BFB allgather (Eq. (2), Theorem 15: it takes D(G) steps). `method` picks
    how problems that no shortcut prices are solved: "zeta" (subset sums), "cut" (min cuts) or "auto"
    (subset sums up to ZETA_MAX_DEGREE in-arcs and ZETA_WORK operations per batch, min cuts beyond).

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> bfb_tau(build("torus(4, 6)"))
    (5, Fraction(23, 24))
    """
    steps, maxima = bfb_step_maxima(topology, method=method)
    return steps, Fraction(topology.degree, topology.nodes) * sum(maxima, Fraction(0))


def bfb_step_maxima(topology: Topology, *, method: str = "auto") -> tuple[int, tuple[Fraction, ...]]:
    """(D(G), (max_u U*_{u,1}, ..., max_u U*_{u,D})): the optimal BFB allgather's largest in-arc load of every
    step, in shards (Eq. (2): tau = (d/N) times their sum). The per-step profile is what App. A.6's
    conversion needs: its two halves run side by side, so each step costs the larger of the two."""
    if method not in ("auto", "zeta", "cut"):
        raise ValueError(f"method must be auto, zeta or cut, got {method!r}")
    check_bfb_degree(topology)
    if topology.translation is not None:
        return _maxima_by_translation(topology, method)
    return _maxima_by_bitsets(topology, method)


def u_star(masks: np.ndarray, counts: np.ndarray, d: int, method: str = "auto") -> Fraction:
    """LP (1)'s optimum U* = max_S load(S)/|S| of one (u, t) problem given as source types (in-arc masks with
    their source counts; types with count 0 are ignored)."""
    masks = np.asarray(masks, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    keep = counts > 0
    masks, counts = masks[keep], counts[keep]
    if masks.size == 0:
        return Fraction(0)
    offsets = np.array([0, masks.size], dtype=np.int64)
    alone, _, _, _, multi = type_bounds(offsets, masks, counts, d)
    if not multi[0]:
        return Fraction(int(alone[0]))
    num, den = _multi_u_star(offsets, masks, counts, d, method, np.array([0]))
    return Fraction(int(num[0]), int(den[0]))


def _exact_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, method: str,
                  floor: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
    """U* = num/den of each problem given its source types (problem p: masks[offsets[p]:offsets[p + 1]]
    with their counts); with `floor` and min cuts, max(U*, floor) (cuts settle problems below it at once)."""
    problems = offsets.size - 1
    if method == "zeta" or (method == "auto" and d <= ZETA_MAX_DEGREE and problems * d << d <= ZETA_WORK):
        return zeta_u_star(offsets, masks, counts, d)
    solved = _batched_min_max_load([(masks[a:b], counts[a:b]) for a, b in zip(offsets[:-1], offsets[1:])], d, floor)
    return np.array([a for a, _ in solved], dtype=np.int64), np.array([b for _, b in solved], dtype=np.int64)


def translation_types(g: Topology) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Node 0's problems of a topology with a translation: (D, offsets, masks, counts, dist, mask_of) where
    problem t - 1 (offsets[t - 1]:offsets[t]) lists the source types at step t, dist[v] = d(v, 0) and
    mask_of[v] = v's eligible in-arc slots of node 0 (Definition 15)."""
    check_bfb_degree(g)
    tr = g.translation
    dc = g.distances_to([0])[0].astype(np.int64)          # d(v, 0); d(v, w) = d(v - w, 0) by translation
    everyone = np.arange(g.nodes)
    w = g.in_predecessors[0].astype(np.int64)
    if len(tr.moduli) == 1:                                # Z_n: v - w mod n
        dw = dc[(everyone[:, None] - w[None, :]) % g.nodes]
    else:
        dw = np.stack([dc[tr.add(everyone, tr.negate(int(x)))] for x in w], axis=1)
    return _node0_types(dc, dw)


def _node0_types(dc: np.ndarray, dw: np.ndarray):
    d = dw.shape[1]
    D = int(dc.max())
    mask_of = eligibility_masks(dc, dw)
    sel = dc > 0
    if d + D.bit_length() < 63:                  # (step, mask) types sorted by step, as one packed key
        key, counts = np.unique(dc[sel] * (1 << d) + mask_of[sel], return_counts=True)
        steps, masks = key >> d, key & ((1 << d) - 1)
    else:                                        # a packed key would overflow int64 (d near 62)
        types, counts = np.unique(np.stack([dc[sel], mask_of[sel]], axis=1), axis=0, return_counts=True)
        steps, masks = types[:, 0], np.ascontiguousarray(types[:, 1])
    offsets = np.searchsorted(steps, np.arange(1, D + 2)).astype(np.int64)   # problem t - 1: one step
    return D, offsets, masks, counts.astype(np.int64), dc, mask_of


def cyclic_step_maxima(n: int, generators, *, method: str = "auto") -> tuple[int, tuple[Fraction, ...]]:
    """`bfb_step_maxima` of the Cayley graph of Z_n with the generator multiset `generators` (circulants and
    directed circulants: x -> x + g mod n), from one breadth-first search on Z_n without building the graph:
    d(v, 0) = d(0, -v), node 0's in-neighbours are the -g, and d(v, -g) = d(v + g, 0)."""
    gens = np.asarray(generators, dtype=np.int64) % n
    if gens.size > BFB_MAX_DEGREE:
        raise ScheduleTooLarge(f"a circulant of degree {gens.size}: BFB schedules are built for degree at most "
                               f"{BFB_MAX_DEGREE}")
    everyone = np.arange(n)
    dc = cyclic_distances(n, gens)[(-everyone) % n]
    if (dc < 0).any():
        raise ValueError(f"the generators {gens.tolist()} do not generate Z_{n}")
    dw = dc[(everyone[:, None] + gens[None, :]) % n]
    return _maxima_of_node0(_node0_types(dc, dw), gens.size, method)


def _maxima_by_translation(g: Topology, method: str) -> tuple[int, tuple[Fraction, ...]]:
    """Node 0's problems are every node's (x -> x + u is an automorphism): U*_{0,t} for each t."""
    return _maxima_of_node0(translation_types(g), g.degree, method)


def _maxima_of_node0(types, d: int, method: str) -> tuple[int, tuple[Fraction, ...]]:
    D, offsets, masks, counts, _, _ = types
    if D == 0:
        return 0, ()
    alone, _, _, _, multi = type_bounds(offsets, masks, counts, d)
    out = [Fraction(int(a)) for a in alone]           # no source with two arcs: U* is the largest count
    hard = np.flatnonzero(multi)
    if hard.size:
        num, den = _multi_u_star(offsets, masks, counts, d, method, hard)
        for p, a, b in zip(hard.tolist(), num.tolist(), den.tolist()):
            out[p] = Fraction(int(a), int(b))
    return D, tuple(out)


def _maxima_by_bitsets(g: Topology, method: str) -> tuple[int, tuple[Fraction, ...]]:
    return maxima_of_predecessors(g.in_predecessors, method)


def maxima_of_predecessors(preds, method: str = "auto", active: np.ndarray | None = None
                           ) -> tuple[int, tuple[Fraction, ...]]:
    """`bfb_step_maxima` of the strongly connected digraph whose node u has the in-arc tails preds[u]
    (a node's own index pads a missing slot), without building a Topology; with `active`, only those
    receivers are solved (an automorphism must map every receiver onto an active one)."""
    preds = np.ascontiguousarray(preds, dtype=np.int64)
    d = preds.shape[1]                           # in-arc slots (tau uses the nominal degree)
    out = []
    for t, prev, ball in bitset_balls(preds):
        if full_tree(prev, ball, d, t).any():
            out.append(Fraction(d ** (t - 1)))
        else:
            out.append(StepProblems(prev, ball, preds, method, active).maximum())
    return len(out), tuple(out)


def genkautz_step_maxima(d: int, m: int, *, transposed: bool = False,
                         method: str = "auto") -> tuple[int, tuple[Fraction, ...]]:
    """`bfb_step_maxima` of Pi_{d,m} (x -> -d x - a mod m, a = 1..d; `families.genkautz`) or of its transpose,
    from the arcs' formula: the in-arc tails in the order `Topology` gives them (ascending), no graph built.
    x -> -x - 1 is an automorphism of Pi_{d,m} (x's arcs -d x - a go to d x + a - 1 = -d(-x - 1) - (d + 1 - a))
    and so of its transpose: receivers u and m - 1 - u have the same problems, and only u <= m - 1 - u are
    solved."""
    if d > BFB_MAX_DEGREE:
        raise ScheduleTooLarge(f"genkautz({d}, {m}): BFB schedules are built for degree at most {BFB_MAX_DEGREE}")
    tails = np.repeat(np.arange(m, dtype=np.int64), d)
    heads = (-d * tails - np.tile(np.arange(1, d + 1, dtype=np.int64), m)) % m
    if transposed:                               # G^T's in-arcs of x are G's out-arcs of x
        preds = np.sort(heads.reshape(m, d), axis=1)
    else:                                        # every node has d in-arcs (Pi_{d,m} is d-regular)
        preds = tails[np.argsort(heads, kind="stable")].reshape(m, d)
    everyone = np.arange(m)
    return maxima_of_predecessors(preds, method, active=everyone <= m - 1 - everyone)


def full_tree(prev: np.ndarray, ball: np.ndarray, d: int, t: int) -> np.ndarray:
    """Which receivers have d^t distinct sources at step t (their reverse walks of length t all end at
    different nodes): each in-arc then carries its d^(t-1) sources alone, U* = d^(t-1), and no receiver can
    have more (an in-arc's sources are within t-1 of its tail)."""
    if d ** t > ball.shape[0]:
        return np.zeros(ball.shape[0], dtype=bool)
    return sphere_sizes(prev, ball) == d ** t


class StepProblems:
    """The (u, t) problems of every receiver u at one step t of the bitset evaluator (of the `active` ones,
    when an automorphism maps every receiver onto one of them: the others count as U* = 0).

    `kernels.step_u_star_by_runs` solves every receiver whose sources have one eligible in-arc or one run of
    in-arcs each, straight from the bitsets; the others are refined into source types
    (`kernels.step_types`) and carry bounds until `solve` makes them exact (U* values have denominators
    <= d, so floats order them exactly)."""

    def __init__(self, prev: np.ndarray, ball: np.ndarray, preds: np.ndarray, method: str = "auto",
                 active: np.ndarray | None = None):
        self.prev, self.ball, self.preds, self.method = prev, ball, preds, method
        self.d = preds.shape[1]
        if active is None:
            active = np.ones(preds.shape[0], dtype=np.bool_)
        self.num, self.den, self.exact = step_u_star_by_runs(prev, ball, preds, active)
        self.lo = self.num / self.den                     # lower bounds (exact where `exact`)
        self.hi = self.lo.copy()                          # upper bounds
        self.rest = np.flatnonzero(~self.exact)
        if self.rest.size:
            self.offsets, self.masks, self.counts = step_types(prev, ball, preds, self.rest)
            alone, sources, used, upper, multi = type_bounds(self.offsets, self.masks, self.counts, self.d)
            ratio = sources / np.maximum(used, 1)
            self.lo[self.rest] = np.maximum(alone, ratio)
            # a feasible load balance bounds U* from above (a hair higher, against rounding) and closes most
            # receivers below the step's best lower bound without an exact solve
            self.hi[self.rest] = np.minimum(upper, balanced_upper(self.offsets, self.masks, self.counts, self.d,
                                                                 BALANCE_SWEEPS) * (1 + 1e-9))
            self._alone, self._sources, self._used = alone, sources, used
            single = ~multi                              # no source with two arcs: U* is the largest count
            self.num[self.rest[single]] = alone[single]
            self.lo[self.rest[single]] = self.hi[self.rest[single]] = alone[single]
            self.exact[self.rest[single]] = True

    def u(self, a: int) -> Fraction:
        """U*_{a,t} (after `solve` for receivers that were not exact)."""
        return Fraction(int(self.num[a]), int(self.den[a]))

    def lower(self, a: int) -> Fraction:
        """An exact lower bound on U*_{a,t}: U* itself, or max(largest single-arc count, sources / arcs used)."""
        if self.exact[a]:
            return self.u(a)
        i = int(np.searchsorted(self.rest, a))
        return max(Fraction(int(self._alone[i])), Fraction(int(self._sources[i]), max(int(self._used[i]), 1)))

    def solve(self, receivers: np.ndarray) -> None:
        """Make U* exact for `receivers`."""
        need = np.asarray(receivers, dtype=np.int64)
        need = need[~self.exact[need]]
        if need.size:
            pos = np.searchsorted(self.rest, need)
            num, den = _multi_u_star(self.offsets, self.masks, self.counts, self.d, self.method, pos)
            self.num[need], self.den[need] = num, den
            self.lo[need] = self.hi[need] = num / den
            self.exact[need] = True

    def types(self, a: int) -> tuple[np.ndarray, np.ndarray]:
        """Receiver a's source types (masks, counts)."""
        offsets, masks, counts = step_types(self.prev, self.ball, self.preds, np.array([a]))
        return masks, counts

    def open_above(self, floor: Fraction, among: np.ndarray | None = None) -> np.ndarray:
        """Receivers (of `among`) whose upper bound exceeds `floor`."""
        idx = np.arange(self.hi.size) if among is None else np.asarray(among, dtype=np.int64)
        return idx[self.hi[idx] * floor.denominator > floor.numerator * (1 + 1e-12)]

    def maximum(self) -> Fraction:
        """max over receivers of U*_{u,t}."""
        a = int(np.argmax(self.lo))
        floor = self.lower(a)
        self.solve(self.open_above(floor))
        a = int(np.argmax(np.where(self.exact, self.lo, -1.0)))
        return max(floor, self.u(a))


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The indices of the slices lo[i]:hi[i] laid end to end, and the offsets of each slice among them."""
    lengths = (hi - lo).astype(np.int64)
    sub = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    idx = np.arange(sub[-1], dtype=np.int64) + np.repeat(lo.astype(np.int64) - sub[:-1], lengths)
    return idx, sub


def _multi_u_star(offsets: np.ndarray, masks: np.ndarray, counts: np.ndarray, d: int, method: str,
                  which: np.ndarray, floor: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
    """U* = num/den of the problems `which` (some source has two eligible arcs): by windows where every type
    is a run of the slot cycle, otherwise by subset sums or min cuts (max(U*, floor) there, with a floor)."""
    num, den, ok = interval_u_star(offsets, masks, counts, d, which)
    rest = np.flatnonzero(~ok)
    if rest.size:
        lo, hi = offsets[which[rest]], offsets[which[rest] + 1]
        idx, sub = _ranges(lo, hi)
        sm, sc = masks[idx], counts[idx]
        # a perfectly balanced load (every in-arc at sources / arcs used) is optimal: water-filling often
        # finds one, and U* values are fractions with denominators <= d, so a bound within 1e-9 settles it
        # (worth it before batched min cuts; subset sums and a single min cut cost less than trying)
        _, sources, used, _, _ = type_bounds(sub, sm, sc, d)
        used = np.maximum(used, 1)
        balanced = np.zeros(rest.size, dtype=bool)
        if rest.size > 1 and not (method == "zeta" or (method == "auto" and d <= ZETA_MAX_DEGREE)):
            balanced = balanced_upper(sub, sm, sc, d, BALANCE_SWEEPS) <= sources / used * (1 + 1e-9)
        num[rest[balanced]], den[rest[balanced]] = sources[balanced], used[balanced]
        hard = np.flatnonzero(~balanced)
        if hard.size:
            lo2, hi2 = sub[hard], sub[hard + 1]
            idx2, sub2 = _ranges(lo2, hi2)
            num[rest[hard]], den[rest[hard]] = _exact_u_star(sub2, sm[idx2], sc[idx2], d, method, floor)
    return num, den
