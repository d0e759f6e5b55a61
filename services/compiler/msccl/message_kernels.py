"""Kernels (numba) of the MSCCL message-table pass (services.compiler.msccl.messages), each one pass where
numpy takes several with temporaries:

* `expand_units`: a step's transfers as units (sender, receiver, channel, unit g = v * P + j * P0 + x) for
  every instance j and chunk x of each transfer's range, in the builder's order (instance, transfer, chunk);
* `first_fresh`: of a copy step's units sorted by (receiver, unit), the first of each (receiver, unit) whose
  receiver does not hold that unit's final result yet (messages._MessageBuilder._step drops the others);
* `mark_breaks` and `run_starts` (msccl.runs): splitting rows into maximal runs where some columns advance by
  one and others stay constant, one read of each column (numpy's diff, compare and or take four passes and two
  temporaries per column), then one pass cutting the runs at most max_len long.

`mark_breaks` takes the columns services.compiler.common.radix.takes says (numpy's diff any other); differences are
taken in int64, as msccl.runs did with numpy. `warm` compiles every kernel here.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..common.radix import KERNEL_MIN, KINDS, takes

__all__ = ["expand_units", "first_fresh", "mark_breaks", "run_starts", "warm"]



@njit(cache=True, nogil=True)
def _expand(v, u, w, lane, lo, hi, rank, blocks, nodes, P, P0, k, c):
    total = 0
    for i in range(v.size):
        total += hi[i] - lo[i]
    U = np.empty(total * k, np.int64)
    W = np.empty(total * k, np.int64)
    CH = np.empty(total * k, np.int64)
    G = np.empty(total * k, np.int64)
    r = 0
    for j in range(k):
        for i in range(v.size):
            cls = rank[v[i]] * c // nodes if blocks else rank[v[i]] % c
            ch = lane[i] * (k * c) + j * c + cls
            base = v[i] * P + j * P0
            for x in range(lo[i], hi[i]):
                U[r] = u[i]
                W[r] = w[i]
                CH[r] = ch
                G[r] = base + x
                r += 1
    return U, W, CH, G


def expand_units(v, u, w, lane, lo, hi, rank: np.ndarray, blocks: bool, P: int, P0: int, k: int, c: int):
    """(U, W, CH, G) of every unit of the transfers (source v, sender u, receiver w, lane, chunks [lo, hi)):
    instance j of chunk x of shard v is unit v * P + j * P0 + x on channel lane * k * c + j * c + class_c(v),
    class_c(v) = rank[v] mod c, or rank[v] * c // N with `blocks` (services.compiler.lowering.channels.ShardChannels);
    ordered by instance, then transfer, then chunk. Every hi >= lo."""
    a = [np.require(x, np.int64, ["C", "W"]) for x in (v, u, w, lane, lo, hi)]
    rank = np.require(rank, np.int64, ["C", "W"])
    return _expand(*a, rank, bool(blocks), int(rank.size), int(P), int(P0), int(k), int(c))


@njit(cache=True, nogil=True)
def _first_fresh(U, W, CH, G, final, units):
    n = U.size
    u, w, ch, g = np.empty(n, U.dtype), np.empty(n, W.dtype), np.empty(n, CH.dtype), np.empty(n, G.dtype)
    m = 0
    for i in range(n):
        if i > 0 and W[i] == W[i - 1] and G[i] == G[i - 1]:
            continue
        if final[W[i] * units + G[i]]:
            continue
        u[m], w[m], ch[m], g[m] = U[i], W[i], CH[i], G[i]
        m += 1
    return u[:m], w[:m], ch[:m], g[:m]


def first_fresh(U, W, CH, G, final: np.ndarray):
    """(U, W, CH, G) of the rows (sorted so that equal (W, G) are adjacent) that are the first of their (W, G)
    and whose final[W, G] (a (gpu x unit) bool array) is False; int64 columns."""
    cols = [np.require(c, np.int64, ["C", "W"]) for c in (U, W, CH, G)]
    return _first_fresh(*cols, np.require(final.reshape(-1), bool, ["C", "W"]), int(final.shape[1]))


@njit(cache=True, nogil=True)
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
    if takes(col):
        _mark(brk, col, step)
    else:
        brk[1:] |= np.diff(col.astype(np.int64)) != step


def run_starts(brk: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the runs that begin at the True entries of brk (brk[0] True), each cut into pieces
    of at most max_len rows from its start."""
    st = _starts(np.require(brk, bool, ["C", "W"]), int(max_len))
    return st, np.diff(np.append(st, brk.size))


def warm() -> None:
    """Compile (or load from numba's cache) every kernel here for the types the message table passes."""
    one = np.ones(2, np.int64)
    expand_units(one, one, one, one, one - 1, one, np.arange(2), False, 1, 1, 1, 1)
    first_fresh(one, one, one, one, np.zeros((2, 2), bool))
    brk = np.ones(KERNEL_MIN, bool)
    for t in KINDS:
        mark_breaks(brk, np.ones(KERNEL_MIN, t), 1)
    run_starts(brk, 1)
