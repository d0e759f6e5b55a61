"""The deadlock proof as compiled kernels (numba): the waits of services.compiler.check.deadlock (its module docstring
states the rules) found in one sweep over the steps (`waits`), and the program run to completion or to a stop
on them (`runs`), both linear in steps and waits. A program that stops goes back to the caller with its waits
as edges (`edges`), which names the cycle (scipy's strongly connected components); the kernels only decide.

`runs` executes the thread blocks as the runtime would, in any order: a tb advances while the step at its
cursor has every wait satisfied and otherwise stops at the first step it waits for (sweeps over the tbs in
order, then a stack of tbs woken when that step completes). Every step completes iff the graph of waits has no
cycle (a step completes iff everything it waits for does; one on or after a cycle never does), and no edge list
is built: the waits of a step are read from a CSR over the steps (its own and its nops' producers, the send a
receive matches, the receive a send waits for).

Connections are properties of thread blocks (a step's sender, receiver and channel are its tb's), so the k-th
send of a connection is found by walking its sending tbs in (connection, tb) order, their sends in row order:
no sort of the steps.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["waits", "runs", "edges", "OK", "UNPUBLISHED", "MISMATCH"]

OK, UNPUBLISHED, MISMATCH = 0, 1, 2


@njit(cache=True, nogil=True)
def _rows_by_tb(tb, n_tbs):
    """CSR start of each thread block's rows (rows sorted by tb)."""
    start = np.zeros(n_tbs + 1, np.int64)
    for r in range(tb.size):
        start[tb[r] + 1] += 1
    for t in range(n_tbs):
        start[t + 1] += start[t]
    return start


@njit(cache=True, nogil=True)
def _connection_rows(tbs, tb_start, kind, is_kind):
    """The rows of kind `is_kind` of the thread blocks `tbs`, in that tb order, each tb's in row order."""
    m = 0
    for t in tbs:
        for r in range(tb_start[t], tb_start[t + 1]):
            if is_kind[kind[r]]:
                m += 1
    rows = np.empty(m, np.int32)
    m = 0
    for t in tbs:
        for r in range(tb_start[t], tb_start[t + 1]):
            if is_kind[kind[r]]:
                rows[m] = r
                m += 1
    return rows


@njit(cache=True, nogil=True)
def _producer(target, rp, pub_start, pub, pub_pos):
    """The first published row of tb `target` at XML index >= rp (binary search); -1: none."""
    if target < 0 or target >= pub_start.size - 1:
        return -1
    lo, hi = pub_start[target], pub_start[target + 1]
    end = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if pub_pos[mid] < rp:
            lo = mid + 1
        else:
            hi = mid
    return pub[lo] if lo < end else -1


@njit(cache=True, nogil=True)
def waits(tb, kind, tb_gpu, gstart, xml_pos, hasdep, dep_first, nop_ptr, nop_tb, nop_pos,
          sends, receives, s_tbs, s_key, r_tbs, r_key):
    """(status, row, dep_start, dep, s_rows, r_rows): per row the CSR of its dependency waits' producers (its own
    first, then its nops', in order), the first published step of the named tb at XML index >= the one named;
    the sends and the receives in (connection, row) order, the k-th of one matching the k-th of the other.
    status UNPUBLISHED: row is the first waiter whose producer never publishes (own dependencies by row, then
    nops by row); MISMATCH: some connection's sends and receives differ in number; then the rest is empty.

    tb: per row (sorted); kind: per row, indexing the bool tables sends / receives; tb_gpu: per tb; gstart: the
    first tb of each gpu; dep_first: per row its own dependency (tb, XML index; -1: none); nop_ptr / nop_tb / nop_pos: its
    nops'; s_tbs / r_tbs: the tbs in (connection, tb) order of their send / receive connection, s_key / r_key
    the connection per tb."""
    n = tb.size
    n_tbs = tb_gpu.size
    e32 = np.zeros(0, np.int32)
    tb_start = _rows_by_tb(tb, n_tbs)
    pub_start = np.zeros(n_tbs + 1, np.int64)
    for r in range(n):
        if hasdep[r] == 1:
            pub_start[tb[r] + 1] += 1
    for t in range(n_tbs):
        pub_start[t + 1] += pub_start[t]
    pub = np.empty(pub_start[n_tbs], np.int64)
    pub_pos = np.empty(pub_start[n_tbs], np.int64)
    k = 0
    for r in range(n):                          # rows are by (tb, XML index)
        if hasdep[r] == 1:
            pub[k] = r
            pub_pos[k] = xml_pos[r]
            k += 1
    dep_start = np.zeros(n + 1, np.int32)
    for r in range(n):
        dep_start[r + 1] = dep_start[r] + (dep_first[r, 0] >= 0) + nop_ptr[r + 1] - nop_ptr[r]
    dep = np.empty(dep_start[n], np.int32)
    first_nop = -1
    for r in range(n):
        g0 = gstart[tb_gpu[tb[r]]]
        q = dep_start[r]
        if dep_first[r, 0] >= 0:
            p = _producer(g0 + dep_first[r, 0], dep_first[r, 1], pub_start, pub, pub_pos)
            if p < 0:
                return UNPUBLISHED, r, e32, e32, e32, e32
            dep[q] = p
            q += 1
        for j in range(nop_ptr[r], nop_ptr[r + 1]):
            p = _producer(g0 + nop_tb[j], nop_pos[j], pub_start, pub, pub_pos)
            if p < 0 and first_nop < 0:
                first_nop = r
            dep[q] = p
            q += 1
    if first_nop >= 0:
        return UNPUBLISHED, first_nop, e32, e32, e32, e32
    s_rows = _connection_rows(s_tbs, tb_start, kind, sends)
    r_rows = _connection_rows(r_tbs, tb_start, kind, receives)
    if s_rows.size != r_rows.size:
        return MISMATCH, -1, e32, e32, e32, e32
    for i in range(s_rows.size):
        if s_key[tb[s_rows[i]]] != r_key[tb[r_rows[i]]]:
            return MISMATCH, -1, e32, e32, e32, e32
    return OK, -1, dep_start, dep, s_rows, r_rows


