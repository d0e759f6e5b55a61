"""Schedule -> MSCCL XML (paper section 7; reference section 2), as passes over an instruction table.

Layout (services.compiler.lower.layout). A shard is cut into P = P0 x instances units; unit g = v*P + j*P0 + x.
`nchunksperloop = N * P`; allgather input P / output N*P, reduce-scatter input N*P / output P, allreduce N*P.

1. Messages. Comm step by comm step, every transfer of the schedule becomes its units; a channel per unit
   (lane x instances x channels: parallel arcs get their own channels, instance j its own, and `channels`
   spreads a link's shards over that many channels by the shard's class, services.compiler.lower.channels, so a
   forwarded piece keeps its channel; or, Messages.by_message, the messages formed on one channel are dealt
   over the channels round robin per connection);
   units a receiver already holds are dropped (a copy step's redundant delivery); runs contiguous at the
   sender, the receiver and (reductions) the receiver's partial become one message of at most
   MSCCL_MAX_COUNT - 1 chunks: a send `s` at the sender and a receive at the receiver (`r` into the home for
   copies, `rrc` = partial + message into the accumulator for reductions). Several contributions to one
   unit in one step are ranked; the first reads the partial where it is, the others the accumulator.
   Consolidation (optional): a link's non-contiguous pieces of one step are gathered into contiguous scratch
   (`cpy`), sent once, received into scratch and scattered (`cpy`, or `re` for reductions).
   Results not at their home at the end are copied there.
2. Thread blocks. Combined (default): one tb per (receive peer, send peer, channel), pairing each gpu's
   in-neighbours with its out-neighbours by a maximum-weight matching on the number of receives that are
   forwarded unchanged in the next step (so they fuse), else one tb per (peer, direction, channel).
3. Fusion (the pass msccl-tools calls rcs/rrs/rrcs): a receive whose written range is exactly the range
   its tb sends in the next comm step becomes one instruction: `rcs` (copy), `rrcs` (reduce, result kept),
   `rrs` (reduce, result read by nothing else and not final).
4. Order. A tb runs its instructions by (comm step, phase: local gathers, sends, receives, scatters;
   contribution rank; then the order the peer sent them). Every connection's receives follow its sends.
5. Dependencies. Every instruction waits for the last writer of what it reads or writes and for the
   readers of what it overwrites (RAW, WAR, WAW, per chunk; in-place aliasing counted when the program
   must run both ways), one wait per other tb (the latest), dropped when implied by an earlier wait of the
   same tb. The first wait goes on the instruction, the others on `nop`s before it; producers get hasdep=1.
   Within a comm step the sends read start-of-step values (schedule IR semantics): they come before the
   step's receives in every tb.

Everything is numpy over the whole instruction table: time and memory grow with the transfers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule

from ..common.arrays import (isin_sorted, lexorder, lexsorted, ranges, run_positions, unique, unique_counts,
                             unique_inverse)
from ..lower.channels import ShardChannels, shard_classes
from .conn_kernels import connections as connection_ids
from .order_kernels import tb_order
from .dep_kernels import dense_keys, group_order, xml_positions
from .dep_kernels import prune as dep_prune
from .dep_kernels import sweep as dep_sweep
from ..errors import CompileError
from ..lower.layout import IBUF, NONE, OBUF, SBUF, AlltoallPairs, UnitLayout, alltoall_position
from .message_kernels import expand_units, first_fresh, mark_breaks, run_starts
from ..common.pool import ordered_map
from ..runtimes import RuntimeProfile
from ..text.xmltext import MSCCL as MSCCL_TEXT
from ..text.xmltext import block_bounds, fill_blocks, line_bound, msccl_gpus

__all__ = ["Messages", "MscclOptions", "MscclProgram", "XmlStep", "build_messages", "build_program", "runs", "to_xml",
           "xml_chunks"]

BUF_NAME = {IBUF: "i", OBUF: "o", SBUF: "s", NONE: "i"}
S, R, RRC, CPY, RE, RCS, RRCS, RRS = range(8)
TYPE_NAME = ("s", "r", "rrc", "cpy", "re", "rcs", "rrcs", "rrs")
_READS_SRC = np.array([1, 0, 1, 1, 1, 0, 1, 1], dtype=bool)
_WRITES_DST = np.array([0, 1, 1, 1, 1, 1, 1, 0], dtype=bool)
_READS_DST = np.array([0, 0, 0, 0, 1, 0, 0, 0], dtype=bool)
SENDS = np.array([1, 0, 0, 0, 0, 1, 1, 1], dtype=bool)
RECEIVES = np.array([0, 1, 1, 0, 0, 1, 1, 1], dtype=bool)
PH_LOCAL, PH_SEND, PH_RECV, PH_SCATTER = 0, 1, 2, 3


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


@dataclass(frozen=True)
class MscclOptions:
    """instances: every transfer split in that many parts, each on its own channels (P x instances);
    channels: channels a link's messages are spread over (by shard; by message when by_message); mode: "out",
    "in" or "both" (one program that runs in and out of place); consolidate: gather/scatter through scratch;
    combined: one tb per (receive peer, send peer, channel) instead of one per direction; fuse: rcs/rrcs/rrs;
    by_message: the messages formed on one channel are dealt over the channels (Messages.by_message) instead
    of every shard keeping its class's channel."""

    instances: int = 1
    channels: int = 1
    mode: str = "out"
    consolidate: bool = False
    combined: bool = True
    fuse: bool = True
    by_message: bool = False

    def label(self) -> str:
        parts = [f"instances={self.instances}", f"channels={self.channels}", f"mode={self.mode}"]
        if self.by_message and self.channels > 1:
            parts.append("channel per message")
        parts.append("combined tbs" if self.combined else "separate send/receive tbs")
        if self.fuse:
            parts.append("fused")
        if self.consolidate:
            parts.append("consolidated")
        return ", ".join(parts)


@dataclass
class MscclProgram:
    """The instruction table of every gpu, ordered, with tbs and dependencies (ready to print)."""

    nodes: int
    units_per_shard: int
    nchannels: int
    ops: dict                      # column -> array, sorted by (gpu, tb, position)
    tb_gpu: np.ndarray             # per global tb: gpu, send, recv, chan, id (XML id within its gpu)
    tb_send: np.ndarray
    tb_recv: np.ndarray
    tb_chan: np.ndarray
    tb_id: np.ndarray
    xml_pos: np.ndarray            # per op: its XML step index within its tb
    dep_first: np.ndarray          # per op: (depid, deps) of its own dependency (-1, -1)
    nop_deps: tuple                # (ptr per op, depid, deps): op r's nops wait on [ptr[r], ptr[r + 1])
    hasdep: np.ndarray
    i_chunks: int
    o_chunks: int
    s_chunks: np.ndarray           # per gpu
    messages: int
    dropped_units: int
    fused: int
    consolidated: int
    stats: dict = field(default_factory=dict)


