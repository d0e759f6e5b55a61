"""Finder candidates (paper section 5.4): topology expressions priced exactly by the schedule
that ships (`pricing`), and the specs the search enumerates before pricing them.

A `Spec` is an expression with a cheap lower bound on its allgather (steps, tau): at least its diameter (or
the Moore bound) in steps (Theorem 15, and no schedule beats D(G)) and at least (N-1)/N in tau (Theorem 4).
The search prices a spec only when no candidate already priced dominates that bound (`resolve`).
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from functools import lru_cache, partial
from typing import Callable, Iterable

from services.synthesis.schedule.cost import is_moore_optimal, moore_steps, optimal_tau
from services.synthesis.schedule.ir import Collective
from services.synthesis.search import pricing
from services.synthesis.topology.expr import Expr, parse

__all__ = ["Candidate", "Spec", "candidate", "pareto", "resolve", "line_spec", "line_spec_of", "degree_spec",
           "power_spec", "product_spec", "bidir_spec", "exact_spec", "PRICED"]

# Called with each spec's expression after `resolve` priced it: how a front end shows a frontier sweep's
# progress (the CLI's bar). A context variable, because the sweep recurses through cached sub-frontiers.
PRICED: ContextVar = ContextVar("priced", default=None)


@dataclass(frozen=True)
class Candidate:
    expr: str
    nodes: int
    degree: int
    steps: int                 # allgather: T_L = steps * alpha of the schedule that ships (exact)
    tau: Fraction              # allgather: T_B = tau * M / B (exact)
    diameter: int | None       # D(G) when known without building the graph (`graph_diameter`)
    bidirectional: bool        # every arc has its reverse (duplex cabling)
    simple: bool               # no self-loops or parallel arcs (Theorem 13 needs it)
    self_loops: bool
    reverse_symmetric: bool    # G isomorphic to G^T (Definition 6): reduce-scatter costs the allgather's
    bfb_bw_optimal: bool       # G has a BW-optimal BFB schedule of D(G) steps (Theorem 13 factor)
    family: str = ""
    schedule: str = "bfb"      # how the top level ships: "bfb" or "construction" (`pricing`)
    rs_steps: int | None = field(default=None, compare=False)     # reduce-scatter, when not reverse-symmetric
    rs_tau: Fraction | None = field(default=None, compare=False)

    def cost(self, collective: Collective = Collective.ALLGATHER) -> tuple[int, Fraction]:
        """(steps, tau) of `collective`: reduce-scatter is the reverse of the allgather of G^T (Cor. 1.1),
        allreduce is reduce-scatter then allgather."""
        if collective is Collective.ALLGATHER:
            return self.steps, self.tau
        rs = self.reducescatter()
        if collective is Collective.REDUCESCATTER:
            return rs
        if collective is not Collective.ALLREDUCE:
            raise ValueError(f"a candidate is priced for allgather, reduce-scatter and allreduce, not {collective.value}")
        return rs[0] + self.steps, rs[1] + self.tau

    def reducescatter(self) -> tuple[int, Fraction]:
        if self.rs_steps is not None and self.rs_tau is not None:
            return self.rs_steps, self.rs_tau
        if self.reverse_symmetric:
            return self.steps, self.tau
        p = pricing.price(self.expr, transposed=True)
        return p.steps, p.tau

    def with_reducescatter(self) -> "Candidate":
        """The same candidate with its reduce-scatter cost priced (for frontiers and selection)."""
        steps, tau = self.reducescatter()
        return replace(self, rs_steps=steps, rs_tau=tau)

    def bw_optimal(self, collective: Collective = Collective.ALLGATHER) -> bool:
        phases = 2 if collective is Collective.ALLREDUCE else 1
        return self.cost(collective)[1] == phases * optimal_tau(self.nodes)

    def moore_optimal(self, collective: Collective = Collective.ALLGATHER) -> bool:
        """Definition 10 for every phase (an allreduce is Moore-optimal when both of its phases are)."""
        if collective is Collective.ALLREDUCE:
            return all(is_moore_optimal(self.nodes, self.degree, s)
                       for s in (self.steps, self.reducescatter()[0]))
        return is_moore_optimal(self.nodes, self.degree, self.cost(collective)[0])

    def key(self, collective: Collective = Collective.ALLGATHER) -> tuple:
        """Preference among equal costs: bidirectional, smaller diameter, shorter name."""
        steps, tau = self.cost(collective)
        return steps, tau, not self.bidirectional, self.diameter_bound(), len(self.expr), self.expr

    def graph_diameter(self) -> int:
        return self.diameter if self.diameter is not None else pricing.diameter(self.expr)

    def diameter_bound(self) -> int:
        """A lower bound on D(G) without building the graph (the Moore bound when D is not known)."""
        return self.diameter if self.diameter is not None else moore_steps(self.nodes, self.degree)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(tau=float(self.tau), tau_exact=str(self.tau), rs_tau=None if self.rs_tau is None else str(self.rs_tau),
                 diameter=self.graph_diameter(),
                 bw_optimal=self.bw_optimal(), moore_optimal=self.moore_optimal())
        return d


def candidate(expr: str, family: str, root: bool = True) -> Candidate:
    """Price `expr` by the schedule that ships for it (`pricing.price`; inside a larger expression when
    root is False) and collect its facts."""
    f, p = pricing.facts(expr), pricing.price(expr, root=root)
    return Candidate(expr, f.nodes, f.degree, p.steps, p.tau, p.diameter, f.bidirectional, f.simple, f.self_loops,
                     f.reverse_symmetric, p.bfb_bw_optimal, family, p.method)


@dataclass(frozen=True)
class Spec:
    """An expression to price, with a lower bound on its allgather cost (exact when `priced` is given)."""

    expr: str
    family: str
    nodes: int
    degree: int
    steps: int                          # lower bound on the allgather steps, at most D(G)
    tau: Fraction                       # lower bound on the allgather tau
    bidirectional: bool
    reverse_symmetric: bool
    priced: Candidate | None = None
    tau_floor: Callable[[], Fraction] | None = field(default=None, compare=False)   # a costlier, better bound

    def refined(self, collective: Collective) -> tuple[int, Fraction]:
        """`bound`, raised by `tau_floor` (an allgather bound) when there is one."""
        steps, tau = self.bound(collective)
        if self.tau_floor is not None and collective is Collective.ALLGATHER:
            tau = max(tau, self.tau_floor())
        return steps, tau

    def bound(self, collective: Collective) -> tuple[int, Fraction]:
        """Lower bound on the collective's cost (a reduce-scatter takes at least D(G^T) = D(G) steps)."""
        if collective is Collective.ALLGATHER:
            return self.steps, self.tau
        if self.priced is not None:
            return self.priced.cost(collective)
        rs = (self.steps, self.tau) if self.reverse_symmetric else (self.steps, optimal_tau(self.nodes))
        if collective is Collective.REDUCESCATTER:
            return rs
        return rs[0] + self.steps, rs[1] + self.tau

    def price(self, root: bool = True) -> Candidate:
        return self.priced if self.priced is not None else candidate(self.expr, self.family, root)


