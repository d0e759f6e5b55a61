"""Whether an MSCCL program runs to completion on a runtime's connection buffering, decided without running it.

Every step of a thread block waits only for the completion of other steps (the semantics of the runtimes'
kernels, as services.compiler.check.msccl_simulate.Simulator executes them):

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
each wait for another. Compiled kernels (services.compiler.check.deadlock_kernels) find the waits in one sweep over
the steps and run the thread blocks on them, linear in steps and waits, so the test decides programs far too
large for the simulator (whose vector clocks are quadratic in thread blocks): 2 M steps in about 0.2 s; a cycle
found is named from the graph's strongly connected components (scipy.sparse.csgraph). It proves progress only;
the data a program moves is correct by construction (services.compiler.msccl.program) and checked by the simulator
where it runs.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..common.arrays import lexorder, unique_counts
from ..errors import Finding
from ..msccl.ir import RECEIVES, SENDS, TYPE_NAME, MscclProgram
from .deadlock_kernels import MISMATCH, UNPUBLISHED, edges, runs, waits

__all__ = ["deadlock", "deadlock_of_file", "deadlock_of_columns"]
_NAMES = TYPE_NAME + ("nop",)            # the compiler's instruction kinds, and a file's nops
_SENDS, _RECEIVES = np.r_[SENDS, False], np.r_[RECEIVES, False]      # by kind, a file's nop last
_KIND = {name: i for i, name in enumerate(_NAMES)}


def _where(prog: MscclProgram, row: int) -> tuple[int, int, int, str]:
    t = int(prog.tb_of_op[row])
    return int(prog.tb_gpu[t]), int(prog.tb_id[t]), int(prog.xml_pos[row]), _NAMES[int(prog.ops["kind"][row])]


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def deadlock(prog: MscclProgram, fifo: int) -> Finding | None:
    """None when every step of `prog` completes with connections buffering `fifo` messages (0: rendezvous);
    otherwise a Finding ("deadlock", or "mismatch" when a connection's sends and receives differ in number)
    naming a step that never completes. See the module docstring; the graph is built and tested by compiled
    kernels (services.compiler.check.deadlock_kernels), and a cycle named by its strongly connected components."""
    if fifo < 0:
        raise ValueError(f"fifo must be >= 0, got {fifo}")
    kind = prog.ops["kind"]
    tb = _i64(prog.tb_of_op)
    n_ops = tb.size
    if n_ops == 0:
        return None
    gstart = np.searchsorted(prog.tb_gpu, np.arange(prog.nodes))
    n, t_gpu, t_chan = np.int64(prog.nodes), _i64(prog.tb_gpu), _i64(prog.tb_chan)
    s_key = (t_gpu * n + _i64(prog.tb_send)) * 65536 + t_chan           # a tb's send and receive connections
    r_key = (_i64(prog.tb_recv) * n + t_gpu) * 65536 + t_chan
    ids = np.arange(t_gpu.size)
    ptr, nop_tb, nop_pos = prog.nop_deps
    dep_first = _i64(prog.dep_first)
    status, row, dep_start, dep, s_rows, r_rows = waits(
        tb, np.ascontiguousarray(kind, dtype=np.int8), t_gpu, _i64(gstart), _i64(prog.xml_pos),
        np.ascontiguousarray(prog.hasdep, dtype=np.int8), dep_first,
        _i64(ptr), _i64(nop_tb), _i64(nop_pos), _SENDS, _RECEIVES, lexorder((ids, s_key)), s_key,
        lexorder((ids, r_key)), r_key)
    if status == UNPUBLISHED:
        g, t, p, k = _where(prog, int(row))
        return Finding("deadlock", f"gpu {g} tb {t} step {p} ({k}) waits for a step its producer never publishes",
                       gpu=g, tb=t, step=p)
    if status == MISMATCH:
        snd, rcv = np.flatnonzero(_SENDS[kind]), np.flatnonzero(_RECEIVES[kind])
        sends, receives = (dict(zip(*(c.tolist() for c in unique_counts(key[tb[rows]]))))
                           for key, rows in ((s_key, snd), (r_key, rcv)))
        bad = next(c for c in sorted(sends.keys() | receives.keys()) if sends.get(c, 0) != receives.get(c, 0))
        u, w = divmod(bad // 65536, int(n))
        return Finding("mismatch", f"connection gpu {u} -> gpu {w} channel {bad % 65536} carries "
                                   f"{sends.get(bad, 0)} sends and {receives.get(bad, 0)} receives", gpu=u)
    if runs(tb, t_gpu.size, dep_start, dep, s_rows, r_rows, s_key, int(fifo)):
        return None
    a, b = edges(tb, dep_first, dep_start, dep, s_rows, r_rows, s_key, int(fifo))
    loop = np.flatnonzero(a == b)
    if loop.size:
        g, t, p, k = _where(prog, int(a[loop[0]]))
        return Finding("deadlock", f"deadlock: gpu {g} tb {t} step {p} ({k}) waits for itself", gpu=g, tb=t, step=p)
    graph = coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n_ops, n_ops)).tocsr()
    count, labels = connected_components(graph, directed=True, connection="strong")
    sizes = np.bincount(labels)
    stuck = np.flatnonzero(sizes[labels] > 1)
    g, t, p, k = _where(prog, int(stuck[0]))
    return Finding("deadlock", f"deadlock: {stuck.size} steps wait for each other in a cycle, e.g. gpu {g} tb {t} "
                               f"step {p} ({k}) (the connections buffer {fifo} messages)", gpu=g, tb=t, step=p)


def deadlock_of_file(algo, fifo: int) -> Finding | None:
    """`deadlock` for a parsed and validated MSCCL file (services.compiler.check.msccl_parse.Algo: tb ids dense from 0,
    steps numbered from 0): every <step>, nops included, is a step of the graph (a nop waits for its dependency
    and neither sends nor receives)."""
    gpus = sorted(algo.gpus, key=lambda g: g.id)
    tbs = [(g.id, tb) for g in gpus for tb in sorted(g.tbs, key=lambda t: t.id)]
    steps = [st for _, tb in tbs for st in tb.steps]
    tb_cols = np.array([(g, tb.id, tb.send, tb.recv, tb.chan) for g, tb in tbs], np.int64).reshape(-1, 5)
    rows = [(_KIND[st.type], st.s, st.hasdep, st.depid, st.deps) for st in steps]
    kind, s, hasdep, depid, deps = np.array(rows, np.int64).reshape(-1, 5).T
    return _deadlock_of_columns(algo.ngpus, tb_cols, np.array([len(tb.steps) for _, tb in tbs], np.int64),
                                kind, s, hasdep, depid, deps, fifo)


def deadlock_of_columns(c, ngpus: int, fifo: int) -> Finding | None:
    """`deadlock_of_file` for a validated file's columns (services.compiler.check.scan.Columns: gpus 0.. and their
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
