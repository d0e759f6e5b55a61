"""The base database (paper section 5.4, Table 9) and generative families instantiated at a size.

Small bases are evaluated once by BFB (exact (steps, tau)) and cached in memory and, for the CLI, in a JSON
file (FABRICPLAN_CACHE_DIR, default ~/.cache/fabricplan). Families whose optimal BFB cost is a theorem
(rings, tori, Hamming graphs) are not solved at all. Paper families the text leaves under-specified are
replaced by derived equivalents with the same (N, d, steps, tau) (see DERIVED).
"""
from __future__ import annotations

import itertools
import json
import math
import os
import threading
from functools import lru_cache
from fractions import Fraction
from pathlib import Path

import numpy as np

from services.synthesis.search.candidates import Candidate, from_topology, pareto
from services.synthesis.topology.catalog import build
from services.synthesis.schedule.cost import optimal_tau
from services.synthesis.topology.distreg import CATALOGUE
from services.synthesis.topology.families import theorem22_offsets
from services.synthesis.bfb.kernels import circulant_eccentricities
from services.synthesis.topology.graph import TopologyError

BASE_MAX_NODES = 64          # bases are small; larger sizes come from expansions and generative families
GENERATIVE_BFB_LIMIT = 4096  # non-vertex-transitive generative families are solved by BFB up to this size

# Paper bases whose definitions the text does not give, replaced by derived graphs with identical
# (N, d, steps, tau): digest 4.10/4.11.
DERIVED = {
    # Diamond (Fig. 19): N=8, d=2, T_L=3, BW-optimal. The digest's substitute (BFB, reverse-symmetric).
    "diamond": "edges(8, 0>1, 0>4, 1>3, 1>5, 2>1, 2>7, 3>4, 3>6, 4>2, 4>5, 5>6, 5>7, 6>0, 6>2, 7>0, 7>3)",
    # DBJMod(2,4): N=16, d=2, T_L=5, BW-optimal; the directed circulant x -> x+1, x+7 has D=5 and a
    # BW-optimal BFB schedule (found by exhaustive search over 2-offset directed circulants).
    "dbjmod(2,4)": "dcirculant(16, 1, 7)",
    # DBJMod(4,2): N=16, d=4, T_L=3, BW-optimal; C(16,{3,4}) has D=3 and is BW-optimal (Theorem 22).
    "dbjmod(4,2)": "circulant(16, 3, 4)",
}


class _Cache:
    """In-memory cache with optional JSON persistence of evaluated expressions -> (steps, tau, facts)."""

    def __init__(self):
        self.mem: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.path: Path | None = None
        self.dirty = False

    def attach(self, directory: str | os.PathLike | None) -> None:
        if directory is None:
            return
        self.path = Path(directory) / "candidates-v1.json"
        if self.path.exists():
            try:
                self.mem.update(json.loads(self.path.read_text()))
            except (OSError, ValueError):
                pass

    def get(self, key: str) -> Candidate | None:
        d = self.mem.get(key)
        return None if d is None else _from_json(d)

    def put(self, c: Candidate) -> None:
        with self.lock:
            self.mem[c.expr] = _to_json(c)
            self.dirty = True

    def flush(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.mem))
        tmp.replace(self.path)
        self.dirty = False


def _to_json(c: Candidate) -> dict:
    d = dict(c.__dict__)
    d["tau"] = str(c.tau)
    return d


def _from_json(d: dict) -> Candidate:
    return Candidate(**{**d, "tau": Fraction(d["tau"])})


CACHE = _Cache()


def default_cache_dir() -> Path:
    return Path(os.environ.get("FABRICPLAN_CACHE_DIR", Path.home() / ".cache" / "fabricplan"))


def evaluate(expr: str, *, reverse_symmetric: bool, family: str, steps=None, tau=None) -> Candidate | None:
    """Candidate for a concrete expression (cached); None if the parameters are invalid."""
    c = CACHE.get(expr)
    if c is not None:
        return c
    try:
        t = build(expr)
    except (TopologyError, ValueError):
        return None
    c = from_topology(t, reverse_symmetric=reverse_symmetric, family=family, steps=steps, tau=tau)
    if c.expr != expr:
        c2 = CACHE.get(c.expr)
        if c2 is not None:
            return c2
    CACHE.put(c)
    return c


# ----- instances of each family at (n, d) ----------------------------------------------------------
def _priced(expr: str, n: int, d: int, steps: int, diameter: int, *, bidirectional: bool, simple: bool,
            family: str, many_out: bool) -> Candidate:
    """A candidate whose optimal BFB cost is a theorem (BW-optimal, steps = diameter): no graph is built."""
    return Candidate(expr, n, d, steps, optimal_tau(n), diameter, bidirectional, simple, False, True, True,
                     many_out, True, True, family)


