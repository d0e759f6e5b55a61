"""Schedule -> MSCCL XML (paper section 7; reference section 2).

Layout. A shard is cut into P chunks (the lowered grid), so unit (v, k) = chunk k of shard v is MSCCL chunk
g = v * P + k of an N * P chunk loop (`nchunksperloop = N * P`):

    allgather      i: P chunks (own shard)      o: N * P (shard v at v * P)
    reducescatter  i: N * P (all contributions)  o: P (own reduced shard)
    allreduce      i: N * P                      o: N * P

Thread blocks. One per (peer, direction, channel): a send tb (send=w, recv=-1) and a receive tb (send=-1,
recv=u) per arc, on channel `lane * channels + j` (parallel arcs get their own channels, `channels`
splits every transfer in equal parts over that many channels). Sends use `s`; an allgather receive is `r`
straight into the output; a reduce-scatter receive is `rrc` (the receiver's own partial + the message,
written to its accumulator: the output for its own shard or for an allreduce, scratch otherwise).

Dependencies. Ops are generated in one global order (comm step by comm step; within a step gathers,
then each message's send immediately followed by its receive, then scatters), and every op depends on
the last writer of what it reads or writes and on the readers of what it overwrites (RAW, WAR, WAW),
per chunk. Dependencies inside one tb are implied by program order; for each other tb only the latest
step is kept, and a dependency already implied by an earlier explicit one in the same tb is dropped.
The first remaining dependency goes on the op, the others on `nop` steps right before it; `hasdep` is set
on every producer. Every dependency points backwards in the global order and each message's receive
directly follows its send there, so the program runs even with rendezvous (unbuffered) connections.

Semantics. Within a comm step a send reads the value at the start of the step (schedule IR semantics):
when a gpu would overwrite a chunk in the same step as it sends it, the chunk is first copied to scratch.

Consolidation (paper section 7; `consolidate=True`, or "auto" = only when the plain program exceeds the
runtime's steps per thread block): when one (link, step) would need several non-contiguous messages, the
sender gathers the pieces into contiguous scratch and sends once; the receiver receives once into scratch
and scatters with `cpy` (allgather) or `re` (reduce: the scratch piece += the receiver's partial, which
then lives in scratch). The gathers and scatters run on local-copy thread blocks (send=-1, recv=-1),
balanced by load, so the send and receive thread blocks keep about one step per comm step: it cuts
network messages (and their per-message latency) and the steps of the communicating thread blocks, at
the price of local copies and a few extra thread blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule

from .errors import CompileError
from .limits import RuntimeLimits

from .layout import IBUF, NONE, OBUF, SBUF, UnitLayout  # noqa: E402  (re-exported for oneccl)
BUF_NAME = {IBUF: "i", OBUF: "o", SBUF: "s"}


@dataclass
class MOp:
    type: str
    srcbuf: int = NONE
    srcoff: int = -1
    dstbuf: int = NONE
    dstoff: int = -1
    cnt: int = 0
    deps: list = field(default_factory=list)      # [(tb index, op index)]
    hasdep: bool = False
    step: int = 0                                  # comm step (0: before, steps+1: after)


@dataclass
class MTb:
    send: int
    recv: int
    chan: int
    ops: list = field(default_factory=list)
    id: int = -1


class GpuProgram:
    """One gpu's thread blocks plus the per-chunk access history used to derive dependencies."""

    def __init__(self, rank: int):
        self.rank = rank
        self.tbs: list[MTb] = []
        self._tb_of: dict[tuple[int, int, int], int] = {}
        self._writer: dict[tuple[int, int], tuple[int, int]] = {}
        self._readers: dict[tuple[int, int], dict[int, int]] = {}
        self._waited: list[dict[int, int]] = []
        self.scratch = 0
        self.i_chunks = 0
        self.o_chunks = 0

    def tb(self, send: int, recv: int, chan: int, j: int = 0) -> int:
        key = (send, recv, chan, j)
        i = self._tb_of.get(key)
        if i is None:
            i = self._tb_of[key] = len(self.tbs)
            self.tbs.append(MTb(send, recv, chan))
            self._waited.append({})
        return i

    def copy_tb(self, budget: int) -> int:
        """A local-copy thread block (no peers) with fewer than `budget` ops; a new one when all are full."""
        pool = [i for k, i in self._tb_of.items() if k[0] == -1 and k[1] == -1]
        best = min(pool, key=lambda i: (len(self.tbs[i].ops), i), default=None)
        if best is None or len(self.tbs[best].ops) >= budget:
            return self.tb(-1, -1, 0, len(pool))
        return best

    def least_loaded_tb(self) -> int:
        if not self.tbs:
            return self.tb(-1, -1, 0)
        return min(range(len(self.tbs)), key=lambda i: (len(self.tbs[i].ops), i))

    def alloc(self, n: int) -> int:
        off = self.scratch
        self.scratch += n
        return off

    def emit(self, tb: int, op: MOp, reads=(), writes=()) -> tuple[int, int]:
        """Append `op` to thread block `tb`; reads/writes are (buf, off, cnt) ranges."""
        deps: dict[int, int] = {}

        def need(ref):
            if ref is not None and ref[0] != tb and deps.get(ref[0], -1) < ref[1]:
                deps[ref[0]] = ref[1]

        for b, o, c in reads:
            for x in range(o, o + c):
                need(self._writer.get((b, x)))
        for b, o, c in writes:
            for x in range(o, o + c):
                need(self._writer.get((b, x)))
                for r_tb, r_idx in self._readers.get((b, x), {}).items():
                    need((r_tb, r_idx))
        waited = self._waited[tb]
        kept = []
        for t2, i2 in sorted(deps.items()):
            if waited.get(t2, -1) < i2:
                kept.append((t2, i2))
                waited[t2] = i2
                self.tbs[t2].ops[i2].hasdep = True
        op.deps = kept
        ops = self.tbs[tb].ops
        me = (tb, len(ops))
        ops.append(op)
        for b, o, c in reads:
            for x in range(o, o + c):
                rd = self._readers.setdefault((b, x), {})
                rd[tb] = me[1]
        for b, o, c in writes:
            for x in range(o, o + c):
                self._writer[(b, x)] = me
                self._readers.pop((b, x), None)
        return me