def exact_spec(c: Candidate) -> Spec:
    return Spec(c.expr, c.family, c.nodes, c.degree, c.steps, c.tau, c.bidirectional, c.reverse_symmetric, c)


def pareto(cands: Iterable[Candidate], collective: Collective = Collective.ALLGATHER) -> list[Candidate]:
    """Pareto frontier on the collective's (steps, tau): c is dominated iff another has steps <= and tau <=
    with one strict (section 5.4); among ties one representative (Candidate.key). Sorted by steps."""
    best: dict[tuple[int, Fraction], Candidate] = {}
    for c in cands:
        k = c.cost(collective)
        if k not in best or c.key(collective) < best[k].key(collective):
            best[k] = c
    out, best_tau = [], None
    for k in sorted(best):
        if best_tau is None or k[1] < best_tau:
            out.append(best[k])
            best_tau = k[1]
    return out


def resolve(specs: Iterable[Spec], collective: Collective = Collective.ALLGATHER, root: bool = True) -> list[Candidate]:
    """The Pareto frontier of the specs' exact costs (as whole expressions, or with root=False as parts of
    larger ones), pricing a spec only when its lower bound is not dominated by (or tied with a preferred)
    candidate already priced: specs go in order of their bounds."""
    def order(s: Spec):
        steps, tau = s.bound(collective)
        return steps, tau, not s.bidirectional, len(s.expr), s.expr

    def dominated(s: Spec, steps: int, tau: Fraction) -> bool:
        best = (steps, tau, not s.bidirectional, s.steps, len(s.expr), s.expr)     # D(G) >= s.steps
        return any(cs <= steps and ct <= tau and ((cs, ct) != (steps, tau) or c.key(collective) <= best)
                   for c in front for cs, ct in [c.cost(collective)])

    front: list[Candidate] = []
    for s in sorted(specs, key=order):
        if dominated(s, *s.bound(collective)):
            continue
        if s.tau_floor is not None and dominated(s, *s.refined(collective)):
            continue
        c = s.price(root)
        if (priced := PRICED.get()) is not None:
            priced(s.expr)
        if collective is not Collective.ALLGATHER:
            c = c.with_reducescatter()
        front = pareto(front + [c], collective)
    return front


