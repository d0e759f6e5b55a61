"""Schedule -> oneCCL XML for CPU ranks (paper section 7: an interpreter in an extended oneCCL executes
per-rank lists of send / recv / reduce / copy / sync instructions). Format: docs/oneccl-xml.md.

Each comm step t of the schedule becomes, on every rank: post the step's receives, post its sends, `sync`,
then the step's local reductions. Chunk layout is MSCCL's (unit (v, k) = chunk v * P + k of an N * P chunk
loop). Allgather receives go straight to the output; reduce-scatter receives go to a staging area of
`tmp` and are added after the sync (`reduce`: accumulator = staging + the rank's partial), so the sends
of a step always read start-of-step values. A chunk that a rank sends and overwrites in the same copy step
is first copied to `tmp`. Results not in place at the end are copied there.
"""
from __future__ import annotations

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.topology.graph import Topology

from .errors import CompileError
from .layout import IBUF, NONE, OBUF, SBUF, UnitLayout
from .msccl import _runs

NAMES = {IBUF: "in", OBUF: "out", SBUF: "tmp"}
COLL = {Collective.ALLGATHER: "allgather", Collective.REDUCESCATTER: "reduce_scatter",
        Collective.ALLREDUCE: "allreduce"}


class _Rank:
    def __init__(self, r: int):
        self.r = r
        self.instr: list[str] = []
        self.tmp = 0

    def alloc(self, n: int) -> int:
        off = self.tmp
        self.tmp += n
        return off


