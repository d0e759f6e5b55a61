"""Build the schedule of any topology expression (DESIGN section 5, `schedule`): the one `pricing` prices.

Each level of the expression is built the way `pricing.price` decided: BFB (LP (1)) for families, products
and line digraphs; the expansion's construction (Definitions 2 and 14, App. A.6) or BFB on the expanded graph
for degree expansions, Cartesian powers and A.6 conversions. At the top level, when the other method may
cost the same (`Price.alternative`: Definition 1's lift beside BFB on a line digraph, or a tie between a
construction and BFB), both are built and the one with fewer transfers ships if it costs exactly the same.
Reduce-scatter is the reverse of the allgather built the same way on the transpose (Cor. 1.1 and 1.2): the
expansions commute with transposition (L(G)^T = L(G^T) up to relabelling arcs, (G*n)^T = G^T*n,
(G^{box n})^T = (G^T)^{box n}). Allreduce = reduce-scatter then allgather. Each result carries the price,
which the model checker's measurement of the schedule always equals.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from typing import cast

import numpy as np

from services.synthesis.bfb.lp import bfb_allgather, check_schedule_size
from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.search import expansions as ex
from services.synthesis.search.pricing import price
from services.synthesis.topology.expansions import line
from services.synthesis.topology.catalog import build
from services.synthesis.topology.expr import Expr, parse
from services.synthesis.topology.graph import Topology

__all__ = ["Prediction", "Constructed", "construct", "construct_collectives", "needs_bfb_fanout"]


@dataclass
class Prediction:
    """(steps, tau) of the schedule, as `pricing.price` (and the finder) reported it before building it."""

    steps: int
    tau: Fraction


@dataclass
class Constructed:
    topology: Topology
    schedule: Schedule
    prediction: Prediction
    seconds: float
    method: str = "bfb"        # how the top level was built: "bfb" or "construction"


@dataclass
class _Oriented:
    true: Topology          # the topology the expression names
    orient: Topology        # itself, or its transpose (same node labels)
    schedule: Schedule      # an allgather on `orient`
    prediction: Prediction
    method: str


def _labelled(s: Schedule, expr: str, perm: np.ndarray | None = None) -> Schedule:
    def m(x):
        return x if perm is None else perm[x].astype(np.int32)
    return Schedule(s.collective, s.nodes, s.grid, s.step_ptr, m(s.source), m(s.sender), m(s.receiver), s.lane,
                    s.lo, s.hi, s.ops, expr)


def _line_parts(tree: Expr) -> tuple[Expr, int]:
    base = cast(Expr, tree.args[0])
    k = cast(int, tree.args[1]) if len(tree.args) > 1 else 1
    while base.name == "line":
        k += base.args[1] if len(base.args) > 1 else 1
        base = base.args[0]
    return base, k


def _construction(tree: Expr, transposed: bool, true: Topology, orient: Topology) -> Schedule | None:
    """The expansion's own construction on the shipped schedule of its argument (None for families)."""
    name = tree.name
    if name == "bidir":                      # bidir(G)^T = bidir(G): both orientations are the same
        fwd, rev = _allgather(tree.args[0], False), _allgather(tree.args[0], True)
        return _labelled(ex.bidir_schedule(fwd.true, fwd.schedule, rev.schedule, true), true.expr)
    if name == "line":                       # Definition 1 on the shipped schedule of L^(k-1)(G)
        base, k = _line_parts(tree)
        inner = _allgather(base if k == 1 else Expr("line", (base, k - 1)), transposed)
        g, o = inner.true, inner.orient
        if transposed:        # L(G)^T: build L(G^T) and map arc j of G^T to the arc of G it reverses
            perm = g.arc_index(o.heads, o.tails, o.lanes)
            return _labelled(ex.line_schedule(o, inner.schedule, line(o)), true.expr, perm)
        return _labelled(ex.line_schedule(g, inner.schedule, line(g)), true.expr)
    if name not in ("degree", "power"):
        return None
    inner = _allgather(tree.args[0], transposed)
    n = tree.args[1]
    if name == "degree":
        return _labelled(ex.degree_schedule(inner.orient, n, inner.schedule, orient), true.expr)
    check_schedule_size(true)
    return _labelled(ex.power_schedule(inner.orient, n, inner.schedule, orient), true.expr)


