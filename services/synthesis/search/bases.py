"""The base database (paper section 5.4, Table 9) and generative families instantiated at a size.

Families whose optimal BFB cost is a theorem (rings, tori, Hamming graphs) come priced without a graph; the
others are specs with a lower bound (their diameter or the Moore bound, and tau >= (N-1)/N) that the finder
prices (`pricing`, cached in memory and, for the CLI, on disk) only when the bound can still enter a
frontier. Paper families the text leaves under-specified are replaced by derived equivalents with the same
(N, d, steps, tau) (see DERIVED).
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from services.synthesis.schedule.cost import moore_steps, optimal_tau
from services.synthesis.search import pricing
from services.synthesis.search.candidates import Spec, candidate, exact_spec
from services.synthesis.search.circulant_pareto import KEEP_MIN_DIAMETER, pareto_lookup
from services.synthesis.search.circulants import best_offsets
from services.synthesis.search.offset_table import lookup
from services.synthesis.topology.distreg import CATALOGUE
from services.synthesis.topology.families import theorem22_offsets, torus_factorisations

__all__ = ["DERIVED", "instances", "line_base_circulants"]

BASE_MAX_NODES = 64          # bases are small; larger sizes come from expansions and generative families
GENERATIVE_BFB_LIMIT = 8192  # generalized Kautz graphs are priced up to this size

# Paper bases whose definitions the text does not give, replaced by derived graphs with identical
# (N, d, steps, tau): Table 9 and Fig. 19.
DERIVED = {
    # Diamond (Fig. 19): N=8, d=2, T_L=3, BW-optimal. Our substitute (BFB, reverse-symmetric).
    "diamond": "edges(8, 0>1, 0>4, 1>3, 1>5, 2>1, 2>7, 3>4, 3>6, 4>2, 4>5, 5>6, 5>7, 6>0, 6>2, 7>0, 7>3)",
    # DBJMod(2,4): N=16, d=2, T_L=5, BW-optimal; the directed circulant x -> x+1, x+7 has D=5 and a
    # BW-optimal BFB schedule (found by exhaustive search over 2-offset directed circulants).
    "dbjmod(2,4)": "dcirculant(16, 1, 7)",
    # DBJMod(4,2): N=16, d=4, T_L=3, BW-optimal; C(16,{3,4}) has D=3 and is BW-optimal (Theorem 22).
    "dbjmod(4,2)": "circulant(16, 3, 4)",
}


# ----- instances of each family at (n, d) ----------------------------------------------------------
def _theorem(expr: str, family: str) -> Spec:
    """A family whose optimal BFB cost is a theorem (BW-optimal in D(G) steps): priced without a graph."""
    return exact_spec(candidate(expr, family))


def _lazy(expr: str, family: str, n: int, d: int, steps: int, *, bidirectional: bool,
          reverse_symmetric: bool) -> Spec:
    """A family member priced on demand: at least `steps` (<= its diameter) and tau >= (N-1)/N."""
    return Spec(expr, family, n, d, steps, optimal_tau(n), bidirectional, reverse_symmetric)


def _ring_family(n: int, d: int) -> list[Spec]:
    """UniRing(d, n): n-1 steps; BiRing(d, n), even d: floor(n/2) steps (BFB ring, App. F.1); both BW-optimal."""
    out = [_theorem(f"ring({n})" if d == 1 else f"ring({n}, {d})", "ring")]
    if d % 2 == 0 and n >= 3:
        out.append(_theorem(f"biring({n})" if d == 2 else f"biring({n}, {d})", "biring"))
    return out


def _torus_family(n: int, d: int) -> list[Spec]:
    """Every factorisation of n into dimensions whose degree (2 per dimension >= 3, 1 per size-2 one) is d:
    BW-optimal with steps = sum floor(d_i / 2) (Theorem 13)."""
    return [_theorem(f"torus({', '.join(map(str, dims))})", "torus") for dims in torus_factorisations(n)
            if len(dims) >= 2 and sum(1 if x == 2 else 2 for x in dims) == d]


def _hamming_family(n: int, d: int) -> list[Spec]:
    """H(k, q), q^k = n, d = k(q-1): BW-optimal in k steps (Cartesian power of K_q)."""
    out = []
    for k in range(2, 14):
        q = round(n ** (1 / k))
        for qq in (q - 1, q, q + 1):
            if qq >= 2 and qq ** k == n and k * (qq - 1) == d:
                out.append(_theorem(f"hypercube({k})" if qq == 2 else f"hamming({k}, {qq})", "hamming"))
    return out


LINE_BASE_KEEP = 4      # circulants kept as line-digraph bases (BFB on L(G) depends on G beyond its cost)
SMALL_LINE_BASE, SMALL_LINE_BASE_KEEP = 16, 32


def _offsets(n: int, k: int, kind: str, keep: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(diameter, offsets) of the `keep` smallest-diameter circulants of the kind: the offline exhaustive
    table (`offset_table`), else the directed-circulant table's (`circulant_pareto`), else
    `circulants.best_offsets` (exhaustive over canonical sets when they are few, sampled beyond; one search
    keeps LINE_BASE_KEEP sets for both uses); with keep > 4, the run-time search's sets rather than a table's."""
    table = lookup(n, k, kind) if keep <= 4 else None
    if table is None and keep <= KEEP_MIN_DIAMETER and (row := pareto_lookup(n, k, kind)) is not None:
        return row.smallest[:keep]
    searched = SMALL_LINE_BASE_KEEP if n <= SMALL_LINE_BASE else LINE_BASE_KEEP
    return (table or best_offsets(n, k, kind, searched)).found[:keep]


