"""The compiler's sort and run kernels against numpy's definitions (services.compiler.common.arrays, radix,
message_kernels): lexorder and lexsorted give np.lexsort's order and the gathered columns on either side of the
kernels' size threshold, for every key type, with ties, wide keys (index carried beside the keys, or np.lexsort
past 63 bits), read-only and strided columns; the radix sort is stable on any bit range; runs, the unit
expansion and a copy step's first fresh units match the numpy formulas the message table used before them."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.compiler.common.arrays import RADIX_MIN, lexorder, lexsorted, ranges, run_positions
from services.compiler.lowering.channels import ShardChannels
from services.compiler.msccl.message_kernels import expand_units, first_fresh
from services.compiler.msccl.messages import runs
from services.compiler.common.radix import radix_sort

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.bool_)


def column(rng, n: int, dtype, width: int) -> np.ndarray:
    if dtype is np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    info = np.iinfo(dtype)
    lo = max(int(info.min), -(1 << (width - 1)))
    hi = min(int(info.max), lo + (1 << width) - 1)
    return rng.integers(lo, hi, n, endpoint=True).astype(dtype)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3 * RADIX_MIN), kinds=st.lists(
    st.tuples(st.sampled_from(DTYPES), st.integers(1, 40)), min_size=1, max_size=5),
    view=st.sampled_from(["plain", "readonly", "strided"]))
def test_lexorder_and_lexsorted_are_lexsort(seed, n, kinds, view):
    rng = np.random.default_rng(seed)
    keys = []
    for dtype, width in kinds:
        c = column(rng, 2 * n if view == "strided" else n, dtype, width)
        if view == "strided":
            c = c[::2]
        elif view == "readonly":
            c.flags.writeable = False
        keys.append(c)
    want = np.lexsort(keys)
    assert np.array_equal(lexorder(keys), want)
    order, cols = lexsorted(keys)
    assert np.array_equal(order, want)
    for c, k in zip(cols, keys):
        assert c.dtype == k.dtype and np.array_equal(c, k[want])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3 * RADIX_MIN), shift=st.integers(0, 20),
       bits=st.integers(0, 40), distinct=st.integers(1, 5000), carry=st.booleans())
def test_radix_sort_is_a_stable_sort_on_the_bit_range(seed, n, shift, bits, distinct, carry):
    rng = np.random.default_rng(seed)
    high = rng.integers(0, distinct, n) % (1 << bits) if bits else np.zeros(n, np.int64)
    keys = (high << shift) | rng.integers(0, 1 << shift, n)       # bits below the range ride along
    want = np.argsort(keys >> shift, kind="stable")
    if carry:
        out, idx = radix_sort(keys.copy(), shift, bits, np.arange(n))
        assert np.array_equal(idx, want)
    else:
        out = radix_sort(keys.copy(), shift, bits)
    assert np.array_equal(out, keys[want])


def runs_reference(adv, eq, max_len):
    """msccl.runs as it was written in numpy."""
    n = adv[0].size if adv else eq[0].size
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    for c in adv:
        brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 1
    for c in eq:
        brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 0
    st_ = np.flatnonzero(brk | (run_positions(brk) % max_len == 0))
    return st_, np.diff(np.append(st_, n))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3 * RADIX_MIN), max_len=st.integers(1, 300),
       kinds=st.lists(st.sampled_from(DTYPES[:-1]), min_size=1, max_size=4), split=st.integers(0, 4))
def test_runs_match_numpy(seed, n, max_len, kinds, split):
    rng = np.random.default_rng(seed)
    cols = []
    for i, dtype in enumerate(kinds):
        if i < split:       # advancing columns: long runs of +1 with occasional jumps
            steps = np.where(rng.random(n) < 0.02, rng.integers(-3, 5, n), 1)
            cols.append((np.cumsum(steps) % np.iinfo(dtype).max).astype(dtype))
        else:               # constant columns: runs of equal values
            cols.append(np.repeat(rng.integers(0, 3, n // 50 + 1), 50)[:n].astype(dtype))
    adv, eq = cols[:split], cols[split:]
    got, want = runs(adv, eq, max_len=max_len), runs_reference(adv, eq, max_len)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), transfers=st.integers(0, 300), nodes=st.integers(2, 40),
       P0=st.integers(1, 6), k=st.integers(1, 3), c=st.integers(1, 5), blocks=st.booleans())
def test_expand_units_matches_numpy(seed, transfers, nodes, P0, k, c, blocks):
    rng = np.random.default_rng(seed)
    v, u, w = (rng.integers(0, nodes, transfers) for _ in range(3))
    lane = rng.integers(0, 3, transfers)
    lo = rng.integers(0, P0, transfers)
    hi = lo + rng.integers(0, P0 - lo + 1)
    classes = ShardChannels(rng.permutation(nodes).astype(np.int64), blocks=blocks)
    P = P0 * k
    U, W, CH, G = expand_units(v, u, w, lane, lo, hi, classes.rank, classes.blocks, P, P0, k, c)
    ln = hi - lo                    # the builder's numpy formula
    rep = np.tile(np.repeat(np.arange(transfers), ln), k)
    x = np.tile(ranges(lo, ln), k)
    j = np.repeat(np.arange(k), int(ln.sum()))
    vv = v[rep]
    assert np.array_equal(U, u[rep]) and np.array_equal(W, w[rep])
    assert np.array_equal(G, vv * P + j * P0 + x)
    assert np.array_equal(CH, lane[rep] * (k * c) + j * c + classes.of(vv, c))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000), gpus=st.integers(1, 8), units=st.integers(1, 50))
def test_first_fresh_matches_numpy(seed, n, gpus, units):
    rng = np.random.default_rng(seed)
    U, W, CH, G = rng.integers(0, gpus, n), rng.integers(0, gpus, n), rng.integers(0, 3, n), rng.integers(0, units, n)
    o = np.lexsort((CH, U, G, W))
    U, W, CH, G = U[o], W[o], CH[o], G[o]
    final = rng.random((gpus, units)) < 0.3
    keep = ~(np.r_[False, (W[1:] == W[:-1]) & (G[1:] == G[:-1])] | final[W, G])
    for got, want in zip(first_fresh(U, W, CH, G, final), (U[keep], W[keep], CH[keep], G[keep])):
        assert np.array_equal(got, want)