# ----- specs of the expansions (paper section 5, Table 3) -------------------------------------------
def line_spec(c: Candidate) -> Spec:
    """L(G): d N nodes, degree d, D(G) + 1 steps (BFB on the line digraph; priced by `bfb.line`)."""
    n = c.nodes * c.degree
    return Spec(_wrap_line(c.expr), "line", n, c.degree, c.diameter_bound() + 1, optimal_tau(n), False,
                c.reverse_symmetric)


def line_spec_of(s: Spec) -> Spec:
    """L(G) of a spec not priced yet, whose `steps` is G's exact diameter (circulants): D(G) + 1 steps."""
    n = s.nodes * s.degree
    return Spec(_wrap_line(s.expr), "line", n, s.degree, s.steps + 1, optimal_tau(n), False, s.reverse_symmetric)


@lru_cache(maxsize=1 << 16)
def _wrap_line(expr: str) -> str:
    """line(line(G)) is written line(G, 2)."""
    tree = parse(expr)
    if tree.name == "line":
        times = tree.args[1] if len(tree.args) > 1 else 1
        return str(Expr("line", (tree.args[0], times + 1)))
    return f"line({expr})"


def degree_spec(c: Candidate, m: int) -> Spec:
    """G*m (no self-loops): m N nodes, degree m d; Definition 2 takes one step more than G's schedule, BFB on
    G*m takes D(G*m) >= D(G) steps (Theorem 11). When G ships its optimal BFB schedule, tau is at
    least G's: Definition 2 adds (m-1)/(mN), and in BFB on G*m every copy of a source of G keeps G's eligible
    in-arcs (copied m times), so every step's largest load is at least G's."""
    n = c.nodes * m
    tau = max(c.tau, optimal_tau(n)) if c.schedule == "bfb" else optimal_tau(n)
    return Spec(f"degree({c.expr}, {m})", "degree", n, c.degree * m, min(c.steps + 1, c.diameter_bound()),
                tau, c.bidirectional, c.reverse_symmetric)


def power_spec(c: Candidate, p: int) -> Spec:
    """G^{box p}: N^p nodes, degree p d, D = p D(G) (Theorem 12)."""
    n = c.nodes ** p
    return Spec(f"power({c.expr}, {p})", "power", n, c.degree * p, p * c.diameter_bound(), optimal_tau(n),
                c.bidirectional, c.reverse_symmetric)


def product_spec(a: Candidate, b: Candidate, bfb_limit: int | None = None) -> Spec | None:
    """G1 box G2 by BFB: D(G1 box G2) = D1 + D2 steps (Definition 3), BW-optimal when both factors are simple
    with BW-optimal BFB schedules (Theorem 13), otherwise priced by BFB on the product, whose tau is at least
    `pricing.product_tau_floor` (evaluated by `resolve` only for a spec its cheap bound does not prune).
    None for a product outside Theorem 13 larger than `bfb_limit` nodes."""
    n = a.nodes * b.nodes
    theorem13 = a.simple and b.simple and a.bfb_bw_optimal and b.bfb_bw_optimal
    if not theorem13 and bfb_limit is not None and n > bfb_limit:
        return None
    steps = a.diameter_bound() + b.diameter_bound()
    floor = None if theorem13 else partial(pricing.product_tau_floor, a.expr, b.expr)
    return Spec(f"product({a.expr}, {b.expr})", "product", n, a.degree + b.degree, steps, optimal_tau(n),
                a.bidirectional and b.bidirectional, a.reverse_symmetric and b.reverse_symmetric, tau_floor=floor)


def bidir_spec(c: Candidate) -> Spec | None:
    """App. A.6: G u G^T of a reverse-symmetric unidirectional G: N nodes, degree 2d, G's (steps, tau) or BFB
    on the union if that is better."""
    if not c.reverse_symmetric or c.bidirectional:
        return None
    return Spec(f"bidir({c.expr})", "bidir", c.nodes, 2 * c.degree, min(c.steps, moore_steps(c.nodes, 2 * c.degree)),
                optimal_tau(c.nodes), True, True)
