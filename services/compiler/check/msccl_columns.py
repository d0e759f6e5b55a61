"""The validation rules of services.compiler.check.msccl_rules (sections 2-3 of its docstring) decided on a file's
integer columns (services.compiler.check.scan) in array operations, for files of millions of steps.

`validate_columns` is a sound acceptance test: it returns the warnings of `msccl_rules.validate` (the same
findings, in the same order) when no rule of `validate` reports an error, and None when some rule may (then the
caller runs `validate` on the file's elements, which words the error). Every condition under which `validate`
appends an error is tested here: the per-step rules in one compiled sweep over the steps (numba), the rest in
array operations.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import Finding
from ..runtimes import RECV_TYPES, SEND_TYPES, RuntimeProfile
from .scan import KIND_NAMES, Columns

__all__ = ["validate_columns", "declares_warning", "cnt0_warning", "too_many_channels", "max_chan_warning",
           "hasdep_warning", "READS_SRC", "WRITES_DST"]

READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
_NOP, _RE = KIND_NAMES.index("nop"), KIND_NAMES.index("re")


def _kinds(names) -> np.ndarray:
    return np.array([k in names for k in KIND_NAMES])


_SENDK, _RECVK, _READK, _WRITEK = (_kinds(s) for s in (SEND_TYPES, RECV_TYPES, READS_SRC, WRITES_DST))


# the warnings of validate, worded once for both ways of checking
def too_many_channels(nchannels: int, P: RuntimeProfile) -> Finding:
    """An error where the runtime reads nchannels (executor, RCCL), a warning on microsoft/msccl."""
    return Finding("limit", f"nchannels={nchannels}; the {P.name} runtime has {P.max_channels} channels")


def declares_warning(g: int, i_chunks: int, o_chunks: int, coll: str, ncpl: int, nat) -> Finding:
    return Finding("bounds", f"gpu {g} declares i_chunks={i_chunks}, o_chunks={o_chunks} but a {coll} of "
                             f"nchunksperloop={ncpl} has {nat[0]} input and {nat[1]} output chunks per rank", gpu=g)


def cnt0_warning(g: int, tb: int, i: int) -> Finding:
    return Finding("structure", f"gpu {g} tb {tb} step {i}: cnt=0 moves no data", gpu=g, tb=tb, step=i)


def max_chan_warning(nchannels: int, max_chan: int) -> Finding:
    return Finding("structure", f"nchannels={nchannels} but the highest channel used is {max_chan}")


def hasdep_warning(g: int, tb: int, i: int) -> Finding:
    return Finding("structure", f"gpu {g} tb {tb} step {i}: hasdep=1 but no step depends on it", gpu=g, tb=tb, step=i)


@njit(cache=True, nogil=True)
def _step_kernel(steps, tbs, tb_step, gpu_tb, size, real, allowed, sendk, recvk, readk, writek, max_count,
                 comm_min, max_offset, max_dep_tb, max_fusion, chain_rule, nop, re):
    """Whether a rule of msccl_rules._tb_rules fails for some step, in one sweep over the thread blocks in
    order: numbering, type, hasdep, peers, cnt, buffer ranges, fusion of consecutive `re` steps with one
    destination (one cnt), the step after nop dependencies (its own dependency) and the dependency's target."""
    for g in range(gpu_tb.size - 1):
        ntb = gpu_tb[g + 1] - gpu_tb[g]
        for t in range(gpu_tb[g], gpu_tb[g + 1]):
            pending = False
            fusing = False
            fkey0 = fkey1 = fkey2 = fcnt = flen = 0
            for r in range(tb_step[t], tb_step[t + 1]):
                k, sb, so, db, do, cnt = steps[1, r], steps[2, r], steps[3, r], steps[4, r], steps[5, r], steps[6, r]
                depid, deps, hasdep = steps[7, r], steps[8, r], steps[9, r]
                if steps[0, r] != r - tb_step[t] or not allowed[k]:
                    return True
                isnop = k == nop
                if (not isnop and hasdep != 0 and hasdep != 1) or (sendk[k] and tbs[t, 1] < 0) or \
                        (recvk[k] and tbs[t, 2] < 0):
                    return True
                if not isnop and (cnt < 0 or cnt >= max_count or (cnt < comm_min and (sendk[k] or recvk[k]))):
                    return True
                if readk[k] and (so < 0 or so + cnt > size[g, sb] or so + cnt > real[g, sb] or so > max_offset):
                    return True
                if writek[k] and (do < 0 or do + cnt > size[g, db] or do + cnt > real[g, db] or do > max_offset):
                    return True
                if k == re:
                    if fusing and fkey0 == db and fkey1 == do and fkey2 == sb and depid == -1:
                        if cnt != fcnt:
                            return True
                        if hasdep != 0 or flen + 1 == max_fusion:
                            fusing = False
                        else:
                            flen += 1
                    elif hasdep != 0 or max_fusion == 1:
                        fusing = False
                    else:
                        fusing = True
                        fkey0, fkey1, fkey2, fcnt, flen = db, do, sb, cnt, 1
                elif not isnop:
                    fusing = False
                if depid == -1 and deps == -1:
                    if isnop or (pending and chain_rule):
                        return True
                    pending = False
                    continue
                pending = isnop
                if depid < 0 or depid >= ntb or depid == tbs[t, 0] or depid > max_dep_tb:
                    return True
                o = gpu_tb[g] + depid
                if deps < 0 or deps >= tb_step[o + 1] - tb_step[o]:
                    return True
                if steps[1, tb_step[o] + deps] == nop or steps[9, tb_step[o] + deps] != 1:
                    return True
    return False


