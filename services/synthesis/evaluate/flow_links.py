"""Links of a topology for the flow LPs of the all-to-all (module `alltoall`, LP (3)): distinct (tail, head)
pairs with capacity = multiplicity, positive lengths for Dijkstra, and the link loads of shortest-path-tree
routings (used by the certificates of `alltoall` and the column generation of `alltoall_colgen`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import csr_matrix

from services.synthesis.topology.graph import Topology

__all__ = ["Links", "positive_lengths", "tree_loads"]


@dataclass(frozen=True)
class Links:
    """Distinct non-loop (tail, head) pairs with capacity = number of parallel arcs."""

    nodes: int
    tail: np.ndarray
    head: np.ndarray
    cap: np.ndarray

    @classmethod
    def of(cls, topology: Topology) -> "Links":
        n = topology.nodes
        keep = topology.tails != topology.heads
        key = topology.tails[keep].astype(np.int64) * n + topology.heads[keep]
        uniq, count = np.unique(key, return_counts=True)
        return cls(n, (uniq // n).astype(np.int64), (uniq % n).astype(np.int64), count.astype(np.float64))

    @property
    def size(self) -> int:
        return int(self.tail.size)

    def matrix(self, lengths: np.ndarray) -> csr_matrix:
        return csr_matrix((lengths, (self.tail, self.head)), shape=(self.nodes, self.nodes))

    @cached_property
    def _dense_index(self) -> np.ndarray | None:
        if self.nodes > 4096:
            return None
        idx = np.full((self.nodes, self.nodes), -1, dtype=np.int32)
        idx[self.tail, self.head] = np.arange(self.size)
        return idx

    def lookup(self, tails: np.ndarray, heads: np.ndarray) -> np.ndarray:
        """Link index of each (tail, head) pair (which must be a link)."""
        if self._dense_index is not None:
            return self._dense_index[tails, heads].astype(np.int64)
        return np.searchsorted(self.tail * self.nodes + self.head, np.asarray(tails, dtype=np.int64) * self.nodes
                               + heads)


def positive_lengths(lengths: np.ndarray) -> np.ndarray:
    """Lengths >= 0 with a tiny positive floor (scipy's csgraph treats stored zeros as missing arcs);
    the floor only changes which bound is certified, and the bound is computed with the floored lengths."""
    lengths = np.maximum(np.nan_to_num(np.asarray(lengths, dtype=np.float64)), 0.0)
    top = lengths.max() if lengths.size else 0.0
    if top <= 0:
        return np.ones_like(lengths)
    return lengths + 1e-10 * top


def tree_loads(links: Links, pred: np.ndarray, demand: np.ndarray | None = None,
                group: np.ndarray | None = None, groups: int = 1) -> np.ndarray:
    """Link loads of shortest-path-tree routing for the rows of pred (one tree per source, scipy's
    predecessor format), sending demand[i, u] (default one unit) from source i to every node u. Subtree
    sums are accumulated level by level (tree depth), vectorised over all sources. With `group` (a group id
    per row), returns one load vector per group (shape groups x L)."""
    b, n = pred.shape
    par = pred.astype(np.int64)
    inner = par >= 0
    rows = np.arange(b)[:, None] * n
    parent_flat = np.where(inner, rows + par, rows + np.arange(n)[None, :]).ravel()   # roots: themselves
    # depth by pointer doubling: after k rounds, depth counts the ancestors within 2^k steps
    flat_depth = inner.ravel().astype(np.int32)
    jump = parent_flat
    while True:
        step = flat_depth[jump]
        if not step.any():
            break
        flat_depth = flat_depth + step
        jump = jump[jump]
    size = (np.ones((b, n)) if demand is None else np.array(demand, dtype=np.float64)).ravel()
    order = np.argsort(flat_depth, kind="stable")[::-1]
    levels = flat_depth[order]
    cuts = np.flatnonzero(np.diff(levels)) + 1
    for chunk in np.split(order, cuts):
        if flat_depth[chunk[0]] == 0:
            continue
        size += np.bincount(parent_flat[chunk], weights=size[chunk], minlength=b * n)
    r, v = np.nonzero(inner)
    link = links.lookup(par[r, v], v)
    weight = size.reshape(b, n)[r, v]
    if group is None:
        return np.bincount(link, weights=weight, minlength=links.size)
    return np.bincount(group[r] * links.size + link, weights=weight,
                       minlength=groups * links.size).reshape(groups, links.size)