def runs(adv: list[np.ndarray], eq: list[np.ndarray], *, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Split positions 0..n-1 into maximal runs where every `adv` column advances by exactly 1 and every `eq`
    column stays constant, each at most max_len long. Returns (starts, lengths). The kernels:
    services.compiler.msccl.message_kernels."""
    n = adv[0].size if adv else eq[0].size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    for c in adv:
        mark_breaks(brk, c, 1)
    for c in eq:
        mark_breaks(brk, c, 0)
    return run_starts(brk, max_len)


class _Table:
    """Instruction rows appended in batches (columns as numpy arrays). A batch keeps the arrays it is given
    (pass arrays nothing writes later) and its constant columns as scalars; `concat` writes each column once."""

    COLS = ("gpu", "kind", "t", "phase", "sub", "tie", "speer", "rpeer", "chan", "sbuf", "soff", "dbuf", "doff",
            "cnt", "msg")
    DT = {"kind": np.int8, "phase": np.int8, "sbuf": np.int8, "dbuf": np.int8, "tie": np.int64, "msg": np.int64}

    def __init__(self):
        self.parts: list[tuple[int, dict]] = []

    def add(self, n: int, **cols) -> None:
        if n == 0:
            return
        self.parts.append((n, {c: np.broadcast_to(np.asarray(cols.get(c, -1), dtype=self.DT.get(c, np.int32)), (n,))
                               for c in self.COLS}))

    def concat(self) -> dict:
        total = sum(n for n, _ in self.parts)
        out = {}
        for c in self.COLS:
            col = np.empty(total, dtype=self.DT.get(c, np.int32))
            at = 0
            for n, row in self.parts:
                col[at:at + n] = row[c]
                at += n
            out[c] = col
        return out


class _Builder:
    def __init__(self, schedule: Schedule, profile: RuntimeProfile, opt: MscclOptions,
                 classes: ShardChannels | None = None, pairs: AlltoallPairs | None = None):
        self.s, self.profile, self.opt = schedule, profile, opt
        self.classes = (ShardChannels.identity(schedule.nodes) if opt.channels == 1
                        else shard_classes(schedule) if classes is None else classes)
        self.n, self.P0, self.k, self.c = schedule.nodes, schedule.grid, opt.instances, opt.channels
        self.P = self.P0 * self.k
        self.coll = schedule.collective
        self.maxcnt = profile.max_count - 1
        self.scratch = np.zeros(self.n, dtype=np.int64)
        if self.coll is Collective.ALLTOALL and pairs is None:
            pairs = AlltoallPairs(schedule, self.k)
        self.layout = UnitLayout(self.coll, self.n, self.P, opt.mode == "in", self._alloc, pairs)
        self.table = _Table()
        self.dense = isinstance(self.layout.locbuf, np.ndarray)    # (gpu x unit) arrays, not the all-to-all's pairs
        self.msg = 0
        self.dropped = 0
        self.consolidated = 0

    def _alloc(self, gpus: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        gpus = np.asarray(gpus, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        order = lexorder((gpus,))
        g, sz = gpus[order], sizes[order]
        csum = np.cumsum(sz)
        first = np.r_[True, g[1:] != g[:-1]]
        grp = np.cumsum(first) - 1
        starts = np.flatnonzero(first)
        before = csum - sz - np.where(starts[grp] > 0, csum[starts[grp] - 1], 0)
        bases = np.empty_like(sz)
        bases[order] = self.scratch[g] + before
        np.add.at(self.scratch, g, sz)
        return bases.astype(np.int32)

    def _cells(self, W: np.ndarray, G: np.ndarray):
        """What indexes the layout's tables at gpus W, units G: the flat positions in its dense (gpu x unit)
        arrays (one index array instead of two for numpy to combine on every access), else the pairs."""
        return W.astype(np.int64, copy=False) * self.layout.locbuf.shape[1] + G if self.dense else (W, G)

    @staticmethod
    def _of(table, cells):
        """The entries of a layout table at `cells` (_cells)."""
        return table[cells] if isinstance(cells, tuple) else table.reshape(-1)[cells]

    @staticmethod
    def _put(table, cells, values) -> None:
        """Set the entries of a layout table at `cells` (_cells)."""
        if isinstance(cells, tuple):
            table[cells] = values
        else:
            table.reshape(-1)[cells] = values

    # ----- pass 1: messages ------------------------------------------------------------------------------
    def _units(self, t: int):
        s, P, P0, k, c = self.s, self.P, self.P0, self.k, self.c
        sl = s.step_slice(t)
        v, u, w = s.source[sl].astype(np.int64), s.sender[sl].astype(np.int64), s.receiver[sl].astype(np.int64)
        lane, lo, hi = s.lane[sl].astype(np.int64), s.lo[sl].astype(np.int64), s.hi[sl].astype(np.int64)
        if np.any(u == w):
            i = int(np.flatnonzero(u == w)[0])
            raise CompileError(f"step {t}: a transfer over the self-loop of node {u[i]} carries no data; the "
                               f"schedule is not executable")
        ln = hi - lo
        if self.coll is not Collective.ALLTOALL and not np.any(ln < 0):
            return expand_units(v, u, w, lane, lo, hi, self.classes.rank, self.classes.blocks, P, P0, k, c)
        total = int(ln.sum())
        rep = np.repeat(np.arange(v.size), ln)
        x = ranges(lo, ln)
        j = np.repeat(np.arange(k), total)
        rep = np.tile(rep, k)
        x = np.tile(x, k)
        vv = v[rep]
        if self.coll is Collective.ALLTOALL:
            g = vv * P + alltoall_position(x, j, self.n, P0, k)
        else:
            g = vv * P + j * P0 + x
        chan = lane[rep] * (k * c) + j * c + self.classes.of(vv, c)
        return u[rep], w[rep], chan, g

    def build_messages(self) -> None:
        s = self.s
        if self.coll is Collective.ALLGATHER and self.opt.mode != "in":
            self._fixups(0, held_only=True)   # own shard into the output first; sends read it there (msccl-tools)
        for t in range(1, s.steps + 1):
            self._step(t, Op(int(s.ops[t - 1])))
        self._fixups(s.steps + 1)

    def _step(self, t: int, op: Op) -> None:
        lay = self.layout
        U, W, CH, G = self._units(t)
        if U.size == 0:
            return
        _, (CH, U, G, W) = lexsorted((CH, U, G, W))   # by receiver and unit: duplicates and ranks are adjacent
        if op is Op.COPY:        # the first copy of each unit a receiver does not hold yet
            n = U.size
            if self.dense:
                U, W, CH, G = first_fresh(U, W, CH, G, lay.final)
            else:
                keep = ~(np.r_[False, (W[1:] == W[:-1]) & (G[1:] == G[:-1])] | lay.final[W, G])
                U, W, CH, G = U[keep], W[keep], CH[keep], G[keep]
            self.dropped += n - U.size
            if U.size == 0:
                return
        else:       # sorted by (W, G, U, CH): equal (U, W, G) triples are adjacent whatever their channels
            same_unit = (W[1:] == W[:-1]) & (G[1:] == G[:-1])
            if np.any(same_unit & (U[1:] == U[:-1])):
                raise CompileError(f"step {t}: a node sends the same chunk to a neighbour twice in a reduce step; "
                                   f"not supported")
            unit_first = np.r_[True, ~same_unit]         # each unit's first contribution (_direct)
        at = self._cells(U, G)
        SB, SO = self._of(lay.locbuf, at), self._of(lay.locoff, at)
        if np.any(SB == NONE):
            i = int(np.flatnonzero(SB == NONE)[0])
            v, x = divmod(int(G[i]), self.P)
            raise CompileError(f"step {t}: gpu {U[i]} sends chunk {x}/{self.P} of shard {v} before holding it; the "
                               f"schedule is not valid")
        # link order (sender, receiver, channel), then the sender's layout
        order, (SO, SB, CH, W, U) = lexsorted((SO, SB, CH, W, U))
        G = G[order]
        DB, DO = lay.home(W, G) if op is Op.COPY else lay.acc(W, G)   # per row, whatever the rows' order
        if op is Op.REDUCE:
            unit_first = unit_first[order]
        staged_send = staged_recv = np.zeros(U.size, bool)
        if self.opt.consolidate:
            PB, PO = DB, DO
            for _ in range(2 if op is Op.REDUCE else 1):
                if op is Op.REDUCE:         # the partial each direct receive reads (the first direct one in place)
                    d = np.flatnonzero(~staged_recv)
                    o = d[lexorder((CH[d], U[d], G[d], W[d]))]
                    first = np.r_[True, (W[o][1:] != W[o][:-1]) | (G[o][1:] != G[o][:-1])][:o.size]
                    f = o[first]
                    PB, PO = DB.copy(), DO.copy()
                    PB[f], PO[f] = lay.locbuf[W[f], G[f]], lay.locoff[W[f], G[f]]
                ss, sr = self._consolidate_plan(U, W, CH, SB, SO, DB, DO, PB, PO)
                staged_send, staged_recv = staged_send | ss, staged_recv | sr
            if staged_send.any():
                SB, SO = self._gather(t, U, W, CH, SB, SO, staged_send)
        direct = np.flatnonzero(~staged_recv)
        if direct.size == U.size:
            self._direct(t, op, U, W, CH, G, SB, SO, DB, DO, presorted=not staged_send.any(),
                         first=unit_first if op is Op.REDUCE else None)
        elif direct.size:
            self._direct(t, op, U[direct], W[direct], CH[direct], G[direct], SB[direct], SO[direct], DB[direct],
                         DO[direct], presorted=not staged_send.any())
        staged = np.flatnonzero(staged_recv)
        if staged.size:
            self._staged_receive(t, op, U[staged], W[staged], CH[staged], G[staged], SB[staged], SO[staged],
                                 DB[staged], DO[staged])

    def _direct(self, t, op, U, W, CH, G, SB, SO, DB, DO, presorted: bool = False,
                first: np.ndarray | None = None) -> None:
        """Messages straight into place: `r` into the home, or `rrc` (partial + message) into the accumulator.
        The links into a gpu that reduce in one step are ranked (by sender and channel): link k's reductions
        run after those of links < k, and a unit's first contribution reads the partial where it is, later ones
        the accumulator. Every message of a connection has its link's rank. `first` (reductions, when the rows
        are all of the step's): per row, whether it is its unit's first contribution, i.e. of the least (sender,
        channel), which is the least rank (`_step` finds them in its sort by receiver and unit)."""
        lay = self.layout
        if op is Op.COPY:
            rank = np.zeros(U.size, np.int64)
            PB = np.full(U.size, NONE, np.int8)
            PO = np.full(U.size, -1, np.int32)
        else:
            rank = self._link_ranks(U, W, CH)
            if first is None:
                o = lexorder((rank, G, W))
                first_c = np.empty(U.size, bool)
                first_c[o] = np.r_[True, (W[o][1:] != W[o][:-1]) | (G[o][1:] != G[o][:-1])]
            else:
                first_c = first
            at = self._cells(W, G)
            PB, PO = self._of(lay.locbuf, at), self._of(lay.locoff, at)
            if np.any(PB[first_c] == NONE):
                i = int(np.flatnonzero((PB == NONE) & first_c)[0])
                v, x = divmod(int(G[i]), self.P)
                raise CompileError(f"gpu {W[i]} reduces into chunk {x}/{self.P} of shard {v} without holding a "
                                   f"partial; the schedule is not valid")
            later = ~first_c
            PB[later], PO[later] = DB[later], DO[later]
        if not presorted:               # (a subset of rows in link order whose sources no gather moved is in it)
            o = lexorder((SO, SB, CH, W, U))
            U, W, CH, G, rank, SB, SO, DB, DO, PB, PO = (a[o] for a in (U, W, CH, G, rank, SB, SO, DB, DO, PB, PO))
        adv, eq = [SO, DO], [U, W, CH, SB, DB]
        if op is Op.REDUCE:
            adv.append(PO)
            eq.append(PB)
        st, ln = runs(adv, eq, max_len=self.maxcnt)
        self._messages(t, U[st], W[st], CH[st], rank[st], SB[st], SO[st], DB[st], DO[st],
                       None if op is Op.COPY else PB[st], PO[st], ln)
        at = self._cells(W, G)
        self._put(lay.locbuf, at, DB)
        self._put(lay.locoff, at, DO)
        if op is Op.COPY:
            self._put(lay.final, at, True)

    def _link_ranks(self, U, W, CH) -> np.ndarray:
        """Per row, the rank of its link (sender, channel) among the links into its receiver, ordered by (sender,
        channel). The rows come in link order (by sender, receiver, channel: `_step` sorts them so, and a subset
        keeps the order), so each link is one run and only the runs' first rows are sorted."""
        brk = np.r_[True, (U[1:] != U[:-1]) | (W[1:] != W[:-1]) | (CH[1:] != CH[:-1])]
        firsts = np.flatnonzero(brk)
        ul, inv_run = unique_inverse((W[firsts] * self.n + U[firsts]) * (1 << 20) + CH[firsts])   # distinct
        lw = ul // (self.n << 20)
        lrank = np.arange(ul.size) - np.searchsorted(lw, lw)
        return np.repeat(lrank[inv_run], np.diff(np.r_[firsts, U.size]))

    def _messages(self, t, u, w, ch, rank, sb, so, db, do, pb, po, ln) -> None:
        m = u.size
        ids = self.msg + np.arange(m, dtype=np.int64)
        self.msg += m
        self.table.add(m, gpu=u, kind=S, t=t, phase=PH_SEND, sub=rank, tie=ids, speer=w, rpeer=-1, chan=ch,
                       sbuf=sb, soff=so, dbuf=NONE, doff=-1, cnt=ln, msg=ids)
        kind = R if pb is None else RRC
        self.table.add(m, gpu=w, kind=kind, t=t, phase=PH_RECV, sub=rank, tie=0, speer=-1, rpeer=u, chan=ch,
                       sbuf=NONE if kind == R else pb, soff=-1 if kind == R else po, dbuf=db, doff=do, cnt=ln, msg=ids)

    # ----- consolidation -------------------------------------------------------------------------------------
    def _consolidate_plan(self, U, W, CH, SB, SO, DB, DO, PB, PO):
        """Per unit (sorted by link): whether its link stages the send (its pieces are not contiguous at the
        sender) and the receive (not contiguous at the receiver) through scratch."""
        grp_brk = np.r_[True, (U[1:] != U[:-1]) | (W[1:] != W[:-1]) | (CH[1:] != CH[:-1])]
        gid = np.cumsum(grp_brk) - 1

        def breaks(adv, eq):
            brk = grp_brk.copy()
            for c in adv:
                brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 1
            for c in eq:
                brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 0
            return np.bincount(gid, weights=brk)[gid]

        multi = breaks([SO, DO, PO], [SB, DB, PB]) > 1
        self.consolidated += int(unique(gid[multi]).size)
        return multi & (breaks([SO], [SB]) > 1), multi & (breaks([DO, PO], [DB, PB]) > 1)

    def _gather(self, t, U, W, CH, SB, SO, staged):
        """Copy each staged link's pieces into contiguous scratch at the sender; the send reads it there."""
        grp_brk = np.r_[True, (U[1:] != U[:-1]) | (W[1:] != W[:-1]) | (CH[1:] != CH[:-1])]
        gid = np.cumsum(grp_brk) - 1
        sel = np.flatnonzero(staged)
        g_sel = gid[sel]
        first = np.r_[True, g_sel[1:] != g_sel[:-1]]
        sizes = np.diff(np.r_[np.flatnonzero(first), sel.size])
        bases = self._alloc(U[sel][first], sizes)
        pos = run_positions(first)
        new_off = (np.repeat(bases, sizes) + pos).astype(np.int32)
        st, ln = runs([SO[sel], new_off], [SB[sel], g_sel], max_len=self.maxcnt)
        i = sel[st]
        self.table.add(st.size, gpu=U[i], kind=CPY, t=t, phase=PH_LOCAL, sub=0, tie=np.arange(st.size),
                       sbuf=SB[i], soff=SO[i], dbuf=SBUF, doff=new_off[st], cnt=ln)
        SB, SO = SB.copy(), SO.copy()
        SB[sel], SO[sel] = SBUF, new_off
        return SB, SO

    def _staged_receive(self, t, op, U, W, CH, G, SB, SO, DB, DO) -> None:
        """Receive each staged link's message into contiguous scratch, then scatter: copy into the homes, or
        (reductions, after the step's direct contributions) add the partials into the staged pieces, which then
        hold them."""
        lay = self.layout
        grp_brk = np.r_[True, (U[1:] != U[:-1]) | (W[1:] != W[:-1]) | (CH[1:] != CH[:-1])]
        gid = np.cumsum(grp_brk) - 1
        firsts = np.flatnonzero(grp_brk)
        sizes = np.diff(np.r_[firsts, U.size])
        bases = self._alloc(W[firsts], sizes)
        RO = (bases[gid] + np.arange(U.size) - firsts[gid]).astype(np.int32)
        RB = np.full(U.size, SBUF, np.int8)
        zero = np.zeros(U.size, np.int64)
        st, ln = runs([SO, RO], [U, W, CH, SB], max_len=self.maxcnt)
        self._messages(t, U[st], W[st], CH[st], zero[st], SB[st], SO[st], RB[st], RO[st], None, None, ln)
        if op is Op.COPY:
            o = lexorder((RO, W))
            st, ln = runs([RO[o], DO[o]], [W[o], DB[o]], max_len=self.maxcnt)
            i = o[st]
            self.table.add(st.size, gpu=W[i], kind=CPY, t=t, phase=PH_SCATTER, sub=0, tie=np.arange(st.size),
                           sbuf=SBUF, soff=RO[i], dbuf=DB[i], doff=DO[i], cnt=ln)
            lay.locbuf[W, G], lay.locoff[W, G] = DB, DO
            lay.final[W, G] = True
            return
        # reductions: per unit, the k-th staged contribution adds the partial left by the (k-1)-th
        o = lexorder((CH, U, G, W))
        Wk, Gk, ROk = W[o], G[o], RO[o]
        same = np.r_[False, (Wk[1:] == Wk[:-1]) & (Gk[1:] == Gk[:-1])]
        k = run_positions(~same)
        PB, PO = lay.locbuf[Wk, Gk].copy(), lay.locoff[Wk, Gk].copy()
        PB[same], PO[same] = SBUF, ROk[np.flatnonzero(same) - 1]
        if np.any(PB == NONE):
            i = int(np.flatnonzero(PB == NONE)[0])
            raise CompileError(f"gpu {Wk[i]} reduces into a chunk it holds no partial of; the schedule is not valid")
        o2 = lexorder((ROk, k, Wk))
        st, ln = runs([PO[o2], ROk[o2]], [Wk[o2], k[o2], PB[o2]], max_len=self.maxcnt)
        i = o2[st]
        self.table.add(st.size, gpu=Wk[i], kind=RE, t=t, phase=PH_SCATTER, sub=k[i], tie=np.arange(st.size),
                       sbuf=PB[i], soff=PO[i], dbuf=SBUF, doff=ROk[i], cnt=ln)
        last = np.r_[~same[1:], True]
        lay.locbuf[Wk[last], Gk[last]] = SBUF
        lay.locoff[Wk[last], Gk[last]] = ROk[last]

    # ----- fixups --------------------------------------------------------------------------------------------
    def _fixups(self, t: int, held_only: bool = False) -> None:
        """Copy every result that is not where the collective wants it (e.g. an allgather's own shard)."""
        lay = self.layout
        W, G = lay.results()
        at = self._cells(W, G)
        b, o = self._of(lay.locbuf, at), self._of(lay.locoff, at)
        if held_only:
            h = b != NONE
            W, G, b, o = W[h], G[h], b[h], o[h]
        elif np.any(b == NONE):
            i = int(np.flatnonzero(b == NONE)[0])
            v, x = divmod(int(G[i]), self.P)
            raise CompileError(f"gpu {W[i]} never receives chunk {x}/{self.P} of shard {v}: the schedule is "
                               f"incomplete")
        hb, ho = lay.home(W, G)
        wrong = np.flatnonzero((b != hb) | (o != ho))
        if wrong.size == 0:
            return
        W, sb, so, db, do = W[wrong], b[wrong], o[wrong], hb[wrong], ho[wrong]
        st, ln = runs([so, do], [W, sb, db], max_len=self.maxcnt)
        self.table.add(st.size, gpu=W[st], kind=CPY, t=t, phase=PH_LOCAL, sub=0, tie=np.arange(st.size),
                       sbuf=sb[st], soff=so[st], dbuf=db[st], doff=do[st], cnt=ln)
        lay.locbuf[W, G[wrong]], lay.locoff[W, G[wrong]] = db, do


# ---------------------------------------------------------------------------------------------------------
# passes 2-5
# ---------------------------------------------------------------------------------------------------------
def _match(w_in: np.ndarray, w_out: np.ndarray, weight: np.ndarray, same_peer: np.ndarray):
    """Maximum-weight pairing of in-peers with out-peers (ties: the same peer both ways)."""
    from scipy.optimize import linear_sum_assignment

    cost = -(weight.astype(np.float64) * 4 + same_peer)
    ri, ci = linear_sum_assignment(cost)
    return ri, ci


def _assign_tbs(ops: dict, opt: MscclOptions, n: int, layout: UnitLayout, conns: "Connections"):
    """Thread blocks of the communication instructions (and fusion candidates when combined); `conns`: the
    table's connections (Messages.connections)."""
    kind, gpu, chan = ops["kind"], ops["gpu"].astype(np.int64), ops["chan"].astype(np.int64)
    is_s, is_r = kind == S, (kind == R) | (kind == RRC)
    fuse_pairs = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if opt.combined and opt.fuse:
        fuse_pairs = _fusion_candidates(ops, is_s, is_r & _last_writes(ops, layout, opt.mode == "both"))
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


def _last_writes(ops: dict, layout: UnitLayout, both: bool) -> np.ndarray:
    """Per row: True if no other instruction writes any chunk it writes before the sends of the next comm
    step (so what it wrote is what those sends read)."""
    kind = ops["kind"]
    rep, key = _access_keys(ops, np.flatnonzero(_WRITES_DST[kind]), "dbuf", "doff", layout, both)
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


def _fusion_candidates(ops: dict, is_s: np.ndarray, is_r: np.ndarray):
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


def _apply_fusion(ops: dict, tb: np.ndarray, pairs, fuse: bool, rrs_ok) -> tuple[dict, np.ndarray, int]:
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


def _order(ops: dict, tb: np.ndarray) -> np.ndarray:
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


DEP_BATCH_UNITS = 1 << 22             # chunk accesses whose dependency tables exist at once


def _dependencies(ops: dict, tb: np.ndarray, n_tbs: int, layout: UnitLayout, both: bool):
    """(op index, dep tb, dep idx) after pruning, and idx (position among ops) per op, and each tb's first op.

    ops must be sorted by (gpu, tb, t, phase, sub, tie). Dependencies never cross gpus, so gpus are handled in
    batches of about DEP_BATCH_UNITS chunk accesses: memory stays bounded whatever the program's size (COMPILE_THREADS
    batches at a time, services.compiler.common.pool)."""
    n_ops = tb.size
    tb_start = np.searchsorted(tb, np.arange(n_tbs))
    idx = np.arange(n_ops) - tb_start[tb]
    gpu = ops["gpu"]
    gstart = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1]]) if n_ops else np.zeros(0, np.int64)
    gend = np.r_[gstart[1:], n_ops].astype(np.int64)
    work_at_end = np.cumsum(ops["cnt"].astype(np.int64) * 2)[gend - 1] if n_ops else np.zeros(0, np.int64)
    cuts, a, k = [], 0, 0                   # batch [a, b) = whole gpus k0..k-1, at least one
    while a < n_ops:
        base = int(work_at_end[k - 1]) if k else 0
        k = max(int(np.searchsorted(work_at_end, base + DEP_BATCH_UNITS, "right")), k + 1)
        b = int(gend[k - 1])
        cuts.append((a, b))
        a = b
    def batch(cut):
        a, b = cut
        co, ct, ci = _dependencies_of({c: v[a:b] for c, v in ops.items()}, tb[a:b], idx[a:b], layout, both)
        return co + a, ct, ci
    parts = list(ordered_map(batch, cuts))          # batches on COMPILE_THREADS threads (services.compiler.common.pool)
    if not parts:
        return (np.zeros(0, np.int64),) * 3, idx, tb_start
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3)), idx, tb_start


