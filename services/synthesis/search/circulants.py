"""Minimum-diameter offsets of circulants (paper App. F.4, Definition 18, Theorem 22; digest 4.7, 4.8).

A circulant is the Cayley graph of Z_n on a generator set S; its optimal BFB schedule takes D(G) steps
(Theorem 15) and, for undirected circulants, is BW-optimal (proven for two offsets, Conjecture 1 beyond),
so the offsets that matter to the finder are those of the smallest diameter. Three kinds:

- ``circulant``: k offsets a, each giving x -> x +- a (degree 2k, no a with 2a = n);
- ``half``: k offsets and the involution n/2 (one duplex link; degree 2k + 1, n even);
- ``dcirculant``: k directed offsets x -> x + a (degree k).

Two proven facts bound the search:

- multiplication by a unit u of Z_n is a group automorphism, so S and uS give isomorphic circulants. Every
  connected offset set is therefore isomorphic to one containing 1 (when some offset is a unit) or, when
  none is, to one containing a proper divisor g of n (g = gcd(a, n) = u a for a unit u) and only non-units.
  `canonical` enumerates exactly these representatives;
- in an abelian Cayley graph every node within D hops of 0 is a sum of at most D generators, which commute,
  so the ball has at most as many nodes as the lattice points of the matching ball in Z^k (the "abelian
  Moore bound", `diameter_floor`). No offset set of the kind has a smaller diameter.

`exhaustive_offsets` evaluates every canonical set (the offline table, `offset_table`, holds its results for
the undirected kinds up to 400 nodes). At run time `best_offsets` does so when there are at most
EXHAUSTIVE_SETS canonical sets; beyond that it evaluates structured seeds and a deterministic random sample
of SEARCH_ROWS sets containing 1, which is exact only when a set meets the floor. `OffsetSearch.proven`
says which case holds.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from services.synthesis.bfb.kernels import circulant_eccentricities

__all__ = ["KINDS", "EXHAUSTIVE_SETS", "SEARCH_ROWS", "BASE_SEARCH_ROWS", "BASE_NODES", "OffsetSearch", "diameter_floor", "generators",
           "domain", "canonical", "canonical_count", "best_offsets", "exhaustive_offsets"]

KINDS = ("circulant", "half", "dcirculant")
EXHAUSTIVE_SETS = 2_000       # canonical offset sets evaluated exhaustively at run time up to this many
SEARCH_ROWS = 192             # beyond: a sample of this many sets containing 1 (and the seeds) ...
BASE_SEARCH_ROWS = 640        # ... or of this many on at most BASE_NODES nodes (bases of line digraphs)
BASE_NODES = 64
_BATCH_ROWS = 8_192           # rows per call of the compiled search (a search stops between batches)


@dataclass(frozen=True)
class OffsetSearch:
    """The offset sets found for (n, k, kind), lowest diameter first, and what is proven about them."""

    found: tuple[tuple[int, tuple[int, ...]], ...]      # (diameter, offsets)
    floor: int                                          # no set of the kind has a smaller diameter
    exhaustive: bool                                    # every canonical set was evaluated

    @property
    def proven(self) -> bool:
        """The smallest diameter found is the smallest any offset set of the kind has."""
        return bool(self.found) and (self.exhaustive or self.found[0][0] == self.floor)


def _l1_ball(k: int, radius: int) -> int:
    """Lattice points of Z^k with L1 norm at most `radius`: sum_i 2^i C(k, i) C(radius, i)."""
    if radius < 0:
        return 0
    return sum(2 ** i * math.comb(k, i) * math.comb(radius, i) for i in range(k + 1))


def diameter_floor(n: int, k: int, kind: str) -> int:
    """The abelian Moore bound: the least D whose lattice ball (C(D + k, k) points of N^k for k directed
    generators; the L1 ball of Z^k for k offsets +-a; that ball plus the previous radius's for the added
    involution n/2) holds n points. Every circulant of the kind has diameter at least this."""
    size = {"dcirculant": lambda r: math.comb(r + k, k), "circulant": lambda r: _l1_ball(k, r),
            "half": lambda r: _l1_ball(k, r) + _l1_ball(k, r - 1)}[kind]
    d = 0
    while size(d) < n:
        d += 1
    return d


def domain(n: int, kind: str) -> int:
    """Offsets of the kind are 1..domain(n, kind) (undirected: a and n - a are the same link)."""
    return n - 1 if kind == "dcirculant" else (n - 1) // 2


def generators(n: int, offsets: np.ndarray, kind: str) -> np.ndarray:
    """Rows of offsets (P, k) -> rows of generators of Z_n (the arcs x -> x + g of each circulant)."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(len(offsets), -1)
    if kind == "dcirculant":
        return offsets
    gens = np.concatenate([offsets, n - offsets], axis=1)
    if kind == "half":
        gens = np.concatenate([gens, np.full((len(gens), 1), n // 2, dtype=np.int64)], axis=1)
    return gens


def _connected(n: int, rows: np.ndarray, kind: str) -> np.ndarray:
    g = np.gcd.reduce(rows, axis=1) if rows.size else np.zeros(0, dtype=np.int64)
    g = np.gcd(g, n)
    if kind == "half":
        g = np.gcd(g, n // 2)
    return g == 1


def _combinations(values: list[int], r: int) -> np.ndarray:
    if r == 0:
        return np.zeros((1, 0), dtype=np.int64)
    if len(values) < r:
        return np.zeros((0, r), dtype=np.int64)
    return np.array(list(itertools.combinations(values, r)), dtype=np.int64).reshape(-1, r)


@lru_cache(maxsize=None)
def canonical_count(n: int, k: int, kind: str) -> int:
    """How many rows `canonical` has (before the connectivity filter)."""
    m = domain(n, kind)
    nonunits = [a for a in range(2, m + 1) if math.gcd(a, n) > 1]
    divisors = [g for g in nonunits if n % g == 0]
    return math.comb(m - 1, k - 1) + len(divisors) * math.comb(max(len(nonunits) - 1, 0), k - 1)


def canonical(n: int, k: int, kind: str) -> np.ndarray:
    """One representative (at least) of every connected offset set of the kind up to multiplication by a
    unit of Z_n: sets containing 1, and sets of non-units containing a divisor of n. Rows sorted (a set
    containing two divisors appears twice)."""
    m = domain(n, kind)
    if k > m:
        return np.zeros((0, k), dtype=np.int64)
    with_one = _combinations(list(range(2, m + 1)), k - 1)
    parts = [np.concatenate([np.ones((len(with_one), 1), dtype=np.int64), with_one], axis=1)]
    nonunits = [a for a in range(2, m + 1) if math.gcd(a, n) > 1]
    for g in (a for a in nonunits if n % a == 0):
        rest = _combinations([a for a in nonunits if a != g], k - 1)
        parts.append(np.sort(np.concatenate([np.full((len(rest), 1), g, dtype=np.int64), rest], axis=1), axis=1))
    rows = np.concatenate(parts)
    return rows[_connected(n, rows, kind)]


def _seeds(n: int, k: int, kind: str) -> list[tuple[int, ...]]:
    """Structured starting sets: Theorem 22's {m, m + 1} pattern widened to k consecutive offsets, and the
    geometric {1, s, s^2, ...} with s ~ n^(1/k) (the shape of the lattice-like optimal sets)."""
    m = domain(n, kind)
    out = []
    for s in {max(2, round(n ** (1 / k))), max(2, round((n / 2) ** (1 / k))), max(2, math.ceil(n ** (1 / k)))}:
        row = sorted({min(m, s ** i) for i in range(k)})
        if len(row) == k:
            out.append(tuple(row))
    if k == 2 and n > 6:
        a = math.ceil((-1 + math.sqrt(2 * n - 1)) / 2)
        if a + 1 <= m:
            out.append((a, a + 1))
    out.append(tuple(range(1, k + 1)))
    return [r for r in out if len(r) == k and r[-1] <= m]


def _random_rows(rng: np.random.Generator, m: int, k: int, count: int) -> np.ndarray:
    """`count` sets {1, a_2, ..., a_k} of distinct offsets from 2..m."""
    if k == 1:
        return np.ones((1, 1), dtype=np.int64)
    if 4 * (k - 1) > m - 1:
        rest = np.argpartition(rng.random((count, m - 1)), k - 2, axis=1)[:, :k - 1] + 2
    else:
        rest = rng.integers(2, m + 1, size=(2 * count, k - 1))
        rest = np.sort(rest, axis=1)
        rest = rest[(np.diff(rest, axis=1) != 0).all(axis=1)][:count]
    return np.sort(np.concatenate([np.ones((len(rest), 1), dtype=np.int64), rest], axis=1), axis=1)


@lru_cache(maxsize=None)
def best_offsets(n: int, k: int, kind: str, keep: int = 4) -> OffsetSearch:
    """The smallest-diameter offset sets of k offsets of the kind on n nodes: every canonical set when there
    are at most EXHAUSTIVE_SETS (`exhaustive_offsets`, exact); otherwise the seeds and a deterministic random
    sample of SEARCH_ROWS sets containing 1 (BASE_SEARCH_ROWS up to BASE_NODES nodes; exact only when a set
    meets the floor)."""
    if kind not in KINDS:
        raise ValueError(f"unknown circulant kind {kind!r}")
    floor = diameter_floor(n, k, kind)
    m = domain(n, kind)
    if (kind == "half" and n % 2) or k < 1 or k > m:
        return OffsetSearch((), floor, True)
    if canonical_count(n, k, kind) <= EXHAUSTIVE_SETS:
        return exhaustive_offsets(n, k, kind, keep)
    rng = np.random.default_rng([n, k, KINDS.index(kind)])
    seeds = np.array(_seeds(n, k, kind), dtype=np.int64).reshape(-1, k)
    count = BASE_SEARCH_ROWS if n <= BASE_NODES else SEARCH_ROWS
    rows = np.concatenate([seeds, _random_rows(rng, m, k, count)])
    rows = rows[(np.diff(rows, axis=1) != 0).all(axis=1) & _connected(n, rows, kind)]
    diam = circulant_eccentricities(n, generators(n, rows, kind), keep)
    found: list[tuple[int, tuple[int, ...]]] = []
    for i in np.lexsort((*rows.T[::-1], diam)).tolist():
        if diam[i] >= n or len(found) == keep:
            break
        hit = (int(diam[i]), tuple(int(x) for x in rows[i]))
        if not found or found[-1] != hit:                  # a sample may draw a set twice
            found.append(hit)
    found = tuple(found)
    return OffsetSearch(found, floor, False)


def _canonical_chunks(n: int, k: int, kind: str):
    """`canonical`'s rows, in one piece when they are few (up to _BATCH_ROWS), otherwise in chunks: sets
    containing 1 by their second offset first, then the non-unit sets by their divisor, so that a search
    can stop early without building them all."""
    if canonical_count(n, k, kind) <= _BATCH_ROWS or k <= 2:
        yield canonical(n, k, kind)
        return
    m = domain(n, kind)
    for a2 in range(2, m + 1):
        rest = _combinations(list(range(a2 + 1, m + 1)), k - 2)
        if len(rest):
            yield np.concatenate([np.full((len(rest), 1), 1, dtype=np.int64),
                                  np.full((len(rest), 1), a2, dtype=np.int64), rest], axis=1)
    nonunits = [a for a in range(2, m + 1) if math.gcd(a, n) > 1]
    for g in (a for a in nonunits if n % a == 0):
        rest = _combinations([a for a in nonunits if a != g], k - 1)
        if len(rest):
            yield np.sort(np.concatenate([np.full((len(rest), 1), g, dtype=np.int64), rest], axis=1), axis=1)


def _batches(chunks, rows: int):
    """Chunks joined into arrays of at least `rows` rows (the last may be smaller)."""
    pending, count = [], 0
    for c in chunks:
        pending.append(c)
        count += len(c)
        if count >= rows:
            yield np.concatenate(pending)
            pending, count = [], 0
    if pending:
        yield np.concatenate(pending)


def exhaustive_offsets(n: int, k: int, kind: str, keep: int = 2) -> OffsetSearch:
    """The smallest diameter over every canonical offset set (exact, however many there are): evaluated
    chunk by chunk with the `keep` best sets so far in front, so a row is abandoned as soon as it cannot be
    among the `keep` smallest; stops once `keep` sets meet the floor."""
    floor = diameter_floor(n, k, kind)
    if (kind == "half" and n % 2) or k < 1 or k > domain(n, kind):
        return OffsetSearch((), floor, True)
    best: list[tuple[int, tuple[int, ...]]] = []
    for rows in _batches(_canonical_chunks(n, k, kind), _BATCH_ROWS):
        rows = rows[_connected(n, rows, kind)]
        if not len(rows):
            continue
        lead = np.array([offs for _, offs in best], dtype=np.int64).reshape(-1, k)
        rows = np.concatenate([lead, rows])
        diam = circulant_eccentricities(n, generators(n, rows, kind), keep)
        hits = np.flatnonzero(diam[len(lead):] < n) + len(lead)
        best = sorted(set(best) | {(int(diam[i]), tuple(int(x) for x in rows[i])) for i in hits.tolist()})
        best = best[:keep]
        if len(best) == keep and best[-1][0] == floor:
            break
    return OffsetSearch(tuple(best), floor, True)
