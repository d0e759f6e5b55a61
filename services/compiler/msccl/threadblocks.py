"""Pass 2 of the MSCCL compiler, thread blocks (paper section 7): every communication row of the IR
(services.compiler.msccl.ir) gets a thread block. Combined (default): one tb per (receive peer, send peer,
channel), pairing each gpu's in-neighbours with its out-neighbours by a maximum-weight matching on the number of
receives that are forwarded unchanged in the next step (so they fuse, pass 3), else one tb per (peer, direction,
channel). Local instructions go onto the gpu's least-loaded tbs (`place_local`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..common.arrays import lexorder, unique, unique_counts
from ..lowering.layout import UnitLayout
from .fusion import fusion_candidates, last_writes
from .ir import RRC, MscclOptions, R, S

__all__ = ["Connections", "assign_thread_blocks", "place_local", "thread_block_counts"]


@dataclass
class Connections:
    """A message table's connections: the distinct (gpu << 32 | channel << 16 | peer) keys of its sends
    (out_key, sorted) and receives (in_key), and per send row (out_rows) and receive row (in_rows) the index of
    its connection (out_of, in_of)."""

    out_key: np.ndarray
    out_rows: np.ndarray
    out_of: np.ndarray
    in_key: np.ndarray
    in_rows: np.ndarray
    in_of: np.ndarray


def thread_block_counts(out_conn: np.ndarray, in_conn: np.ndarray, stride: int,
                        nodes: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """The thread blocks of a program's connections, from the (gpu x stride + channel) key of every distinct
    out- and in-connection (one per peer): per gpu, combined tbs (per channel the larger of its in- and
    out-peers) and separate tbs (their sum); the most sending or receiving tbs on one channel of a gpu; and
    which gpus have a peer at all."""
    gc_o, out_p = unique_counts(out_conn)
    gc_i, in_p = unique_counts(in_conn)
    gc = unique(np.concatenate([gc_o, gc_i]))
    outs, ins = np.zeros(gc.size, np.int64), np.zeros(gc.size, np.int64)
    outs[np.searchsorted(gc, gc_o)] = out_p
    ins[np.searchsorted(gc, gc_i)] = in_p
    g_of = gc // stride
    combined = np.bincount(g_of, weights=np.maximum(ins, outs), minlength=nodes).astype(np.int64)
    separate = np.bincount(g_of, weights=ins + outs, minlength=nodes).astype(np.int64)
    return combined, separate, int(max(outs.max(initial=0), ins.max(initial=0))), np.bincount(g_of, minlength=nodes) > 0


def _match(w_in: np.ndarray, w_out: np.ndarray, weight: np.ndarray, same_peer: np.ndarray):
    """Maximum-weight pairing of in-peers with out-peers (ties: the same peer both ways)."""
    from scipy.optimize import linear_sum_assignment

    cost = -(weight.astype(np.float64) * 4 + same_peer)
    ri, ci = linear_sum_assignment(cost)
    return ri, ci


def assign_thread_blocks(ops: dict, opt: MscclOptions, n: int, layout: UnitLayout, conns: "Connections"):
    """Thread blocks of the communication instructions (and fusion candidates when combined); `conns`: the
    table's connections (Messages.connections)."""
    kind, gpu, chan = ops["kind"], ops["gpu"].astype(np.int64), ops["chan"].astype(np.int64)
    is_s, is_r = kind == S, (kind == R) | (kind == RRC)
    fuse_pairs = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if opt.combined and opt.fuse:
        fuse_pairs = fusion_candidates(ops, is_s, is_r & last_writes(ops, layout, opt.mode == "both"))
    # per (gpu, chan): out-peers from sends, in-peers from receives
    out_key, in_key = conns.out_key, conns.in_key
    tbs: dict[tuple, int] = {}
    tb_of_out: dict[int, int] = {}
    tb_of_in: dict[int, int] = {}

    def new_tb(g, send, recv, ch):
        key = (g, send, recv, ch)
        if key not in tbs:
            tbs[key] = len(tbs)
        return tbs[key]

    if not opt.combined:         # one tb per out-connection, then one per in-connection, in key order
        def keys_of(key, send: bool):
            g, ch, peer = (key >> 32).tolist(), ((key >> 16) & 0xFFFF).tolist(), (key & 0xFFFF).tolist()
            none = [-1] * key.size
            return zip(g, peer, none, ch) if send else zip(g, none, peer, ch)
        tbs.update(zip(keys_of(out_key, True), range(out_key.size)))
        tbs.update(zip(keys_of(in_key, False), range(out_key.size, out_key.size + in_key.size)))
        tb = np.full(kind.size, -1, np.int64)
        tb[conns.out_rows] = conns.out_of
        tb[conns.in_rows] = out_key.size + conns.in_of
        return tb, tbs, fuse_pairs
    else:
        m1, m2 = fuse_pairs
        wkey = (gpu[m1] << 32 | chan[m1] << 16 | ops["rpeer"][m1].astype(np.int64)) if m1.size else np.zeros(0, np.int64)
        okey = ops["speer"][m2].astype(np.int64) if m2.size else np.zeros(0, np.int64)
        pair_w: dict[tuple[int, int], int] = {}
        if m1.size:
            pk, cnt = unique_counts(wkey * 65536 + okey)         # okey is a peer id < 65536
            pair_w = {(int(k) // 65536, int(k) % 65536): int(c) for k, c in zip(pk.tolist(), cnt.tolist())}
        groups: dict[int, tuple[list, list]] = {}
        for k in out_key.tolist():
            groups.setdefault(k >> 16, ([], []))[1].append(k & 0xFFFF)
        for k in in_key.tolist():
            groups.setdefault(k >> 16, ([], []))[0].append(k & 0xFFFF)
        for gc, (ins, outs) in groups.items():
            g, ch = gc >> 16, gc & 0xFFFF
            paired_in, paired_out = set(), set()
            if ins and outs:
                wmat = np.array([[pair_w.get((gc << 16 | i, o), 0) for o in outs] for i in ins])
                same = np.array([[1.0 if i == o else 0.0 for o in outs] for i in ins])
                ri, ci = _match(np.array(ins), np.array(outs), wmat, same)
                for a, b in zip(ri.tolist(), ci.tolist()):
                    i, o = ins[a], outs[b]
                    tb = new_tb(g, o, i, ch)
                    tb_of_in[gc << 16 | i] = tb
                    tb_of_out[gc << 16 | o] = tb
                    paired_in.add(i)
                    paired_out.add(o)
            for i in ins:
                if i not in paired_in:
                    tb_of_in[gc << 16 | i] = new_tb(g, -1, i, ch)
            for o in outs:
                if o not in paired_out:
                    tb_of_out[gc << 16 | o] = new_tb(g, o, -1, ch)
    tb = np.full(kind.size, -1, np.int64)
    if out_key.size:
        tb[conns.out_rows] = np.array([tb_of_out[k] for k in out_key.tolist()], np.int64)[conns.out_of]
    if in_key.size:
        tb[conns.in_rows] = np.array([tb_of_in[k] for k in in_key.tolist()], np.int64)[conns.in_of]
    return tb, tbs, fuse_pairs


def place_local(ops: dict, tb: np.ndarray, tbs: dict, n: int) -> np.ndarray:
    gpu = ops["gpu"]
    load = np.bincount(tb[tb >= 0], minlength=len(tbs)) if (tb >= 0).any() else np.zeros(len(tbs), np.int64)
    per_gpu: dict[int, list[int]] = {}
    for (g, snd, rcv, ch), i in tbs.items():
        per_gpu.setdefault(g, []).append(i)
    local = np.flatnonzero(tb < 0)
    lg = gpu[local]
    o = lexorder((lg,))
    local, lg = local[o], lg[o]
    first = np.r_[True, lg[1:] != lg[:-1]]
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], local.size]
    for a, z in zip(starts.tolist(), ends.tolist()):
        g = int(lg[a])
        cands = per_gpu.get(g)
        if not cands:
            key = (g, -1, -1, 0)
            tbs[key] = len(tbs)
            cands = per_gpu[g] = [tbs[key]]
            load = np.append(load, 0)
        cands = sorted(cands, key=lambda i: (load[i], i))
        k = len(cands)
        rows = local[a:z]
        tb[rows] = np.array(cands, np.int64)[np.arange(rows.size) % k]
    return tb