def _dependencies_of(ops: dict, tb: np.ndarray, idx: np.ndarray, layout: UnitLayout, both: bool):
    """(op index, dep tb, dep idx) of the ops of some whole gpus (see `_dependencies`).

    Ops run in phase groups (comm step, phase, contribution rank) in order; within a group the writes take
    effect before the reads are recorded. Every chunk access waits for the last write of its location in an
    earlier group (RAW, WAW), and every write for the reads of its location since the last write in an earlier
    group (WAR); of an op's waits on another tb only the latest is kept, and of a tb's waits on another tb only
    those no earlier op of it already implies (services.compiler.msccl.dep_kernels: one sweep per gpu)."""
    kind = ops["kind"]
    n = kind.size
    gpu = ops["gpu"].astype(np.int64)
    cnt = ops["cnt"].astype(np.int64)

    def start(flag: np.ndarray, bufcol: str, offcol: str) -> np.ndarray:
        """The location key of the first chunk of the range each op accesses so (-1: none); keys are affine
        in the offset within one buffer."""
        rows = np.flatnonzero(flag[kind])
        s = np.full(n, -1, np.int64)
        if rows.size:
            b, off = ops[bufcol][rows], ops[offcol][rows]
            s[rows] = layout.alias_key(gpu[rows], b, off) if both else layout.plain_key(b, off)
        return s

    (src, rdst, wdst), space = dense_keys([start(_READS_SRC, "sbuf", "soff"), start(_READS_DST, "dbuf", "doff"),
                                          start(_WRITES_DST, "dbuf", "doff")], cnt)
    order, gid = group_order(gpu, ops["t"], ops["phase"], ops["sub"])   # stable: the table's order within a group
    reads = cnt * ((src >= 0).astype(np.int64) + (rdst >= 0))
    pool = int(np.bincount(gpu, weights=reads).max()) if n else 0
    n_tbs = int(tb.max()) + 1 if n else 0
    tb, idx = tb.astype(np.int64, copy=False), idx.astype(np.int64, copy=False)
    co, ct, ci = dep_sweep(order, gid, gpu, tb, idx, cnt, src, rdst, wdst, max(space, 1), n_tbs, max(pool, 1))
    keep = dep_prune(co, ct, ci, n, tb, n_tbs)           # by (op, waited tb)
    return co[keep], ct[keep], ci[keep]