def _gpu_errors(c: Columns, N: int, ncpl: int, coll: str, nchannels: int, P: RuntimeProfile) -> bool:
    """Whether a rule of msccl_rules._gpu_rules (outside the per-step ones) fails for some gpu or thread block."""
    ic, oc = c.gpus[:, 1], c.gpus[:, 2]
    ntb = np.diff(c.gpu_tb)
    steps_of_gpu = c.tb_step[c.gpu_tb[1:]] - c.tb_step[c.gpu_tb[:-1]]
    if (ntb > min(P.max_tbs, P.max_children)).any() or (1 + N + ntb + steps_of_gpu >= P.max_parser_nodes).any():
        return True
    if (c.gpus[:, 1:] - 1 > P.max_offset).any():
        return True
    if P.io_chunks_checked:
        mult_in = N if coll == "allgather" else 1
        mult_out = N if coll == "reducescatter" else 1
        if ((ic > 0) & (ic * mult_in != ncpl) | (oc > 0) & (oc * mult_out != ncpl)).any():
            return True
    g = c.tb_gpu
    _, snd, rcv, chan = c.tbs.T
    for peer in (snd, rcv):
        if ((peer == g) | (peer < -1) | (peer >= N)).any():
            return True
    if ((chan < 0) | (chan >= nchannels) | (chan >= P.max_channels)).any() or \
            (np.diff(c.tb_step) > P.max_steps).any():
        return True
    C = int(chan.max(initial=-1)) + 1                 # channels used (nchannels itself may be any int64)
    for peer in (snd, rcv):
        has = peer >= 0
        if has.any() and np.bincount(g[has] * C + chan[has]).max() > P.max_tbs_per_channel:
            return True
    return False


def _step_errors(c: Columns, nat, P: RuntimeProfile) -> bool:
    """Whether a rule of msccl_rules._tb_rules fails for some step."""
    size = c.gpus[:, 1:]                                      # (G, 3): i, o, s chunks
    real = size.copy()
    if nat is not None:
        real[:, 0] = np.minimum(real[:, 0], nat[0])
        real[:, 1] = np.minimum(real[:, 1], nat[1])
    allowed = np.array([k in P.step_types for k in KIND_NAMES])
    return _step_kernel(c.steps, c.tbs, c.tb_step, c.gpu_tb, np.ascontiguousarray(size), real, allowed, _SENDK,
                        _RECVK, _READK, _WRITEK, P.max_count, P.comm_count_min, P.max_offset, P.max_dep_tb,
                        P.max_reduce_fusion, P.chain_rule, _NOP, _RE)


