"""Expansion operators on topologies (paper section 5, Definitions 3, 12, 13): the expanded *graphs*.

Their schedules come from BFB on the result (always valid, and optimal-BFB by Theorem 16) or from the
expansion-definition schedules (Def. 1, 2, 14, App. A.6) of services.synthesis.search.expansions.
"""
from __future__ import annotations

import numpy as np

from services.synthesis.topology.graph import Topology, TopologyError, Translation

__all__ = ["line", "degree", "product", "power", "bidir", "OPERATORS"]

def line(g: Topology, times: int = 1) -> Topology:
    """L^k(G) (Definition 12): every arc becomes a node; arc e -> arc f when head(e) = tail(f).

    Parallel arcs are distinct nodes and a self-loop becomes a node with a self-loop, so a d-regular
    N-node G gives a d-regular dN-node L(G). Arc i of G is node i of L(G).
    """
    if not isinstance(times, int) or times < 1:
        raise TopologyError(f"line: the repeat count must be a positive integer, got {times!r}")
    _require_regular("line", g)
    expr = f"line({g.expr})" if times == 1 else f"line({g.expr}, {times})"
    cur = g
    for _ in range(times):
        d = cur.degree
        # arcs are sorted by tail, so the out-arcs of node v are the block v*d .. v*d + d - 1
        tails = np.repeat(np.arange(cur.arcs), d)
        heads = (cur.heads.astype(np.int64)[:, None] * d + np.arange(d)[None, :]).ravel()
        cur = Topology(cur.arcs, tails, heads, expr)
    return cur


def degree(g: Topology, n: int) -> Topology:
    """G*n (Definition 13): node v becomes v_0..v_{n-1} (label v*n + i); arc (u, v) becomes every
    (u_i, v_j). N -> nN, d -> nd. Requires G without self-loops."""
    if not isinstance(n, int) or n < 2:
        raise TopologyError(f"degree: the expansion factor must be an integer >= 2, got {n!r}")
    _require_regular("degree", g)
    if g.self_loops:
        raise TopologyError(f"degree: {g.expr} has self-loops; degree expansion is defined only without them")
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    tails = (g.tails.astype(np.int64)[:, None] * n + i.ravel()[None, :]).ravel()
    heads = (g.heads.astype(np.int64)[:, None] * n + j.ravel()[None, :]).ravel()
    # a Cayley graph of a group A gives one of A x Z_n: (u, i) -> (u + a, i + c) for every generator a, all c
    translation = None if g.translation is None else Translation(g.translation.moduli + (n,), g.translation.twist)
    return Topology(g.nodes * n, tails, heads, f"degree({g.expr}, {n})", translation=translation)


def product(*factors: Topology, expr: str | None = None) -> Topology:
    """G_1 box ... box G_k (Definition 3): node (x_1..x_k), label mixed radix (first factor most
    significant); an arc changes one coordinate along an arc of that factor. Degree = sum of degrees.
    Products of untwisted Cayley factors are Cayley graphs of the product group."""
    if len(factors) < 2 or not all(isinstance(f, Topology) for f in factors):
        raise TopologyError("product: needs at least two topologies")
    for f in factors:
        _require_regular("product", f)
    sizes = [f.nodes for f in factors]
    total = int(np.prod(sizes))
    if total > 1 << 24:
        raise TopologyError(f"product: {total} nodes is beyond what this service plans")
    everyone = np.arange(total, dtype=np.int64)
    tails, heads = [], []
    stride = total
    for f in factors:
        stride //= f.nodes
        coord = (everyone // stride) % f.nodes
        # for each node, every out-arc of its coordinate in factor f
        start = coord * f.degree
        arc = (start[:, None] + np.arange(f.degree)[None, :]).ravel()
        base = np.repeat(everyone - coord * stride, f.degree)
        tails.append(np.repeat(everyone, f.degree))
        heads.append(base + f.heads[arc].astype(np.int64) * stride)
    translation = None
    if all(f.translation is not None and f.translation.twist is None for f in factors):
        translation = Translation(tuple(m for f in factors for m in f.translation.moduli))
    return Topology(total, np.concatenate(tails), np.concatenate(heads),
                    expr or f"product({', '.join(f.expr for f in factors)})", translation=translation)


def power(g: Topology, n: int) -> Topology:
    """G^{box n}: the Cartesian product of n copies of G (N^n nodes, degree nd)."""
    if not isinstance(n, int) or n < 2:
        raise TopologyError(f"power: the exponent must be an integer >= 2, got {n!r}")
    return product(*([g] * n), expr=f"power({g.expr}, {n})")


def bidir(g: Topology) -> Topology:
    """G u G^T (App. A.6): every arc gets its reverse; 2d-regular and bidirectional. Arcs of G come first
    among parallel arcs (lanes 0..), then those of G^T."""
    return Topology(g.nodes, np.concatenate([g.tails, g.heads]), np.concatenate([g.heads, g.tails]),
                    f"bidir({g.expr})", translation=g.translation, vertex_transitive=g.vertex_transitive,
                    degree=2 * g.degree)


def _require_regular(name: str, g: Topology) -> None:
    """The expansions' definitions and theorems (section 5) are for d-regular topologies."""
    if not g.regular:
        raise TopologyError(f"{name}: {g.expr} is not regular; expansions apply to regular topologies")


OPERATORS = {"line": line, "degree": degree, "product": product, "power": power, "bidir": bidir}
