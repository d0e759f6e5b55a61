"""Whether an MSCCL program runs to completion on a runtime's connection buffering, decided without running it.

Every step of a thread block waits only for the completion of other steps (the semantics of the runtimes'
kernels, as services.compiler.msccl_check.Simulator executes them):

1. the previous step of its thread block;
2. its dependency (depid, deps), and that of every nop placed before it: the producer thread block's first
   published (hasdep) step at XML index >= deps;
3. a receive (r, rrc, rcs, rrs, rrcs) that is the k-th on its connection (sender, receiver, channel): the k-th
   send on that connection;
4. a send (s, rcs, rrs, rrcs) that is the k-th on its connection, when the connection buffers `fifo` messages:
   the (k - fifo)-th receive; with fifo = 0 (rendezvous) the send completes only when the receiving thread
   block waits at the k-th receive, i.e. after what that receive waits for under 1 and 2.

Each condition, once true, stays true (one thread block sends and one receives per connection; a published
index only grows). Such a system of conjunctive waits runs every step iff the graph "step a must complete
before step b" has no cycle: an acyclic graph is executed in any topological order, and the steps of a cycle
each wait for another. The cycle test is a strongly-connected-components pass (scipy.sparse.csgraph, Tarjan's
algorithm), linear in steps and waits, so it decides programs far too large for the simulator (whose vector
clocks are quadratic in thread blocks): 2 M steps in about a second. It proves progress only; the data a
program moves is correct by construction (services.compiler.msccl) and checked by the simulator where it runs.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from .arrays import lexorder, unique_counts
from .errors import Finding
from .msccl import RECEIVES, SENDS, TYPE_NAME, MscclProgram

__all__ = ["deadlock", "deadlock_of_file", "deadlock_of_columns"]
_NAMES = TYPE_NAME + ("nop",)            # the compiler's instruction kinds, and a file's nops
_SENDS, _RECEIVES = np.r_[SENDS, False], np.r_[RECEIVES, False]
_KIND = {name: i for i, name in enumerate(_NAMES)}


def _waits_on_published(prog: MscclProgram, gstart: np.ndarray, owner: np.ndarray, ref_tb: np.ndarray,
                        ref_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(waiter rows, producer rows) for waits named by (gpu-local tb id, XML index): the producer is the first
    hasdep step of that tb at index >= the one named; -1 where there is none (the wait is never satisfied)."""
    tb = prog.tb_of_op
    pub = np.flatnonzero(prog.hasdep == 1)
    pub_key = (tb[pub].astype(np.int64) << 32) | prog.xml_pos[pub].astype(np.int64)   # sorted: rows are by (tb, pos)
    gpu = prog.tb_gpu[tb[owner]]
    target_tb = gstart[gpu] + ref_tb
    key = (target_tb.astype(np.int64) << 32) | ref_pos.astype(np.int64)
    i = np.searchsorted(pub_key, key)
    ok = i < pub.size
    ok[ok] = (pub_key[i[ok]] >> 32) == target_tb[ok]
    producer = np.where(ok, pub[np.minimum(i, max(pub.size - 1, 0))], -1) if pub.size else np.full(owner.size, -1)
    return owner, producer


def _connection_ranks(rows: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rows sorted by (connection key, row), their keys, and each one's rank on its connection."""
    o = lexorder((rows, key))
    rows, key = rows[o], key[o]
    start = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, bool)
    first = np.flatnonzero(start)
    rank = np.arange(rows.size) - np.repeat(first, np.diff(np.r_[first, rows.size]))
    return rows, key, rank


def _where(prog: MscclProgram, row: int) -> tuple[int, int, int, str]:
    t = int(prog.tb_of_op[row])
    return int(prog.tb_gpu[t]), int(prog.tb_id[t]), int(prog.xml_pos[row]), _NAMES[int(prog.ops["kind"][row])]


