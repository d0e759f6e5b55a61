"""Schedule -> oneCCL XML for CPU ranks (paper section 7: an interpreter in an extended oneCCL executes
per-rank lists of send / recv / reduce / copy / sync instructions). Format: docs/oneccl-xml.md.

Each comm step t of the schedule becomes, on every rank: post the step's receives, post its sends, `sync`,
then the step's local reductions. Chunk layout is MSCCL's (services.compiler.lowering.layout: unit (v, k) = chunk
v * P + k of an N * P chunk loop). Allgather receives go straight to the output; a unit the receiver already
holds is not sent again. Reduce-scatter receives go to a staging area of `tmp` and are added after the sync
(`reduce`: accumulator = staging + the rank's partial; several contributions to one unit in a step chain),
so the sends of a step always read start-of-step values. Results not in place at the end are copied there.
Vectorized over each step's transfers: time and memory grow with the transfers.
"""
from __future__ import annotations

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology

from ..common.arrays import lexorder, ranges, run_positions, unique
from ..errors import CompileError
from ..lowering.layout import NONE, SBUF, AlltoallPairs, UnitLayout
from ..msccl.messages import runs
from .xmltext import (ONECCL, ONECCL_FIRST, ONECCL_NAMED, ONECCL_WIDTH, block_bounds, fill_blocks, line_bound,
                      oneccl_ranks)

__all__ = ["compile_oneccl"]

COLL = {Collective.ALLGATHER: "allgather", Collective.REDUCESCATTER: "reduce_scatter",
        Collective.ALLREDUCE: "allreduce", Collective.ALLTOALL: "alltoall"}
PH_RECV, PH_SEND, PH_SYNC, PH_REDUCE, PH_COPY = range(5)
BIG = 1 << 30
RANK_BLOCK_ROWS = 1 << 18        # instructions whose text exists at once while printing (whole ranks)


class _Instructions:
    """Instruction rows (kind and up to six integer fields; buffer fields hold 0/1/2 for in/out/tmp) with
    (rank, step, phase, seq) order keys. Kept numeric and printed rank block by rank block, so memory grows
    with the instructions, not with their text."""

    KINDS = ("recv", "send", "sync", "reduce", "copy")      # xmltext.ONECCL_TEMPLATES, in this order

    def __init__(self):
        self.parts: list[tuple] = []
        self.count = 0

    def add(self, kind: str, rank, t: int, phase: int, *fields) -> None:
        rank = np.asarray(rank, np.int64)
        n = rank.size
        if n == 0:
            return
        vals = np.zeros((6, n), np.int64)
        for i, f in enumerate(fields):
            vals[i] = f
        self.parts.append((self.KINDS.index(kind), rank, t, phase, self.count, vals))
        self.count += n

    def per_rank(self, n: int):
        """(kind, vals, bounds) in printing order: rank r's instructions are rows bounds[r]:bounds[r + 1]."""
        if not self.parts:
            return np.zeros(0, np.int8), np.zeros((6, 0), np.int64), np.zeros(n + 1, np.int64)
        kind = np.concatenate([np.full(p[1].size, p[0], np.int8) for p in self.parts])
        rank = np.concatenate([p[1] for p in self.parts])
        step = np.concatenate([np.full(p[1].size, p[2], np.int64) for p in self.parts])
        phase = np.concatenate([np.full(p[1].size, p[3], np.int8) for p in self.parts])
        vals = np.concatenate([p[5] for p in self.parts], axis=1)
        self.parts.clear()
        order = lexorder((np.arange(rank.size), phase, step, rank))
        del step, phase
        kind, rank, vals = kind[order], rank[order], vals[:, order]
        return kind, vals, np.searchsorted(rank, np.arange(n + 1))


