"""Loading every compiled kernel (numba) before the work that needs it: the graph's breadth-first search
(services.synthesis.topology.distances), the BFB evaluator's kernels (services.synthesis.bfb.kernels), the
greedy scheduler's matcher (services.synthesis.bfb.greedy) and tree packing's max-flow
(services.synthesis.forest) and the dependency-driven time (services.synthesis.schedule.dependency). It sits
above all of them, so none of them imports another to be warmed.

Each step runs its kernels on tiny inputs: numba compiles them the first time (and writes its on-disk cache),
later runs load them from the cache in well under a second. Run once after installing
(`python -m services.synthesis.bfb.warm`) and before forking workers, so that no process pays the compilation
inside a timed or parallel section.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

__all__ = ["STEPS", "Report", "print_step", "run_steps", "warm"]

Report = Callable[[int, int, str, float, float], None]    # (step number, steps, name, seconds, CPU seconds)


def _distances() -> None:
    from services.synthesis.topology.distances import bfs_distances, grow_balls

    ring = np.array([[1], [2], [0]], dtype=np.int64)           # the directed 3-cycle, as next-hop rows
    bfs_distances(np.array([0], dtype=np.int64), ring)
    grow_balls(np.array([[1], [2], [4]], dtype=np.uint64), np.array([[2], [0], [1]], dtype=np.int64))


def _bfb() -> None:
    from services.synthesis.bfb.kernels import (balanced_upper, circulant_eccentricities, cyclic_distances,
                                                excluded_u_star, interval_u_star, sphere_sizes, step_types,
                                                step_u_star_by_runs, type_bounds, walk_overlaps, zeta_u_star)

    prev = np.array([[1], [2], [4]], dtype=np.uint64)           # balls B_0 and B_1 of the 3-cycle's reverse
    ball = np.array([[5], [3], [6]], dtype=np.uint64)
    preds = np.array([[2], [0], [1]], dtype=np.int64)
    offsets, masks, counts = step_types(prev, ball, preds)
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


def _greedy() -> None:
    from services.synthesis.bfb import greedy

    greedy.warm()


def _forest() -> None:
    from services.synthesis.forest import balanced, packing, reroute, stream

    packing.warm()                                             # x* by max flows, rerouted trees, arc checks
    balanced.warm()                                            # the balanced trees the reroute starts from
    reroute.warm()
    stream.warm()                                              # the trees run event-driven


def _dependency() -> None:
    from services.synthesis.schedule import dependency

    dependency.warm()


# in the order a first plan needs them: distances and BFB price and build its schedules
STEPS: list[tuple[str, Callable[[], None]]] = [
    ("graph distances (topology.distances)", _distances),
    ("BFB evaluator (bfb.kernels)", _bfb),
    ("greedy scheduler (bfb.greedy)", _greedy),
    ("tree packing (forest)", _forest),
    ("dependency-driven time (schedule.dependency)", _dependency),
]


def run_steps(steps: list[tuple[str, Callable[[], None]]], report: Report | None = None) -> float:
    """Run each (name, step) in order, telling `report` (number, steps, name, seconds, CPU seconds) after
    each; returns the seconds taken."""
    t0 = time.perf_counter()
    for i, (name, step) in enumerate(steps, 1):
        t, c = time.perf_counter(), time.process_time()
        step()
        if report is not None:
            report(i, len(steps), name, time.perf_counter() - t, time.process_time() - c)
    return time.perf_counter() - t0


def print_step(i: int, n: int, name: str, seconds: float, cpu_s: float) -> None:
    print(f"fabricplan: kernels [{i}/{n}] {name}: {seconds:.1f} s ({cpu_s:.1f} s CPU)", file=sys.stderr,
          flush=True)


def warm(report: Report | None = None) -> float:
    """Compile (or load from numba's on-disk cache) every kernel on tiny inputs; returns the seconds taken."""
    return run_steps(STEPS, report)


if __name__ == "__main__":
    print(f"fabricplan: compiled kernels ready in {warm(print_step):.1f} s", file=sys.stderr)
