"""Process-wide settings of fabricplan's processes (the CLI, the API and worker processes, the benches)."""
from __future__ import annotations

import gc

GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Raise CPython's cyclic-collector thresholds from the default (700, 10, 10) to GC_THRESHOLDS.

    The finder and the pricing engine allocate millions of small objects (fractions, tuples, candidates)
    that live on in their caches; with the default thresholds the collector walks those caches again and
    again: 6 to 15 % of the finder sweep (`python -m bench.finder`), depending on the degree. Reference
    counting still frees every acyclic object at once; only reference cycles wait a little longer. Forked
    children (Celery's pool, the embedded worker's job processes) inherit the setting."""
    gc.set_threshold(*GC_THRESHOLDS)
