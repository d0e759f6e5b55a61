"""Local search over directed-circulant offset sets (paper App. F.4; Theorem 15: BFB on a circulant takes
D(G) steps), for the (n, k) whose canonical sets are too many to evaluate one by one.

A state is a set {1, a_2, ..., a_k} of distinct offsets of Z_n (every set containing a unit is isomorphic to
one containing 1: multiplication by a unit is a group automorphism, `circulants.canonical`). Its score is
(D(G), number of nodes at distance D(G) from 0), lexicographically; by vertex transitivity one breadth-first
search from node 0 gives both (a bitset BFS, as `bfb.kernels.circulant_eccentricities`). A move replaces one
offset other than 1 by an offset not in the set. Each climb starts from a random set and takes a random move
when it does not increase the score (equal scores walk a plateau), until `patience` moves in a row fail to
decrease it. Every accepted set is recorded with its diameter, so that the sets of the smallest diameters
found can be priced by BFB afterwards (`circulant_pareto`).

A climb finds sets; it proves nothing: a row built from it is exact only where the abelian Moore floor is met
by a BW-optimal set (`circulant_pareto.ParetoOffsets.proven`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from services.synthesis.bfb.kernels import _equal, _or_shifted_left, _or_shifted_right, _popcount

__all__ = ["ClimbResult", "climb", "score"]


@dataclass(frozen=True)
class ClimbResult:
    """Sets accepted by the climbs (rows, sorted offsets) with their diameters, and the evaluations spent."""

    rows: np.ndarray  # (P, k) offset sets, each containing 1
    diameters: np.ndarray  # (P,) D(G) of each row
    evaluated: int  # breadth-first searches run
    climbs: int  # climbs run


@njit(cache=True, nogil=True)
def _score(n: int, gens: np.ndarray, bound: int, ball: np.ndarray, grown: np.ndarray, full: np.ndarray):
    """(D(G), nodes at distance D(G) from 0) of the circulant x -> x + g; (n, 0) when disconnected or when the
    diameter exceeds `bound` (the search is abandoned there)."""
    ball[:] = 0
    ball[0] = 1
    t = 0
    inside = 1
    while True:
        if _equal(ball, full):
            return t, n - inside if t > 0 else 1
        if t >= bound:
            return n, 0
        grown[:] = ball
        for g in gens:
            _or_shifted_left(ball, g, n, grown)
            _or_shifted_right(ball, n - g, grown)
        if _equal(grown, ball):
            return n, 0
        inside = _popcount(ball)
        ball[:] = grown
        t += 1


@njit(cache=True, nogil=True)
def _climb(n: int, starts: np.ndarray, seed: int, patience: int, budget: int, record: int):
    k = starts.shape[1]
    words = (n + 63) // 64
    ball = np.empty(words, dtype=np.uint64)
    grown = np.empty(words, dtype=np.uint64)
    full = np.full(words, ~np.uint64(0), dtype=np.uint64)
    if n % 64:
        full[words - 1] = (np.uint64(1) << np.uint64(n % 64)) - np.uint64(1)
    member = np.zeros(n, dtype=np.bool_)
    out = np.zeros((record, k), dtype=np.int64)
    out_d = np.zeros(record, dtype=np.int64)
    kept = 0
    evaluated = 0
    climbs = 0
    np.random.seed(seed)
    cand = np.empty(k, dtype=np.int64)
    for r in range(starts.shape[0]):
        if evaluated >= budget:
            break
        climbs += 1
        cur = starts[r].copy()
        member[:] = False
        for a in cur:
            member[a] = True
        cd, cl = _score(n, cur, n, ball, grown, full)
        evaluated += 1
        if cd < n and kept < record:
            out[kept] = cur
            out_d[kept] = cd
            kept += 1
        fails = 0
        while fails < patience and evaluated < budget:
            i = 1 + np.random.randint(k - 1)
            v = 2 + np.random.randint(n - 2)
            if member[v]:
                fails += 1
                continue
            cand[:] = cur
            cand[i] = v
            bound = cd if cd < n else n
            d, last = _score(n, cand, bound, ball, grown, full)
            evaluated += 1
            if d < cd or (d == cd and last <= cl and d < n):
                if d < cd or last < cl:
                    fails = 0
                else:
                    fails += 1
                member[cur[i]] = False
                member[v] = True
                cur[i] = v
                cd, cl = d, last
                if kept < record:
                    out[kept] = cur
                    out_d[kept] = cd
                    kept += 1
            else:
                fails += 1
    return out[:kept], out_d[:kept], evaluated, climbs


def score(n: int, offsets) -> tuple[int, int]:
    """(D(G), nodes at distance D(G) from node 0) of the directed circulant on these offsets; (n, 0) when
    they do not generate Z_n."""
    words = (n + 63) // 64
    full = np.full(words, ~np.uint64(0), dtype=np.uint64)
    if n % 64:
        full[words - 1] = (np.uint64(1) << np.uint64(n % 64)) - np.uint64(1)
    d, last = _score(
        n,
        np.asarray(offsets, dtype=np.int64),
        n,
        np.empty(words, dtype=np.uint64),
        np.empty(words, dtype=np.uint64),
        full,
    )
    return int(d), int(last)


def climb(n: int, k: int, seed: int, budget: int, patience: int, record: int = 200_000) -> ClimbResult:
    """Climbs from fixed-seed random sets {1, ...} until `budget` breadth-first searches are spent (module
    docstring); each climb ends after `patience` moves in a row that do not decrease the score."""
    if k < 2 or k > n - 1:
        raise ValueError(f"a climb needs 2 <= k <= n - 1 offsets, got k = {k}, n = {n}")
    rng = np.random.default_rng(seed)
    starts = max(1, budget // max(patience, 1))
    rest = np.argsort(rng.random((starts, n - 2)), axis=1)[:, : k - 1] + 2
    rows = np.concatenate([np.ones((starts, 1), dtype=np.int64), rest.astype(np.int64)], axis=1)
    out, diam, evaluated, climbs = _climb(n, rows, int(rng.integers(1 << 31)), patience, budget, record)
    return ClimbResult(np.sort(out, axis=1), diam, int(evaluated), int(climbs))
