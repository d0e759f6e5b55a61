"""The Topology type: a port-accurate directed multigraph (paper section 3).

Nodes are 0..N-1. Arcs are stored as two sorted integer arrays (tail, head); parallel arcs are distinct
links ("lanes" 0, 1, ... between the same ordered pair) and self-loops are allowed: as in the paper a
self-loop occupies one of the d ports and carries B/d of bandwidth but can carry nothing useful.
Every topology is strongly connected. The generative families are d-regular (in- and out-degree d at every
node); explicit arc lists and degraded topologies (failed arcs removed) need not be. The cost model uses
the nominal degree d: a node's egress bandwidth B is split over d ports, so every link carries B/d. It is
the largest out-degree (or in-degree, if larger: a port transmits and receives, and G^T must keep d) unless
the caller says more ports exist (a degraded topology keeps the d of the topology it was cut from). Per-node arrays of neighbours (`in_arcs`, `in_predecessors`, `out_neighbours`)
are rectangular: on an irregular topology the missing entries are padding that acts as a self-loop (an
in-arc slot whose tail is the node itself: never on a shortest path, so BFB never uses it).

A bidirectional topology is one whose arc multiset equals its reverse (every cable is duplex); this is
computed from the arcs, never claimed. A vertex-transitive family may carry a `Translation`: a labelling of
the nodes as an abelian group such that x -> x + u is an automorphism for every u; BFB then solves one
node per step and maps the solution to every node (DESIGN section 8).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from services.synthesis.topology.distances import bfs_distances, grow_balls

UNREACHABLE = np.iinfo(np.int32).max


class TopologyError(ValueError):
    """Impossible family parameters or a graph that is not a valid direct-connect topology."""


@dataclass(frozen=True)
class Translation:
    """Nodes labelled as Z_{m_1} x ... x Z_{m_k} (mixed radix, first coordinate most significant).

    `twist = (wrap_axis, shifted_axis, shift)` makes it the quotient used by twisted tori: carrying over
    the wrap of `wrap_axis` adds `shift` to `shifted_axis`. x -> x + u is an automorphism of the topology.
    """

    moduli: tuple[int, ...]
    twist: tuple[int, int, int] | None = None

    @cached_property
    def size(self) -> int:
        return math.prod(self.moduli)

    def coords(self, x: np.ndarray) -> list[np.ndarray]:
        out, rest = [], np.asarray(x, dtype=np.int64)
        for m in reversed(self.moduli):
            out.append(rest % m)
            rest = rest // m
        return out[::-1]

    def index(self, coords: list[np.ndarray]) -> np.ndarray:
        idx = np.zeros_like(coords[0])
        for c, m in zip(coords, self.moduli):
            idx = idx * m + c
        return idx

    def add(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Group sum of node labels (broadcasting)."""
        if len(self.moduli) == 1:                  # Z_m (a twist needs two axes)
            return (np.asarray(x, dtype=np.int64) + np.asarray(y, dtype=np.int64)) % self.moduli[0]
        cx, cy = self.coords(x), self.coords(y)
        s = [a + b for a, b in zip(cx, cy)]
        if self.twist is not None:
            wrap, shifted, shift = self.twist
            carry = s[wrap] >= self.moduli[wrap]
            s[shifted] = s[shifted] + shift * carry
        return self.index([c % m for c, m in zip(s, self.moduli)])

    def negate(self, x: int) -> int:
        """The label y with x + y = 0."""
        if len(self.moduli) == 1:
            return (-x) % self.moduli[0]
        everyone = np.arange(self.size)
        return int(everyone[self.add(np.full(self.size, x), everyone) == 0][0])


