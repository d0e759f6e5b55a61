"""Build the schedule of any topology expression by its own construction (DESIGN section 5, `schedule`).

line / degree / power use the expansion definitions (Def. 1, 2, 14) on the schedule of their argument;
products, families and explicit graphs use BFB (LP (1); Theorem 13 for products). Reduce-scatter is the
reverse of the allgather constructed on the transpose (Cor. 1.1 and 1.2): the expansions commute with
transposition (L(G)^T = L(G^T) up to relabelling arcs, (G*n)^T = G^T*n, (G^{box n})^T = (G^T)^{box n}).
Allreduce = reduce-scatter then allgather. Each result carries the prediction of Table 3's algebra.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from services.synthesis.search import expansions as ex
from services.synthesis.bfb.lp import bfb_allgather, check_schedule_size
from services.synthesis.topology.catalog import build
from services.synthesis.topology.expr import Expr, parse
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.topology.graph import Topology


@dataclass
class Prediction:
    """(steps, tau) from the theorems; `exact` is False where the theorem only bounds tau (Theorem 7)."""

    steps: int
    tau: Fraction
    exact: bool = True


@dataclass
class Constructed:
    topology: Topology
    schedule: Schedule
    prediction: Prediction
    seconds: float


@dataclass
class _Oriented:
    true: Topology          # the topology the expression names
    orient: Topology        # itself, or its transpose (same node labels)
    schedule: Schedule      # an allgather on `orient`
    prediction: Prediction
    bfb_optimal: bool       # the schedule is the optimal BFB schedule of `orient`


def _relabel(s: Schedule, perm: np.ndarray, topo: Topology) -> Schedule:
    return Schedule(s.collective, s.nodes, s.grid, s.step_ptr, perm[s.source].astype(np.int32),
                    perm[s.sender].astype(np.int32), perm[s.receiver].astype(np.int32), s.lane, s.lo, s.hi,
                    s.ops, topo.expr)


def _allgather(tree: Expr, transposed: bool) -> _Oriented:
    name = tree.name
    if name == "bidir":                      # bidir(G)^T = bidir(G): both orientations are the same
        fwd, rev = _allgather(tree.args[0], False), _allgather(tree.args[0], True)
        true = ex.bidir(fwd.true)
        s = ex.bidir_schedule(fwd.true, fwd.schedule, rev.schedule, true)
        p = Prediction(max(fwd.prediction.steps, rev.prediction.steps), max(fwd.prediction.tau, rev.prediction.tau),
                       fwd.prediction.exact and rev.prediction.exact and fwd.prediction.tau == rev.prediction.tau)
        return _Oriented(true, true, s, p, False)
    if name in ("line", "degree", "power"):
        inner = _allgather(tree.args[0], transposed)
        n = tree.args[1] if len(tree.args) > 1 else 1
        g, o, s, p = inner.true, inner.orient, inner.schedule, inner.prediction
        if name == "line":
            bfb_opt = inner.bfb_optimal
            for _ in range(n):
                true = ex.line(g)
                if transposed:     # L(G)^T: build L(G^T) and map arc j of G^T to the arc of G it reverses
                    perm = g.arc_index(o.heads, o.tails, o.lanes)
                    s = _relabel(ex.line_schedule(o, s, ex.line(o)), perm, true)
                    o = true.transpose()
                else:
                    s = ex.line_schedule(g, s, true)
                    o = true
                # Theorem 10: exact (and optimal BFB again) for an optimal BFB base with > 1 out-neighbour;
                # otherwise Theorem 7 bounds tau from above
                bfb_opt = bfb_opt and g.min_out_neighbours > 1
                p = Prediction(p.steps + 1, p.tau + Fraction(1, g.nodes), p.exact and bfb_opt)
                g = true
            true = Topology(g.nodes, g.tails, g.heads, str(tree))
            orient = true.transpose() if transposed else true
            s = Schedule(s.collective, s.nodes, s.grid, s.step_ptr, s.source, s.sender, s.receiver, s.lane,
                         s.lo, s.hi, s.ops, true.expr)
            return _Oriented(true, orient, s, p, bfb_opt)
        if name == "degree":
            true, orient = ex.degree(g, n), ex.degree(o, n)
            s = ex.degree_schedule(o, n, s, orient)
            p = Prediction(p.steps + 1, p.tau + Fraction(n - 1, n * g.nodes), p.exact)
        else:
            true, orient = ex.power(g, n), ex.power(o, n)
            check_schedule_size(true)
            s = ex.power_schedule(o, n, s, orient)
            N = g.nodes
            p = Prediction(n * p.steps, p.tau * Fraction(N, N - 1) * Fraction(N ** n - 1, N ** n), p.exact)
        return _Oriented(true, orient, s, p, False)
    true = build(tree)
    orient = true.transpose() if transposed else true
    r = bfb_allgather(orient)
    return _Oriented(true, orient, r.schedule, Prediction(r.steps, r.tau), True)


def _canonical(expr: str | Expr) -> Expr:
    """The canonical tree (e.g. circulant(16) -> its offsets), refusing schedules beyond the size limit."""
    topo = build(expr)
    check_schedule_size(topo)
    return parse(topo.expr)


def construct(expr: str | Expr, collective: Collective | str = Collective.ALLGATHER) -> Constructed:
    """Topology and schedule of `expr` by its construction, with the predicted (steps, tau)."""
    t0 = time.perf_counter()
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    if collective is Collective.ALLTOALL:
        raise ValueError("the construction builds allgather, reduce-scatter and allreduce schedules; all-to-all "
                         "schedules come from evaluate.alltoall_schedule")
    tree = _canonical(expr)
    ag = _allgather(tree, False) if collective is not Collective.REDUCESCATTER else None
    if collective is Collective.ALLGATHER:
        return Constructed(ag.true, ag.schedule, ag.prediction, time.perf_counter() - t0)
    tr = _allgather(tree, True)
    rs = tr.schedule.reverse(topology=tr.true.expr)
    if collective is Collective.REDUCESCATTER:
        return Constructed(tr.true, rs, tr.prediction, time.perf_counter() - t0)
    pred = Prediction(tr.prediction.steps + ag.prediction.steps, tr.prediction.tau + ag.prediction.tau,
                      tr.prediction.exact and ag.prediction.exact)
    return Constructed(ag.true, allreduce(rs, ag.schedule), pred, time.perf_counter() - t0)


def construct_collectives(expr: str | Expr) -> dict[Collective, Constructed]:
    """Allgather, reduce-scatter and allreduce of `expr`, solving each orientation once."""
    t0 = time.perf_counter()
    tree = _canonical(expr)
    ag = _allgather(tree, False)
    tr = ag if ag.true.bidirectional and tree.name != "line" else _allgather(tree, True)
    rs = tr.schedule.reverse(topology=tr.true.expr)
    secs = time.perf_counter() - t0
    ar_pred = Prediction(tr.prediction.steps + ag.prediction.steps, tr.prediction.tau + ag.prediction.tau,
                         tr.prediction.exact and ag.prediction.exact)
    return {Collective.ALLGATHER: Constructed(ag.true, ag.schedule, ag.prediction, secs),
            Collective.REDUCESCATTER: Constructed(ag.true, rs, tr.prediction, secs),
            Collective.ALLREDUCE: Constructed(ag.true, allreduce(rs, ag.schedule), ar_pred, secs)}


def needs_bfb_fanout(expr: str, min_nodes: int) -> bool:
    """True when the schedule is one large BFB solve over every receiver (a family or product that is not
    vertex-transitive): the case worth splitting into receiver blocks across workers."""
    tree = parse(expr)
    if tree.name in ("line", "degree", "power", "bidir"):
        return False
    t = build(tree)
    return t.nodes >= min_nodes and t.translation is None
