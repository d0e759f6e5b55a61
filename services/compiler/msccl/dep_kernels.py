"""The MSCCL dependency pass as compiled kernels (numba), one sequential sweep per gpu instead of sorts of every
chunk access (services.compiler.msccl.dependencies states the rule).

A gpu's instructions run in phase groups (comm step, phase, contribution rank); within a group the writes take
effect before the reads are recorded. `group_order` orders a batch's ops by gpu and group (a counting sort per gpu,
stable: the table's order within a group) and numbers the groups. `sweep` visits each gpu's groups in order, keeping
per chunk location the last write so far and the reads since the group of that write (a linked list in a pool):
every access of a group's instructions waits for the location's last write in an earlier group (RAW, WAW) and every
write also for the reads listed (WAR); then the group's writes replace the locations' last writes and restart their
read lists, and its reads are appended. The waits of one instruction are reduced as they are found to the latest one
per other thread block. `prune` drops a wait implied by an earlier wait of the same thread block on the same thread
block (program order) and lists the kept ones by (op, waited tb). `xml_positions` turns them into the XML's
numbering: each op preceded by a nop per wait beyond its first (services.compiler.msccl.program.build_program).

Locations are dense per gpu (`dense_keys`): the same index space serves every gpu of a batch, and a stamp per
location (the gpu that last touched it) makes stale entries read as empty, so nothing is cleared between gpus.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .order_kernels import buckets

__all__ = ["dense_keys", "group_order", "prune", "sweep", "xml_positions"]


def dense_keys(starts: list[np.ndarray], cnt: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Location keys of ranges [start, start + cnt) (start -1: no access) made dense: keys are (buffer << 40 |
    offset) or offsets below 2^40, buffer < 4; each buffer's offsets get their own block of the index space.
    Returns the dense starts (-1 kept) and the size of the index space."""
    out, space = _dense_keys(starts[0], starts[1], starts[2], cnt)
    return list(out), int(space)


@njit(cache=True, nogil=True)
def _dense_keys(s0, s1, s2, cnt):
    lo_mask = (np.int64(1) << 40) - 1
    ext = np.zeros(4, np.int64)
    for s in (s0, s1, s2):
        for r in range(s.size):
            if s[r] >= 0:
                hi = s[r] >> 40
                ext[hi] = max(ext[hi], (s[r] & lo_mask) + cnt[r])
    base = np.zeros(4, np.int64)
    for h in range(3):
        base[h + 1] = base[h] + ext[h]
    out = (np.empty(s0.size, np.int64), np.empty(s1.size, np.int64), np.empty(s2.size, np.int64))
    for k in range(3):
        s, o = (s0, s1, s2)[k], out[k]
        for r in range(s.size):
            o[r] = base[s[r] >> 40] + (s[r] & lo_mask) if s[r] >= 0 else -1
    return out, base[3] + ext[3]