def _connection_errors(c: Columns, N: int) -> bool:
    """Whether msccl_rules._connections reports: two thread blocks on one connection end, or a connection whose
    sends and receives differ in number or, in order, in cnt."""
    g = c.tb_gpu
    _, snd, rcv, chan = c.tbs.T
    kind, cnt = c.steps[1], c.steps[6]
    stb = c.step_tb
    C = int(chan.max(initial=-1)) + 1
    keys = []
    for peer, src, dst, which in ((snd, g, snd, _SENDK), (rcv, rcv, g, _RECVK)):
        has = peer >= 0
        tkey = (src * N + dst) * C + chan
        if np.unique(tkey[has]).size != int(has.sum()):
            return True
        rows = np.flatnonzero(which[kind] & has[stb])
        k = tkey[stb[rows]]
        o = np.argsort(k, kind="stable")
        keys.append((k[o], cnt[rows[o]]))
    (sk, sc), (rk, rc) = keys
    return not (np.array_equal(sk, rk) and np.array_equal(sc, rc))


def validate_columns(c: Columns, coll: str, ngpus: int, ncpl: int, nchannels: int, nat,
                     P: RuntimeProfile) -> list[Finding] | None:
    """The warnings `msccl_rules.validate` gives the file when it gives no error; None when it may give one.
    O(steps log steps)."""
    N = ngpus
    if c.gpus.shape[0] != N or not np.array_equal(c.gpus[:, 0], np.arange(N)) or N > P.max_children:
        return None
    if (coll in ("allgather", "reducescatter", "alltoall") and nat is None) or \
            (nchannels > P.max_channels and P.reads_outofplace):
        return None
    if not np.array_equal(c.tbs[:, 0], np.arange(c.tbs.shape[0]) - c.gpu_tb[c.tb_gpu]):    # ids 0.. in file order
        return None
    if _gpu_errors(c, N, ncpl, coll, nchannels, P) or _step_errors(c, nat, P) or _connection_errors(c, N):
        return None
    W: list[Finding] = []
    if nchannels > P.max_channels:
        W.append(too_many_channels(nchannels, P))
    # per gpu: its declared-size warning, then its steps' cnt=0 warnings
    ic, oc = c.gpus[:, 1], c.gpus[:, 2]
    wide = np.flatnonzero((ic > nat[0]) | (oc > nat[1])) if nat is not None else np.zeros(0, np.int64)
    kind, cnt = c.steps[1], c.steps[6]
    zero = np.flatnonzero((kind != _NOP) & (cnt == 0))
    stb = c.step_tb
    zg = c.tb_gpu[stb[zero]]
    events = sorted([(int(g), -1) for g in wide] + [(int(g), int(r)) for g, r in zip(zg, zero)])
    for g, r in events:
        if r < 0:
            W.append(declares_warning(g, int(ic[g]), int(oc[g]), coll, ncpl, nat))
        else:
            W.append(cnt0_warning(g, int(c.tbs[stb[r], 0]), int(c.steps[0, r])))
    max_chan = int(c.tbs[:, 3].max()) if c.tbs.shape[0] else -1
    if max_chan >= 0 and max_chan + 1 < nchannels:
        W.append(max_chan_warning(nchannels, max_chan))
    # the first step of every thread block that publishes (hasdep=1) but on which no step waits
    depid, deps, hasdep = c.steps[7], c.steps[8], c.steps[9]
    w = np.flatnonzero(depid >= 0)
    used = np.zeros(c.steps.shape[1], bool)
    used[c.tb_step[c.gpu_tb[c.tb_gpu[stb[w]]] + depid[w]] + deps[w]] = True
    idle = np.flatnonzero((hasdep == 1) & ~used)
    if idle.size:
        first = idle[np.r_[True, stb[idle[1:]] != stb[idle[:-1]]]]
        for r in first:
            t = stb[r]
            W.append(hasdep_warning(int(c.tb_gpu[t]), int(c.tbs[t, 0]), int(c.steps[0, r])))
    return W