def _runs(adv, eq=(), *, max_len: int) -> list[tuple[int, int]]:
    """Split positions 0..n-1 into maximal runs where every `adv` column advances by exactly 1 and every
    `eq` column stays constant, each run at most max_len long. Returns (start, length) pairs."""
    n = adv[0].size
    if n == 0:
        return []
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    for c in adv:
        brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 1
    for c in eq:
        brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 0
    starts = np.flatnonzero(brk).tolist() + [n]
    out = []
    for a, b in zip(starts[:-1], starts[1:]):
        for s in range(a, b, max_len):
            out.append((s, min(max_len, b - s)))
    return out


@dataclass
class _Piece:
    """The units one connection carries in one step, with the sender's locations (start of the step)."""

    u: int
    w: int
    chan: int
    units: np.ndarray            # global unit ids g = v * P + k, in message order
    sbuf: np.ndarray
    soff: np.ndarray


class MscclBuilder:
    """Builds the thread-block programs of every gpu for a lowered schedule."""

    def __init__(self, schedule: Schedule, *, channels: int = 1, inplace: bool = False,
                 consolidate: bool = False, limits: RuntimeLimits):
        self.s = schedule
        self.n = schedule.nodes
        self.P = schedule.grid
        self.coll = schedule.collective
        self.channels = channels
        self.inplace = inplace
        self.consolidate = consolidate
        self.limits = limits
        self.maxcnt = limits.max_count - 1
        n, P = self.n, self.P
        self.gpus = [GpuProgram(r) for r in range(n)]
        L = n * P
        self.layout = UnitLayout(self.coll, n, P, inplace, lambda w, size: self.gpus[w].alloc(size))
        self.locbuf, self.locoff = self.layout.locbuf, self.layout.locoff
        self.home, self.acc = self.layout.home, self.layout.acc
        for gp in self.gpus:
            gp.i_chunks = P if self.coll is Collective.ALLGATHER else L
            gp.o_chunks = P if self.coll is Collective.REDUCESCATTER else L
        self.messages = 0
        self.consolidated = 0
        self.copy_budget = max(1, limits.max_steps // 2)     # ops per copy tb, leaving room for nops

    # ----- locations (services.compiler.layout) -------------------------------------------------------
    def _partial(self, w: int, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rb, ro = self.locbuf[w, units].copy(), self.locoff[w, units].copy()
        if np.any(rb == NONE):
            g = int(units[rb == NONE][0])
            raise CompileError(f"gpu {w} reduces into chunk {g % self.P}/{self.P} of shard {g // self.P} "
                               f"without holding a partial; the schedule is not valid")
        return rb, ro

    def _not_held(self, u: int, g: int, t: int) -> CompileError:
        v, k = divmod(g, self.P)
        return CompileError(f"step {t}: gpu {u} sends chunk {k}/{self.P} of shard {v} before holding it; "
                            f"the schedule is not valid")

    # ----- building ------------------------------------------------------------------------------
    def build(self) -> list[GpuProgram]:
        s = self.s
        for t in range(1, s.steps + 1):
            self._step(t, Op(int(s.ops[t - 1])))
        self._fixups(s.steps + 1)
        return self.gpus

    def _pieces(self, t: int, op: Op) -> list[_Piece]:
        s, P, c = self.s, self.P, self.channels
        sl = s.step_slice(t)
        src, snd, rcv = s.source[sl], s.sender[sl], s.receiver[sl]
        lane, lo, hi = s.lane[sl], s.lo[sl], s.hi[sl]
        if np.any(snd == rcv):
            i = int(np.flatnonzero(snd == rcv)[0])
            raise CompileError(f"step {t}: a transfer over the self-loop of node {snd[i]} carries no data; the "
                               f"schedule is not executable")
        groups: dict[tuple[int, int, int], list[np.ndarray]] = {}
        for v, u, w, ln, a, b in zip(src.tolist(), snd.tolist(), rcv.tolist(), lane.tolist(), lo.tolist(),
                                     hi.tolist()):
            size = (b - a) // c
            for j in range(c):
                a_j = a + j * size
                groups.setdefault((u, w, ln * c + j), []).append(v * P + np.arange(a_j, a_j + size))
        out = []
        for (u, w, ch), parts in sorted(groups.items()):
            units = np.concatenate(parts)
            uniq = np.unique(units)
            if uniq.size != units.size:
                if op is Op.REDUCE:
                    raise CompileError(f"step {t}: node {u} sends the same chunk to {w} twice on one link in a "
                                       f"reduce step; not supported")
                units = uniq
            out.append(_Piece(u, w, ch, units, self.locbuf[u, units].copy(), self.locoff[u, units].copy()))
        return out

    def _step(self, t: int, op: Op) -> None:
        pieces = self._pieces(t, op)
        # a chunk that a gpu sends and overwrites in the same step is first copied to scratch, so the send
        # carries its value at the start of the step
        sent = {(p.u, g) for p in pieces for g in p.units.tolist()}
        written = {(p.w, g) for p in pieces for g in p.units.tolist()}
        snap: dict[tuple[int, int], tuple[int, int]] = {}
        by_gpu: dict[int, list[int]] = {}
        for u, g in sorted(sent & written):
            by_gpu.setdefault(u, []).append(g)
        for u, gs in by_gpu.items():
            ga = np.array(gs, dtype=np.int64)
            b, o = self.locbuf[u, ga], self.locoff[u, ga]
            if np.any(b == NONE):
                raise self._not_held(u, int(ga[b == NONE][0]), t)
            gp = self.gpus[u]
            base = gp.alloc(ga.size)
            tb = gp.least_loaded_tb()
            for a, ln in _runs([o], [b], max_len=self.maxcnt):
                gp.emit(tb, MOp("cpy", int(b[a]), int(o[a]), SBUF, base + a, ln, step=t),
                        reads=[(int(b[a]), int(o[a]), ln)], writes=[(SBUF, base + a, ln)])
            for i, g in enumerate(gs):
                snap[(u, g)] = (SBUF, base + i)
        for p in pieces:
            if snap:
                for i, g in enumerate(p.units.tolist()):
                    if (p.u, g) in snap:
                        p.sbuf[i], p.soff[i] = snap[(p.u, g)]
            if np.any(p.sbuf == NONE):
                raise self._not_held(p.u, int(p.units[p.sbuf == NONE][0]), t)
            order = np.lexsort((p.soff, p.sbuf))            # sender-contiguous message order
            p.units, p.sbuf, p.soff = p.units[order], p.sbuf[order], p.soff[order]

        # plan: direct messages, or (consolidate) gather -> one message -> scatter
        plans = []
        for p in pieces:
            staged_send = staged_recv = False
            if self.consolidate:
                if op is Op.COPY:
                    db, do = self.home(p.w, p.units)
                    recv_runs = _runs([do], [db], max_len=p.units.size)
                    direct = _runs([p.soff, do], [p.sbuf, db], max_len=p.units.size)
                else:                           # partials as of now (the direct path re-reads them)
                    rb, ro = self._partial(p.w, p.units)
                    db, do = self.acc(p.w, p.units)
                    recv_runs = _runs([do, ro], [db, rb], max_len=p.units.size)
                    direct = _runs([p.soff, do, ro], [p.sbuf, db, rb], max_len=p.units.size)
                if len(direct) > 1:
                    staged_send = len(_runs([p.soff], [p.sbuf], max_len=p.units.size)) > 1
                    staged_recv = len(recv_runs) > 1
                    self.consolidated += staged_send or staged_recv
            plans.append([p, staged_send, staged_recv, None, None])
        # pass 1: gathers into contiguous scratch at the senders
        for plan in plans:
            p, staged_send = plan[0], plan[1]
            if staged_send:
                gu = self.gpus[p.u]
                base = gu.alloc(p.units.size)
                ctb = gu.copy_tb(self.copy_budget)          # one copy tb per message: the send waits once
                for a, ln in _runs([p.soff], [p.sbuf], max_len=self.maxcnt):
                    sb, so = int(p.sbuf[a]), int(p.soff[a])
                    gu.emit(ctb, MOp("cpy", sb, so, SBUF, base + a, ln, step=t),
                            reads=[(sb, so, ln)], writes=[(SBUF, base + a, ln)])
                p.sbuf = np.full(p.units.size, SBUF, np.int8)
                p.soff = base + np.arange(p.units.size)
        # pass 2: messages; each send is immediately followed by its receive
        for plan in plans:
            p, _, staged_recv = plan[0], plan[1], plan[2]
            if staged_recv:
                gw = self.gpus[p.w]
                rbase = gw.alloc(p.units.size)
                self._messages(t, p, np.full(p.units.size, SBUF, np.int8), rbase + np.arange(p.units.size),
                               None, None, recv_type="r")
                plan[3] = rbase
            elif op is Op.COPY:
                db, do = self.home(p.w, p.units)
                self._messages(t, p, db, do, None, None, recv_type="r")
                self.locbuf[p.w, p.units], self.locoff[p.w, p.units] = db, do
            else:
                rb, ro = self._partial(p.w, p.units)
                db, do = self.acc(p.w, p.units)
                self._messages(t, p, db, do, rb, ro, recv_type="rrc")
                self.locbuf[p.w, p.units], self.locoff[p.w, p.units] = db, do
        # pass 3: scatters at the receivers
        for p, _, staged_recv, rbase, _ in plans:
            if not staged_recv:
                continue
            gw = self.gpus[p.w]
            ctb = gw.copy_tb(self.copy_budget)
            sidx = rbase + np.arange(p.units.size)
            if op is Op.COPY:
                db, do = self.home(p.w, p.units)
                for a, ln in _runs([do, sidx], [db], max_len=self.maxcnt):
                    gw.emit(ctb, MOp("cpy", SBUF, int(sidx[a]), int(db[a]), int(do[a]), ln, step=t),
                            reads=[(SBUF, int(sidx[a]), ln)], writes=[(int(db[a]), int(do[a]), ln)])
                self.locbuf[p.w, p.units], self.locoff[p.w, p.units] = db, do
            else:
                rb, ro = self._partial(p.w, p.units)
                for a, ln in _runs([ro, sidx], [rb], max_len=self.maxcnt):
                    gw.emit(ctb, MOp("re", int(rb[a]), int(ro[a]), SBUF, int(sidx[a]), ln, step=t),
                            reads=[(int(rb[a]), int(ro[a]), ln), (SBUF, int(sidx[a]), ln)],
                            writes=[(SBUF, int(sidx[a]), ln)])
                self.locbuf[p.w, p.units], self.locoff[p.w, p.units] = SBUF, sidx

    def _messages(self, t: int, p: _Piece, db, do, rb, ro, *, recv_type: str) -> None:
        """Send/receive pairs for piece p: runs contiguous on both sides (and in the receiver's partial)."""
        gu, gw = self.gpus[p.u], self.gpus[p.w]
        stb, rtb = gu.tb(p.w, -1, p.chan), gw.tb(-1, p.u, p.chan)
        adv, eq = [p.soff, do], [p.sbuf, db]
        if rb is not None:
            adv.append(ro)
            eq.append(rb)
        for a, ln in _runs(adv, eq, max_len=self.maxcnt):
            sb, so = int(p.sbuf[a]), int(p.soff[a])
            d_b, d_o = int(db[a]), int(do[a])
            gu.emit(stb, MOp("s", sb, so, NONE, -1, ln, step=t), reads=[(sb, so, ln)])
            if rb is None:
                gw.emit(rtb, MOp(recv_type, NONE, -1, d_b, d_o, ln, step=t), writes=[(d_b, d_o, ln)])
            else:
                r_b, r_o = int(rb[a]), int(ro[a])
                gw.emit(rtb, MOp(recv_type, r_b, r_o, d_b, d_o, ln, step=t), reads=[(r_b, r_o, ln)],
                        writes=[(d_b, d_o, ln)])
            self.messages += 1

    def _fixups(self, t: int) -> None:
        """Copy every result that is not where the collective wants it (e.g. an allgather's own shard)."""
        n, P = self.n, self.P
        for w in range(n):
            units = np.arange(w * P, (w + 1) * P) if self.coll is Collective.REDUCESCATTER else np.arange(n * P)
            b, o = self.locbuf[w, units], self.locoff[w, units]
            if np.any(b == NONE):
                g = int(units[b == NONE][0])
                raise CompileError(f"gpu {w} never receives chunk {g % P}/{P} of shard {g // P}: the schedule "
                                   f"is incomplete")
            hb, ho = self.home(w, units)
            wrong = np.flatnonzero((b != hb) | (o != ho))
            if wrong.size == 0:
                continue
            gp = self.gpus[w]
            tb = gp.least_loaded_tb()
            sb, so, db, do = b[wrong], o[wrong], hb[wrong], ho[wrong]
            for a, ln in _runs([so, do], [sb, db], max_len=self.maxcnt):
                gp.emit(tb, MOp("cpy", int(sb[a]), int(so[a]), int(db[a]), int(do[a]), ln, step=t),
                        reads=[(int(sb[a]), int(so[a]), ln)], writes=[(int(db[a]), int(do[a]), ln)])
            self.locbuf[w, units[wrong]], self.locoff[w, units[wrong]] = db, do


# ---------------------------------------------------------------------------------------------------
# thread-block numbering, nop expansion, limits and XML text
# ---------------------------------------------------------------------------------------------------
@dataclass
class XmlStep:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int


def finalize(gpus: list[GpuProgram]) -> list[list[tuple[MTb, list[XmlStep]]]]:
    """Number thread blocks (sorted by (send, recv, chan) as msccl-tools does), expand extra dependencies
    into nops and resolve dependency references to (tb id, XML step index)."""
    out = []
    for gp in gpus:
        order = sorted(range(len(gp.tbs)), key=lambda i: (gp.tbs[i].send, gp.tbs[i].recv, gp.tbs[i].chan))
        for new, old in enumerate(order):
            gp.tbs[old].id = new
        xml_index: list[list[int]] = []
        for tb in gp.tbs:
            idx, pos = [], 0
            for op in tb.ops:
                pos += max(0, len(op.deps) - 1)
                idx.append(pos)
                pos += 1
            xml_index.append(idx)
        blocks = []
        for old in order:
            tb = gp.tbs[old]
            steps: list[XmlStep] = []
            for op in tb.ops:
                refs = [(gp.tbs[t2].id, xml_index[t2][i2]) for t2, i2 in op.deps]
                for depid, deps in refs[1:]:
                    steps.append(XmlStep(len(steps), "nop", "i", -1, "o", -1, 0, depid, deps, 0))
                depid, deps = refs[0] if refs else (-1, -1)
                steps.append(XmlStep(len(steps), op.type, BUF_NAME.get(op.srcbuf, "i"), op.srcoff,
                                     BUF_NAME.get(op.dstbuf, "o"), op.dstoff, op.cnt, depid, deps,
                                     int(op.hasdep)))
            blocks.append((tb, steps))
        out.append(blocks)
    return out


def check_limits(gpus: list[GpuProgram], blocks, limits: RuntimeLimits, nchannels: int, ngpus: int) -> None:
    """Raise CompileError for the first runtime limit the program exceeds."""
    if nchannels > limits.max_channels:
        raise CompileError(f"the program needs {nchannels} channels; the {limits.dialect} runtime allows at most "
                           f"{limits.max_channels} (use fewer channels)", limit="max_channels", value=nchannels,
                           maximum=limits.max_channels)
    if ngpus > limits.max_subs:
        raise CompileError(f"{ngpus} gpus exceed the XML parser's {limits.max_subs} children per element",
                           limit="max_subs", value=ngpus, maximum=limits.max_subs)
    for gp, bl in zip(gpus, blocks):
        if len(bl) > limits.max_tbs:
            raise CompileError(f"gpu {gp.rank} needs {len(bl)} thread blocks; the runtime allows {limits.max_tbs}",
                               limit="max_tbs", value=len(bl), maximum=limits.max_tbs, gpu=gp.rank)
        senders: dict[int, int] = {}
        receivers: dict[int, int] = {}
        nodes = 1 + ngpus + len(bl)
        for tb, steps in bl:
            if len(steps) > limits.max_steps:
                raise CompileError(
                    f"gpu {gp.rank} thread block {tb.id} (send {tb.send}, recv {tb.recv}, chan {tb.chan}) needs "
                    f"{len(steps)} steps; the {limits.dialect} runtime allows at most {limits.max_steps} per "
                    f"thread block (MSCCL_MAX_NUM_STEPS). Use dialect 'rccl'/'legacy' (256), more channels, "
                    f"fewer chunks or consolidate=True", limit="max_steps", value=len(steps),
                    maximum=limits.max_steps, gpu=gp.rank, tb=tb.id)
            nodes += len(steps)
            if tb.send >= 0:
                senders[tb.chan] = senders.get(tb.chan, 0) + 1
            if tb.recv >= 0:
                receivers[tb.chan] = receivers.get(tb.chan, 0) + 1
        for what, per in (("sending", senders), ("receiving", receivers)):
            for chan, k in per.items():
                if k > limits.max_tbs_per_channel:
                    raise CompileError(f"gpu {gp.rank} has {k} {what} thread blocks on channel {chan}; the runtime "
                                       f"allows {limits.max_tbs_per_channel}", limit="max_tbs_per_channel", value=k,
                                       maximum=limits.max_tbs_per_channel, gpu=gp.rank)
        if nodes >= limits.max_parser_nodes:
            raise CompileError(f"gpu {gp.rank}'s part of the XML has {nodes} parser nodes; the runtime's XML parser "
                               f"is limited to {limits.max_parser_nodes}", limit="max_parser_nodes", value=nodes,
                               maximum=limits.max_parser_nodes, gpu=gp.rank)
        biggest = max(gp.scratch, gp.i_chunks, gp.o_chunks)
        if biggest - 1 > limits.max_offset:
            raise CompileError(f"gpu {gp.rank} needs chunk offsets up to {biggest - 1}; the runtime stores offsets as "
                               f"16-bit integers (max {limits.max_offset})", limit="max_offset", value=biggest - 1,
                               maximum=limits.max_offset, gpu=gp.rank)


def _attr_text(x: str) -> str:
    return "".join(ch if ch.isalnum() or ch in " ,()_.-=+:/" else "_" for ch in x)[:200]


def to_xml(blocks, gpus: list[GpuProgram], *, name: str, coll: str, proto: str, nchannels: int,
           nchunksperloop: int, inplace: bool, min_bytes: int, max_bytes: int, redop: str) -> str:
    """XML text in the form both runtime parsers accept: no declaration, one element per line, attributes on
    one line separated by single spaces, double quotes, space indentation."""
    lines = [f'<algo name="{_attr_text(name)}" proto="{proto}" nchannels="{nchannels}" '
             f'nchunksperloop="{nchunksperloop}" ngpus="{len(gpus)}" coll="{coll}" inplace="{int(inplace)}" '
             f'outofplace="{int(not inplace)}" minBytes="{min_bytes}" maxBytes="{max_bytes}" redop="{redop}">']
    for gp, bl in zip(gpus, blocks):
        lines.append(f'  <gpu id="{gp.rank}" i_chunks="{gp.i_chunks}" o_chunks="{gp.o_chunks}" '
                     f's_chunks="{gp.scratch}">')
        for tb, steps in bl:
            lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for st in steps:
                lines.append(f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                             f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                             f'deps="{st.deps}" hasdep="{st.hasdep}"/>')
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"
