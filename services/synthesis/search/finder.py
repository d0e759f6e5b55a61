"""The Pareto topology finder (paper section 5.4, App. A.3, A.6).

For a target (N, d) it searches bottom-up over every size n dividing N and every degree <= d: the base and
generative families of that size (bases.instances), line digraphs of (n/deg, deg), degree expansions of
(n/m, deg/m), Cartesian powers of (n^(1/p), deg/p) and Cartesian products of any two smaller states, pruned to
the Pareto frontier on (steps, tau) per state. Every candidate that can enter a frontier is priced exactly by
the schedule that ships for it (`pricing`: the expansion's construction or BFB on the expanded graph,
whichever is better; line digraphs by BFB, priced from the base by `bfb.line`); the others are never priced,
because a cheap lower bound (diameter or Moore steps, tau >= (N-1)/N) is already dominated (`resolve`).

The answer is the frontier at (N, d), independent of alpha, M and B, for a collective: allgather (default),
reduce-scatter (the reverse of the allgather of G^T: the same cost when G is reverse-symmetric) or allreduce
(reduce-scatter + allgather). Intermediate sizes are pruned on the allgather's cost. `select` picks the best
entry for a workload. `bidirectional=True` keeps only topologies a duplex-cable fabric can realise:
bidirectional candidates and App. A.6 conversions G u G^T of reverse-symmetric unidirectional ones of degree
d/2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from services.synthesis.schedule.cost import LinkModel, moore_steps, optimal_tau
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective
from services.synthesis.search.bases import BASE_MAX_NODES, instances, line_base_circulants
from services.synthesis.search.circulant_pareto import line_lookup
from services.synthesis.search.candidates import (Candidate, Spec, bidir_spec, degree_spec, line_spec,
                                                  line_spec_of, power_spec, product_spec, resolve)
from services.synthesis.search.pricing import CACHE

__all__ = ["FinderError", "frontier", "frontier_entry", "candidate_from_entry", "bounds", "WorkloadItem",
           "Selection", "workload_time", "select", "MAX_NODES", "MAX_DEGREE"]

MAX_NODES = 8192
MAX_DEGREE = 16
INNER_LINE_BASES = 2         # circulant bases of line digraphs below the target (bases.LINE_BASE_KEEP at it)
PRODUCT_BFB_LIMIT = 1024     # products outside Theorem 13 are priced by BFB on the product up to this size


class FinderError(ValueError):
    """Bad finder or selection input."""


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def _specs(n: int, deg: int, target: bool, bidi: bool) -> list[Spec]:
    """Everything the search can build with n nodes and degree deg; with `bidi`, only bidirectional
    topologies: bidirectional families, degree expansions, powers and products of bidirectional ones, and
    App. A.6 conversions of reverse-symmetric ones of degree deg/2."""
    specs: list[Spec] = [s for s in instances(n, deg, target) if s.bidirectional or not bidi]
    if deg >= 2 and n % deg == 0 and n // deg >= 2 and not bidi:
        specs += _line_specs(n // deg, deg, target)
    if bidi and deg % 2 == 0:
        specs += [b for b in (bidir_spec(c) for c in _state(n, deg // 2, target)) if b is not None]
    for m in range(2, deg + 1):
        if deg % m == 0 and n % m == 0 and n // m >= 2:
            specs += [degree_spec(c, m) for c in _state(n // m, deg // m, False, bidi) if not c.self_loops]
    for p in range(2, deg + 1):
        if deg % p:
            continue
        b = round(n ** (1 / p))
        for bb in (b - 1, b, b + 1):
            if bb >= 2 and bb ** p == n:
                specs += [power_spec(c, p) for c in _state(bb, deg // p, False, bidi)]
    return specs + _products(n, deg, bidi, target)


def _products(n: int, deg: int, bidi: bool, target: bool) -> list[Spec]:
    """Cartesian products G1 box G2 (n1 n2 = n, d1 + d2 = deg) of every pair of Pareto states of
    (n1, d1) and (n2, d2): priced by Theorem 13 when both factors are simple with BW-optimal BFB schedules,
    by BFB on the product otherwise (paper section 5.3), the latter at the target only and up to
    PRODUCT_BFB_LIMIT nodes (below the target, products are Theorem 13's). Each is bounded below by
    D1 + D2 steps, so `resolve` prices only those that can still enter the frontier."""
    out = []
    for n1 in _divisors(n):
        n2 = n // n1
        if n1 < 2 or n2 < 2 or n1 > n2:
            continue
        for d1 in range(1, deg):
            d2 = deg - d1
            if n1 == n2 and d1 > d2:
                continue
            for x in _state(n1, d1, False, bidi):
                for y in _state(n2, d2, False, bidi):
                    if x.expr == y.expr or ((n1, d1) == (n2, d2) and x.expr > y.expr):
                        continue               # G box G is power(G, 2); each unordered pair once
                    spec = product_spec(x, y, bfb_limit=PRODUCT_BFB_LIMIT if target else 0)
                    if spec is not None:
                        out.append(spec)
    return out


def _line_specs(n: int, deg: int, target: bool) -> list[Spec]:
    """Line digraphs of (n, deg)'s Pareto states and of the circulants the offset search finds there (up
    to bases.LINE_BASE_KEEP for the target, INNER_LINE_BASES below it, on bases of at most BASE_MAX_NODES
    nodes), bounded by their exact
    diameter + 1 without pricing the base. BFB on L(G) depends on more than G's (steps, tau): Theorem 10's
    lift is not always optimal, and line(dcirculant(64, 1, 4, 43, 49)) is BW-optimal while
    line(dcirculant(64, 1, 4, 16, 29)) is not, from bases of equal cost, so bases tied with a Pareto state
    are expanded too; at the target, also the directed circulant of (n, deg) whose line digraph has the
    least tau (`circulant_pareto.line_lookup`, tabulated for line digraphs of up to 400 nodes)."""
    states = _state(n, deg)
    out = [line_spec(c) for c in states]
    seen = {c.expr for c in states}
    if n <= BASE_MAX_NODES:
        bases = line_base_circulants(n, deg) if target else line_base_circulants(n, deg, INNER_LINE_BASES)
        out += [line_spec_of(s) for s in bases if s.expr not in seen]
        seen |= {s.expr for s in bases}
    for diameter, tau, offs in line_lookup(n, deg) if target else ():     # tabulated bases of least line tau
        base = f"dcirculant({n}, {', '.join(map(str, offs))})"
        if base not in seen:
            spec = line_spec_of(Spec(base, "dcirculant", n, deg, diameter, Fraction(n - 1, n), False, True))
            out.append(replace(spec, tau=max(spec.tau, tau)))
    return out


@lru_cache(maxsize=None)
def _state(n: int, deg: int, target: bool = False, bidi: bool = False) -> tuple[Candidate, ...]:
    """Pareto set (allgather cost) of everything the search can build with n nodes and degree deg, priced as
    whole expressions at the target and as parts of larger ones below it."""
    return tuple(resolve(_specs(n, deg, target, bidi), root=target))


@lru_cache(maxsize=256)
def _collective_frontier(n: int, deg: int, bidi: bool, collective: Collective) -> tuple[Candidate, ...]:
    return tuple(resolve(_specs(n, deg, True, bidi), collective))


def _check(nodes, degree) -> None:
    for name, v, lo, hi in (("nodes", nodes, 2, MAX_NODES), ("degree", degree, 1, MAX_DEGREE)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise FinderError(f"{name} must be an integer, got {v!r}")
        if not lo <= v <= hi:
            raise FinderError(f"{name} must be between {lo} and {hi}, got {v}")


def frontier(nodes: int, degree: int, *, bidirectional: bool = False,
             collective: Collective | str = Collective.ALLGATHER) -> list[Candidate]:
    """All Pareto-efficient topologies for (N, d) and a collective, sorted by its steps (first: lowest T_L;
    last: lowest T_B). Every entry's cost is that of the schedule `construct` ships for it, and no entry is
    dominated by another. The entries of a reduce-scatter or allreduce frontier carry their reduce-scatter
    cost (`Candidate.cost`).

    Examples
    --------
    >>> [(c.steps, str(c.tau)) for c in frontier(32, 4)]
    [(3, '1'), (4, '31/32')]
    """
    _check(nodes, degree)
    if isinstance(collective, str):
        try:
            collective = Collective.parse(collective)
        except ValueError as exc:
            raise FinderError(str(exc)) from None
    if collective not in ALLGATHER_FAMILY:
        raise FinderError(f"the finder prices allgather, reduce-scatter and allreduce, not {collective.value} "
                          "(all-to-all throughput: services.synthesis.evaluate.alltoall)")
    if collective is Collective.ALLGATHER:
        result = list(_state(nodes, degree, True, bidirectional))
    else:
        result = list(_collective_frontier(nodes, degree, bidirectional, collective))
    CACHE.flush()
    return result


def frontier_entry(c: Candidate, collective: Collective = Collective.ALLGATHER) -> dict:
    """A frontier entry as the CLI, the API and plans show it: the collective's (steps, tau) and every
    collective's cost, all of them those of the schedules `construct` ships."""
    costs = {k.value: _cost_dict(*c.cost(k)) for k in ALLGATHER_FAMILY}
    return {"expr": c.expr, "nodes": c.nodes, "degree": c.degree, "collective": collective.value,
            **costs[collective.value], "diameter": c.graph_diameter(), "bw_optimal": c.bw_optimal(collective),
            "moore_optimal": c.moore_optimal(collective), "bidirectional": c.bidirectional,
            "reverse_symmetric": c.reverse_symmetric, "family": c.family, "schedule": c.schedule, "costs": costs}


