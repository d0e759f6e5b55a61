"""Loading every compiled kernel (numba) before the work that needs it: the BFB evaluator's kernels
(services.synthesis.bfb.kernels), the greedy scheduler's matcher (services.synthesis.bfb.greedy) and the
graph's breadth-first search (services.synthesis.topology.distances) and tree packing's max-flow
(services.synthesis.forest, exact and balanced) and the dependency-driven time
(services.synthesis.schedule.dependency). It sits above all of them, so none of
them imports another to be warmed.

Run once after installing (`python -m services.synthesis.bfb.warm`) and before forking workers, so that no
process pays the compilation inside a timed or parallel section.
"""
from __future__ import annotations

import time

import numpy as np

from services.synthesis.bfb import greedy
from services.synthesis.forest import balanced
from services.synthesis.forest.packing import pack_trees
from services.synthesis.schedule import dependency
from services.synthesis.bfb.kernels import (balanced_upper, circulant_eccentricities, cyclic_distances,
                                            excluded_u_star, interval_u_star, sphere_sizes, step_types,
                                            step_u_star_by_runs, type_bounds, walk_overlaps, zeta_u_star)
from services.synthesis.topology.catalog import build
from services.synthesis.topology.distances import bfs_distances, grow_balls

__all__ = ["warm"]


def warm() -> float:
    """Compile (or load from numba's on-disk cache) every kernel on tiny inputs; returns the seconds taken."""
    t0 = time.perf_counter()
    ring = np.array([[1], [2], [0]], dtype=np.int64)           # the directed 3-cycle, as next-hop rows
    bfs_distances(np.array([0], dtype=np.int64), ring)
    prev = np.array([[1], [2], [4]], dtype=np.uint64)           # balls B_0 and B_1 of the 3-cycle's reverse
    ball = np.array([[5], [3], [6]], dtype=np.uint64)
    preds = np.array([[2], [0], [1]], dtype=np.int64)
    offsets, masks, counts = step_types(prev, ball, preds)
    grow_balls(prev, preds)
    sphere_sizes(prev, ball)
    step_u_star_by_runs(prev, ball, preds, np.ones(prev.shape[0], dtype=np.bool_))
    type_bounds(offsets, masks, counts, 1)
    balanced_upper(offsets, masks, counts, 1, 1)
    excluded_u_star(offsets, masks, counts, 1, 1, np.zeros((offsets.size - 1, 1, 1), dtype=np.int64),
                    np.zeros((offsets.size - 1, 1, 1), dtype=np.int64))
    interval_u_star(offsets, masks, counts, 1, np.arange(offsets.size - 1))
    zeta_u_star(offsets, masks, counts, 1)
    circulant_eccentricities(5, np.array([[1, 2]], dtype=np.int64))
    circulant_eccentricities(5, np.array([[1, 2]], dtype=np.int64), 1)     # the finder passes `keep`
    cyclic_distances(5, np.array([1, 2], dtype=np.int64))
    walk_overlaps(np.array([[1], [2], [0]], dtype=np.int64), np.array([1, 2, 0], dtype=np.int64),
                  np.zeros(3, dtype=np.int64), np.array([0], dtype=np.int64), 2)
    greedy.warm()
    pack_trees(build("ring(4)"), np.ones(4))                   # tree packing's max-flow and arc checks
    balanced.warm()                                            # and its balanced trees beyond 128 nodes
    dependency.warm()
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"fabricplan: compiled kernels ready in {warm():.1f} s")