def line_base_circulants(n: int, d: int, keep: int = LINE_BASE_KEEP) -> list[Spec]:
    """Circulants of (n, d) offered to line digraphs: up to `keep` of the smallest diameters (per kind), or
    up to SMALL_LINE_BASE_KEEP on at most SMALL_LINE_BASE nodes, where their line digraphs cost little."""
    return _circulant_family(n, d, max(keep, SMALL_LINE_BASE_KEEP) if n <= SMALL_LINE_BASE else keep)


def _circulant_family(n: int, d: int, keep: int = 4) -> list[Spec]:
    """The smallest-diameter circulants of degree d on n nodes (`circulants`): undirected with d/2 offsets
    (even d; Theorem 22 for d = 4), with (d-1)/2 offsets and the involution n/2 (odd d, even n), and
    directed with d offsets, and from the directed-circulant table the least-tau set of each diameter that
    can enter a frontier (`circulant_pareto`: BFB on two directed circulants of one diameter can differ in
    tau); each at least its diameter in steps (Theorem 15)."""
    out = []

    def add(name: str, offsets, extra: tuple[int, ...] = (), taus=None) -> None:
        for i, (diameter, offs) in enumerate(offsets):
            expr = f"{name}({n}, {', '.join(map(str, offs + extra))})"
            if all(s.expr != expr for s in out):
                spec = _lazy(expr, name, n, d, diameter, bidirectional=name == "circulant", reverse_symmetric=True)
                out.append(spec if taus is None else replace(spec, tau=taus[i]))

    if d % 2 == 0 and d >= 4 and n >= d + 1:
        k = d // 2
        if k == 2 and n > 6:                # Theorem 22: {m, m + 1} has the minimum diameter m, BW-optimal
            m, _ = theorem22_offsets(n)
            add("circulant", [(m, (m, m + 1))])
        else:
            add("circulant", _offsets(n, k, "circulant", keep))
    if d % 2 == 1 and d >= 3 and n % 2 == 0 and n >= d + 1:
        add("circulant", _offsets(n, (d - 1) // 2, "half", keep), (n // 2,))
    if n >= d + 2:
        add("dcirculant", _offsets(n, d, "dcirculant", keep))
        if (row := pareto_lookup(n, d)) is not None:       # the least BFB tau per diameter (tabulated, exact)
            add("dcirculant", [(dm, offs) for dm, _, offs in row.entries], taus=[t for _, t, _ in row.entries])
    return out


def _kautz_family(n: int, d: int) -> list[Spec]:
    """Generalized Kautz Pi_{d,n} (within a step of the Moore bound, Theorem 21) and de Bruijn DBJ(d, k)."""
    out = []
    if d >= 2 and d + 1 <= n <= GENERATIVE_BFB_LIMIT:
        out.append(_lazy(f"genkautz({d}, {n})", "genkautz", n, d, moore_steps(n, d), bidirectional=False,
                         reverse_symmetric=False))
    if d >= 2:
        k = round(math.log(n, d)) if n > 1 else 0
        for kk in (k - 1, k, k + 1):
            if kk >= 1 and d ** kk == n:
                out.append(_lazy(f"debruijn({d}, {kk})", "debruijn", n, d, kk, bidirectional=False,
                                 reverse_symmetric=True))
    return out


def _small_families(n: int, d: int) -> list[Spec]:
    out = []
    if d == n - 1:
        out.append(_lazy(f"complete({n})", "complete", n, d, 1, bidirectional=True, reverse_symmetric=True))
    if n % 2 == 0 and d == n // 2 and n >= 4:
        out.append(_lazy(f"bipartite({n // 2})", "bipartite", n, d, 2, bidirectional=True, reverse_symmetric=True))
    for name, entry in CATALOGUE.items():
        if (entry.nodes, entry.degree) == (n, d):
            out.append(_lazy(f"distreg({name})", "distreg", n, d, entry.diameter, bidirectional=True,
                             reverse_symmetric=True))
    for key, expr in DERIVED.items():
        f = pricing.facts(expr)
        if (f.nodes, f.degree) == (n, d):
            out.append(_lazy(expr, key, n, d, moore_steps(n, d), bidirectional=f.bidirectional,
                             reverse_symmetric=f.reverse_symmetric))
    return out


@lru_cache(maxsize=None)
def instances(n: int, d: int, target: bool = True) -> tuple[Spec, ...]:
    """Every generative or base family member with exactly n nodes and degree d. Below the target size only
    theorem-priced families, the small-base database (n <= BASE_MAX_NODES) and, for d = 4, Theorem 22's
    circulant are used as expansion inputs."""
    if n < 2 or d < 1:
        return ()
    specs = _ring_family(n, d) + _torus_family(n, d) + _hamming_family(n, d) + _small_families(n, d)
    if target or n <= BASE_MAX_NODES:
        specs += _circulant_family(n, d) + _kautz_family(n, d)
    elif d == 4 and n > 6:
        m, _ = theorem22_offsets(n)
        specs.append(_lazy(f"circulant({n}, {m}, {m + 1})", "circulant", n, d, m, bidirectional=True,
                           reverse_symmetric=True))
    return tuple(s for s in specs if (s.nodes, s.degree) == (n, d))
