"""The validation rules of services.compiler.msccl_check (sections 2-3 of its docstring) decided on a file's integer
columns (services.compiler.xmlscan) in array operations, for files of millions of steps.

`validate_columns` is a sound acceptance test: it returns the warnings of `msccl_check.validate` (the same
findings, in the same order) when no rule of `validate` reports an error, and None when some rule may (then the
caller runs `validate` on the file's elements, which words the error). Every condition under which `validate`
appends an error is tested here, over all steps at once; the two rules that depend on the steps before
(consecutive `re` steps the runtime fuses, and the step after nop dependencies) run as one compiled sweep.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .errors import Finding
from .runtimes import RECV_TYPES, SEND_TYPES, RuntimeProfile
from .xmlscan import KIND_NAMES, Columns

__all__ = ["validate_columns", "declares_warning", "cnt0_warning", "channels_warning", "max_chan_warning",
           "hasdep_warning", "READS_SRC", "WRITES_DST"]

READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
_NOP, _RE = KIND_NAMES.index("nop"), KIND_NAMES.index("re")


def _kinds(names) -> np.ndarray:
    return np.array([k in names for k in KIND_NAMES])


_SENDK, _RECVK, _READK, _WRITEK = (_kinds(s) for s in (SEND_TYPES, RECV_TYPES, READS_SRC, WRITES_DST))


# the warnings of validate, worded once for both ways of checking
def channels_warning(nchannels: int, P: RuntimeProfile) -> Finding:
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
def _sequential_errors(kind, cnt, srcbuf, dstbuf, dstoff, depid, deps, hasdep, tb_step, max_fusion, chain_rule,
                       nop, re):
    """Whether some thread block breaks the fusion rule (consecutive `re` steps with one destination share a
    cnt) or the chain rule (the step after nop dependencies carries one), as msccl_check._tb_rules sweeps them."""
    for t in range(tb_step.size - 1):
        pending = False
        fusing = False
        fkey0 = fkey1 = fkey2 = fcnt = flen = 0
        for r in range(tb_step[t], tb_step[t + 1]):
            k = kind[r]
            if k == re:
                same = fusing and fkey0 == dstbuf[r] and fkey1 == dstoff[r] and fkey2 == srcbuf[r]
                if same and depid[r] == -1:
                    if cnt[r] != fcnt:
                        return True
                    if hasdep[r] != 0 or flen + 1 == max_fusion:
                        fusing = False
                    else:
                        fcnt, flen = cnt[r], flen + 1
                elif hasdep[r] != 0 or max_fusion == 1:
                    fusing = False
                else:
                    fusing = True
                    fkey0, fkey1, fkey2, fcnt, flen = dstbuf[r], dstoff[r], srcbuf[r], cnt[r], 1
            elif k != nop:
                fusing = False
            if depid[r] == -1 and deps[r] == -1:
                if k == nop or (pending and chain_rule):
                    return True
                pending = False
                continue
            pending = k == nop
    return False


def _gpu_errors(c: Columns, N: int, ncpl: int, coll: str, nchannels: int, P: RuntimeProfile) -> bool:
    """Whether a rule of msccl_check._gpu_rules (outside the per-step ones) fails for some gpu or thread block."""
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
    for peer in (snd, rcv):
        has = peer >= 0
        if has.any() and np.bincount(g[has] * nchannels + chan[has]).max() > P.max_tbs_per_channel:
            return True
    return False


def _step_errors(c: Columns, nat, P: RuntimeProfile) -> bool:
    """Whether a rule of msccl_check._tb_rules fails for some step."""
    S = c.steps.shape[1]
    if S == 0:
        return False
    s, kind, sbuf, soff, dbuf, doff, cnt, depid, deps, hasdep = c.steps
    stb = c.step_tb
    g = c.tb_gpu[stb]
    if not np.array_equal(s, np.arange(S) - c.tb_step[stb]):
        return True
    allowed = np.array([k in P.step_types for k in KIND_NAMES])
    nop = kind == _NOP
    comm = _SENDK[kind] | _RECVK[kind]
    if (~allowed[kind]).any() or (~nop & (hasdep != 0) & (hasdep != 1)).any():
        return True
    if (_SENDK[kind] & (c.tbs[stb, 1] < 0)).any() or (_RECVK[kind] & (c.tbs[stb, 2] < 0)).any():
        return True
    if (~nop & ((cnt < 0) | (cnt >= P.max_count) | ((cnt < P.comm_count_min) & comm))).any():
        return True
    size = c.gpus[:, 1:]                                      # (G, 3): i, o, s chunks
    real = size.copy()
    if nat is not None:
        real[:, 0] = np.minimum(real[:, 0], nat[0])
        real[:, 1] = np.minimum(real[:, 1], nat[1])
    for used, buf, off in ((_READK[kind], sbuf, soff), (_WRITEK[kind], dbuf, doff)):
        end = off + cnt
        if (used & ((off < 0) | (end > size[g, buf]) | (end > real[g, buf]) | (off > P.max_offset))).any():
            return True
    if _sequential_errors(kind, cnt, sbuf, dbuf, doff, depid, deps, hasdep, c.tb_step, P.max_reduce_fusion,
                          P.chain_rule, _NOP, _RE):
        return True
    w = np.flatnonzero((depid != -1) | (deps != -1))
    d, ntb = depid[w], np.diff(c.gpu_tb)[g[w]]
    if ((d < 0) | (d >= ntb) | (d == c.tbs[stb[w], 0]) | (d > P.max_dep_tb)).any():
        return True
    other = c.gpu_tb[g[w]] + d
    if ((deps[w] < 0) | (deps[w] >= np.diff(c.tb_step)[other])).any():
        return True
    target = c.tb_step[other] + deps[w]
    return bool(((kind[target] == _NOP) | (hasdep[target] != 1)).any())


def _connection_errors(c: Columns, N: int, nchannels: int) -> bool:
    """Whether msccl_check._connections reports: two thread blocks on one connection end, or a connection whose
    sends and receives differ in number or, in order, in cnt."""
    g = c.tb_gpu
    _, snd, rcv, chan = c.tbs.T
    kind, cnt = c.steps[1], c.steps[6]
    stb = c.step_tb
    keys = []
    for peer, src, dst, which in ((snd, g, snd, _SENDK), (rcv, rcv, g, _RECVK)):
        has = peer >= 0
        tkey = (src * N + dst) * nchannels + chan
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
    """The warnings `msccl_check.validate` gives the file when it gives no error; None when it may give one.
    O(steps log steps)."""
    N = ngpus
    if c.gpus.shape[0] != N or not np.array_equal(c.gpus[:, 0], np.arange(N)) or N > P.max_children:
        return None
    if (coll in ("allgather", "reducescatter", "alltoall") and nat is None) or \
            (nchannels > P.max_channels and P.reads_outofplace):
        return None
    if not np.array_equal(c.tbs[:, 0], np.arange(c.tbs.shape[0]) - c.gpu_tb[c.tb_gpu]):    # ids 0.. in file order
        return None
    if _gpu_errors(c, N, ncpl, coll, nchannels, P) or _step_errors(c, nat, P) or _connection_errors(c, N, nchannels):
        return None
    W: list[Finding] = []
    if nchannels > P.max_channels:
        W.append(channels_warning(nchannels, P))
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
