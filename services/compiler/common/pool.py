"""Ordered parallel map over independent blocks of a compile (the XML text of blocks of gpus, the dependency pass
of batches of gpus) on a few threads.

The work of a block is numba kernels compiled with nogil and large numpy operations, which release the GIL, so
two threads use two cores. Results come back in the blocks' order, with at most `threads` + 1 blocks in flight
(a streamed file's memory stays bounded by its blocks, not its size). The first block runs on the calling thread
before any other starts, so a kernel is compiled or loaded from numba's cache once, not raced by the threads.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

__all__ = ["COMPILE_THREADS", "ordered_map"]


def _threads_from_env() -> int:
    """FABRICPLAN_COMPILE_THREADS, default the machine's cores up to 2 (1: everything on the calling thread)."""
    raw = os.environ.get("FABRICPLAN_COMPILE_THREADS", "")
    if raw.strip().isdigit() and int(raw) >= 1:
        return int(raw)
    return max(1, min(2, os.cpu_count() or 1))


COMPILE_THREADS = _threads_from_env()


def ordered_map(fn, items, threads: int | None = None):
    """Yield fn(item) for every item, in order, computing up to `threads` of them at once (default
    COMPILE_THREADS)."""
    items = list(items)
    threads = COMPILE_THREADS if threads is None else threads
    if threads <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item)
        return
    yield fn(items[0])
    with ThreadPoolExecutor(threads, thread_name_prefix="compile") as pool:
        pending: deque = deque()
        for item in items[1:]:
            pending.append(pool.submit(fn, item))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
