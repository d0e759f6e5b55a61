"""Process-wide settings of fabricplan's processes (the CLI, the API and worker processes, the benches)."""
from __future__ import annotations

import gc
import resource

__all__ = ["GC_THRESHOLDS", "tune_gc", "address_space", "apply_memory_limit"]

GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Raise CPython's cyclic-collector thresholds from the default (700, 10, 10) to GC_THRESHOLDS.

    The finder and the pricing engine allocate millions of small objects (fractions, tuples, candidates)
    that live on in their caches; with the default thresholds the collector walks those caches again and
    again: 6 to 15 % of the finder sweep (`python -m bench.finder`), depending on the degree. Reference
    counting still frees every acyclic object at once; only reference cycles wait a little longer. Forked
    children (Celery's pool, the embedded worker's job processes) inherit the setting."""
    gc.set_threshold(*GC_THRESHOLDS)


def address_space() -> int:
    """Bytes this process has mapped now (VmSize)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def apply_memory_limit(limit_mb: int) -> int:
    """Cap this process's address space at its current size + limit_mb MiB (RLIMIT_AS, never above the hard
    limit): an allocation beyond it raises MemoryError. Returns the cap in bytes."""
    cap = address_space() + limit_mb * (1 << 20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return cap
