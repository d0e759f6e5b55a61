"""The schedule every topology expression ships, and its exact cost (paper sections 5 and 6).

One set of rules decides, for any expression, which allgather schedule `construct` builds and what it
costs. The finder prices its candidates with the same rules, so a frontier entry's (steps, tau) is what the
model checker measures on the schedule that ships:

- a family or an explicit graph: its optimal BFB schedule (LP (1)). Rings, bidirectional rings, tori and
  Hamming graphs are priced by their theorems (BW-optimal in D(G) steps); generalized Kautz graphs on d*m
  nodes, m > d, as line digraphs of Pi_{d,m} (Imase-Itoh) and Kautz graphs as L^n(K_{d+1}); everything
  else by the evaluator (`bfb.price`).
- line(G, k): the optimal BFB schedule of L^k(G), priced from G (`bfb.line`). Definition 1's lift of a BFB
  schedule is a BFB schedule (Theorem 10), so it never beats that optimum (Theorem 16); at the root
  `construct` also builds the lift and ships it when it costs the same with fewer transfers.
- degree(G, n), power(G, n), bidir(G): inside an expression, the expansion's own construction on G's
  shipped schedule (Definitions 2 and 14, App. A.6), priced exactly by Theorems 11 and 12 and, for A.6, by
  the larger of the two halves' cost at every step. At the top level of an expression, BFB on the expanded
  graph replaces the construction when it costs no more in both steps and tau and less in one; it is
  evaluated only when it could: a BW-optimal construction in D steps can at best be tied. On a tie
  `construct` builds both and ships the one with fewer transfers (`Price.alternative`).
- product(G_1, ..., G_k): BFB, priced by Theorem 13 (sum of the D(G_i), BW-optimal) when every factor is
  simple with a BW-optimal BFB schedule of D(G_i) steps, otherwise by the evaluator.

A reduce-scatter is the reverse of an allgather of G^T built by the same rules (Cor. 1.1 and 1.2), so
`price(expr, transposed=True)` is its cost; for a reverse-symmetric expression (Definition 6) it is the
allgather's. Every family but generalized Kautz graphs and explicit arc lists is reverse-symmetric, and the
expansions preserve it; small explicit graphs and generalized Kautz graphs are tested (VF2++ isomorphism of
G and G^T up to 64 nodes; generalized Kautz graphs only at Kautz sizes, by theorem).
"""
from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass
from typing import NamedTuple
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import networkx as nx
import numpy as np

from services.synthesis.bfb.line import line_step_maxima
from services.synthesis.bfb.price import bfb_step_maxima, cyclic_step_maxima, genkautz_step_maxima
from services.synthesis.schedule.cost import optimal_tau
from services.synthesis.topology.catalog import build
from services.synthesis.topology.expr import Expr, parse
from services.synthesis.topology.graph import Topology

__all__ = ["Facts", "Price", "facts", "price", "diameter", "step_costs", "product_tau_floor", "CACHE",
           "default_cache_dir"]

# families whose graphs are isomorphic to their transposes (Definition 6): bidirectional ones, circulants
# (x -> -x), de Bruijn (digit reversal) and Kautz graphs (line digraphs of complete graphs)
REVERSE_SYMMETRIC = {"complete", "bipartite", "ring", "biring", "circulant", "dcirculant", "hamming",
                     "hypercube", "torus", "twisted_torus", "debruijn", "distreg", "kautz"}
THEOREM_PRICED = {"ring", "biring", "torus", "hamming", "hypercube"}
RS_TEST_MAX_NODES = 64


@dataclass(frozen=True)
class Facts:
    """Structure of the graph an expression names (no schedule involved)."""

    nodes: int
    degree: int
    bidirectional: bool
    simple: bool               # no self-loops or parallel arcs (Theorem 13 needs it)
    self_loops: bool
    reverse_symmetric: bool    # isomorphic to its transpose (Definition 6)


