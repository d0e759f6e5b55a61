"""The program order of an MSCCL instruction table as a compiled kernel (numba): rows by (tb, t, phase, sub,
tie), stable, as services.compiler.common.arrays.lexorder((tie, sub, phase, t, tb)) gives it
(services.compiler.msccl.program.build_program, pass 4).

The rows are bucketed by thread block (a counting sort, stable), then each block's rows, at most a runtime's
steps per thread block in a program that fits, are put in order by insertion. Linear in the rows where one
sort of packed keys no longer fits 63 bits with the row index and falls back to a stable argsort.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..common.arrays import lexorder

__all__ = ["buckets", "tb_order"]

INSERTION_MAX = 256                   # rows of one tb beyond which the table is sorted instead


def tb_order(tb: np.ndarray, t: np.ndarray, phase: np.ndarray, sub: np.ndarray, tie: np.ndarray,
             n_tbs: int) -> np.ndarray:
    """The permutation putting rows in (tb, t, phase, sub, tie) order, ties kept in row order; tb in
    [0, n_tbs)."""
    if tb.size == 0 or np.bincount(tb, minlength=n_tbs).max() > INSERTION_MAX:
        return lexorder((tie, sub, phase, t, tb))
    return _tb_order(tb, t, phase, sub, tie, n_tbs)


@njit(cache=True, nogil=True)
def buckets(key, n_keys):
    """A stable counting sort of rows by key in [0, n_keys): (start of every key's rows, len n_keys + 1; the
    rows in order)."""
    start = np.zeros(n_keys + 1, np.int64)
    for r in range(key.size):
        start[key[r] + 1] += 1
    for k in range(n_keys):
        start[k + 1] += start[k]
    pos = start[:-1].copy()
    order = np.empty(key.size, np.int64)
    for r in range(key.size):
        order[pos[key[r]]] = r
        pos[key[r]] += 1
    return start, order


@njit(cache=True, nogil=True, inline="always")
def _after(t, phase, sub, tie, q, r):
    """Row q's key (t, phase, sub, tie) is greater than row r's."""
    if t[q] != t[r]:
        return t[q] > t[r]
    if phase[q] != phase[r]:
        return phase[q] > phase[r]
    if sub[q] != sub[r]:
        return sub[q] > sub[r]
    return tie[q] > tie[r]


@njit(cache=True, nogil=True)
def _tb_order(tb, t, phase, sub, tie, n_tbs):
    start, order = buckets(tb, n_tbs)
    for k in range(n_tbs):
        a = start[k]
        for i in range(a + 1, start[k + 1]):
            r = order[i]
            j = i
            while j > a:
                q = order[j - 1]
                if not _after(t, phase, sub, tie, q, r):
                    break
                order[j] = q
                j -= 1
            order[j] = r
    return order