def _cost_dict(steps: int, tau: Fraction) -> dict:
    return {"steps": steps, "tau": float(tau), "tau_exact": str(tau)}


def candidate_from_entry(e: dict) -> Candidate:
    """The candidate behind a stored frontier entry (what selection needs: facts and every collective's cost)."""
    ag, rs = e["costs"]["allgather"], e["costs"]["reducescatter"]
    return Candidate(e["expr"], e["nodes"], e["degree"], ag["steps"], Fraction(ag["tau_exact"]), e["diameter"],
                     e["bidirectional"], False, False, e["reverse_symmetric"], False, e["family"], e["schedule"],
                     rs["steps"], Fraction(rs["tau_exact"]))


def bounds(nodes: int, degree: int, collective: Collective = Collective.ALLGATHER) -> dict:
    """The theoretical row of Tables 4 and 7: Moore steps T_L*(N, d) and tau* = (N-1)/N, per phase (an
    allreduce has two)."""
    phases = 2 if collective is Collective.ALLREDUCE else 1
    return {"steps": phases * moore_steps(nodes, degree), "tau": phases * optimal_tau(nodes)}


# ----- selection for a workload (section 5.4) -----------------------------------------------------
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
    """sum_i w_i T(collective_i, M_i) with T = steps alpha + tau M/B of that collective's schedule
    (`Candidate.cost`: an allreduce is the reduce-scatter's cost plus the allgather's), plus an all-to-all
    share w_a2a * (D/N) / (f B/d) when given (section 5.4, App. A.5)."""
    total = sum(i.weight * link.time(*c.cost(i.collective), i.size_bytes) for i in items)
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