@dataclass(frozen=True)
class Price:
    """The shipped allgather's cost: T_L = steps * alpha, T_B = tau * M / B (exact)."""

    steps: int
    tau: Fraction
    diameter: int | None                 # D(G), None until `diameter(expr)` computes it from the graph
    method: str = "bfb"                  # "bfb" or "construction": how the expression's top level is built
    bfb_bw_optimal: bool = False         # the graph has a BW-optimal BFB schedule of D steps (Theorem 13)
    alternative: bool = False            # the other method may cost the same (the root picks fewer transfers)
    maxima: tuple[Fraction, ...] | None = None    # BFB's largest in-arc load per step, in shards (Eq. (2))


# ----- persistence (the CLI keeps evaluated prices between runs) ------------------------------------
class _Cache:
    """Evaluated prices by key, in memory and optionally in a JSON file (FABRICPLAN_CACHE_DIR)."""

    FILE = "candidates-v2.json"       # v1 held finder candidates priced by Table 3's algebra

    def __init__(self):
        self.mem: dict[str, tuple[int, tuple[Fraction, ...]] | list] = {}     # a list: as read from the file
        self.lock = threading.Lock()
        self.path: Path | None = None
        self.dirty = False

    def attach(self, directory: str | os.PathLike | None) -> None:
        if directory is None:
            return
        self.path = Path(directory) / self.FILE
        if self.path.exists():
            try:
                self.mem.update(json.loads(self.path.read_text()))
            except (OSError, ValueError):
                pass

    def get(self, key: str) -> tuple[int, tuple[Fraction, ...]] | None:
        v = self.mem.get(key)
        if isinstance(v, list):                       # as read from the file
            v = self.mem[key] = (int(v[0]), tuple(Fraction(x) for x in v[1]))
        return v

    def put(self, key: str, steps: int, maxima: tuple[Fraction, ...]) -> None:
        with self.lock:
            self.mem[key] = (steps, tuple(maxima))
            self.dirty = True

    def flush(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: [v[0], [str(x) for x in v[1]]] for k, v in self.mem.items()}))
        tmp.replace(self.path)
        self.dirty = False


CACHE = _Cache()


def default_cache_dir() -> Path:
    return Path(os.environ.get("FABRICPLAN_CACHE_DIR", Path.home() / ".cache" / "fabricplan"))


# ----- graphs -----------------------------------------------------------------------------------
class _Node(NamedTuple):
    """One level of an expression: its name and arguments, sub-expressions kept as their text."""

    name: str
    args: tuple

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


@lru_cache(maxsize=1 << 16)
def _parse(key: str) -> _Node:
    """Split `name(arg, ...)` at its top-level commas without parsing the arguments (they are memo keys
    themselves); integers become ints. The text must be a valid expression (the callers' come from `parse`
    or the finder)."""
    i = key.index("(")
    body = key[i + 1:key.rindex(")")]
    args, depth, start = [], 0, 0
    for j, ch in enumerate(body):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(body[start:j].strip())
            start = j + 1
    if body.strip():
        args.append(body[start:].strip())
    return _Node(key[:i].strip(), tuple(int(a) if a.lstrip("-").isdigit() else a for a in args))


_SMALL_GRAPH = 512          # graphs up to this many nodes stay cached (bases are built again and again)
_graphs: dict[tuple[str, bool], Topology] = {}
_small_graphs: dict[tuple[str, bool], Topology] = {}


def _graph(key: str, transposed: bool) -> Topology:
    """The topology (or its transpose), cached: the last 8 large ones and up to 4096 small ones."""
    k = (key, transposed)
    g = _small_graphs.get(k) or _graphs.get(k)
    if g is None:
        g = _graph(key, False).transpose() if transposed else build(parse(key))
        cache = _small_graphs if g.nodes <= _SMALL_GRAPH else _graphs
        if len(cache) >= (4096 if cache is _small_graphs else 8):
            cache.pop(next(iter(cache)))
        cache[k] = g
    return g


def _evaluated(kind: str, key: str, transposed: bool, g_of) -> tuple[int, tuple[Fraction, ...]]:
    """(steps, per-step maxima in shards) of an evaluator run, through the cache."""
    ck = f"{kind}:{key}|{'T' if transposed else 'G'}"
    hit = CACHE.get(ck)
    if hit is not None:
        return hit
    steps, maxima = g_of()
    CACHE.put(ck, steps, maxima)
    return steps, maxima


def _key(expr: str | Expr) -> str:
    """The memo key: the expression's text (the canonical form when it comes from a parsed tree)."""
    return expr if isinstance(expr, str) else str(expr)


