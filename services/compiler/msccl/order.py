"""Pass 4 of the MSCCL compiler, order (paper section 7): a tb runs its instructions by (comm step, phase: local
gathers, sends, receives, scatters; contribution rank; then the order the peer sent them), so every
connection's receives follow its sends. `receive_order` gives the last key (the IR's `tie` column,
services.compiler.msccl.ir); the sort itself is services.compiler.msccl.order_kernels.tb_order."""
from __future__ import annotations

import numpy as np

from ..common.arrays import lexorder
from .ir import RECEIVES, S

__all__ = ["receive_order"]


def receive_order(ops: dict, tb: np.ndarray) -> np.ndarray:
    """Per row: the tie-break within (t, phase, sub). Receives follow the order their messages were sent;
    so does everything on one connection, since its sends all sit in one tb."""
    tie = ops["tie"].copy()
    kind, t, phase, sub = ops["kind"], ops["t"], ops["phase"], ops["sub"]
    msg = ops["msg"]
    fwd = ops.get("fwd_msg")
    recv_rows = np.flatnonzero(RECEIVES[kind])
    # the send event of every message: the S row, or the fused row that forwards it
    send_rows = np.flatnonzero(kind == S)
    fused_rows = np.flatnonzero(fwd >= 0) if fwd is not None else np.zeros(0, np.int64)
    ev_msg = np.concatenate([msg[send_rows], fwd[fused_rows] if fwd is not None else msg[:0]])
    ev_row = np.concatenate([send_rows, fused_rows])
    sender_of = np.full(int(msg.max()) + 1 if msg.size else 0, -1, np.int64)
    sender_of[ev_msg] = ev_row
    rt = t[recv_rows]
    span = int(rt.max()) - int(rt.min()) if rt.size else 0
    # stable: by step, each step's rows in table order (numpy's stable sort of 16-bit keys is a radix sort)
    o = np.argsort((rt - rt.min()).astype(np.uint16), kind="stable") if 0 < span < 1 << 16 else lexorder((rt,))
    recv_rows, rt = recv_rows[o], rt[o]
    cuts = np.flatnonzero(np.r_[True, rt[1:] != rt[:-1], True]) if rt.size else np.zeros(1, np.int64)
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        rows = recv_rows[a:b]
        ev = sender_of[msg[rows]]
        # rank of each send event among the step's events: (t, phase, sub, tie, tb) of the sending row
        o = lexorder((tb[ev], tie[ev], sub[ev], phase[ev], t[ev]))
        rank = np.empty(rows.size, np.int64)
        rank[o] = np.arange(rows.size)
        tie[rows] = rank
    return tie
