"""The MSCCL dependency pass as compiled kernels (numba), one sequential sweep per gpu instead of sorts of every
chunk access (services.compiler.msccl._dependencies_of states the rule).

A gpu's instructions run in phase groups (comm step, phase, contribution rank); within a group the writes take
effect before the reads are recorded. `sweep` visits each gpu's groups in order, keeping per chunk location
the last write so far and the reads since the group of that write (a linked list in a pool): every access of a
group's instructions waits for the location's last write in an earlier group (RAW, WAW) and every write also
for the reads listed (WAR); then the group's writes replace the locations' last writes and restart their read
lists, and its reads are appended. The waits of one instruction are reduced as they are found to the latest
one per other thread block. `prune` drops a wait implied by an earlier wait of the same thread block on the
same thread block (program order).

Locations are dense per gpu (`dense_keys`): the same index space serves every gpu of a batch, and a stamp per
location (the gpu that last touched it) makes stale entries read as empty, so nothing is cleared between gpus.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["dense_keys", "prune", "sweep"]


def dense_keys(starts: list[np.ndarray], cnt: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Location keys of ranges [start, start + cnt) (start -1: no access) made dense: keys are (buffer << 40 |
    offset) or offsets below 2^40; each buffer's offsets get their own block of the index space. Returns the
    dense starts (-1 kept) and the size of the index space."""
    ext = np.zeros(4, np.int64)
    his, los = [], []
    for s in starts:
        has = s >= 0
        hi, lo = s >> 40, s & ((1 << 40) - 1)
        his.append(hi)
        los.append(lo)
        if has.any():
            np.maximum.at(ext, hi[has], lo[has] + cnt[has])
    base = np.r_[0, np.cumsum(ext)[:-1]]
    out = [np.where(s >= 0, base[np.maximum(hi, 0)] + lo, -1) for s, hi, lo in zip(starts, his, los)]
    return out, int(ext.sum())


@njit(cache=True, nogil=True)
def sweep(order, grp, gpu, tb, idx, cnt, src, rdst, wdst, space, n_tbs, pool_size):
    """Waits (op, dep tb, dep idx) of the ops of a batch of whole gpus, at most one per (op, other tb), the
    latest. order: the ops by (gpu, group), the table order within a group; grp: a key equal within a group;
    src / rdst / wdst: dense start of the range each op reads at its source, reads at its destination, writes
    (-1: none); pool_size: at least one gpu's read chunk accesses."""
    n = order.size
    stamp = np.full(space, -1, np.int64)
    last_w = np.empty(space, np.int64)
    head = np.empty(space, np.int64)
    nxt = np.empty(pool_size, np.int64)
    rop = np.empty(pool_size, np.int64)
    best = np.full(n_tbs, -1, np.int64)
    touched = np.empty(n_tbs, np.int64)
    cap = max(1024, 2 * n)
    out_op = np.empty(cap, np.int64)
    out_tb = np.empty(cap, np.int64)
    out_idx = np.empty(cap, np.int64)
    m = 0
    used = 0
    cur_gpu = -1
    a = 0
    while a < n:
        g = gpu[order[a]]
        if g != cur_gpu:
            cur_gpu = g
            used = 0
        b = a + 1
        while b < n and grp[order[b]] == grp[order[a]] and gpu[order[b]] == g:
            b += 1
        # the group's waits, from the state before it
        for q in range(a, b):
            r = order[q]
            me = tb[r]
            nt = 0
            for which in range(3):
                s = src[r] if which == 0 else (rdst[r] if which == 1 else wdst[r])
                if s < 0:
                    continue
                for loc in range(s, s + cnt[r]):
                    if stamp[loc] != g:
                        continue
                    w = last_w[loc]
                    if w >= 0 and tb[w] != me:
                        t = tb[w]
                        if best[t] < 0:
                            touched[nt] = t
                            nt += 1
                        best[t] = max(best[t], idx[w])
                    if which == 2:
                        e = head[loc]
                        while e >= 0:
                            x = rop[e]
                            t = tb[x]
                            if t != me:
                                if best[t] < 0:
                                    touched[nt] = t
                                    nt += 1
                                best[t] = max(best[t], idx[x])
                            e = nxt[e]
            if m + nt > cap:
                cap = 2 * cap + nt
                o1, o2, o3 = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
                o1[:m], o2[:m], o3[:m] = out_op[:m], out_tb[:m], out_idx[:m]
                out_op, out_tb, out_idx = o1, o2, o3
            for k in range(nt):
                t = touched[k]
                out_op[m], out_tb[m], out_idx[m] = r, t, best[t]
                m += 1
                best[t] = -1
        # the group's writes take effect, then its reads are recorded
        for q in range(a, b):
            r = order[q]
            s = wdst[r]
            if s < 0:
                continue
            for loc in range(s, s + cnt[r]):
                stamp[loc] = g
                last_w[loc] = r
                head[loc] = -1
        for q in range(a, b):
            r = order[q]
            for which in range(2):
                s = src[r] if which == 0 else rdst[r]
                if s < 0:
                    continue
                for loc in range(s, s + cnt[r]):
                    if stamp[loc] != g:
                        stamp[loc] = g
                        last_w[loc] = -1
                        head[loc] = -1
                    nxt[used] = head[loc]
                    rop[used] = r
                    head[loc] = used
                    used += 1
        a = b
    return out_op[:m], out_tb[:m], out_idx[:m]


@njit(cache=True, nogil=True)
def prune(co, ct, ci, n_ops, tb, n_tbs):
    """Keep a wait (op co waits for idx ci of tb ct) only if no earlier op of the same tb (ops are in program
    order within a tb) already waits for ct at ci or later."""
    count = np.zeros(n_ops + 1, np.int64)
    for k in range(co.size):
        count[co[k] + 1] += 1
    for r in range(n_ops):
        count[r + 1] += count[r]
    pos = count[:-1].copy()
    by_op = np.empty(co.size, np.int64)
    for k in range(co.size):
        by_op[pos[co[k]]] = k
        pos[co[k]] += 1
    seen = np.full(n_tbs, -1, np.int64)
    owner = np.full(n_tbs, -1, np.int64)
    keep = np.zeros(co.size, np.bool_)
    for r in range(n_ops):
        me = tb[r]
        for j in range(count[r], count[r + 1]):
            k = by_op[j]
            t = ct[k]
            if owner[t] != me:
                owner[t] = me
                seen[t] = -1
            if ci[k] > seen[t]:
                keep[k] = True
                seen[t] = ci[k]
    return keep