# ----- facts ------------------------------------------------------------------------------------
def facts(expr: str | Expr) -> Facts:
    """Nodes, degree and the structural facts the expansion theorems need, for any expression.

    Examples
    --------
    >>> facts("line(circulant(16, 3, 4), 2)").nodes
    256
    """
    return _facts(_key(expr))


@lru_cache(maxsize=1 << 16)
def _facts(key: str) -> Facts:
    tree = _parse(key)
    name, args = tree.name, tree.args
    if name == "line":
        g, k = _facts(str(args[0])), (args[1] if len(args) > 1 else 1)
        if g.degree == 1:
            return g
        return Facts(g.nodes * g.degree ** k, g.degree, False, not g.self_loops, g.self_loops, g.reverse_symmetric)
    if name == "degree":
        g, m = _facts(str(args[0])), args[1]
        return Facts(g.nodes * m, g.degree * m, g.bidirectional, g.simple, False, g.reverse_symmetric)
    if name == "power":
        g, p = _facts(str(args[0])), args[1]
        return Facts(g.nodes ** p, g.degree * p, g.bidirectional, g.simple, g.self_loops, g.reverse_symmetric)
    if name == "product":
        fs = [_facts(str(a)) for a in args]
        nodes = 1
        for f in fs:
            nodes *= f.nodes
        return Facts(nodes, sum(f.degree for f in fs), all(f.bidirectional for f in fs), all(f.simple for f in fs),
                     any(f.self_loops for f in fs), all(f.reverse_symmetric for f in fs))
    if name == "bidir":
        g = _facts(str(args[0]))
        return Facts(g.nodes, 2 * g.degree, True, False, g.self_loops, True)
    if name in THEOREM_PRICED:
        return _theorem_facts(name, args)
    if name in PARAMETER_FACTS:
        return _parameter_facts(name, args)
    topo = _graph(key, False)
    rs = name in REVERSE_SYMMETRIC or topo.bidirectional or _tested_reverse_symmetric(name, args, topo)
    return Facts(topo.nodes, topo.degree, topo.bidirectional, not topo.self_loops and not topo.multi_arcs,
                 topo.self_loops, rs)


def _theorem_facts(name: str, args: tuple) -> Facts:
    if name == "ring":
        n, d = args[0], (args[1] if len(args) > 1 else 1)
        return Facts(n, d, n == 2, d == 1, False, True)
    if name == "biring":
        n, d = args[0], (args[1] if len(args) > 1 else 2)
        return Facts(n, d, True, d == 2, False, True)
    if name == "torus":
        nodes = 1
        for x in args:
            nodes *= x
        return Facts(nodes, sum(1 if x == 2 else 2 for x in args), True, True, False, True)
    k, q = (args[0], args[1]) if name == "hamming" else (args[0], 2)
    return Facts(q ** k, k * (q - 1), True, True, False, True)


PARAMETER_FACTS = {"circulant", "dcirculant", "genkautz", "complete", "bipartite"}


def _parameter_facts(name: str, args: tuple) -> Facts:
    """Facts of families read off their parameters (no graph is built)."""
    if name in ("circulant", "dcirculant"):
        n, offsets = args[0], args[1:]
        gens = [a % n for a in offsets]
        if name == "circulant":                   # an involution (2a = n) is one duplex link
            gens += [(n - a) % n for a in offsets if 2 * a != n]
        bidirectional = sorted(gens) == sorted((n - g) % n for g in gens)
        return Facts(n, len(gens), bidirectional, len(set(gens)) == len(gens), False, True)
    if name == "genkautz":                        # x -> -d x - a: loops unless (d + 1) | m; K_{d+1} at m = d + 1
        d, m = args
        loops = m % (d + 1) != 0
        rs = _tested_reverse_symmetric(name, args, None)
        return Facts(m, d, m == d + 1, not loops, loops, rs)
    if name == "complete":
        return Facts(args[0], args[0] - 1, True, True, False, True)
    return Facts(2 * args[0], args[0], True, True, False, True)         # bipartite K_{m,m}


