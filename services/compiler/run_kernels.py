"""The kernels (numba) of services.compiler.msccl.runs: splitting rows into maximal runs where some columns
advance by one and others stay constant, in one read of each column (numpy's diff, compare and or take four
passes and two temporaries per column) and one pass cutting the runs at most max_len long.

`mark_breaks` is compiled ahead for the integer and boolean column types (services.compiler.radix.KINDS);
differences are taken in int64, as msccl.runs did with numpy.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .radix import KINDS

__all__ = ["mark_breaks", "run_starts"]

_NUMPY = {"boolean": "bool"}
_COMPILED = frozenset(np.dtype(_NUMPY.get(t, t)) for t in KINDS)


@njit([f"void(boolean[::1], {t}[:], int64)" for t in KINDS], cache=True, nogil=True)
def _mark(brk, col, step):
    for i in range(1, col.size):
        if np.int64(col[i]) - np.int64(col[i - 1]) != step:
            brk[i] = True


@njit(cache=True, nogil=True)
def _starts(brk, max_len):
    n = brk.size
    out = np.empty(n, np.int64)
    m = 0
    pos = 0
    for i in range(n):
        if brk[i] or pos == max_len:
            out[m] = i
            m += 1
            pos = 0
        pos += 1
    return out[:m].copy()


def mark_breaks(brk: np.ndarray, col: np.ndarray, step: int) -> None:
    """brk[i] |= col[i] - col[i - 1] != step for every i >= 1, in place (brk: contiguous bool)."""
    col = np.asarray(col)
    if col.dtype in _COMPILED and col.ndim == 1:
        _mark(brk, col, step)
    else:
        brk[1:] |= np.diff(col.astype(np.int64)) != step


def run_starts(brk: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the runs that begin at the True entries of brk (brk[0] True), each cut into pieces
    of at most max_len rows from its start."""
    st = _starts(brk, max_len)
    return st, np.diff(np.append(st, brk.size))