def _rrs_predicate(ops: dict, layout: UnitLayout, both: bool, result_keys: np.ndarray):
    """rrs is legal for a fused reduction whose written range is read by nothing but the forwarding send and
    is not a final result (a later instruction writes it again, or it is scratch)."""
    kind, t = ops["kind"], ops["t"]

    def keys(rows, buf, off):
        return _access_keys(ops, rows, buf, off, layout, both)

    _, rk1 = keys(np.flatnonzero(_READS_SRC[kind]), "sbuf", "soff")
    _, rk2 = keys(np.flatnonzero(_READS_DST[kind]), "dbuf", "doff")
    read_sorted = np.sort(np.concatenate([rk1, rk2]))
    w_rep, wk = keys(np.flatnonzero(_WRITES_DST[kind]), "dbuf", "doff")
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


@dataclass
class Messages:
    """Pass 1's result: the instruction rows of every gpu before thread blocks (depends on the lowering, the
    instances, channels, mode and consolidation, not on the thread-block layout)."""

    schedule: Schedule
    ops: dict
    layout: UnitLayout
    scratch: np.ndarray
    messages: int
    dropped: int
    consolidated: int
    _bounds: dict = field(default_factory=dict, repr=False)

    def by_message(self, channels: int) -> "Messages":
        """These messages (built on one channel per lane and instance) dealt over `channels` channels: a
        connection's messages in the order it sends them (comm step, then message) go round robin, the k-th on
        channel k mod `channels`, and each receive follows its message.

        A connection of M messages then carries ceil(M / channels) on its fullest channel, the fewest any
        assignment allows, and the messages stay as long as on one channel (shard classes cut a link's run of
        shards wherever consecutive shards change class). What it gives up is the shard's fixed channel:
        a forwarded piece may leave on another channel than it arrived on, so receives cannot fuse with their
        forwarding sends, and a send may wait on receive thread blocks of every channel (more nops). Ordering
        is unaffected: a tb still runs its rows by (comm step, phase, contribution rank, send order)."""
        ops = self.ops
        kind, msg = ops["kind"], ops["msg"]
        srow = np.flatnonzero(kind == S)
        chan = ops["chan"].astype(np.int64)
        conn = ops["gpu"][srow].astype(np.int64) << 32 | ops["speer"][srow].astype(np.int64) << 16 | chan[srow]
        o = lexorder((msg[srow], ops["t"][srow], conn))
        first = np.r_[True, conn[o][1:] != conn[o][:-1]] if o.size else np.zeros(0, bool)
        ordinal = run_positions(first)
        of_msg = np.full(self.messages, -1, np.int64)
        of_msg[msg[srow[o]]] = chan[srow[o]] * channels + ordinal % channels
        has = msg >= 0
        chan[has] = of_msg[msg[has]]
        out = dict(ops)
        out["chan"] = chan.astype(ops["chan"].dtype)
        return Messages(self.schedule, out, self.layout, self.scratch, self.messages, self.dropped, self.consolidated)

    def connections(self) -> Connections:
        """The table's connections (computed once; the lower bounds and the thread blocks both use them)."""
        c = self._bounds
        if "conns" not in c:
            ops = self.ops
            kind, gpu, chan = ops["kind"], ops["gpu"], ops["chan"]
            parts = []
            for rows, peer in ((np.flatnonzero(kind == S), ops["speer"]), (np.flatnonzero(RECEIVES[kind]), ops["rpeer"])):
                parts += [*connection_ids(gpu[rows], chan[rows], peer[rows]), rows]
            (ok, oi, orow), (ik, ii, irow) = parts[:3], parts[3:]
            c["conns"] = Connections(ok, orow, oi, ik, irow, ii)
        return c["conns"]

    def fused_steps_floor(self) -> int:
        """The sum over gpus of max(sends, receives): a gpu's steps with fused instructions are at least the
        larger, and on more channels both only grow (services.compiler.fit.search's buffering floor). Computed once."""
        c = self._bounds
        if "fused_floor" not in c:
            cn, gpu, n = self.connections(), self.ops["gpu"], self.schedule.nodes
            c["fused_floor"] = int(np.maximum(np.bincount(gpu[cn.out_rows], minlength=n),
                                              np.bincount(gpu[cn.in_rows], minlength=n)).sum())
        return c["fused_floor"]

    def lower_bounds(self, opt: MscclOptions, per_gpu: bool = True) -> dict:
        """What any thread-block layout of these messages needs at least (`opt` says combined or separate tbs
        and whether fusion is on), computed without building the program (per_gpu=False leaves out
        steps_per_gpu and steps_per_tb_avg, which for fused tbs need every forwarded receive matched):

        steps_per_gpu   per gpu: its instructions less those fusion could merge (every forwarded receive
                        counted, a bound on the exact fusions)
        steps_per_tb    the most messages one connection (gpu, peer, channel, direction) carries: its tb has
                        at least that many steps
        tbs_per_gpu     per gpu, exactly: separate tbs one per (peer, channel, direction); combined tbs
                        pair in- and out-peers per channel, max(in, out) of them (a gpu with only local
                        copies gets one)
        tbs_per_channel the most sending or receiving tbs on one channel of a gpu
        steps_per_tb_avg   the busiest gpu's steps spread evenly over its tbs (a tb holds at least that)
        messages_per_connection_step   the most messages one connection receives in one comm step (fusion
                        keeps every receive)
        """
        c = self._bounds
        if "rows" not in c:
            ops, n = self.ops, self.schedule.nodes
            cn = self.connections()
            c["rows"] = np.bincount(ops["gpu"], minlength=n)
            per_tb = 0
            for of in (cn.out_of, cn.in_of):
                per_tb = max(per_tb, int(np.bincount(of).max()) if of.size else 0)
            c["steps_per_tb"] = per_tb
            combined, separate, c["tbs_per_channel"], has_peers = thread_block_counts(
                cn.out_key >> 16, cn.in_key >> 16, 1 << 16, n)            # (gpu, channel) per connection
            local_only = (c["rows"] > 0) & ~has_peers
            c["tbs_combined"], c["tbs_separate"] = combined + local_only, separate + local_only
            t = ops["t"][cn.in_rows].astype(np.int64)
            span = int(t.max()) + 1 if t.size else 1
            key = cn.in_of * span + t                                  # (connection, comm step)
            dense = cn.in_key.size * span <= 4 * t.size + (1 << 20)
            c["messages_per_connection_step"] = (0 if not t.size else int(np.bincount(key).max()) if dense
                                                 else int(unique_counts(key)[1].max()))
        fused = opt.combined and opt.fuse
        tbs = c["tbs_combined"] if opt.combined else c["tbs_separate"]
        if not per_gpu:
            return {"steps_per_gpu": None, "steps_per_tb": c["steps_per_tb"], "tbs_per_gpu": tbs,
                    "tbs_per_channel": c["tbs_per_channel"], "steps_per_tb_avg": None,
                    "messages_per_connection_step": c["messages_per_connection_step"]}
        if fused and "fusable" not in c:       # every range match counted: a bound, not the exact fusions
            ops = self.ops
            is_s, is_r = ops["kind"] == S, (ops["kind"] == R) | (ops["kind"] == RRC)
            m1, _ = _fusion_candidates(ops, is_s, is_r)
            c["fusable"] = np.bincount(ops["gpu"][unique(m1)], minlength=self.schedule.nodes)
        steps = c["rows"] - (c["fusable"] if fused else 0)
        avg = -(-steps // np.maximum(tbs, 1))
        return {"steps_per_gpu": steps, "steps_per_tb": c["steps_per_tb"], "tbs_per_gpu": tbs,
                "tbs_per_channel": c["tbs_per_channel"], "steps_per_tb_avg": int(avg.max(initial=0)),
                "messages_per_connection_step": c["messages_per_connection_step"]}


def build_messages(schedule: Schedule, profile: RuntimeProfile, opt: MscclOptions,
                   classes: ShardChannels | None = None, pairs: AlltoallPairs | None = None) -> Messages:
    """Pass 1 (see the module docstring). `classes`: the shards' channel classes (services.compiler.lower.channels;
    computed here when not given); with opt.by_message the messages of one channel are dealt over the channels
    instead (Messages.by_message). `pairs`: an all-to-all's AlltoallPairs for opt.instances (built here when not
    given; the fit search shares one between candidates)."""
    if opt.by_message and opt.channels > 1:
        return build_messages(schedule, profile, replace(opt, channels=1, by_message=False),
                              pairs=pairs).by_message(opt.channels)
    b = _Builder(schedule, profile, opt, classes, pairs)
    b.build_messages()
    ops = b.table.concat()
    b.table.parts.clear()                   # the layout keeps the builder alive through its allocator
    return Messages(schedule, ops, b.layout, b.scratch, b.msg, b.dropped, b.consolidated)


def build_program(schedule: Schedule, profile: RuntimeProfile, opt: MscclOptions, *, budget=None,
                  messages: Messages | None = None) -> MscclProgram:
    """The instruction table of `schedule` (on its integer grid) for `profile` with options `opt` (passes
    2-5 over `messages`, built here when not given).

    budget(stats) -> None may raise CompileError after the tbs are assigned, before dependencies are
    computed (the cheap point to refuse a candidate that cannot fit)."""
    msgs = messages or build_messages(schedule, profile, opt)
    ops = dict(msgs.ops)
    n = schedule.nodes
    lay = msgs.layout
    both = opt.mode == "both"
    result_keys = None
    tb, tbs, pairs = _assign_tbs(ops, opt, n, lay, msgs.connections())
    rrs_pred = None
    if opt.fuse and pairs[0].size:
        W, G = lay.results()
        hb, ho = lay.home(W, G)
        hk = lay.alias_key(W, hb, ho) if both else lay.plain_key(hb, ho)
        result_keys = unique(W.astype(np.int64) << 42 | hk)
        rrs_pred = _rrs_predicate(ops, lay, both, result_keys)
    ops, tb, fused = _apply_fusion(ops, tb, pairs, opt.fuse, rrs_pred)
    # local instructions: onto the gpu's least-loaded tbs, round robin (a copy tb when the gpu has none)
    local = tb < 0
    if local.any():
        tb = _place_local(ops, tb, tbs, n)
    n_tbs = len(tbs)
    tb_gpu = np.zeros(n_tbs, np.int64)
    tb_send = np.zeros(n_tbs, np.int64)
    tb_recv = np.zeros(n_tbs, np.int64)
    tb_chan = np.zeros(n_tbs, np.int64)
    if n_tbs:
        at = np.fromiter(tbs.values(), np.int64, n_tbs)
        tb_gpu[at], tb_send[at], tb_recv[at], tb_chan[at] = np.array(list(tbs), np.int64).reshape(n_tbs, 4).T
    # XML tb ids: per gpu sorted by (send, recv, chan), as msccl-tools numbers them
    o = lexorder((tb_chan, tb_recv, tb_send, tb_gpu))
    renum = np.empty(n_tbs, np.int64)
    renum[o] = np.arange(n_tbs)
    tb = renum[tb]
    tb_gpu, tb_send, tb_recv, tb_chan = tb_gpu[o], tb_send[o], tb_recv[o], tb_chan[o]
    gstart = np.searchsorted(tb_gpu, np.arange(n))
    tb_local = np.arange(n_tbs) - gstart[tb_gpu]
    tie = _order(ops, tb)
    ops["tie"] = tie
    # within (tb, comm step): local gathers, sends, receives, scatters (the phases' order). Every send of a step
    # comes before its receives, so no message of a step waits for another of the same step (the realized
    # depth is the schedule's step count).
    order = tb_order(tb, ops["t"], ops["phase"], ops["sub"], tie, n_tbs)
    ops = {c: a[order] for c, a in ops.items()}
    tb = tb[order]
    n_ops_tb = np.bincount(tb, minlength=n_tbs)
    lanes = int(schedule.lane.max()) + 1 if schedule.transfers else 1
    nchannels = lanes * opt.instances * opt.channels
    stats = {"tbs_per_gpu": np.bincount(tb_gpu, minlength=n), "ops_per_tb": n_ops_tb,
             "ops_per_gpu": np.bincount(ops["gpu"], minlength=n), "nchannels": nchannels,
             "tb_chan": tb_chan, "tb_send": tb_send, "tb_recv": tb_recv, "tb_gpu": tb_gpu,
             "scratch": msgs.scratch, "i_chunks": lay.input_units, "o_chunks": lay.output_units}
    if budget is not None:
        budget(stats)
    (d_op, d_tb, d_idx), idx, tb_start = _dependencies(ops, tb, n_tbs, lay, both)
    # XML positions: each op is preceded by (number of its deps - 1) nops; the first wait goes on the op
    xml_pos, dep_first, nop_ptr, nop_tb, nop_pos, hasdep, steps_tb, max_dep_tb = xml_positions(
        d_op, d_tb, d_idx, tb, idx, tb_start, tb_local)
    nop_deps = (nop_ptr, nop_tb, nop_pos)
    stats["steps_per_tb"] = steps_tb
    stats["tb_local"] = tb_local
    prog = MscclProgram(n, lay.chunk_loop // n, nchannels, ops, tb_gpu, tb_send, tb_recv, tb_chan, tb_local, xml_pos,
                        dep_first, nop_deps, hasdep, lay.input_units, lay.output_units, msgs.scratch,
                        msgs.messages, msgs.dropped, fused, msgs.consolidated, stats)
    prog.tb_of_op = tb
    prog.max_dep_tb = int(max_dep_tb)
    return prog


def _place_local(ops: dict, tb: np.ndarray, tbs: dict, n: int) -> np.ndarray:
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


# ---------------------------------------------------------------------------------------------------------
# XML text
# ---------------------------------------------------------------------------------------------------------
def _attr_text(x: str) -> str:
    return "".join(ch if ch.isalnum() or ch in " ,()_.+:/" else "_" for ch in x)[:200]


def to_xml(prog: MscclProgram, *, name: str, coll: str, proto: str, profile: RuntimeProfile, inplace: bool,
           outofplace: bool, min_bytes: int, max_bytes: int, header: str = "") -> bytes:
    """XML file (ASCII bytes) in the form the runtimes' tokenizer accepts: no declaration, one element per line,
    attributes on one line separated by single spaces, double quotes, space indentation. The pieces of
    `xml_chunks` joined: memory is the file's size plus one block's text."""
    return b"".join(xml_chunks(prog, name=name, coll=coll, proto=proto, profile=profile, inplace=inplace,
                               outofplace=outofplace, min_bytes=min_bytes, max_bytes=max_bytes, header=header))


XML_BLOCK_OPS = 1 << 18               # instructions whose text one block holds (whole gpus, at least one)


def xml_chunks(prog: MscclProgram, *, name: str, coll: str, proto: str, profile: RuntimeProfile, inplace: bool,
               outofplace: bool, min_bytes: int, max_bytes: int, header: str = ""):
    """The file of `to_xml` as consecutive bytes-like pieces (write each to a file or store as it comes): the
    header and <algo> line, then the text of blocks of whole gpus, each written by a compiled kernel into a
    buffer of its exact size (services.compiler.text.xmltext.msccl_gpus), then </algo>."""
    values = {"name": _attr_text(name), "proto": proto, "nchannels": prog.nchannels,
              "nchunksperloop": prog.nodes * prog.units_per_shard, "ngpus": prog.nodes, "coll": coll,
              "inplace": int(inplace), "outofplace": int(outofplace), "minBytes": min_bytes, "maxBytes": max_bytes}
    attrs = " ".join(f'{a}="{values[a]}"' for a in profile.algo_written)
    if header:
        yield f"<!-- fabricplan {header.replace('--', '- -')} -->\n".encode()
    yield f"<algo {attrs}>\n".encode()
    ops = prog.ops
    i64 = np.int64
    op_start = np.searchsorted(prog.tb_of_op, np.arange(prog.tb_gpu.size + 1)).astype(i64)
    gpu_tb = np.searchsorted(prog.tb_gpu, np.arange(prog.nodes + 1)).astype(i64)
    gpu_op = op_start[gpu_tb]
    tb_cols = [np.ascontiguousarray(a, i64) for a in (prog.tb_id, prog.tb_send, prog.tb_recv, prog.tb_chan)]
    s_chunks = np.ascontiguousarray(prog.s_chunks, i64)
    nop_ptr, nop_tb, nop_pos = (np.ascontiguousarray(a, i64) for a in prog.nop_deps)

    gpu_line, tb_line = line_bound(MSCCL_TEXT, (0, 1, 2, 3, 4, 10), 4), line_bound(MSCCL_TEXT, (5, 6, 7, 8, 4, 9), 4)
    step_line = line_bound(MSCCL_TEXT, (11, 15, 16, 17, 18, 19, 20, 21, 13, 22, 23), 10)
    nop_line = line_bound(MSCCL_TEXT, (11, 12, 13, 14), 3)

    def args(a: int, b: int):
        r0, r1 = int(gpu_op[a]), int(gpu_op[b])
        bound = ((b - a) * gpu_line + int(gpu_tb[b] - gpu_tb[a]) * tb_line + (r1 - r0) * step_line
                 + int(nop_ptr[r1] - nop_ptr[r0]) * nop_line)
        kind, sbuf, soff, dbuf, doff, cnt = (np.ascontiguousarray(ops[c][r0:r1]) for c in (
            "kind", "sbuf", "soff", "dbuf", "doff", "cnt"))
        return bound, (MSCCL_TEXT.data, MSCCL_TEXT.off, a, b, gpu_tb, int(prog.i_chunks), int(prog.o_chunks),
                       s_chunks, *tb_cols, op_start, r0, np.ascontiguousarray(prog.xml_pos[r0:r1], i64), kind, sbuf,
                       soff, dbuf, doff, cnt, np.ascontiguousarray(prog.dep_first[r0:r1], i64),
                       np.ascontiguousarray(prog.hasdep[r0:r1]), nop_ptr, nop_tb, nop_pos, _READS_SRC,
                       _WRITES_DST | _READS_DST)

    yield from fill_blocks(msccl_gpus, block_bounds(gpu_op, XML_BLOCK_OPS), args)
    yield b"</algo>\n"
