"""Pass 3 of the MSCCL compiler, fusion (the pass msccl-tools calls rcs/rrs/rrcs): a receive whose written range
is exactly the range its tb sends in the next comm step becomes one instruction: `rcs` (copy), `rrcs` (reduce,
result kept), `rrs` (reduce, result read by nothing else and not final). Rows and columns: the IR
(services.compiler.msccl.ir)."""
from __future__ import annotations

import numpy as np

from ..common.arrays import isin_sorted, lexorder, ranges, unique, unique_inverse
from ..lowering.layout import UnitLayout
from .ir import PH_SEND, RCS, READS_DST, READS_SRC, RRC, RRCS, RRS, WRITES_DST, R

__all__ = ["apply_fusion", "fusion_candidates", "last_writes", "rrs_predicate"]


def _access_keys(ops: dict, rows: np.ndarray, bufcol: str, offcol: str, layout: UnitLayout, both: bool):
    """(row per chunk, location key per chunk) of the ranges [off, off + cnt) that `rows` access through the
    given buffer/offset columns; keys are per gpu and alias input/output when the program runs in place too."""
    cnt = ops["cnt"][rows].astype(np.int64)
    rep = np.repeat(rows, cnt)
    off = ranges(ops[offcol][rows], cnt)
    b = np.repeat(ops[bufcol][rows], cnt)
    g = ops["gpu"][rep].astype(np.int64)
    k = layout.alias_key(g, b, off) if both else layout.plain_key(b, off)
    return rep, g << 42 | k


def last_writes(ops: dict, layout: UnitLayout, both: bool) -> np.ndarray:
    """Per row: True if no other instruction writes any chunk it writes before the sends of the next comm
    step (so what it wrote is what those sends read)."""
    kind = ops["kind"]
    rep, key = _access_keys(ops, np.flatnonzero(WRITES_DST[kind]), "dbuf", "doff", layout, both)
    grp = ops["t"][rep].astype(np.int64) * 8 + ops["phase"][rep].astype(np.int64)
    o = lexorder((ops["sub"][rep], grp, key))
    key_o, grp_o = key[o], grp[o]
    nxt = np.r_[grp_o[1:], 1 << 60]
    nxt[np.r_[key_o[1:] != key_o[:-1], True]] = 1 << 60
    limit = (ops["t"][rep[o]].astype(np.int64) + 1) * 8 + PH_SEND
    bad = rep[o][nxt <= limit]
    ok = np.ones(kind.size, bool)
    ok[bad] = False
    return ok


def fusion_candidates(ops: dict, is_s: np.ndarray, is_r: np.ndarray):
    """(receive row, send row) pairs: the send forwards, in the next comm step and on the same gpu and
    channel, exactly the range the receive wrote (and nothing wrote it in between)."""
    r_rows = np.flatnonzero(is_r)
    s_rows = np.flatnonzero(is_s)
    if r_rows.size == 0 or s_rows.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    gpu, chan, cnt = ops["gpu"].astype(np.int64), ops["chan"].astype(np.int64), ops["cnt"].astype(np.int64)
    t = ops["t"].astype(np.int64)
    # (gpu, chan, step) ranked densely, then (buffer, offset, cnt) packed under it
    a_r = gpu[r_rows] << 40 | chan[r_rows] << 20 | (t[r_rows] + 1)
    a_s = gpu[s_rows] << 40 | chan[s_rows] << 20 | t[s_rows]
    ua, inv = unique_inverse(np.concatenate([a_r, a_s]))
    b_r = (ops["dbuf"][r_rows].astype(np.int64) + 1) << 40 | ops["doff"][r_rows].astype(np.int64) << 8 | cnt[r_rows]
    b_s = (ops["sbuf"][s_rows].astype(np.int64) + 1) << 40 | ops["soff"][s_rows].astype(np.int64) << 8 | cnt[s_rows]
    rk = inv[:r_rows.size].astype(np.int64) << 43 | b_r
    sk = inv[r_rows.size:].astype(np.int64) << 43 | b_s
    order = lexorder((sk,))
    sk_sorted = sk[order]
    lo = np.searchsorted(sk_sorted, rk, "left")
    hi = np.searchsorted(sk_sorted, rk, "right")
    c = hi - lo
    m1 = np.repeat(r_rows, c)
    idx = ranges(lo, c)
    m2 = s_rows[order[idx]]
    return m1, m2


def apply_fusion(ops: dict, tb: np.ndarray, pairs, fuse: bool, rrs_ok) -> tuple[dict, np.ndarray, int]:
    """Merge each accepted (receive, send) pair into one instruction at the receive's place."""
    m1, m2 = pairs
    if not fuse or m1.size == 0:
        return ops, tb, 0
    ok = tb[m1] == tb[m2]
    m1, m2 = m1[ok], m2[ok]
    # one partner each (a range is written once per step, so a send has at most one candidate receive)
    for col in (0, 1):
        o = np.argsort((m1, m2)[col], kind="stable")
        key = (m1, m2)[col][o]
        first = o[np.r_[True, key[1:] != key[:-1]]] if key.size else o
        m1, m2 = m1[np.sort(first)], m2[np.sort(first)]
    if m1.size == 0:
        return ops, tb, 0
    kind = ops["kind"].copy()
    rrs = rrs_ok(m1) if m1.size else np.zeros(0, bool)
    kind[m1] = np.where(kind[m1] == R, RCS, np.where(rrs, RRS, RRCS))
    ops = {**ops, "kind": kind}
    ops["speer"] = ops["speer"].copy()
    ops["speer"][m1] = ops["speer"][m2]
    # the forwarded message keeps its id; the fused row now carries it as its send
    ops["fwd_msg"] = np.full(kind.size, -1, np.int64)
    ops["fwd_msg"][m1] = ops["msg"][m2]
    keep = np.ones(kind.size, bool)
    keep[m2] = False
    ops = {c: a[keep] for c, a in ops.items()}
    return ops, tb[keep], int(m1.size)


def rrs_predicate(ops: dict, layout: UnitLayout, both: bool, result_keys: np.ndarray):
    """rrs is legal for a fused reduction whose written range is read by nothing but the forwarding send and
    is not a final result (a later instruction writes it again, or it is scratch)."""
    kind, t = ops["kind"], ops["t"]

    def keys(rows, buf, off):
        return _access_keys(ops, rows, buf, off, layout, both)

    _, rk1 = keys(np.flatnonzero(READS_SRC[kind]), "sbuf", "soff")
    _, rk2 = keys(np.flatnonzero(READS_DST[kind]), "dbuf", "doff")
    read_sorted = np.sort(np.concatenate([rk1, rk2]))
    w_rep, wk = keys(np.flatnonzero(WRITES_DST[kind]), "dbuf", "doff")
    o = lexorder((t[w_rep], wk))
    last = np.r_[wk[o][1:] != wk[o][:-1], True]
    last_key, last_t = wk[o][last], t[w_rep][o][last]

    def pred(m1: np.ndarray) -> np.ndarray:
        rep, k = keys(m1, "dbuf", "doff")
        n_reads = np.searchsorted(read_sorted, k, "right") - np.searchsorted(read_sorted, k, "left")
        j = np.searchsorted(last_key, k)
        written_later = last_t[j] > t[rep]
        final = isin_sorted(k, result_keys) & ~written_later
        bad = (n_reads > 1) | final            # the forwarding send itself reads it once
        ok = np.ones(m1.size, bool)
        order = np.argsort(m1)
        ok[order[np.searchsorted(m1[order], unique(rep[bad]))]] = False
        return ok & (kind[m1] == RRC)
    return pred
