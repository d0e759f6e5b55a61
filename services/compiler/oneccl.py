"""Schedule -> oneCCL XML for CPU ranks (paper section 7: an interpreter in an extended oneCCL executes
per-rank lists of send / recv / reduce / copy / sync instructions). Format: docs/oneccl-xml.md.

Each comm step t of the schedule becomes, on every rank: post the step's receives, post its sends, `sync`,
then the step's local reductions. Chunk layout is MSCCL's (services.compiler.layout: unit (v, k) = chunk
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

from .arrays import ranges, unique
from .errors import CompileError
from .layout import NONE, SBUF, UnitLayout
from .msccl import runs

__all__ = ["compile_oneccl"]

NAMES = np.array(["in", "out", "tmp"])
COLL = {Collective.ALLGATHER: "allgather", Collective.REDUCESCATTER: "reduce_scatter",
        Collective.ALLREDUCE: "allreduce"}
PH_RECV, PH_SEND, PH_SYNC, PH_REDUCE, PH_COPY = range(5)
BIG = 1 << 30


class _Lines:
    """Instruction text with (rank, step, phase, seq) sort keys."""

    def __init__(self):
        self.text: list[str] = []
        self.keys: list[np.ndarray] = []

    def add(self, rank: np.ndarray, t: int, phase: int, texts: list[str]) -> None:
        n = len(texts)
        if n == 0:
            return
        seq = np.arange(len(self.text), len(self.text) + n, dtype=np.int64)
        self.text.extend(texts)
        self.keys.append(np.stack([np.broadcast_to(np.asarray(rank, np.int64), (n,)),
                                   np.full(n, t, np.int64), np.full(n, phase, np.int64), seq]))

    def per_rank(self, n: int) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(n)]
        if not self.keys:
            return out
        k = np.concatenate(self.keys, axis=1)
        order = np.lexsort((k[3], k[2], k[1], k[0]))
        ranks = k[0][order]
        bounds = np.searchsorted(ranks, np.arange(n + 1))
        text = self.text
        idx = k[3][order].tolist()
        for r in range(n):
            out[r] = [text[i] for i in idx[bounds[r]:bounds[r + 1]]]
        return out


def compile_oneccl(schedule: Schedule, topology: Topology, *, inplace: bool = False, name: str | None = None):
    """(xml text, stats) for a lowered schedule (integer grid P = schedule.grid)."""
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

    lay = UnitLayout(coll, n, P, inplace, alloc)
    lines = _Lines()
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
        o = np.lexsort((U, G, W))                   # by receiver and unit: duplicates and ranks are adjacent
        U, W, G = U[o], W[o], G[o]
        if op is Op.COPY:
            dup = np.r_[False, (W[1:] == W[:-1]) & (G[1:] == G[:-1])]
            keep = ~(dup | lay.final[W, G])
            dropped += int((~keep).sum())
            U, W, G = U[keep], W[keep], G[keep]
            rank = np.zeros(U.size, np.int64)
        else:
            same = np.r_[False, (W[1:] == W[:-1]) & (G[1:] == G[:-1])]
            rank = np.arange(U.size) - np.flatnonzero(~same)[np.cumsum(~same) - 1]
        if U.size == 0:
            continue
        SB, SO = lay.locbuf[U, G], lay.locoff[U, G]
        if np.any(SB == NONE):
            i = int(np.flatnonzero(SB == NONE)[0])
            raise CompileError(f"step {t}: rank {U[i]} sends chunk {G[i] % P}/{P} of shard {G[i] // P} before "
                               f"holding it")
        o = np.lexsort((SO, SB, W, U))
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
        po = np.argsort(pair, kind="stable")
        ps = pair[po]
        first = np.r_[True, ps[1:] != ps[:-1]]
        within = np.arange(ps.size) - np.flatnonzero(first)[np.cumsum(first) - 1]
        tag = np.empty(ps.size, np.int64)
        tag[po] = tags[mu[po], mw[po]] + within
        np.add.at(tags, (mu, mw), 1)
        sb, so, db, do = NAMES[SB[st]], SO[st].tolist(), NAMES[DB[st]], DO[st].tolist()
        mul, mwl, cl, tl = mu.tolist(), mw.tolist(), cnt.tolist(), tag.tolist()
        lines.add(mw, t, PH_RECV, [f'<recv peer="{a}" buf="{b}" off="{c}" cnt="{d}" tag="{e}"/>'
                                   for a, b, c, d, e in zip(mul, db.tolist(), do, cl, tl)])
        lines.add(mu, t, PH_SEND, [f'<send peer="{a}" buf="{b}" off="{c}" cnt="{d}" tag="{e}"/>'
                                   for a, b, c, d, e in zip(mwl, sb.tolist(), so, cl, tl)])
        messages += st.size
        active = unique(np.concatenate([mu, mw]))
        lines.add(active, t, PH_SYNC, [f'<sync step="{t}"/>'] * active.size)
        if op is Op.COPY:
            lay.locbuf[W, G], lay.locoff[W, G] = DB, DO
            lay.final[W, G] = True
            continue
        # reductions after the sync, contribution by contribution (rank order within a unit)
        ro = np.lexsort((G, W, rank))
        Wr, Gr, rk, DOr = W[ro], G[ro], rank[ro], DO[ro]
        for r in unique(rk).tolist():
            m = rk == r
            w_, g_, so_ = Wr[m], Gr[m], DOr[m]
            pb, po_ = lay.locbuf[w_, g_], lay.locoff[w_, g_]
            if np.any(pb == NONE):
                raise CompileError(f"rank {int(w_[pb == NONE][0])} reduces into a chunk it holds no partial of")
            ab, ao = lay.acc(w_, g_)
            o2 = np.lexsort((so_, w_))
            w_, g_, so_, pb, po_, ab, ao = w_[o2], g_[o2], so_[o2], pb[o2], po_[o2], ab[o2], ao[o2]
            st2, c2 = runs([so_, po_, ao], [w_, pb, ab], max_len=BIG)
            lines.add(w_[st2], t, PH_REDUCE, [
                f'<reduce srcbuf="tmp" srcoff="{a}" accbuf="{b}" accoff="{c}" dstbuf="{d}" dstoff="{e}" cnt="{f}"/>'
                for a, b, c, d, e, f in zip(so_[st2].tolist(), NAMES[pb[st2]].tolist(), po_[st2].tolist(),
                                            NAMES[ab[st2]].tolist(), ao[st2].tolist(), c2.tolist())])
            lay.locbuf[w_, g_], lay.locoff[w_, g_] = ab, ao
    # final copies into place
    if coll is Collective.REDUCESCATTER:
        W = np.repeat(np.arange(n), P)
        G = W * P + np.tile(np.arange(P), n)
    else:
        W = np.repeat(np.arange(n), lay.L)
        G = np.tile(np.arange(lay.L), n)
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
        lines.add(W[st], s.steps + 1, PH_COPY, [
            f'<copy srcbuf="{a}" srcoff="{b_}" dstbuf="{c_}" dstoff="{d}" cnt="{e}"/>'
            for a, b_, c_, d, e in zip(NAMES[sb_[st]].tolist(), so_[st].tolist(), NAMES[db_[st]].tolist(),
                                       do_[st].tolist(), c.tolist())])
    title = "".join(ch if ch.isalnum() or ch in " ,()_.-=+:/" else "_"
                    for ch in (name or f"fabricplan {coll.value} {topology.expr}"))[:200]
    out = [f'<oneccl_schedule version="1" name="{title}" coll="{COLL[coll]}" nranks="{n}" nchunks="{lay.L}" '
           f'steps="{s.steps}" inplace="{int(inplace)}">']
    per_rank = lines.per_rank(n)
    for r in range(n):
        out.append(f'  <rank id="{r}" in_chunks="{lay.input_units}" out_chunks="{lay.output_units}" '
                   f'tmp_chunks="{int(tmp[r])}">')
        out.extend("    " + x for x in per_rank[r])
        out.append("  </rank>")
    out.append("</oneccl_schedule>")
    stats = {"max_tb_steps": max((len(x) for x in per_rank), default=0), "messages": messages, "dropped": dropped}
    return "\n".join(out) + "\n", stats