def _tested_reverse_symmetric(name: str, args: tuple, g: Topology | None) -> bool:
    """Generalized Kautz graphs of Kautz sizes d^k (d+1) are Kautz graphs (other sizes count as not
    reverse-symmetric: their reduce-scatter is priced on the transpose); small explicit graphs are tested."""
    if name == "genkautz":
        d, m = args
        while d >= 2 and m % d == 0 and m > d + 1:
            m //= d
        return m == d + 1                         # Pi_{1,m} is a cycle, Pi_{d,d+1} = K_{d+1}
    if g.nodes > RS_TEST_MAX_NODES:
        return False
    return nx.vf2pp_is_isomorphic(g.graph(), g.transpose().graph())


# ----- prices -----------------------------------------------------------------------------------
def price(expr: str | Expr, *, transposed: bool = False, root: bool = True) -> Price:
    """The cost of the allgather schedule `construct` ships for `expr` (with `transposed`: for expr^T,
    whose reverse is expr's reduce-scatter); with root=False, of the schedule it ships for `expr` inside a
    larger expression.

    Examples
    --------
    >>> p = price("line(dcirculant(50, 1, 32))")
    >>> (p.steps, p.tau, p.method)
    (12, Fraction(99, 100), 'bfb')
    """
    return _price(_key(expr), bool(transposed), bool(root))


EXPANSIONS = ("degree", "power", "bidir")


@lru_cache(maxsize=1 << 16)
def _price(key: str, transposed: bool, root: bool = False) -> Price:
    f = _facts(key)
    if transposed and f.reverse_symmetric:
        return _price(key, False, root)
    tree = _parse(key)
    name = tree.name
    if name in EXPANSIONS:
        return _best_at_root(tree, transposed, f) if root else _construction(tree, transposed, f)
    if root:
        return _price(key, transposed, False)
    if name == "line":
        return _line(tree, transposed, f)
    if name in THEOREM_PRICED:
        steps = _theorem_steps(name, tree.args)
        return Price(steps, optimal_tau(f.nodes), steps, "bfb", True)
    if name == "product":
        return _product(tree, transposed, f)
    return _leaf(tree, transposed, f)