def _ring_family(n: int, d: int) -> list[Candidate]:
    """UniRing(d, n): n-1 steps; BiRing(d, n), even d: floor(n/2) steps (BFB ring, App. F.1); both BW-optimal."""
    out = [_priced(f"ring({n})" if d == 1 else f"ring({n}, {d})", n, d, n - 1, n - 1,
                   bidirectional=n == 2 and d == 1, simple=d == 1, family="ring", many_out=False)]
    if d % 2 == 0 and n >= 3:
        out.append(_priced(f"biring({n})" if d == 2 else f"biring({n}, {d})", n, d, n // 2, n // 2,
                           bidirectional=True, simple=d == 2, family="biring", many_out=True))
    return out


def _torus_family(n: int, d: int) -> list[Candidate]:
    """Every factorisation of n into dimensions whose degree (2 per dimension >= 3, 1 per size-2 one) is d:
    BW-optimal with steps = sum floor(d_i / 2) (Theorem 13)."""
    out = []
    for dims in _factorisations(n):
        if len(dims) < 2 or sum(1 if x == 2 else 2 for x in dims) != d:
            continue
        steps = sum(x // 2 for x in dims)
        out.append(_priced(f"torus({', '.join(map(str, dims))})", n, d, steps, steps, bidirectional=True,
                           simple=True, family="torus", many_out=True))
    return out


def _factorisations(n: int, smallest: int = 2) -> list[tuple[int, ...]]:
    out = [(n,)] if n >= smallest else []
    for f in range(smallest, math.isqrt(n) + 1):
        if n % f == 0:
            out += [(f, *rest) for rest in _factorisations(n // f, f)]
    return out


def _hamming_family(n: int, d: int) -> list[Candidate]:
    """H(k, q), q^k = n, d = k(q-1): BW-optimal in k steps (Cartesian power of K_q)."""
    out = []
    for k in range(2, 13):
        q = round(n ** (1 / k))
        for qq in (q - 1, q, q + 1):
            if qq >= 2 and qq ** k == n and k * (qq - 1) == d:
                out.append(_priced(f"hypercube({k})" if qq == 2 else f"hamming({k}, {qq})", n, d, k, k,
                                   bidirectional=True, simple=True, family="hamming", many_out=True))
    return out


@lru_cache(maxsize=None)
def _best_offsets(n: int, k: int, directed: bool, budget: int = 48) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(diameter, offsets) of circulants on n nodes with k offsets, lowest diameter first: exhaustive when there are
    few, otherwise runs of consecutive offsets, Theorem-22-like pairs scaled up, and a deterministic random
    sample (never enumerating all subsets). Diameters come from one BFS (the graphs are vertex-transitive)."""
    top = n - 1 if directed else n // 2
    if top < k:
        return ()
    if math.comb(top, k) <= budget:
        pool = list(itertools.combinations(range(1, top + 1), k))
    else:
        rng = np.random.default_rng(n * 131 + k * 7 + directed)
        pool = {tuple(range(a, a + k)) for a in range(1, min(top - k + 2, 1 + budget // 4))}
        step = max(1, round(n ** (1 / k)))
        pool.add(tuple(sorted({min(top, max(1, step ** i)) for i in range(k)})))
        while len(pool) < budget:
            pool.add(tuple(sorted((rng.choice(top, size=k, replace=False) + 1).tolist())))
        pool = [p for p in pool if len(p) == k]
    pool = [offs for offs in pool if math.gcd(n, *offs) == 1]
    if not pool:
        return ()
    gens = np.array(pool, dtype=np.int64)
    if not directed:
        gens = np.concatenate([gens, (n - gens) % n], axis=1)       # a duplicate generator changes no distance
    diameters = circulant_eccentricities(n, gens)
    return tuple(sorted(zip(diameters.tolist(), pool))[:2])


def _circulant_family(n: int, d: int, known: list[Candidate] = ()) -> list[Candidate]:
    """The best circulants of degree d on n nodes (Theorem 22's for d = 4, then the lowest-diameter offset
    sets found), undirected and directed. An offset set is not evaluated when the result could not be kept:
    its BFB schedule takes exactly its diameter in steps (Theorem 15) and at best tau* = (N-1)/N, so a
    BW-optimal candidate already priced (`known`, or an earlier circulant) with fewer steps dominates it, and
    one with as many steps wins the tie (Candidate.key); an undirected circulant is only skipped for a
    bidirectional one, since the bidirectional frontier needs it otherwise."""
    out = []
    best_tau = optimal_tau(n)

    def add(kind: str, offsets: list[tuple[int, tuple[int, ...]]]) -> None:
        for diameter, offs in offsets:
            if len(set(offs)) != len(offs) or (kind == "circulant" and any(2 * a == n for a in offs)):
                continue
            if any(c.family == kind and c.bw_optimal and c.steps <= diameter for c in out):
                continue
            expr = f"{kind}({n}, {', '.join(map(str, offs))})"
            bidirectional = kind == "circulant"
            at_best = (diameter, best_tau, False, not bidirectional, diameter, len(expr), expr)
            if any(c.bw_optimal and c.key() <= at_best and (c.bidirectional or not bidirectional)
                   for c in [*known, *out]):
                continue
            c = evaluate(expr, reverse_symmetric=True, family=kind)
            if c is not None and c.degree == d:
                out.append(c)

    if d % 2 == 0 and d >= 4 and n >= d + 1:
        k = d // 2
        first = [(0, theorem22_offsets(n))] if (k == 2 and n > 6) else []     # Theorem 22: the minimum diameter
        add("circulant", first + list(_best_offsets(n, k, directed=False)))
    if n >= d + 2:
        add("dcirculant", list(_best_offsets(n, d, directed=True)))
    return out


def genkautz_candidate(d: int, n: int) -> Candidate | None:
    """Pi_{d,n} priced exactly. For n = d m with m >= d + 1, Pi_{d,dm} is the line digraph of Pi_{d,m}
    (Imase-Itoh), whose optimal BFB schedule is Pi_{d,m}'s lifted by Definition 1 (Theorem 10: every node has
    d distinct out-neighbours): steps + 1, tau + 1/m, no BFB solve. Otherwise BFB (tau-only evaluator)."""
    expr = f"genkautz({d}, {n})"
    c = CACHE.get(expr)
    if c is not None:
        return c
    if d >= 2 and n % d == 0 and n // d >= d + 1:
        base = genkautz_candidate(d, n // d)
        m = n // d
        loops = n % (d + 1) != 0
        c = Candidate(expr, n, d, base.steps + 1, base.tau + Fraction(1, m), base.diameter + 1, False,
                      not loops, loops, False, True, True, False, True, "genkautz")
        CACHE.put(c)
        return c
    return evaluate(expr, reverse_symmetric=False, family="genkautz")


def _kautz_family(n: int, d: int) -> list[Candidate]:
    out = []
    if d >= 2 and n >= d + 1 and n <= GENERATIVE_BFB_LIMIT:
        c = genkautz_candidate(d, n)
        if c is not None:
            out.append(c)
    if d >= 2:
        k = round(math.log(n, d)) if n > 1 else 0
        for kk in (k - 1, k, k + 1):
            if kk >= 1 and d ** kk == n:
                c = evaluate(f"debruijn({d}, {kk})", reverse_symmetric=True, family="debruijn")
                if c is not None:
                    out.append(c)
    return out


def _small_families(n: int, d: int) -> list[Candidate]:
    out = []
    if d == n - 1:
        out.append(evaluate(f"complete({n})", reverse_symmetric=True, family="complete"))
    if n % 2 == 0 and d == n // 2 and n >= 4:
        out.append(evaluate(f"bipartite({n // 2})", reverse_symmetric=True, family="bipartite"))
    if d == 4:
        for name, entry in CATALOGUE.items():
            if entry.nodes == n:
                out.append(evaluate(f"distreg({name})", reverse_symmetric=True, family="distreg"))
    for key, expr in DERIVED.items():
        c = evaluate(expr, reverse_symmetric=True, family=key)
        if c is not None and (c.nodes, c.degree) == (n, d):
            out.append(c)
    return [c for c in out if c is not None]


@lru_cache(maxsize=None)
def instances(n: int, d: int, target: bool = True) -> tuple[Candidate, ...]:
    """Every generative or base candidate with exactly n nodes and degree d (Pareto-pruned). Below the
    target size only cheap families (theorem-priced, vertex-transitive) and the small-base database
    (n <= BASE_MAX_NODES) are used as expansion inputs."""
    if n < 2 or d < 1:
        return ()
    cands = _ring_family(n, d) + _torus_family(n, d) + _hamming_family(n, d) + _small_families(n, d)
    if target or n <= BASE_MAX_NODES:
        cands += _circulant_family(n, d, [c for c in cands if c is not None]) + _kautz_family(n, d)
    elif d == 4 and n > 6:
        cands += [c for c in [evaluate(f"circulant({n}, {', '.join(map(str, theorem22_offsets(n)))})",
                                       reverse_symmetric=True, family="circulant")] if c is not None]
    cands = [c for c in cands if c is not None and (c.nodes, c.degree) == (n, d)]
    keep = {c.expr: c for c in pareto(cands) + pareto([c for c in cands if c.bidirectional])}
    return tuple(sorted(keep.values(), key=Candidate.key))     # both frontiers: all, and bidirectional