@njit(cache=True, nogil=True)
def _waits_by_row(tb, tb_start, dep_start, dep, s_rows, r_rows, s_key, fifo):
    """Per row, the CSR (start, rows) of the steps it waits for besides its predecessor in its tb: its own and its
    nops' producers, for a receive its send, for a send the (k - fifo)-th receive or, with fifo 0, what its
    receive waits for (that receive's predecessor and producers)."""
    n = tb.size
    m = s_rows.size
    count = np.zeros(n + 1, np.int32)
    for r in range(n):
        count[r + 1] = dep_start[r + 1] - dep_start[r]
    first = 0
    for i in range(m):
        count[r_rows[i] + 1] += 1
        if fifo > 0:
            if i > 0 and s_key[tb[s_rows[i]]] != s_key[tb[s_rows[i - 1]]]:
                first = i
            if i - first >= fifo:
                count[s_rows[i] + 1] += 1
        else:
            x = r_rows[i]
            count[s_rows[i] + 1] += (x > tb_start[tb[x]]) + dep_start[x + 1] - dep_start[x]
    for r in range(n):
        count[r + 1] += count[r]
    out = np.empty(count[n], np.int32)
    fill = count[:-1].copy()
    for r in range(n):
        for q in range(dep_start[r], dep_start[r + 1]):
            out[fill[r]] = dep[q]
            fill[r] += 1
    first = 0
    for i in range(m):
        s, x = s_rows[i], r_rows[i]
        out[fill[x]] = s
        fill[x] += 1
        if fifo > 0:
            if i > 0 and s_key[tb[s]] != s_key[tb[s_rows[i - 1]]]:
                first = i
            if i - first >= fifo:
                out[fill[s]] = r_rows[i - fifo]
                fill[s] += 1
        else:
            if x > tb_start[tb[x]]:
                out[fill[s]] = x - 1
                fill[s] += 1
            for q in range(dep_start[x], dep_start[x + 1]):
                out[fill[s]] = dep[q]
                fill[s] += 1
    return count, out


@njit(cache=True, nogil=True, inline="always")
def _blocker(r, w_start, w_rows, done):
    """The first step row r waits for (besides its predecessor) that has not completed; -1: none."""
    for q in range(w_start[r], w_start[r + 1]):
        x = w_rows[q]
        if not _is_done(done, x):
            return x
    return -1


@njit(cache=True, nogil=True, inline="always")
def _is_done(done, x):
    """Bit x of `done` (a bit per step keeps the set of completed steps in cache)."""
    return (done[x >> 3] >> (x & 7)) & 1


@njit(cache=True, nogil=True, inline="always")
def _set_done(done, x):
    done[x >> 3] |= np.uint8(1 << (x & 7))