def _rank_blocks(kind: np.ndarray, vals: np.ndarray, bounds: np.ndarray, in_chunks: int, out_chunks: int,
                 tmp: np.ndarray):
    """The <rank> elements as byte blocks of about RANK_BLOCK_ROWS instructions (services.compiler.text.xmltext)."""
    frag = ONECCL
    head = line_bound(frag, (0, 1, 2, 3, 4, 5), 4)
    row = max(line_bound(frag, tuple(range(f, f + w + 1)), int(w))
              for f, w in zip(ONECCL_FIRST.tolist(), ONECCL_WIDTH.tolist()))
    tmp = np.ascontiguousarray(tmp, np.int64)

    def args(a: int, b: int):
        lo, hi = int(bounds[a]), int(bounds[b])
        return ((b - a) * head + (hi - lo) * row,
                (frag.data, frag.off, ONECCL_FIRST, ONECCL_WIDTH, ONECCL_NAMED, a, b, bounds[a:b + 1] - lo,
                 int(in_chunks), int(out_chunks), tmp, kind[lo:hi].astype(np.int64),
                 np.ascontiguousarray(vals[:, lo:hi], np.int64)))

    return fill_blocks(oneccl_ranks, block_bounds(bounds, RANK_BLOCK_ROWS), args)


def compile_oneccl(schedule: Schedule, topology: Topology, *, inplace: bool = False, name: str | None = None):
    """(XML file as ASCII bytes, stats) for a lowered schedule (integer grid P = schedule.grid)."""
    s = schedule
    n, P = s.nodes, s.grid
    coll = s.collective
    tmp = np.zeros(n, dtype=np.int64)

    def alloc(gpus, sizes):
        gpus = np.asarray(gpus, np.int64)
        sizes = np.asarray(sizes, np.int64)
        out = np.empty(gpus.size, np.int64)
        for i, (g, sz) in enumerate(zip(gpus.tolist(), sizes.tolist())):
            out[i] = tmp[g]
            tmp[g] += sz
        return out

    lay = UnitLayout(coll, n, P, inplace, alloc, AlltoallPairs(s) if coll is Collective.ALLTOALL else None)
    prog = _Instructions()
    tags = np.zeros((n, n), dtype=np.int32)
    messages = 0
    dropped = 0
    for t in range(1, s.steps + 1):
        op = Op(int(s.ops[t - 1]))
        sl = s.step_slice(t)
        v, u, w = s.source[sl].astype(np.int64), s.sender[sl].astype(np.int64), s.receiver[sl].astype(np.int64)
        lo, hi = s.lo[sl].astype(np.int64), s.hi[sl].astype(np.int64)
        if np.any(u == w):
            raise CompileError(f"step {t}: a transfer over a self-loop carries no data; the schedule is not executable")
        ln = hi - lo
        total = int(ln.sum())
        if total == 0:
            continue
        rep = np.repeat(np.arange(v.size), ln)
        x = ranges(lo, ln)
        U, W, G = u[rep], w[rep], v[rep] * P + x
        o = lexorder((U, G, W))                   # by receiver and unit: duplicates and ranks are adjacent
        U, W, G = U[o], W[o], G[o]
        if op is Op.COPY:
            dup = np.r_[False, (W[1:] == W[:-1]) & (G[1:] == G[:-1])]
            keep = ~(dup | lay.final[W, G])
            dropped += int((~keep).sum())
            U, W, G = U[keep], W[keep], G[keep]
            rank = np.zeros(U.size, np.int64)
        else:
            same = np.r_[False, (W[1:] == W[:-1]) & (G[1:] == G[:-1])]
            rank = run_positions(~same)
        if U.size == 0:
            continue
        SB, SO = lay.locbuf[U, G], lay.locoff[U, G]
        if np.any(SB == NONE):
            i = int(np.flatnonzero(SB == NONE)[0])
            raise CompileError(f"step {t}: rank {U[i]} sends chunk {G[i] % P}/{P} of shard {G[i] // P} before "
                               f"holding it")
        o = lexorder((SO, SB, W, U))
        U, W, G, rank, SB, SO = U[o], W[o], G[o], rank[o], SB[o], SO[o]
        if op is Op.COPY:
            DB, DO = lay.home(W, G)
        else:
            # contiguous staging in tmp per (sender, receiver) link
            link_brk = np.r_[True, (U[1:] != U[:-1]) | (W[1:] != W[:-1])]
            gid = np.cumsum(link_brk) - 1
            firsts = np.flatnonzero(link_brk)
            sizes = np.diff(np.r_[firsts, U.size])
            bases = alloc(W[firsts], sizes)
            DB = np.full(U.size, SBUF, np.int8)
            DO = (bases[gid] + (np.arange(U.size) - firsts[gid])).astype(np.int64)
        st, cnt = runs([SO, DO], [U, W, SB, DB], max_len=BIG)
        mu, mw = U[st], W[st]
        # tags count the messages of each (sender, receiver) pair
        pair = mu * n + mw
        po = lexorder((pair,))
        ps = pair[po]
        first = np.r_[True, ps[1:] != ps[:-1]]
        within = run_positions(first)
        tag = np.empty(ps.size, np.int64)
        tag[po] = tags[mu[po], mw[po]] + within
        np.add.at(tags, (mu, mw), 1)
        prog.add("recv", mw, t, PH_RECV, mu, DB[st], DO[st], cnt, tag)
        prog.add("send", mu, t, PH_SEND, mw, SB[st], SO[st], cnt, tag)
        messages += st.size
        active = unique(np.concatenate([mu, mw]))
        prog.add("sync", active, t, PH_SYNC, t)
        if op is Op.COPY:
            lay.locbuf[W, G], lay.locoff[W, G] = DB, DO
            lay.final[W, G] = True
            continue
        # reductions after the sync, contribution by contribution (rank order within a unit)
        ro = lexorder((G, W, rank))
        Wr, Gr, rk, DOr = W[ro], G[ro], rank[ro], DO[ro]
        for r in unique(rk).tolist():
            m = rk == r
            w_, g_, so_ = Wr[m], Gr[m], DOr[m]
            pb, po_ = lay.locbuf[w_, g_], lay.locoff[w_, g_]
            if np.any(pb == NONE):
                raise CompileError(f"rank {int(w_[pb == NONE][0])} reduces into a chunk it holds no partial of")
            ab, ao = lay.acc(w_, g_)
            o2 = lexorder((so_, w_))
            w_, g_, so_, pb, po_, ab, ao = w_[o2], g_[o2], so_[o2], pb[o2], po_[o2], ab[o2], ao[o2]
            st2, c2 = runs([so_, po_, ao], [w_, pb, ab], max_len=BIG)
            prog.add("reduce", w_[st2], t, PH_REDUCE, so_[st2], pb[st2], po_[st2], ab[st2], ao[st2], c2)
            lay.locbuf[w_, g_], lay.locoff[w_, g_] = ab, ao
    # final copies into place
    W, G = lay.results()
    b, o = lay.locbuf[W, G], lay.locoff[W, G]
    if np.any(b == NONE):
        i = int(np.flatnonzero(b == NONE)[0])
        raise CompileError(f"rank {W[i]} never receives chunk {G[i] % P}/{P} of shard {G[i] // P}: the schedule is "
                           f"incomplete")
    hb, ho = lay.home(W, G)
    wrong = np.flatnonzero((b != hb) | (o != ho))
    if wrong.size:
        W, sb_, so_, db_, do_ = W[wrong], b[wrong], o[wrong], hb[wrong], ho[wrong]
        st, c = runs([so_, do_], [W, sb_, db_], max_len=BIG)
        prog.add("copy", W[st], s.steps + 1, PH_COPY, sb_[st], so_[st], db_[st], do_[st], c)
    title = "".join(ch if ch.isalnum() or ch in " ,()_.-=+:/" else "_"
                    for ch in (name or f"fabricplan {coll.value} {topology.expr}"))[:200]
    kind, vals, bounds = prog.per_rank(n)
    counts = np.diff(bounds)
    head = (f'<oneccl_schedule version="1" name="{title}" coll="{COLL[coll]}" nranks="{n}" '
            f'nchunks="{lay.chunk_loop}" steps="{s.steps}" inplace="{int(inplace)}">\n').encode()
    out = b"".join([head, *_rank_blocks(kind, vals, bounds, lay.input_units, lay.output_units, tmp),
                    b"</oneccl_schedule>\n"])
    stats = {"max_tb_steps": int(counts.max()) if counts.size else 0, "messages": messages, "dropped": dropped}
    return out, stats