def compile_oneccl(schedule: Schedule, topology: Topology, *, inplace: bool = False, name: str | None = None):
    """(xml text, stats) for a lowered schedule (integer grid P = schedule.grid)."""
    s = schedule
    n, P = s.nodes, s.grid
    L = n * P
    coll = s.collective
    ranks = [_Rank(r) for r in range(n)]
    layout = UnitLayout(coll, n, P, inplace, lambda w, size: ranks[w].alloc(size))
    locbuf, locoff, home, acc = layout.locbuf, layout.locoff, layout.home, layout.acc

    tags: dict[tuple[int, int], int] = {}
    messages = 0
    for t in range(1, s.steps + 1):
        op = Op(int(s.ops[t - 1]))
        sl = s.step_slice(t)
        if np.any(s.sender[sl] == s.receiver[sl]):
            raise CompileError(f"step {t}: a transfer over a self-loop carries no data; the schedule is not executable")
        groups: dict[tuple[int, int], list[np.ndarray]] = {}
        for v, u, w, a, b in zip(s.source[sl].tolist(), s.sender[sl].tolist(), s.receiver[sl].tolist(),
                                 s.lo[sl].tolist(), s.hi[sl].tolist()):
            groups.setdefault((u, w), []).append(v * P + np.arange(a, b))
        pieces = []
        for (u, w), parts in sorted(groups.items()):
            units = np.unique(np.concatenate(parts)) if op is Op.COPY else np.concatenate(parts)
            pieces.append([u, w, units])
        # snapshots: chunks a rank sends and receives (overwrites) in the same copy step
        snap: dict[tuple[int, int], tuple[int, int]] = {}
        if op is Op.COPY:
            sent = {(u, g) for u, w, units in pieces for g in units.tolist()}
            written = {(w, g) for u, w, units in pieces for g in units.tolist()}
            by_rank: dict[int, list[int]] = {}
            for u, g in sorted(sent & written):
                by_rank.setdefault(u, []).append(g)
            for u, gs in by_rank.items():
                ga = np.array(gs)
                b, o = locbuf[u, ga], locoff[u, ga]
                base = ranks[u].alloc(ga.size)
                for a, ln in _runs([o], [b], max_len=1 << 30):
                    ranks[u].instr.append(_copy(int(b[a]), int(o[a]), SBUF, base + a, ln))
                for i, g in enumerate(gs):
                    snap[(u, g)] = (SBUF, base + i)
        posted_recv: dict[int, list[str]] = {}
        posted_send: dict[int, list[str]] = {}
        reduces: dict[int, list[tuple]] = {}
        written_now: set[tuple[int, int]] = set()
        updates = []
        for u, w, units in pieces:
            sb, so = locbuf[u, units].copy(), locoff[u, units].copy()
            for i, g in enumerate(units.tolist()):
                if (u, g) in snap:
                    sb[i], so[i] = snap[(u, g)]
            if np.any(sb == NONE):
                g = int(units[sb == NONE][0])
                raise CompileError(f"step {t}: rank {u} sends chunk {g % P}/{P} of shard {g // P} before holding it")
            order = np.lexsort((so, sb))
            units, sb, so = units[order], sb[order], so[order]
            if op is Op.COPY:
                db, do = home(w, units)
                dup = np.array([(w, g) in written_now for g in units.tolist()], dtype=bool)
                if dup.any():                       # a second delivery of the same chunk: discard it in tmp
                    base = ranks[w].alloc(int(dup.sum()))
                    db, do = db.copy(), do.copy()
                    db[dup], do[dup] = SBUF, base + np.arange(int(dup.sum()))
                written_now.update((w, g) for g in units.tolist())
                runs = _runs([so, do], [sb, db], max_len=1 << 30)
                keep = ~dup
                updates.append((w, units[keep], db[keep], do[keep]))
            else:
                base = ranks[w].alloc(units.size)
                db, do = np.full(units.size, SBUF, np.int8), base + np.arange(units.size)
                runs = _runs([so], [sb], max_len=1 << 30)
                reduces.setdefault(w, []).append((units, base))
            for a, ln in runs:
                tag = tags.get((u, w), 0)
                tags[(u, w)] = tag + 1
                posted_send.setdefault(u, []).append(
                    f'<send peer="{w}" buf="{NAMES[int(sb[a])]}" off="{int(so[a])}" cnt="{ln}" tag="{tag}"/>')
                posted_recv.setdefault(w, []).append(
                    f'<recv peer="{u}" buf="{NAMES[int(db[a])]}" off="{int(do[a])}" cnt="{ln}" tag="{tag}"/>')
                messages += 1
        for r in ranks:
            r.instr.extend(posted_recv.get(r.r, []))
            r.instr.extend(posted_send.get(r.r, []))
            if r.r in posted_recv or r.r in posted_send:
                r.instr.append(f'<sync step="{t}"/>')
        for w, units, db, do in updates:
            locbuf[w, units], locoff[w, units] = db, do
        for w, items in reduces.items():
            for units, base in items:
                rb, ro = locbuf[w, units].copy(), locoff[w, units].copy()
                if np.any(rb == NONE):
                    raise CompileError(f"rank {w} reduces into a chunk it holds no partial of")
                ab, ao = acc(w, units)
                sidx = base + np.arange(units.size)
                for a, ln in _runs([sidx, ro, ao], [rb, ab], max_len=1 << 30):
                    ranks[w].instr.append(
                        f'<reduce srcbuf="tmp" srcoff="{int(sidx[a])}" accbuf="{NAMES[int(rb[a])]}" '
                        f'accoff="{int(ro[a])}" dstbuf="{NAMES[int(ab[a])]}" dstoff="{int(ao[a])}" cnt="{ln}"/>')
                locbuf[w, units], locoff[w, units] = ab, ao
    # final copies into place
    for w in range(n):
        units = np.arange(w * P, (w + 1) * P) if coll is Collective.REDUCESCATTER else np.arange(L)
        b, o = locbuf[w, units], locoff[w, units]
        if np.any(b == NONE):
            g = int(units[b == NONE][0])
            raise CompileError(f"rank {w} never receives chunk {g % P}/{P} of shard {g // P}: the schedule is "
                               f"incomplete")
        hb, ho = home(w, units)
        wrong = np.flatnonzero((b != hb) | (o != ho))
        sb_, so_, db_, do_ = b[wrong], o[wrong], hb[wrong], ho[wrong]
        for a, ln in _runs([so_, do_], [sb_, db_], max_len=1 << 30):
            ranks[w].instr.append(_copy(int(sb_[a]), int(so_[a]), int(db_[a]), int(do_[a]), ln))
    i_chunks = P if coll is Collective.ALLGATHER else L
    o_chunks = P if coll is Collective.REDUCESCATTER else L
    title = "".join(ch if ch.isalnum() or ch in " ,()_.-=+:/" else "_"
                    for ch in (name or f"fabricplan {coll.value} {topology.expr}"))[:200]
    lines = [f'<oneccl_schedule version="1" name="{title}" coll="{COLL[coll]}" nranks="{n}" nchunks="{L}" '
             f'steps="{s.steps}" inplace="{int(inplace)}">']
    for r in ranks:
        lines.append(f'  <rank id="{r.r}" in_chunks="{i_chunks}" out_chunks="{o_chunks}" tmp_chunks="{r.tmp}">')
        lines.extend("    " + x for x in r.instr)
        lines.append("  </rank>")
    lines.append("</oneccl_schedule>")
    stats = {"threadblocks": None, "max_tb_steps": max(len(r.instr) for r in ranks), "messages": messages,
             "consolidated": False}
    return "\n".join(lines) + "\n", stats


def _copy(sb: int, so: int, db: int, do: int, ln: int) -> str:
    return f'<copy srcbuf="{NAMES[sb]}" srcoff="{so}" dstbuf="{NAMES[db]}" dstoff="{do}" cnt="{ln}"/>'