@njit(cache=True, nogil=True)
def sweep(order, gid, gpu, tb, idx, cnt, src, rdst, wdst, space, n_tbs, pool_size):
    """Waits (op, dep tb, dep idx) of the ops of a batch of whole gpus, at most one per (op, other tb), the
    latest. order: the ops by (gpu, group), the table order within a group; gid: per position of `order`, a
    number equal within a group and different between consecutive groups (`group_order`);
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
        while b < n and gid[b] == gid[a]:
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
def group_order(gpu, t, phase, sub):
    """(order, gid): the rows (sorted by gpu) stably ordered by (gpu, t, phase, sub), and per position of that
    order a group number, counting up from 0 at every new (gpu, t, phase, sub). A counting sort per gpu on the
    dense key of (t, phase, sub); a gpu with fewer rows than keys is merge-sorted instead."""
    n = gpu.size
    order = np.empty(n, np.int64)
    gid = np.empty(n, np.int64)
    if n == 0:
        return order, gid
    t0, t1, p0, p1, s0, s1 = t[0], t[0], phase[0], phase[0], sub[0], sub[0]
    for r in range(n):
        t0, t1 = min(t0, t[r]), max(t1, t[r])
        p0, p1 = min(p0, phase[r]), max(p1, phase[r])
        s0, s1 = min(s0, sub[r]), max(s1, sub[r])
    pw, sw = np.int64(p1 - p0 + 1), np.int64(s1 - s0 + 1)
    n_keys = (np.int64(t1 - t0) + 1) * pw * sw
    key = np.empty(n, np.int64)
    for r in range(n):
        key[r] = ((np.int64(t[r] - t0) * pw) + np.int64(phase[r] - p0)) * sw + np.int64(sub[r] - s0)
    count = np.zeros(n_keys + 1 if n_keys <= (1 << 22) else 1, np.int64)
    a = 0
    g = -1
    while a < n:
        b = a + 1
        while b < n and gpu[b] == gpu[a]:
            b += 1
        if n_keys <= min(4 * (b - a) + 1024, 1 << 22):
            for r in range(a, b):
                count[key[r] + 1] += 1
            for k in range(n_keys):
                count[k + 1] += count[k]
            for r in range(a, b):
                order[a + count[key[r]]] = r
                count[key[r]] += 1
            count[:] = 0
        else:
            o = np.argsort(key[a:b], kind="mergesort")
            for i in range(b - a):
                order[a + i] = a + o[i]
        for q in range(a, b):
            if q == a or key[order[q]] != key[order[q - 1]]:
                g += 1
            gid[q] = g
        a = b
    return order, gid


@njit(cache=True, nogil=True)
def prune(co, ct, ci, n_ops, tb, n_tbs):
    """The waits to keep, by (op, waited tb): a wait (op co waits for idx ci of tb ct) is kept only if no
    earlier op of the same tb (ops are in program order within a tb) already waits for ct at ci or later.
    Returns indices into co / ct / ci."""
    count, by_op = buckets(co, n_ops)
    seen = np.full(n_tbs, -1, np.int64)
    owner = np.full(n_tbs, -1, np.int64)
    keep = np.empty(co.size, np.int64)
    m = 0
    for r in range(n_ops):
        me = tb[r]
        first = m
        for j in range(count[r], count[r + 1]):
            k = by_op[j]
            t = ct[k]
            if owner[t] != me:
                owner[t] = me
                seen[t] = -1
            if ci[k] > seen[t]:
                seen[t] = ci[k]
                p = m                       # an op's waits are on distinct tbs: insert in tb order
                while p > first and ct[keep[p - 1]] > t:
                    keep[p] = keep[p - 1]
                    p -= 1
                keep[p] = k
                m += 1
    return keep[:m]


@njit(cache=True, nogil=True)
def xml_positions(d_op, d_tb, d_idx, tb, idx, tb_start, tb_local):
    """The XML numbering of a program whose ops are sorted by tb (idx: position within its tb) and whose waits
    (op d_op waits for op d_idx of tb d_tb) are sorted by (op, tb): each op is preceded by a nop per wait
    beyond its first. Returns (xml position per op; (tb, step) of its first wait, -1 when none; the other waits
    as CSR per op: pointer, tb, step; hasdep per op (some step waits for it); steps per tb; the largest waited
    tb-local id, -1 when none)."""
    n = tb.size
    m = d_op.size
    n_tbs = tb_start.size
    n_deps = np.zeros(n, np.int64)
    for k in range(m):
        n_deps[d_op[k]] += 1
    xml_pos = np.empty(n, np.int64)
    steps = np.zeros(n_tbs, np.int64)
    run = 0
    for r in range(n):
        if idx[r] == 0:
            run = 0
        if n_deps[r] > 1:
            run += n_deps[r] - 1
        xml_pos[r] = idx[r] + run
        steps[tb[r]] += 1 + max(n_deps[r] - 1, 0)
    dep_first = np.full((n, 2), -1, np.int64)
    nop_ptr = np.zeros(n + 1, np.int64)
    nop_tb = np.empty(max(m - 1, 0), np.int64)
    nop_pos = np.empty(max(m - 1, 0), np.int64)
    hasdep = np.zeros(n, np.int8)
    max_tb = -1
    j = 0
    k = 0
    for r in range(n):
        first = True
        while k < m and d_op[k] == r:
            row = tb_start[d_tb[k]] + d_idx[k]
            hasdep[row] = 1
            ref = tb_local[d_tb[k]]
            max_tb = max(max_tb, ref)
            if first:
                dep_first[r, 0], dep_first[r, 1] = ref, xml_pos[row]
                first = False
            else:
                nop_tb[j], nop_pos[j] = ref, xml_pos[row]
                j += 1
            k += 1
        nop_ptr[r + 1] = j
    return xml_pos, dep_first, nop_ptr, nop_tb[:j], nop_pos[:j], hasdep, steps, max_tb
