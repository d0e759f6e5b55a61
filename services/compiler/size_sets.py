"""A schedule set's size ranges as the minBytes/maxBytes windows of one file per range (docs/runtimes.md,
"Which calls use the file").

Ranges are [min_bytes, max_bytes) of the call's size nbytes (the larger buffer: what the cost model calls M).
The executor and RCCL select a file when minBytes <= nbytes <= maxBytes (maxBytes 0: unbounded), so a range
becomes minBytes = min_bytes, maxBytes = max_bytes - 1, and the last one maxBytes = 0; microsoft/msccl
(legacy) selects minBytes <= nbytes < maxBytes and has no unbounded window, so the files end at
`last_max_bytes` (its 128 MiB default unless given; it allocates scratch for maxBytes): ranges starting at or
above it get no file and the last one kept is cut there. The windows of one
set are disjoint, as RCCL (which reads a directory in no particular order) needs. oneCCL files carry no size
window, so a set cannot be selected by size there.
"""
from __future__ import annotations

from services.compiler.errors import CompileError
from services.compiler.runtimes import profile_for

__all__ = ["size_windows"]


def size_windows(runtime: str, ranges: list[tuple[int, int | None]], last_max_bytes: int | None = None
                 ) -> list[tuple[int, int]]:
    """(minBytes, maxBytes) per range [lo, hi) for `runtime`, in order (see the module docstring: legacy may
    return fewer windows than ranges, for the first ones).

    >>> size_windows("executor", [(0, 4096), (4096, None)])
    [(0, 4095), (4096, 0)]
    >>> size_windows("legacy", [(0, 4096), (4096, None)])
    [(0, 4096), (4096, 134217728)]
    >>> size_windows("legacy", [(0, 4096), (4096, 1 << 28), (1 << 28, None)])
    [(0, 4096), (4096, 134217728)]
    """
    if runtime == "oneccl":
        raise CompileError("oneCCL files have no minBytes/maxBytes window: a schedule set cannot be selected by "
                           "size there (compile one range's schedule instead)", limit="runtime", value=runtime)
    p = profile_for(runtime)
    top = None
    if not p.max_bytes_zero_unbounded:
        top = last_max_bytes if last_max_bytes is not None else p.default_max_bytes
        if top is None or top <= 0:
            raise CompileError(f"the {p.name} runtime needs a positive maxBytes for the last file (give --max-bytes)",
                               limit="max_bytes", value=top)
    out = []
    for lo, hi in ranges:
        if top is not None:
            if lo >= top:
                break
            out.append((lo, top if hi is None or hi >= top else hi))
        elif hi is not None:
            out.append((lo, hi - 1 if p.max_bytes_inclusive else hi))
        else:
            out.append((lo, 0))
    return out
