"""Finder candidates: a topology expression with its predicted (steps, tau) and the structural facts the
expansion theorems need (paper section 5, Table 3; digest 2.0 and 5.3)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from fractions import Fraction

from services.synthesis.bfb.price import bfb_tau
from services.synthesis.schedule.cost import is_moore_optimal, optimal_tau
from services.synthesis.topology.graph import Topology


@dataclass(frozen=True)
class Candidate:
    expr: str
    nodes: int
    degree: int
    steps: int                 # T_L = steps * alpha of its schedule (allgather)
    tau: Fraction              # T_B = tau * M / B (exact, or an upper bound when exact is False)
    diameter: int | None       # D(G) when known
    bidirectional: bool        # every arc has its reverse (duplex cabling)
    simple: bool               # no self-loops or parallel arcs (Theorem 13 needs it)
    self_loops: bool
    reverse_symmetric: bool    # G isomorphic to G^T (Definition 6)
    bfb_optimal: bool          # the schedule is G's optimal BFB schedule (Theorem 10 exactness)
    many_out: bool             # every node has more than one distinct out-neighbour
    bfb_bw_optimal: bool = False   # its optimal BFB schedule is BW-optimal with steps = D (Theorem 13 factor)
    exact: bool = True
    family: str = ""

    @property
    def bw_optimal(self) -> bool:
        return self.tau == optimal_tau(self.nodes)

    @property
    def moore_optimal(self) -> bool:
        return is_moore_optimal(self.nodes, self.degree, self.steps)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(tau=float(self.tau), tau_exact=str(self.tau), bw_optimal=self.bw_optimal,
                 moore_optimal=self.moore_optimal)
        return d

    def key(self) -> tuple:
        """Preference among equal (steps, tau): exact, bidirectional, smaller diameter, shorter name."""
        return (self.steps, self.tau, not self.exact, not self.bidirectional,
                self.diameter if self.diameter is not None else 1 << 20, len(self.expr), self.expr)


def from_topology(t: Topology, *, reverse_symmetric: bool, family: str, steps: int | None = None,
                  tau: Fraction | None = None, bfb_optimal: bool = True) -> Candidate:
    """Evaluate a concrete topology (BFB unless steps/tau are given by a theorem)."""
    if steps is None or tau is None:
        steps, tau = bfb_tau(t)
        diameter = steps                     # Theorem 15: the BFB schedule takes D(G) steps
    else:
        diameter = t.diameter
    return Candidate(t.expr, t.nodes, t.degree, steps, tau, diameter, t.bidirectional,
                     not t.self_loops and not t.multi_arcs, t.self_loops, reverse_symmetric, bfb_optimal,
                     t.min_out_neighbours > 1, bfb_optimal and steps == diameter and tau == optimal_tau(t.nodes),
                     True, family)


def pareto(cands) -> list[Candidate]:
    """Pareto frontier on (steps, tau): c is dominated iff another has steps <= and tau <= with one strict
    (digest 5.2); among ties one representative (Candidate.key). Sorted by steps ascending."""
    best: dict[tuple[int, Fraction], Candidate] = {}
    for c in cands:
        k = (c.steps, c.tau)
        if k not in best or c.key() < best[k].key():
            best[k] = c
    out, best_tau = [], None
    for c in sorted(best.values(), key=lambda c: (c.steps, c.tau)):
        if best_tau is None or c.tau < best_tau:
            out.append(c)
            best_tau = c.tau
    return out


# ----- Table 3's algebra --------------------------------------------------------------------------
def line_of(c: Candidate, times: int = 1) -> Candidate:
    """L(G): N -> dN, k -> k+1, tau -> tau + 1/N; exact for an optimal BFB base with > 1 out-neighbour
    (Theorem 10), otherwise an upper bound (Theorem 7)."""
    out = c
    for _ in range(times):
        exact_here = out.bfb_optimal and out.many_out
        out = replace(out, expr=_wrap_line(out.expr), nodes=out.nodes * out.degree, steps=out.steps + 1,
                      tau=out.tau + Fraction(1, out.nodes),
                      diameter=None if out.diameter is None else out.diameter + (1 if out.degree > 1 else 0),
                      bidirectional=False, simple=not out.self_loops, bfb_optimal=exact_here,
                      many_out=out.degree > 1, bfb_bw_optimal=False, exact=out.exact and exact_here,
                      family="line")
    return out


def _wrap_line(expr: str) -> str:
    """line(line(G)) is written line(G, 2)."""
    from services.synthesis.topology.expr import Expr, parse

    tree = parse(expr)
    if tree.name == "line":
        times = tree.args[1] if len(tree.args) > 1 else 1
        return str(Expr("line", (tree.args[0], times + 1)))
    return f"line({expr})"


def degree_of(c: Candidate, n: int) -> Candidate:
    """G*n (no self-loops): N -> nN, d -> nd, k -> k+1, tau -> tau + (n-1)/(nN) (Theorem 11, exact)."""
    return replace(c, expr=f"degree({c.expr}, {n})", nodes=c.nodes * n, degree=c.degree * n, steps=c.steps + 1,
                   tau=c.tau + Fraction(n - 1, n * c.nodes), diameter=None, simple=c.simple, self_loops=False,
                   bfb_optimal=False, many_out=True, bfb_bw_optimal=False, family="degree")


def power_of(c: Candidate, p: int) -> Candidate:
    """G^{box p}: N -> N^p, d -> pd, k -> pk, tau -> tau N/(N-1) (N^p - 1)/N^p (Theorem 12, exact)."""
    N = c.nodes
    return replace(c, expr=f"power({c.expr}, {p})", nodes=N ** p, degree=c.degree * p, steps=c.steps * p,
                   tau=c.tau * Fraction(N, N - 1) * Fraction(N ** p - 1, N ** p),
                   diameter=None if c.diameter is None else c.diameter * p, bfb_optimal=False,
                   many_out=True, bfb_bw_optimal=c.bfb_bw_optimal and c.simple, family="power")


def product_of(a: Candidate, b: Candidate) -> Candidate | None:
    """G1 box G2 scheduled by BFB: BW-optimal with k = D1 + D2 when both factors are simple with BW-optimal
    BFB schedules (Theorem 13); otherwise unknown (None: the finder evaluates such products only when it can
    run BFB cheaply)."""
    if not (a.simple and b.simple and a.bfb_bw_optimal and b.bfb_bw_optimal):
        return None
    n = a.nodes * b.nodes
    return Candidate(f"product({a.expr}, {b.expr})", n, a.degree + b.degree, a.diameter + b.diameter,
                     Fraction(n - 1, n), a.diameter + b.diameter, a.bidirectional and b.bidirectional, True, False,
                     a.reverse_symmetric and b.reverse_symmetric, True, True, True, True, "product")


def bidir_of(c: Candidate) -> Candidate | None:
    """App. A.6: G u G^T of a reverse-symmetric G: N, 2d, same k and tau (half the data each way)."""
    if not c.reverse_symmetric or c.bidirectional:
        return None
    return replace(c, expr=f"bidir({c.expr})", degree=2 * c.degree, bidirectional=True,
                   simple=False, bfb_optimal=False, bfb_bw_optimal=False, family="bidir")