def _theorem_steps(name: str, args: tuple) -> int:
    """Optimal BFB steps = D(G): rings n - 1, bidirectional rings floor(n/2) (App. F.1), tori the sum of
    floor(d_i / 2) (Theorem 13), Hamming graphs H(k, q) k."""
    if name == "ring":
        return args[0] - 1
    if name == "biring":
        return args[0] // 2
    if name == "torus":
        return sum(x // 2 for x in args)
    return args[0]


def _from_maxima(steps: int, maxima: tuple[Fraction, ...], f: Facts, method: str = "bfb",
                 alternative: bool = False) -> Price:
    """Eq. (2): tau = (d/N) times the sum of the per-step maxima (whose denominators are at most d)."""
    common = math.lcm(*(x.denominator for x in maxima)) if maxima else 1
    total = sum(x.numerator * (common // x.denominator) for x in maxima)
    tau = Fraction(f.degree * total, f.nodes * common)
    return Price(steps, tau, steps, method, tau == optimal_tau(f.nodes), alternative, tuple(maxima))


def _line(tree: _Node, transposed: bool, f: Facts) -> Price:
    bkey, k = tree.args[0], (tree.args[1] if len(tree.args) > 1 else 1)
    while _parse(bkey).name == "line":           # line(line(G, a), b) = L^(a+b)(G)
        inner = _parse(bkey)
        k += inner.args[1] if len(inner.args) > 1 else 1
        bkey = inner.args[0]
    steps, maxima = _evaluated(f"line{k}", bkey, transposed,
                               lambda: line_step_maxima(_graph(bkey, transposed), k))
    return _from_maxima(steps, maxima, f, alternative=True)


def _leaf(tree: _Node, transposed: bool, f: Facts) -> Price:
    key, name, args = str(tree), tree.name, tree.args
    if name == "genkautz" and args[1] % args[0] == 0 and args[1] // args[0] >= args[0] + 1:
        base = f"genkautz({args[0]}, {args[1] // args[0]})"       # Pi_{d,dm} = L(Pi_{d,m}) (Imase-Itoh)
        steps, maxima = _evaluated("line1", base, transposed, lambda: line_step_maxima(_graph(base, transposed), 1))
    elif name in ("circulant", "dcirculant"):                     # Cayley graphs of Z_n: no graph needed
        n, offsets = args[0], args[1:]
        gens = list(offsets) + ([n - a for a in offsets if 2 * a != n] if name == "circulant" else [])
        gens = [(-g) % n for g in gens] if transposed else gens
        steps, maxima = _evaluated("bfb", key, transposed, lambda: cyclic_step_maxima(n, gens))
    elif name == "kautz" and args[1] >= 1:                        # K(d, n) = L^n(K_{d+1})
        base = f"complete({args[0] + 1})"
        steps, maxima = _evaluated(f"line{args[1]}", base, False, lambda: line_step_maxima(_graph(base, False), args[1]))
    elif name == "genkautz" and args[0] >= 2:                     # from the arcs' formula (strongly connected)
        steps, maxima = _evaluated("bfb", key, transposed,
                                   lambda: genkautz_step_maxima(args[0], args[1], transposed=transposed))
    else:
        steps, maxima = _evaluated("bfb", key, transposed, lambda: bfb_step_maxima(_graph(key, transposed)))
    return _from_maxima(steps, maxima, f)


def _product(tree: _Node, transposed: bool, f: Facts) -> Price:
    parts = [(_facts(str(a)), _price(str(a), transposed)) for a in tree.args]
    if all(pf.simple and pp.bfb_bw_optimal for pf, pp in parts):            # Theorem 13
        steps = sum(_diameter(str(a)) for a in tree.args)
        return Price(steps, optimal_tau(f.nodes), steps, "bfb", True)
    key = str(tree)
    steps, maxima = _evaluated("bfb", key, transposed, lambda: bfb_step_maxima(_graph(key, transposed)))
    return _from_maxima(steps, maxima, f)


def _construction(tree: _Node, transposed: bool, f: Facts) -> Price:
    """degree / power / bidir built by the expansion's definition on the argument's shipped schedule."""
    name, arg = tree.name, tree.args[0]
    child_key = str(arg)
    child, cf = _price(child_key, transposed), _facts(child_key)
    if name == "degree":                                             # Theorem 11
        m = tree.args[1]
        steps, tau = child.steps + 1, child.tau + Fraction(m - 1, m * cf.nodes)
        diameter, bw = None, False                  # D(G*m) = max(D(G), longest shortest cycle): from the graph
    elif name == "power":                                            # Theorem 12
        p, N = tree.args[1], cf.nodes
        steps, tau = p * child.steps, child.tau * Fraction(N, N - 1) * Fraction(N ** p - 1, N ** p)
        diameter = None if child.diameter is None else p * child.diameter
        bw = child.bfb_bw_optimal and cf.simple                      # Theorem 13 on G box ... box G
    else:                                                            # bidir: App. A.6, G u G^T
        if cf.reverse_symmetric:                     # G^T's schedule is G's, relabelled: same step costs
            steps, tau = child.steps, child.tau
        else:
            both = _side_by_side(step_costs(child_key, False), step_costs(child_key, True))
            steps, tau = len(both), sum(both, Fraction(0))
        diameter, bw = None, False
    return Price(steps, tau, diameter, "construction", bw)


def _best_at_root(tree: _Node, transposed: bool, f: Facts) -> Price:
    """The construction, or BFB on the expanded graph when that costs no more in both steps and tau."""
    key = str(tree)
    cons = _price(key, transposed, False)
    if cons.tau == optimal_tau(f.nodes) and cons.steps == _diameter(key):      # BFB can at best tie
        return Price(cons.steps, cons.tau, cons.diameter, "construction", cons.bfb_bw_optimal, True)
    b_steps, maxima = _evaluated("bfb", key, transposed, lambda: bfb_step_maxima(_graph(key, transposed)))
    bfb = _from_maxima(b_steps, maxima, f)
    if bfb.steps <= cons.steps and bfb.tau <= cons.tau and (bfb.steps, bfb.tau) != (cons.steps, cons.tau):
        return bfb
    tie = (bfb.steps, bfb.tau) == (cons.steps, cons.tau)
    return Price(cons.steps, cons.tau, cons.diameter, "construction", cons.bfb_bw_optimal or bfb.bfb_bw_optimal, tie)


def _side_by_side(a: tuple[Fraction, ...], b: tuple[Fraction, ...]) -> tuple[Fraction, ...]:
    """Two schedules run at once on disjoint arcs (App. A.6): every step costs the larger of the two."""
    width = max(len(a), len(b))
    a, b = a + (Fraction(0),) * (width - len(a)), b + (Fraction(0),) * (width - len(b))
    return tuple(max(x, y) for x, y in zip(a, b))


def diameter(expr: str | Expr) -> int:
    """D(G) of the graph `expr` names (from its price when known, else from the graph)."""
    return _diameter(_key(expr))


@lru_cache(maxsize=1 << 16)
def _diameter(key: str) -> int:
    p = _price(key, False)
    return p.diameter if p.diameter is not None else _graph(key, False).diameter


def step_costs(expr: str | Expr, transposed: bool = False) -> tuple[Fraction, ...]:
    """The shipped allgather's cost of every step, in units of M/B (they sum to tau): what App. A.6 needs
    when G and G^T are not isomorphic (its two halves run side by side)."""
    return _step_costs(_key(expr), bool(transposed))


@lru_cache(maxsize=1 << 12)
def _step_costs(key: str, transposed: bool) -> tuple[Fraction, ...]:
    p = _price(key, transposed)
    f = _facts(key)
    if p.maxima is not None:
        return tuple(Fraction(f.degree, f.nodes) * x for x in p.maxima)
    tree = _parse(key)
    if p.method == "construction" and tree.name == "degree":
        m, cf = tree.args[1], _facts(str(tree.args[0]))
        return _step_costs(str(tree.args[0]), transposed) + (Fraction(m - 1, m * cf.nodes),)
    if p.method == "construction" and tree.name == "power":
        q, N = tree.args[1], _facts(str(tree.args[0])).nodes
        base = _step_costs(str(tree.args[0]), transposed)
        return tuple(x * Fraction(N ** j, N ** q) for j in range(1, q + 1) for x in base)
    if p.method == "construction":                      # bidir: both halves side by side
        return _side_by_side(_step_costs(str(tree.args[0]), False), _step_costs(str(tree.args[0]), True))
    _, maxima = _evaluated("bfb", key, transposed, lambda: bfb_step_maxima(_graph(key, transposed)))
    return tuple(Fraction(f.degree, f.nodes) * x for x in maxima)


# ----- a lower bound for products outside Theorem 13 ---------------------------------------------
@lru_cache(maxsize=1 << 12)
def _in_spheres(key: str) -> np.ndarray:
    """The distinct rows (|S_0(u)|, ..., |S_D(u)|) over the nodes u of G, S_i(u) = the nodes at distance i
    to u."""
    g = _graph(key, False)
    if g.translation is not None:                  # vertex-transitive: node 0's spheres are everyone's
        return np.bincount(g.distances_to(0)[0], minlength=1).astype(np.int64)[None, :]
    dist = g.distance_matrix
    rows = np.zeros((g.nodes, int(dist.max()) + 1), dtype=np.int64)
    for i in range(rows.shape[1]):
        rows[:, i] = (dist == i).sum(axis=0)
    return np.unique(rows, axis=0)


def product_tau_floor(a: str, b: str) -> Fraction:
    """A lower bound on the optimal BFB tau of G1 box G2 (without building it): in BFB every source at
    distance t from u reaches u at step t through one of its d in-arcs, so step t costs at least
    max_u |S_t(u)| / d shards per link and tau >= (1/N) sum_t max_u |S_t(u)| (Eq. (2)); in the product
    |S_t(u1, u2)| = sum_i |S_i(u1)| |S_(t-i)(u2)| (distances add, Definition 3)."""
    x, y = _in_spheres(_key(a)), _in_spheres(_key(b))
    conv = np.zeros((len(x), len(y), x.shape[1] + y.shape[1] - 1), dtype=np.int64)
    for i in range(x.shape[1]):
        conv[:, :, i:i + y.shape[1]] += x[:, i, None, None] * y[None, :, :]
    nodes = int(x[0].sum()) * int(y[0].sum())
    return Fraction(int(conv[:, :, 1:].max(axis=(0, 1)).sum()), nodes)