def _bfb(true: Topology, orient: Topology) -> Schedule:
    return _labelled(bfb_allgather(orient).schedule, true.expr)


def _cost(s: Schedule, degree: int) -> tuple[int, Fraction]:
    steps = int(np.flatnonzero(np.diff(s.step_ptr))[-1] + 1) if s.transfers else 0
    return steps, measured_tau(s, degree)


def _allgather(tree: Expr, transposed: bool, root: bool = False) -> _Oriented:
    p = price(tree, transposed=transposed)
    true = build(tree)
    orient = true.transpose() if transposed else true
    method = p.method
    s = _construction(tree, transposed, true, orient) if method == "construction" else _bfb(true, orient)
    if root and p.alternative:             # the other method may cost the same: ship fewer transfers
        other = "bfb" if method == "construction" else "construction"
        alt = _bfb(true, orient) if other == "bfb" else _construction(tree, transposed, true, orient)
        if alt is not None and alt.transfers < s.transfers and _cost(alt, true.degree) == (p.steps, p.tau):
            s, method = alt, other
    return _Oriented(true, orient, s, Prediction(p.steps, p.tau), method)


def _canonical(expr: str | Expr) -> Expr:
    """The canonical tree (e.g. circulant(16) -> its offsets), refusing schedules beyond the size limit."""
    topo = build(expr)
    check_schedule_size(topo)
    return parse(topo.expr)


def construct(expr: str | Expr, collective: Collective | str = Collective.ALLGATHER) -> Constructed:
    """Topology and schedule of `expr` for `collective`, with the price it was shipped at.

    Examples
    --------
    >>> c = construct("line(bipartite(4))")
    >>> (c.prediction.steps, c.prediction.tau, c.topology.nodes)
    (3, Fraction(1, 1), 32)
    """
    t0 = time.perf_counter()
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    if collective is Collective.ALLTOALL:
        raise ValueError("the construction builds allgather, reduce-scatter and allreduce schedules; all-to-all "
                         "schedules come from evaluate.alltoall_schedule")
    tree = _canonical(expr)
    ag = _allgather(tree, False, root=True) if collective is not Collective.REDUCESCATTER else None
    if collective is Collective.ALLGATHER:
        return Constructed(ag.true, ag.schedule, ag.prediction, time.perf_counter() - t0, ag.method)
    tr = _allgather(tree, True, root=True)
    rs = tr.schedule.reverse(topology=tr.true.expr)
    if collective is Collective.REDUCESCATTER:
        return Constructed(tr.true, rs, tr.prediction, time.perf_counter() - t0, tr.method)
    return Constructed(ag.true, allreduce(rs, ag.schedule), _sum(tr.prediction, ag.prediction),
                       time.perf_counter() - t0, _methods(tr.method, ag.method))


def _sum(a: Prediction, b: Prediction) -> Prediction:
    return Prediction(a.steps + b.steps, a.tau + b.tau)


def _methods(rs: str, ag: str) -> str:
    return ag if rs == ag else f"reducescatter {rs}, allgather {ag}"


def construct_collectives(expr: str | Expr) -> dict[Collective, Constructed]:
    """Allgather, reduce-scatter and allreduce of `expr`, building each orientation once."""
    t0 = time.perf_counter()
    tree = _canonical(expr)
    ag = _allgather(tree, False, root=True)
    tr = ag if ag.true.bidirectional and tree.name != "line" else _allgather(tree, True, root=True)
    rs = tr.schedule.reverse(topology=tr.true.expr)
    secs = time.perf_counter() - t0
    return {Collective.ALLGATHER: Constructed(ag.true, ag.schedule, ag.prediction, secs, ag.method),
            Collective.REDUCESCATTER: Constructed(ag.true, rs, tr.prediction, secs, tr.method),
            Collective.ALLREDUCE: Constructed(ag.true, allreduce(rs, ag.schedule), _sum(tr.prediction, ag.prediction),
                                              secs, _methods(tr.method, ag.method))}


def needs_bfb_fanout(expr: str, min_nodes: int) -> bool:
    """True when the schedule is one large BFB solve over every receiver (a family or product that is not
    vertex-transitive): the case worth splitting into receiver blocks across workers."""
    tree = parse(expr)
    if tree.name in ("line", "degree", "power", "bidir"):
        return False
    t = build(tree)
    return t.nodes >= min_nodes and t.translation is None