def bitset_balls(nxt):
    """`Topology.balls` on a neighbour table: nxt[x] lists the nodes whose balls row x unites (x's
    out-neighbours for forward balls, its in-neighbours for reverse ones)."""
    nxt = np.ascontiguousarray(nxt, dtype=np.int64)
    n = nxt.shape[0]
    everyone = np.arange(n)
    ball = np.zeros((n, (n + 63) // 64), dtype=np.uint64)
    ball[everyone, everyone // 64] = np.left_shift(np.uint64(1), (everyone % 64).astype(np.uint64))
    full = np.full(ball.shape[1], ~np.uint64(0), dtype=np.uint64)     # a row holding every node
    if n % 64:
        full[-1] = (np.uint64(1) << np.uint64(n % 64)) - np.uint64(1)
    t = 0
    while True:
        grown, changed = grow_balls(ball, nxt)
        if not changed:
            return
        t += 1
        yield t, ball, grown
        if (grown[0] == full).all() and (grown == full).all():     # every ball holds every node: done
            return
        ball = grown


class Topology:
    """A strongly connected directed multigraph with its canonical expression and nominal degree d."""

    def __init__(self, nodes: int, tails, heads, expr: str, *, vertex_transitive: bool = False,
                 translation: Translation | None = None, degree: int | None = None):
        tails = np.asarray(tails, dtype=np.int64).ravel()
        heads = np.asarray(heads, dtype=np.int64).ravel()
        if nodes < 2:
            raise TopologyError(f"{expr}: a topology needs at least 2 nodes, got {nodes}")
        if tails.shape != heads.shape or tails.size == 0:
            raise TopologyError(f"{expr}: needs a non-empty arc list")
        bad = (tails < 0) | (tails >= nodes) | (heads < 0) | (heads >= nodes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TopologyError(f"{expr}: arc {tails[i]}>{heads[i]} names a node outside 0..{nodes - 1}")
        order = np.argsort(tails * nodes + heads, kind="stable")
        self.nodes = int(nodes)
        self.tails = tails[order].astype(np.int32)
        self.heads = heads[order].astype(np.int32)
        self.expr = expr
        out_deg = np.bincount(self.tails, minlength=nodes)
        in_deg = np.bincount(self.heads, minlength=nodes)
        self.max_out_degree, self.max_in_degree = int(out_deg.max()), int(in_deg.max())
        self.regular = bool((out_deg == out_deg[0]).all() and (in_deg == out_deg[0]).all())
        ports = max(self.max_out_degree, self.max_in_degree)
        if degree is None:
            degree = ports
        elif not isinstance(degree, (int, np.integer)) or degree < ports:
            raise TopologyError(f"{expr}: nominal degree {degree!r} is below the largest out- or in-degree {ports}")
        self.degree = int(degree)
        if (translation is not None or vertex_transitive) and not self.regular:
            raise TopologyError(f"{expr}: a vertex-transitive topology is regular; this one is not")
        # strongly connected iff node 0 reaches every node and every node reaches node 0
        self._from0, self._to0 = self.distances_from([0])[0], self.distances_to([0])[0]
        if (self._from0 < 0).any() or (self._to0 < 0).any():
            n_comp, _ = connected_components(self.adjacency, directed=True, connection="strong")
            raise TopologyError(f"{expr}: not strongly connected ({n_comp} strong components)")
        self.vertex_transitive = bool(vertex_transitive or translation is not None)
        self.translation = translation
        if translation is not None and translation.size != nodes:
            raise TopologyError(f"{expr}: translation group has {translation.size} elements, not {nodes}")

    # ----- structure -------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Topology({self.expr}, N={self.nodes}, d={self.degree}{'' if self.regular else ', irregular'})"

    @property
    def arcs(self) -> int:
        return int(self.tails.size)

    @cached_property
    def lanes(self) -> np.ndarray:
        """Index of each arc among the parallel arcs with the same (tail, head), in arc order."""
        key = self.tails.astype(np.int64) * self.nodes + self.heads
        first = np.searchsorted(key, key, side="left")
        return (np.arange(key.size) - first).astype(np.int32)

    @cached_property
    def arc_keys(self) -> np.ndarray:
        """Sorted int64 keys (tail * N + head) * d + lane, one per arc: the link identity."""
        return (self.tails.astype(np.int64) * self.nodes + self.heads) * self.degree + self.lanes

    def arc_index(self, tails, heads, lanes) -> np.ndarray:
        """Arc indices of (tail, head, lane) triples; -1 where the topology has no such arc."""
        tails, heads, lanes = (np.asarray(x, dtype=np.int64) for x in (tails, heads, lanes))
        key = (tails * self.nodes + heads) * self.degree + lanes
        pos = np.minimum(np.searchsorted(self.arc_keys, key), self.arcs - 1)
        inside = (tails >= 0) & (tails < self.nodes) & (heads >= 0) & (heads < self.nodes)
        ok = (self.arc_keys[pos] == key) & inside & (lanes < self.degree) & (lanes >= 0)
        return np.where(ok, pos, -1)

    def multiplicity(self, tails, heads) -> np.ndarray:
        """Number of parallel arcs tail -> head for each pair (0 where there is none)."""
        pair = self.tails.astype(np.int64) * self.nodes + self.heads
        key = np.asarray(tails, dtype=np.int64) * self.nodes + np.asarray(heads, dtype=np.int64)
        return np.searchsorted(pair, key, side="right") - np.searchsorted(pair, key, side="left")

    @cached_property
    def adjacency(self) -> csr_matrix:
        """Simple 0/1 adjacency (parallel arcs collapsed), row = tail."""
        m = csr_matrix((np.ones(self.arcs, dtype=np.int8), (self.tails, self.heads)),
                       shape=(self.nodes, self.nodes))
        m.data[:] = 1
        return m

    @cached_property
    def in_arcs(self) -> np.ndarray:
        """Arc indices into each node, shape (N, max in-degree), grouped by head; -1 pads the rows of nodes
        with fewer in-arcs (irregular topologies only)."""
        narrow = self.heads.astype(np.int16) if self.nodes <= np.iinfo(np.int16).max else self.heads
        order = np.argsort(narrow, kind="stable")            # a radix sort on 16-bit keys
        if self.regular:
            return order.reshape(self.nodes, self.max_in_degree)
        return _pad_rows(order, self.heads[order], self.nodes, self.max_in_degree)

    @cached_property
    def out_neighbours(self) -> np.ndarray:
        """(N, max out-degree): the heads of each node's out-arcs; padded with the node itself."""
        if self.regular:
            return self.heads.reshape(self.nodes, self.max_out_degree)
        out = _pad_rows(np.arange(self.arcs), self.tails, self.nodes, self.max_out_degree)
        return _pad_with_self(np.where(out >= 0, self.heads[out], -1))

    @cached_property
    def min_out_neighbours(self) -> int:
        """The fewest distinct out-neighbours of any node (parallel arcs count once)."""
        pair = self.tails.astype(np.int64) * self.nodes + self.heads        # sorted by (tail, head)
        first = np.concatenate([[True], pair[1:] != pair[:-1]])
        return int(np.bincount(self.tails[first], minlength=self.nodes).min())

    @cached_property
    def min_in_links(self) -> int:
        """The fewest in-arcs from other nodes at any node (self-loops carry nothing useful)."""
        other = self.tails != self.heads
        return int(np.bincount(self.heads[other], minlength=self.nodes).min())

    @cached_property
    def self_loops(self) -> bool:
        return bool((self.tails == self.heads).any())

    @cached_property
    def multi_arcs(self) -> bool:
        return bool((self.lanes > 0).any())

    @cached_property
    def bidirectional(self) -> bool:
        if self.translation is not None:     # Cayley: every arc reversed is an arc iff node 0's out- and
            out0 = np.sort(self.heads[:self.max_out_degree])             # in-neighbour multisets agree
            return bool(np.array_equal(out0, np.sort(self.in_predecessors[0])))
        fwd = np.sort(self.tails.astype(np.int64) * self.nodes + self.heads)
        rev = np.sort(self.heads.astype(np.int64) * self.nodes + self.tails)
        return bool(np.array_equal(fwd, rev))

    def transpose(self) -> "Topology":
        """G^T: every arc reversed (paper App. B); a translation stays an automorphism, the nominal degree
        stays (the same links, used the other way)."""
        if self.bidirectional:
            return self
        return Topology(self.nodes, self.heads, self.tails, f"transpose({self.expr})",
                        vertex_transitive=self.vertex_transitive, translation=self.translation,
                        degree=self.degree)

    def graph(self) -> nx.MultiDiGraph:
        g = nx.MultiDiGraph(expr=self.expr)
        g.add_nodes_from(range(self.nodes))
        g.add_edges_from(zip(self.tails.tolist(), self.heads.tolist()))
        return g

    # ----- distances -------------------------------------------------------------------------------
    def distances_from(self, sources) -> np.ndarray:
        """dist[i, x] = directed distance from sources[i] to x (breadth-first search per source)."""
        return self._bfs(np.atleast_1d(sources), self.out_neighbours)

    def distances_to(self, targets) -> np.ndarray:
        """dist[i, x] = directed distance from x to targets[i]."""
        return self._bfs(np.atleast_1d(targets), self.in_predecessors)

    @cached_property
    def in_predecessors(self) -> np.ndarray:
        """(N, max in-degree): the tails of each node's in-arcs (slot order of `in_arcs`); padded with the
        node itself."""
        if self.regular:
            return self.tails[self.in_arcs]
        return _pad_with_self(np.where(self.in_arcs >= 0, self.tails[self.in_arcs], -1))

    def _bfs(self, sources: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        sources = np.asarray(sources, dtype=np.int64)
        if sources.size and (sources.min() < 0 or sources.max() >= self.nodes):
            raise TopologyError(f"{self.expr}: breadth-first search from a node outside 0..{self.nodes - 1}")
        return bfs_distances(sources, np.ascontiguousarray(nxt, dtype=np.int64))

    def balls(self, *, reverse: bool = False):
        """Breadth-first search from every node at once on bitsets: yield (t, ball_{t-1}, ball_t) for
        t = 1..D(G), where row x of ball_t is the bitset of the nodes within t hops from x (ball_t(x) = {x}
        united with ball_{t-1}(w) over x's out-neighbours w), or, with `reverse`, of the nodes from which x
        is within t hops (in-neighbours instead)."""
        return bitset_balls(self.in_predecessors if reverse else self.out_neighbours)

    @cached_property
    def distance_matrix(self) -> np.ndarray:
        """dist[v, u] for every ordered pair (v to u), from the bitset balls."""
        n = self.nodes
        dist = np.zeros((n, n), dtype=np.int16)
        for t, prev, ball in self.balls():
            bits = np.unpackbits((ball & ~prev).view(np.uint8), axis=1, bitorder="little")[:, :n].view(bool)
            dist[bits] = t
        return dist

    @cached_property
    def distance_counts(self) -> np.ndarray:
        """counts[k] = number of ordered pairs (v, u), v != u, at directed distance k, for k = 0..D(G)
        (counts[0] = 0): the distance distribution. A translation maps node 0's distances onto every node
        (N breadth-first searches collapse to one); otherwise it is read off the distance matrix.

        >>> from services.synthesis.topology.catalog import build
        >>> build("ring(4)").distance_counts.tolist()
        [0, 4, 4, 4]
        """
        if self.translation is not None:
            counts = np.bincount(self._from0, minlength=self.diameter + 1).astype(np.int64) * self.nodes
        else:
            counts = np.zeros(self.diameter + 1, dtype=np.int64)
            for rows in np.array_split(self.distance_matrix, max(1, self.nodes // 256)):
                counts += np.bincount(rows.ravel(), minlength=counts.size)
        counts[0] = 0
        return counts

    @cached_property
    def diameter(self) -> int:
        if self.translation is not None:   # every node has the same eccentricity
            return int(max(self._from0.max(), self._to0.max()))
        return int(self.distance_matrix.max())

    def info(self) -> dict:
        return {"expr": self.expr, "nodes": self.nodes, "degree": self.degree, "regular": self.regular,
                "bidirectional": self.bidirectional, "vertex_transitive": self.vertex_transitive,
                "self_loops": self.self_loops, "multi_arcs": self.multi_arcs}


def _pad_rows(items: np.ndarray, owner: np.ndarray, nodes: int, width: int) -> np.ndarray:
    """(nodes, width) table: row x lists the items whose owner is x, in order (`owner` sorted), -1 after."""
    counts = np.bincount(owner, minlength=nodes)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    table = np.full((nodes, width), -1, dtype=np.int64)
    table[owner, np.arange(owner.size) - start[owner]] = items
    return table


def _pad_with_self(rows: np.ndarray) -> np.ndarray:
    """Replace -1 entries of a (N, k) neighbour table by the row's own node (a harmless self-loop)."""
    own = np.broadcast_to(np.arange(rows.shape[0])[:, None], rows.shape)
    return np.where(rows >= 0, rows, own).astype(np.int32)
