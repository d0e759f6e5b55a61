"""The compiler's small kernels against their numpy / Python definitions: connection ids (conn_kernels), the
program order (order_kernels), the dependency pass's group order (dep_kernels.group_order) and the XML integer
writer (xmltext._int). The whole
pipeline is pinned byte for byte by tests/compiler/test_bytes.py; these cover the inputs the spread does not
reach (large and negative integers, the merge-sort fallback of the group order, the sorted fallback of the
connection ids)."""
from __future__ import annotations

import numpy as np
from numba import njit

from services.compiler.msccl import conn_kernels, order_kernels
from services.compiler.common.arrays import lexorder, unique_inverse
from services.compiler.msccl.dep_kernels import group_order
from services.compiler.text.xmltext import _int


def _keys(g, c, p):
    return g.astype(np.int64) << 32 | c.astype(np.int64) << 16 | p.astype(np.int64)


def test_connections_match_unique_inverse(monkeypatch):
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 5000):
        g = rng.integers(0, 40, n).astype(np.int32)
        c = rng.integers(0, 9, n).astype(np.int32)
        p = rng.integers(0, 500, n).astype(np.int32)
        keys, inv = conn_kernels.connections(g, c, p)
        want_keys, want_inv = unique_inverse(_keys(g, c, p))
        assert np.array_equal(keys, want_keys) and np.array_equal(inv, want_inv)
    monkeypatch.setattr(conn_kernels, "SLOT_TABLE_MAX", 1)          # the sorted fallback agrees too
    keys, inv = conn_kernels.connections(g, c, p)
    assert np.array_equal(keys, want_keys) and np.array_equal(inv, want_inv)


def test_group_order_is_the_stable_lexorder():
    rng = np.random.default_rng(5)
    for n, subs in ((0, 1), (1, 1), (3000, 4), (3000, 5000)):      # 5000 sub values: the merge-sort path
        gpu = np.sort(rng.integers(0, 20, n)).astype(np.int32)
        t = rng.integers(0, 6, n).astype(np.int32)
        phase = rng.integers(0, 4, n).astype(np.int8)
        sub = rng.integers(0, subs, n).astype(np.int32)
        order, gid = group_order(gpu, t, phase, sub)
        assert np.array_equal(order, lexorder((sub, phase, t, gpu)))
        key = np.stack([gpu, t, phase, sub])[:, order]
        new = np.r_[True, (key[:, 1:] != key[:, :-1]).any(axis=0)] if n else np.zeros(0, bool)
        assert np.array_equal(gid, np.cumsum(new) - 1)


@njit(cache=False)
def _write_all(buf, xs):
    p = 0
    for x in xs:
        p = _int(buf, p, x)
        buf[p] = 32
        p += 1
    return p


def test_integer_text_is_str():
    rng = np.random.default_rng(7)
    p10 = 10 ** np.arange(19, dtype=np.int64)
    xs = np.concatenate([np.arange(-1200, 1200), rng.integers(-2 ** 62, 2 ** 62, 2000), p10, p10 - 1, -p10,
                         [2 ** 63 - 1, -2 ** 63 + 1]]).astype(np.int64)
    buf = np.empty(xs.size * 22, np.uint8)
    end = _write_all(buf, xs)
    assert bytes(buf[:end]).decode("ascii") == "".join(f"{int(x)} " for x in xs)


def test_tb_order_is_the_stable_lexorder(monkeypatch):
    rng = np.random.default_rng(9)
    for n in (0, 1, 4000):
        tb = rng.integers(0, 60, n)
        t, phase = rng.integers(0, 5, n).astype(np.int32), rng.integers(0, 4, n).astype(np.int8)
        sub, tie = rng.integers(0, 3, n).astype(np.int32), rng.integers(0, 6, n)
        want = lexorder((tie, sub, phase, t, tb))
        assert np.array_equal(order_kernels.tb_order(tb, t, phase, sub, tie, 60), want)
        monkeypatch.setattr(order_kernels, "INSERTION_MAX", 1 << 30)   # the kernel even where it would sort
        assert np.array_equal(order_kernels.tb_order(tb, t, phase, sub, tie, 60), want)
        monkeypatch.undo()
