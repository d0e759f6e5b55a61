"""Stable least-significant-digit radix sort of non-negative int64 keys (numba), the kernel behind
services.compiler.common.arrays.lexorder on large inputs.

LSD radix sort (Knuth, TAOCP vol. 3, 5.2.5; Cormen et al., Introduction to Algorithms, 8.3) orders the keys by
one digit per pass, least significant first, each pass a stable counting sort: a histogram of the digit, its
exclusive prefix sums as the buckets' first positions, and a scatter in input order. Because every pass is
stable, the result is stably sorted by the whole key: rows with equal keys keep their input order, which is
exactly the order np.lexsort gives.

Only the bits [shift, shift + bits) of a key are sorted on; bits above them must be zero, bits below them ride
along (lexorder puts the row index there, so one int64 array moves per pass). The bits are split into
ceil(bits / 11) digits of equal width (at most 2^11 buckets, whose counters stay in the L1 cache); the
histograms of all digits come from one read of the keys, and a digit that is the same in every key (one bucket
holds them all) is skipped. With `carry` an index array moves with the keys (when the row index does not fit
below them).

`pack` adds one of lexorder's columns to the packed keys in one read (numpy's shift, add and subtract take
three passes), and `unpack` reads a column back out of sorted packed keys (one sequential pass where gathering
the column by the order reads it at random); both for the columns `takes` says (the message table's types,
from KERNEL_MIN rows), numpy's operations for any other. `warm` compiles every kernel for them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["DIGIT_BITS", "KERNEL_MIN", "KINDS", "pack", "radix_sort", "takes", "unpack", "warm"]

DIGIT_BITS = 11
KINDS = (np.int8, np.int32, np.int64, np.bool_)     # the column types the kernels take (others: numpy)
KERNEL_MIN = 1 << 12    # rows from which the kernels run (below, numpy is as fast and small programs load none)


@njit(cache=True, nogil=True)
def _pack(packed, col, lo, bits):
    for i in range(col.size):
        packed[i] = (packed[i] << bits) | (np.int64(col[i]) - lo)


@njit(cache=True, nogil=True)
def _unpack(packed, shift, bits, lo, out):
    mask = (np.int64(1) << bits) - 1
    for i in range(packed.size):
        out[i] = ((packed[i] >> shift) & mask) + lo


_COMPILED = frozenset(np.dtype(t) for t in KINDS)


def takes(col: np.ndarray) -> bool:
    """Whether the kernels take `col`: at least KERNEL_MIN rows, of the types `warm` compiles them for (a
    writeable contiguous vector of a KINDS type; numba compiles anew for any other layout or a read-only
    array)."""
    return (col.size >= KERNEL_MIN and col.dtype in _COMPILED and col.ndim == 1 and col.flags.c_contiguous
            and col.flags.writeable)


def pack(packed: np.ndarray, col: np.ndarray, lo: int, bits: int) -> None:
    """packed = packed << bits | (col - lo), in place (the values of col - lo below 2^bits)."""
    if takes(col):
        _pack(packed, col, lo, bits)
        return
    packed <<= bits
    packed |= col.astype(np.int64) - lo


@njit(cache=True, nogil=True)
def _sort(keys, shift, bits, idx, carry):
    n = keys.size
    if bits <= 0 or n < 2:
        return keys, idx
    passes = (bits + DIGIT_BITS - 1) // DIGIT_BITS
    width = (bits + passes - 1) // passes
    radix = 1 << width
    mask = radix - 1
    counts = np.zeros((passes, radix), np.int64)
    for i in range(n):
        x = keys[i] >> shift
        for p in range(passes):
            counts[p, (x >> (p * width)) & mask] += 1
    src, dst = keys, np.empty_like(keys)
    isrc = idx
    idst = np.empty_like(idx) if carry else idx
    pos = np.empty(radix, np.int64)
    for p in range(passes):
        s = shift + p * width
        total = 0
        single = False
        for d in range(radix):
            c = counts[p, d]
            if c == n:
                single = True
            pos[d] = total
            total += c
        if single:
            continue
        if carry:
            for i in range(n):
                x = src[i]
                d = (x >> s) & mask
                j = pos[d]
                dst[j] = x
                idst[j] = isrc[i]
                pos[d] = j + 1
            isrc, idst = idst, isrc
        else:
            for i in range(n):
                x = src[i]
                d = (x >> s) & mask
                dst[pos[d]] = x
                pos[d] += 1
        src, dst = dst, src
    return src, isrc


def radix_sort(keys: np.ndarray, shift: int, bits: int, idx: np.ndarray | None = None):
    """Stably sort non-negative int64 `keys` by their bits [shift, shift + bits) (higher bits zero). Returns the
    sorted keys, and with `idx` also idx permuted alongside; the inputs may be overwritten."""
    keys = np.require(keys, np.int64, ["C", "W"])
    carry = idx is not None
    i = np.require(idx, np.int64, ["C", "W"]) if carry else np.zeros(0, np.int64)
    out, perm = _sort(keys, shift, bits, i, carry)
    return (out, perm) if carry else out


def unpack(packed: np.ndarray, shift: int, bits: int, lo: int, dtype) -> np.ndarray:
    """The column of `dtype` packed at bits [shift, shift + bits) as value - lo (`pack`)."""
    dtype = np.dtype(dtype)
    if dtype not in _COMPILED or not takes(packed):
        return (((packed >> shift) & ((1 << bits) - 1)) + lo).astype(dtype)
    out = np.empty(packed.size, dtype)
    _unpack(packed, shift, bits, lo, out.view(np.uint8) if dtype == np.bool_ else out)
    return out


def warm() -> None:
    """Compile (or load from numba's cache) every kernel here for every column type of KINDS."""
    keys = np.arange(8, dtype=np.int64)[::-1].copy()
    radix_sort(keys.copy(), 0, 3)
    radix_sort(keys.copy(), 0, 3, np.arange(8))
    for t in KINDS:
        col = np.ones(KERNEL_MIN, t)
        packed = np.zeros(KERNEL_MIN, np.int64)
        pack(packed, col, 0, 1)
        unpack(packed, 0, 1, 0, t)