@njit(cache=True, nogil=True)
def runs(tb, n_tbs, dep_start, dep, s_rows, r_rows, s_key, fifo):
    """Whether every step completes (see the module docstring). The thread blocks run in sweeps, in tb order, each
    as far as it can (memory in order; 25 sweeps complete a 2 M-step allreduce at 1024 ranks); once a sweep
    completes fewer steps than a 16th of the tbs, the rest runs from a stack: a blocked tb parks on the step it
    waits for (a list per step, linked through the tbs) until that step completes, so the work stays linear."""
    n = tb.size
    tb_start = _rows_by_tb(tb, n_tbs)
    w_start, w_rows = _waits_by_row(tb, tb_start, dep_start, dep, s_rows, r_rows, s_key, fifo)
    done = np.zeros((n + 7) >> 3, np.uint8)
    cur = tb_start[:-1].copy()
    blocked_on = np.full(n_tbs, -1, np.int64)
    completed = 0
    least = max(1, n_tbs // 16)                 # a sweep's cost is about n_tbs / 16 steps' (its tbs' checks)
    swept = least
    while swept >= least:
        swept = 0
        for t in range(n_tbs):
            x = blocked_on[t]
            if x >= 0 and not _is_done(done, x):
                continue
            end = tb_start[t + 1]
            r = cur[t]
            while r < end:
                x = _blocker(r, w_start, w_rows, done)
                if x >= 0:
                    break
                _set_done(done, r)
                r += 1
            blocked_on[t] = x
            swept += r - cur[t]
            cur[t] = r
        completed += swept
    park = np.full(n, -1, np.int32)
    park_next = np.full(n_tbs, -1, np.int32)
    stack = np.empty(n_tbs, np.int64)
    top = 0
    for t in range(n_tbs):
        if cur[t] < tb_start[t + 1]:
            stack[top] = t
            top += 1
    while top > 0:
        top -= 1
        t = stack[top]
        end = tb_start[t + 1]
        r = cur[t]
        while r < end:
            x = _blocker(r, w_start, w_rows, done)
            if x >= 0:
                park_next[t] = park[x]
                park[x] = t
                break
            _set_done(done, r)
            completed += 1
            w = park[r]
            while w >= 0:
                stack[top] = w
                top += 1
                w = park_next[w]
            park[r] = -1
            r += 1
        cur[t] = r
    return completed == n


@njit(cache=True, nogil=True)
def edges(tb, dep_first, dep_start, dep, s_rows, r_rows, s_key, fifo):
    """(a, b): the waits as edges a[i] -> b[i] ("a completes before b"), grouped and ordered as services.compiler.
    deadlock lists them: program order; dependencies (own ones by row, then nops by row); the k-th receive on
    the k-th send; the k-th send on the (k - fifo)-th receive, or with fifo 0 on what the matching receive waits
    for (its predecessor, then its dependencies in that order)."""
    n = tb.size
    m = s_rows.size
    n_dep = dep.size
    cap = n + 2 * n_dep + 3 * m
    a = np.empty(cap, np.int64)
    b = np.empty(cap, np.int64)
    e = 0
    prev = np.full(n, -1, np.int64)
    for r in range(1, n):                                   # 1. program order
        if tb[r] == tb[r - 1]:
            a[e], b[e] = r - 1, r
            e += 1
            prev[r] = r - 1
    for r in range(n):                                      # 2. dependencies: own, then the nops'
        if dep_first[r, 0] >= 0:
            a[e], b[e] = dep[dep_start[r]], r
            e += 1
    for r in range(n):
        for q in range(dep_start[r] + (dep_first[r, 0] >= 0), dep_start[r + 1]):
            a[e], b[e] = dep[q], r
            e += 1
    for i in range(m):                                      # 3. the k-th receive waits for the k-th send
        a[e], b[e] = s_rows[i], r_rows[i]
        e += 1
    if fifo > 0:                                            # 4. the k-th send waits for the (k - fifo)-th receive
        first = 0
        for i in range(m):
            if i > 0 and s_key[tb[s_rows[i]]] != s_key[tb[s_rows[i - 1]]]:
                first = i
            if i - first >= fifo:
                a[e], b[e] = r_rows[i - fifo], s_rows[i]
                e += 1
    else:                                                   # rendezvous: what the matching receive waits for
        for i in range(m):
            p = prev[r_rows[i]]
            if p >= 0:
                a[e], b[e] = p, s_rows[i]
                e += 1
        at = np.full(n, -1, np.int64)
        for i in range(m):
            at[r_rows[i]] = i
        for r in range(n):
            if dep_first[r, 0] >= 0 and at[r] >= 0:
                a[e], b[e] = dep[dep_start[r]], s_rows[at[r]]
                e += 1
        for r in range(n):
            if at[r] >= 0:
                for q in range(dep_start[r] + (dep_first[r, 0] >= 0), dep_start[r + 1]):
                    a[e], b[e] = dep[q], s_rows[at[r]]
                    e += 1
    return a[:e], b[:e]
