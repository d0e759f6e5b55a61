"""Pass 5 of the MSCCL compiler, dependencies (paper section 7): every instruction waits for the last writer of
what it reads or writes and for the readers of what it overwrites (RAW, WAR, WAW, per chunk; in-place aliasing
counted when the program must run both ways), one wait per other tb (the latest), dropped when implied by an
earlier wait of the same tb. The first wait goes on the instruction, the others on `nop`s before it; producers
get hasdep=1. Within a comm step the sends read start-of-step values (schedule IR semantics): they come before
the step's receives in every tb. The sweep is services.compiler.msccl.dep_kernels."""
from __future__ import annotations

import numpy as np

from ..common.pool import ordered_map
from ..lowering.layout import UnitLayout
from .dep_kernels import dense_keys, group_order
from .dep_kernels import prune as dep_prune
from .dep_kernels import sweep as dep_sweep
from .ir import READS_DST, READS_SRC, WRITES_DST

__all__ = ["DEP_BATCH_UNITS", "dependencies"]

DEP_BATCH_UNITS = 1 << 22             # chunk accesses whose dependency tables exist at once


def dependencies(ops: dict, tb: np.ndarray, n_tbs: int, layout: UnitLayout, both: bool):
    """(op index, dep tb, dep idx) after pruning, and idx (position among ops) per op, and each tb's first op.

    ops must be sorted by (gpu, tb, t, phase, sub, tie). Dependencies never cross gpus, so gpus are handled in
    batches of about DEP_BATCH_UNITS chunk accesses: memory stays bounded whatever the program's size (COMPILE_THREADS
    batches at a time, services.compiler.common.pool)."""
    n_ops = tb.size
    tb_start = np.searchsorted(tb, np.arange(n_tbs))
    idx = np.arange(n_ops) - tb_start[tb]
    gpu = ops["gpu"]
    gstart = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1]]) if n_ops else np.zeros(0, np.int64)
    gend = np.r_[gstart[1:], n_ops].astype(np.int64)
    work_at_end = np.cumsum(ops["cnt"].astype(np.int64) * 2)[gend - 1] if n_ops else np.zeros(0, np.int64)
    cuts, a, k = [], 0, 0                   # batch [a, b) = whole gpus k0..k-1, at least one
    while a < n_ops:
        base = int(work_at_end[k - 1]) if k else 0
        k = max(int(np.searchsorted(work_at_end, base + DEP_BATCH_UNITS, "right")), k + 1)
        b = int(gend[k - 1])
        cuts.append((a, b))
        a = b
    def batch(cut):
        a, b = cut
        co, ct, ci = _dependencies_of({c: v[a:b] for c, v in ops.items()}, tb[a:b], idx[a:b], layout, both)
        return co + a, ct, ci
    parts = list(ordered_map(batch, cuts))          # batches on COMPILE_THREADS threads (services.compiler.common.pool)
    if not parts:
        return (np.zeros(0, np.int64),) * 3, idx, tb_start
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3)), idx, tb_start


def _dependencies_of(ops: dict, tb: np.ndarray, idx: np.ndarray, layout: UnitLayout, both: bool):
    """(op index, dep tb, dep idx) of the ops of some whole gpus (see `dependencies`).

    Ops run in phase groups (comm step, phase, contribution rank) in order; within a group the writes take
    effect before the reads are recorded. Every chunk access waits for the last write of its location in an
    earlier group (RAW, WAW), and every write for the reads of its location since the last write in an earlier
    group (WAR); of an op's waits on another tb only the latest is kept, and of a tb's waits on another tb only
    those no earlier op of it already implies (services.compiler.msccl.dep_kernels: one sweep per gpu)."""
    kind = ops["kind"]
    n = kind.size
    gpu = ops["gpu"].astype(np.int64)
    cnt = ops["cnt"].astype(np.int64)

    def start(flag: np.ndarray, bufcol: str, offcol: str) -> np.ndarray:
        """The location key of the first chunk of the range each op accesses so (-1: none); keys are affine
        in the offset within one buffer."""
        rows = np.flatnonzero(flag[kind])
        s = np.full(n, -1, np.int64)
        if rows.size:
            b, off = ops[bufcol][rows], ops[offcol][rows]
            s[rows] = layout.alias_key(gpu[rows], b, off) if both else layout.plain_key(b, off)
        return s

    (src, rdst, wdst), space = dense_keys([start(READS_SRC, "sbuf", "soff"), start(READS_DST, "dbuf", "doff"),
                                          start(WRITES_DST, "dbuf", "doff")], cnt)
    order, gid = group_order(gpu, ops["t"], ops["phase"], ops["sub"])   # stable: the table's order within a group
    reads = cnt * ((src >= 0).astype(np.int64) + (rdst >= 0))
    pool = int(np.bincount(gpu, weights=reads).max()) if n else 0
    n_tbs = int(tb.max()) + 1 if n else 0
    tb, idx = tb.astype(np.int64, copy=False), idx.astype(np.int64, copy=False)
    co, ct, ci = dep_sweep(order, gid, gpu, tb, idx, cnt, src, rdst, wdst, max(space, 1), n_tbs, max(pool, 1))
    keep = dep_prune(co, ct, ci, n, tb, n_tbs)           # by (op, waited tb)
    return co[keep], ct[keep], ci[keep]