def deadlock(prog: MscclProgram, fifo: int) -> Finding | None:
    """None when every step of `prog` completes with connections buffering `fifo` messages (0: rendezvous);
    otherwise a Finding ("deadlock", or "mismatch" when a connection's sends and receives differ in number)
    naming a step that never completes. See the module docstring."""
    if fifo < 0:
        raise ValueError(f"fifo must be >= 0, got {fifo}")
    kind = prog.ops["kind"]
    tb = prog.tb_of_op.astype(np.int64)
    n_ops = tb.size
    if n_ops == 0:
        return None
    gstart = np.searchsorted(prog.tb_gpu, np.arange(prog.nodes))
    gpu = prog.tb_gpu[tb]
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    # 1. program order
    same = np.flatnonzero(tb[1:] == tb[:-1])
    prev = np.full(n_ops, -1, np.int64)
    prev[same + 1] = same
    src.append(same)
    dst.append(same + 1)
    # 2. dependencies (an op's own and its nops')
    has = np.flatnonzero(prog.dep_first[:, 0] >= 0)
    ptr, nop_tb, nop_pos = prog.nop_deps
    nop_owner = np.repeat(np.arange(n_ops), np.diff(ptr))
    waiter, producer = _waits_on_published(prog, gstart, np.r_[has, nop_owner].astype(np.int64),
                                           np.r_[prog.dep_first[has, 0], nop_tb], np.r_[prog.dep_first[has, 1], nop_pos])
    if (producer < 0).any():
        r = int(waiter[np.flatnonzero(producer < 0)[0]])
        g, t, p, k = _where(prog, r)
        return Finding("deadlock", f"gpu {g} tb {t} step {p} ({k}) waits for a step its producer never publishes",
                       gpu=g, tb=t, step=p)
    src.append(producer)
    dst.append(waiter)
    # 3, 4. connections: the k-th send and the k-th receive of (sender, receiver, channel)
    chan = prog.tb_chan[tb].astype(np.int64)
    snd = np.flatnonzero(_SENDS[kind])
    rcv = np.flatnonzero(_RECEIVES[kind])
    n = np.int64(prog.nodes)
    s_rows, s_key, s_rank = _connection_ranks(snd, (gpu[snd] * n + prog.tb_send[tb[snd]]) * 65536 + chan[snd])
    r_rows, r_key, r_rank = _connection_ranks(rcv, (prog.tb_recv[tb[rcv]] * n + gpu[rcv]) * 65536 + chan[rcv])
    if s_rows.size != r_rows.size or not np.array_equal(s_key, r_key):
        sends, receives = (dict(zip(*(a.tolist() for a in unique_counts(k)))) for k in (s_key, r_key))
        bad = next(c for c in sorted(sends.keys() | receives.keys()) if sends.get(c, 0) != receives.get(c, 0))
        u, w = divmod(bad // 65536, int(n))
        return Finding("mismatch", f"connection gpu {u} -> gpu {w} channel {bad % 65536} carries "
                                   f"{sends.get(bad, 0)} sends and {receives.get(bad, 0)} receives", gpu=u)
    src.append(s_rows)                                  # the k-th receive waits for the k-th send
    dst.append(r_rows)
    if fifo > 0:
        k = np.flatnonzero(s_rank >= fifo)              # the k-th send waits for the (k - fifo)-th receive
        src.append(r_rows[k - fifo])
        dst.append(s_rows[k])
    else:                                               # rendezvous: what the matching receive waits for
        p = prev[r_rows]
        src.append(p[p >= 0])
        dst.append(s_rows[p >= 0])
        pos = np.full(n_ops, -1, np.int64)
        pos[r_rows] = np.arange(r_rows.size)
        at = pos[waiter]
        src.append(producer[at >= 0])
        dst.append(s_rows[at[at >= 0]])
    a = np.concatenate(src)
    b = np.concatenate(dst)
    loop = np.flatnonzero(a == b)
    if loop.size:
        g, t, p, k = _where(prog, int(a[loop[0]]))
        return Finding("deadlock", f"deadlock: gpu {g} tb {t} step {p} ({k}) waits for itself", gpu=g, tb=t, step=p)
    graph = coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n_ops, n_ops)).tocsr()
    count, labels = connected_components(graph, directed=True, connection="strong")
    if count == n_ops:
        return None
    sizes = np.bincount(labels)
    stuck = np.flatnonzero(sizes[labels] > 1)
    g, t, p, k = _where(prog, int(stuck[0]))
    return Finding("deadlock", f"deadlock: {stuck.size} steps wait for each other in a cycle, e.g. gpu {g} tb {t} "
                               f"step {p} ({k}) (the connections buffer {fifo} messages)", gpu=g, tb=t, step=p)


def deadlock_of_file(algo, fifo: int) -> Finding | None:
    """`deadlock` for a parsed and validated MSCCL file (services.compiler.msccl_check.Algo: tb ids dense from 0,
    steps numbered from 0): every <step>, nops included, is a step of the graph (a nop waits for its dependency
    and neither sends nor receives)."""
    gpus = sorted(algo.gpus, key=lambda g: g.id)
    tbs = [(g.id, tb) for g in gpus for tb in sorted(g.tbs, key=lambda t: t.id)]
    steps = [st for _, tb in tbs for st in tb.steps]
    tb_cols = np.array([(g, tb.id, tb.send, tb.recv, tb.chan) for g, tb in tbs], np.int64).reshape(-1, 5)
    step_cols = np.array([(_KIND[st.type], st.s, st.hasdep, st.depid, st.deps) for st in steps],
                         np.int64).reshape(-1, 5).T
    return _deadlock_of_columns(algo.ngpus, tb_cols, np.array([len(tb.steps) for _, tb in tbs], np.int64),
                                *step_cols, fifo)


def deadlock_of_columns(c, ngpus: int, fifo: int) -> Finding | None:
    """`deadlock_of_file` for a validated file's columns (services.compiler.xmlscan.Columns: gpus 0.. and their
    thread blocks 0.. in file order)."""
    s, kind, _, _, _, _, _, depid, deps, hasdep = c.steps
    return _deadlock_of_columns(ngpus, np.c_[c.tb_gpu, c.tbs], np.diff(c.tb_step), kind, s, hasdep, depid, deps,
                                fifo)


def _deadlock_of_columns(ngpus: int, tb_cols: np.ndarray, counts: np.ndarray, kind, s, hasdep, depid, deps,
                         fifo: int) -> Finding | None:
    """tb_cols: (gpu, id, send, recv, chan) per thread block, sorted by (gpu, id); counts: steps per thread
    block; kind (as _NAMES numbers it), s, hasdep, depid, deps: one entry per step, by thread block."""
    has = depid >= 0
    prog = SimpleNamespace(
        nodes=ngpus, ops={"kind": kind}, tb_of_op=np.repeat(np.arange(tb_cols.shape[0]), counts),
        tb_gpu=tb_cols[:, 0], tb_id=tb_cols[:, 1], tb_send=tb_cols[:, 2], tb_recv=tb_cols[:, 3],
        tb_chan=tb_cols[:, 4], xml_pos=s, hasdep=hasdep.astype(np.int8),
        dep_first=np.c_[np.where(has, depid, -1), np.where(has, deps, -1)],
        nop_deps=(np.zeros(kind.size + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)))
    return deadlock(prog, fifo)
