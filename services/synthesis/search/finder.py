"""The Pareto topology finder (paper section 5.4, App. A.3, A.6; digest 5.1-5.4).

For a target (N, d) it searches bottom-up over every size n dividing N and every degree <= d: the base and
generative candidates of that size (bases.instances), line graphs of (n/deg, deg), degree expansions of
(n/m, deg/m), Cartesian powers of (n^(1/p), deg/p) and Cartesian products of two smaller states, each
predicted with Table 3's algebra and pruned to the Pareto frontier on (steps, tau) per state. The answer
is the frontier at (N, d) - independent of alpha, M and B - from which `select` picks the best for a workload.
`bidirectional=True` keeps only topologies a duplex-cable fabric can realise: bidirectional candidates and
App. A.6 conversions G u G^T of reverse-symmetric unidirectional ones of degree d/2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from services.synthesis.search.bases import CACHE, instances
from services.synthesis.search.candidates import Candidate, bidir_of, degree_of, line_of, pareto, power_of, product_of
from services.synthesis.schedule.cost import LinkModel, moore_steps, optimal_tau
from services.synthesis.schedule.ir import Collective

MAX_NODES = 4096
MAX_DEGREE = 16


class FinderError(ValueError):
    """Bad finder or selection input."""


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


@lru_cache(maxsize=None)
def _state(n: int, deg: int, target: bool = False, bidi: bool = False) -> tuple[Candidate, ...]:
    """Pareto set of everything the search can build with n nodes and degree deg; with `bidi`, only
    bidirectional topologies (pruned among themselves): bidirectional families, degree expansions, powers
    and products of bidirectional ones, and App. A.6 conversions of reverse-symmetric ones of degree deg/2."""
    cands: list[Candidate] = [c for c in instances(n, deg, target) if c.bidirectional or not bidi]
    if deg >= 2 and n % deg == 0 and n // deg >= 2 and not bidi:
        cands += [line_of(c) for c in _state(n // deg, deg)]
    if bidi and deg % 2 == 0:
        cands += [b for b in (bidir_of(c) for c in _state(n, deg // 2, target)) if b is not None]
    for m in range(2, deg + 1):
        if deg % m == 0 and n % m == 0 and n // m >= 2:
            cands += [degree_of(c, m) for c in _state(n // m, deg // m, False, bidi) if not c.self_loops]
    for p in range(2, deg + 1):
        if deg % p:
            continue
        b = round(n ** (1 / p))
        for bb in (b - 1, b, b + 1):
            if bb >= 2 and bb ** p == n:
                cands += [power_of(c, p) for c in _state(bb, deg // p, False, bidi)]
    for n1 in _divisors(n):
        n2 = n // n1
        if n1 < 2 or n2 < 2 or n1 > n2:
            continue
        for d1 in range(1, deg):
            d2 = deg - d1
            if n1 == n2 and d1 > d2:
                continue
            for a in _state(n1, d1, False, bidi):
                if not a.bfb_bw_optimal:
                    continue
                for b in _state(n2, d2, False, bidi):
                    if a.expr != b.expr:
                        c = product_of(a, b)
                        if c is not None:
                            cands.append(c)
    return tuple(pareto(cands))


def _check(nodes, degree) -> None:
    for name, v, lo, hi in (("nodes", nodes, 2, MAX_NODES), ("degree", degree, 1, MAX_DEGREE)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise FinderError(f"{name} must be an integer, got {v!r}")
        if not lo <= v <= hi:
            raise FinderError(f"{name} must be between {lo} and {hi}, got {v}")


def frontier(nodes: int, degree: int, *, bidirectional: bool = False) -> list[Candidate]:
    """All Pareto-efficient topologies for (N, d), sorted by steps (first: lowest T_L; last: lowest T_B)."""
    _check(nodes, degree)
    result = list(_state(nodes, degree, True, bidirectional))
    CACHE.flush()
    return result


def bounds(nodes: int, degree: int) -> dict:
    """The theoretical row of Tables 4 and 7: Moore steps T_L*(N, d) and tau* = (N-1)/N."""
    return {"steps": moore_steps(nodes, degree), "tau": optimal_tau(nodes)}


# ----- selection for a workload (digest 5.4) ------------------------------------------------------
@dataclass(frozen=True)
class WorkloadItem:
    collective: Collective
    size_bytes: float
    weight: float = 1.0


@dataclass
class Selection:
    best: Candidate
    times_s: list[tuple[Candidate, float]]     # every frontier entry with its predicted workload time


def workload_time(c: Candidate, link: LinkModel, items: list[WorkloadItem], alltoall_bytes: float = 0.0,
                  alltoall_weight: float = 0.0, alltoall_f: float | None = None) -> float:
    """sum_i w_i T(collective_i, M_i) with T_AG = T_RS = k alpha + tau M/B and T_AR = 2 (k alpha + tau M/B),
    plus an all-to-all share w_a2a * (D/N) / (f B/d) when given (digest 5.4, 7)."""
    total = sum(i.weight * link.collective_time(i.collective, c.steps, c.tau, i.size_bytes) for i in items)
    if alltoall_weight:
        if not alltoall_f:
            raise FinderError("an all-to-all share needs the topology's all-to-all throughput")
        total += alltoall_weight * (alltoall_bytes / c.nodes) / (alltoall_f * link.node_bandwidth_Bps / c.degree)
    return total


def select(cands: list[Candidate], link: LinkModel, items: list[WorkloadItem], *, alltoall_bytes: float = 0.0,
           alltoall_weight: float = 0.0, alltoall_f=None) -> Selection:
    """The frontier entry with the lowest predicted workload time (ties: fewer steps)."""
    if not cands:
        raise FinderError("no candidate topologies")
    if not items and not alltoall_weight:
        raise FinderError("the workload is empty: give at least one collective size or an all-to-all share")
    for i in items:
        if i.collective is Collective.ALLTOALL:
            raise FinderError("an all-to-all is priced by its throughput: give alltoall_bytes and alltoall_weight")
        if i.size_bytes <= 0 or i.weight < 0:
            raise FinderError(f"sizes must be positive and weights non-negative, got {i.size_bytes}, {i.weight}")
    scored = [(c, workload_time(c, link, items, alltoall_bytes, alltoall_weight,
                                alltoall_f(c) if callable(alltoall_f) else alltoall_f)) for c in cands]
    best = min(scored, key=lambda x: (x[1], x[0].steps))[0]
    return Selection(best, scored)


BASELINES = ("ring", "shifted_ring", "shifted_bfb_ring", "double_binary_tree", "torus_classic")


def baseline_times(nodes: int, degree: int, link: LinkModel, items: list[WorkloadItem],
                   alltoall_bytes: float = 0.0, alltoall_weight: float = 0.0) -> dict[str, float]:
    """The same workload, all-to-all share included, on what clusters use today (paper section 9.2):
    seconds per baseline that exists for (N, d) (e.g. the shifted rings need d = 4)."""
    from services.synthesis.evaluate.baselines import baseline_alltoall_time, baseline_costs

    out = {}
    for name in BASELINES:
        try:
            t = sum(i.weight * baseline_costs(name, nodes, degree, link, i.size_bytes, i.collective).seconds
                    for i in items)
            if alltoall_weight:
                t += alltoall_weight * baseline_alltoall_time(name, nodes, degree, alltoall_bytes,
                                                              link.node_bandwidth_Bps)
            out[name] = t
        except (ValueError, NotImplementedError):
            continue
    return out
