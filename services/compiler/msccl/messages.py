"""Pass 1 of the MSCCL compiler, messages (paper section 7): every transfer of the schedule, comm step by comm
step, becomes instruction rows of the IR (services.compiler.msccl.ir).

Layout (services.compiler.lowering.layout). A shard is cut into P = P0 x instances units; unit g = v*P + j*P0 + x.
`nchunksperloop = N * P`; allgather input P / output N*P, reduce-scatter input N*P / output P, allreduce N*P.

Every transfer becomes its units; a channel per unit (lane x instances x channels: parallel arcs get their own
channels, instance j its own, and `channels` spreads a link's shards over that many channels by the shard's
class, services.compiler.lowering.channels, so a forwarded piece keeps its channel; or, Messages.by_message, the
messages formed on one channel are dealt over the channels round robin per connection); units a receiver
already holds are dropped (a copy step's redundant delivery); runs contiguous at the sender, the receiver and
(reductions) the receiver's partial become one message of at most MSCCL_MAX_COUNT - 1 chunks: a send `s` at the
sender and a receive at the receiver (`r` into the home for copies, `rrc` = partial + message into the
accumulator for reductions). Several contributions to one unit in one step are ranked; the first reads the
partial where it is, the others the accumulator. Consolidation (optional): a link's non-contiguous pieces of one
step are gathered into contiguous scratch (`cpy`), sent once, received into scratch and scattered (`cpy`, or
`re` for reductions). Results not at their home at the end are copied there.

Everything is numpy over the whole table (kernels: services.compiler.msccl.message_kernels, conn_kernels):
time and memory grow with the transfers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule

from ..common.arrays import lexorder, lexsorted, ranges, run_positions, unique, unique_counts, unique_inverse
from ..errors import CompileError
from ..lowering.channels import ShardChannels, shard_classes
from ..lowering.layout import NONE, SBUF, AlltoallPairs, UnitLayout, alltoall_position
from ..runtimes import RuntimeProfile
from .conn_kernels import connections as connection_ids
from .fusion import fusion_candidates
from .ir import CPY, PH_LOCAL, PH_RECV, PH_SCATTER, PH_SEND, RE, RECEIVES, RRC, InstructionTable, MscclOptions, R, S
from .message_kernels import expand_units, first_fresh, mark_breaks, run_starts
from .threadblocks import Connections, thread_block_counts

__all__ = ["Messages", "build_messages", "runs"]


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


def _link_starts(sender: np.ndarray, receiver: np.ndarray, channel: np.ndarray) -> np.ndarray:
    """Per row of rows in link order, whether it starts its link's run (its (sender, receiver, channel) differs
    from the row before)."""
    return np.r_[True, (sender[1:] != sender[:-1]) | (receiver[1:] != receiver[:-1]) | (channel[1:] != channel[:-1])]


class _MessageBuilder:
    """Pass 1 over one schedule: appends the instruction rows of every comm step to `table` (the IR's
    InstructionTable) while `layout` (services.compiler.lowering.layout.UnitLayout) tracks where every unit of every
    gpu lives. Sizes: `nodes` gpus, the schedule's `grid` chunks per shard, `instances` copies of it on their own
    channels, so `units_per_shard` = grid x instances; `channels` per link and instance; a message is at most
    `max_count` chunks. Counters: `msg` messages so far (the next message id), `dropped` units not sent because
    the receiver held them, `consolidated` links staged through scratch; `scratch` per gpu, chunks allocated.

    Within a step the rows are arrays of one entry per unit sent: `sender`, `receiver`, `channel`, `unit` (g = v P
    + j P0 + x, the layout's numbering), where the sender reads it (`src_buf`, `src_off`), where the receiver
    writes it (`dst_buf`, `dst_off`: its home for a copy, its accumulator for a reduction), and for a reduction
    the partial it adds (`part_buf`, `part_off`); staged receives land in scratch (`recv_buf`, `recv_off`)."""

    def __init__(self, schedule: Schedule, profile: RuntimeProfile, opt: MscclOptions,
                 classes: ShardChannels | None = None, pairs: AlltoallPairs | None = None):
        self.schedule, self.profile, self.opt = schedule, profile, opt
        self.classes = (ShardChannels.identity(schedule.nodes) if opt.channels == 1
                        else shard_classes(schedule) if classes is None else classes)
        self.nodes, self.grid = schedule.nodes, schedule.grid
        self.instances, self.channels = opt.instances, opt.channels
        self.units_per_shard = self.grid * self.instances
        self.collective = schedule.collective
        self.max_count = profile.max_count - 1
        self.scratch = np.zeros(self.nodes, dtype=np.int64)
        if self.collective is Collective.ALLTOALL and pairs is None:
            pairs = AlltoallPairs(schedule, self.instances)
        self.layout = UnitLayout(self.collective, self.nodes, self.units_per_shard, opt.mode == "in", self._alloc,
                                 pairs)
        self.table = InstructionTable()
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

    def _cells(self, gpu: np.ndarray, unit: np.ndarray):
        """What indexes the layout's tables at `gpu`, `unit`: the flat positions in its dense (gpu x unit)
        arrays (one index array instead of two for numpy to combine on every access), else the pairs."""
        return gpu.astype(np.int64, copy=False) * self.layout.locbuf.shape[1] + unit if self.dense else (gpu, unit)

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
        s, P, P0, k, c = self.schedule, self.units_per_shard, self.grid, self.instances, self.channels
        sl = s.step_slice(t)
        v, u, w = s.source[sl].astype(np.int64), s.sender[sl].astype(np.int64), s.receiver[sl].astype(np.int64)
        lane, lo, hi = s.lane[sl].astype(np.int64), s.lo[sl].astype(np.int64), s.hi[sl].astype(np.int64)
        if np.any(u == w):
            i = int(np.flatnonzero(u == w)[0])
            raise CompileError(f"step {t}: a transfer over the self-loop of node {u[i]} carries no data; the "
                               f"schedule is not executable")
        ln = hi - lo
        if self.collective is not Collective.ALLTOALL and not np.any(ln < 0):
            return expand_units(v, u, w, lane, lo, hi, self.classes.rank, self.classes.blocks, P, P0, k, c)
        total = int(ln.sum())
        rep = np.repeat(np.arange(v.size), ln)
        x = ranges(lo, ln)
        j = np.repeat(np.arange(k), total)
        rep = np.tile(rep, k)
        x = np.tile(x, k)
        vv = v[rep]
        if self.collective is Collective.ALLTOALL:
            g = vv * P + alltoall_position(x, j, self.nodes, P0, k)
        else:
            g = vv * P + j * P0 + x
        chan = lane[rep] * (k * c) + j * c + self.classes.of(vv, c)
        return u[rep], w[rep], chan, g

    def build_messages(self) -> None:
        s = self.schedule
        if self.collective is Collective.ALLGATHER and self.opt.mode != "in":
            self._fixups(0, held_only=True)   # own shard into the output first; sends read it there (msccl-tools)
        for t in range(1, s.steps + 1):
            self._step(t, Op(int(s.ops[t - 1])))
        self._fixups(s.steps + 1)

    def _step(self, t: int, op: Op) -> None:
        lay = self.layout
        sender, receiver, channel, unit = self._units(t)
        if sender.size == 0:
            return
        # by receiver and unit: duplicates and ranks are adjacent
        _, (channel, sender, unit, receiver) = lexsorted((channel, sender, unit, receiver))
        if op is Op.COPY:        # the first copy of each unit a receiver does not hold yet
            n = sender.size
            if self.dense:
                sender, receiver, channel, unit = first_fresh(sender, receiver, channel, unit, lay.final)
            else:
                repeat = np.r_[False, (receiver[1:] == receiver[:-1]) & (unit[1:] == unit[:-1])]
                keep = ~(repeat | lay.final[receiver, unit])
                sender, receiver, channel, unit = sender[keep], receiver[keep], channel[keep], unit[keep]
            self.dropped += n - sender.size
            if sender.size == 0:
                return
        else:       # sorted by (receiver, unit, sender, channel): equal (sender, receiver, unit) are adjacent
            same_unit = (receiver[1:] == receiver[:-1]) & (unit[1:] == unit[:-1])
            if np.any(same_unit & (sender[1:] == sender[:-1])):
                raise CompileError(f"step {t}: a node sends the same chunk to a neighbour twice in a reduce step; "
                                   f"not supported")
            unit_first = np.r_[True, ~same_unit]         # each unit's first contribution (_direct)
        at = self._cells(sender, unit)
        src_buf, src_off = self._of(lay.locbuf, at), self._of(lay.locoff, at)
        if np.any(src_buf == NONE):
            i = int(np.flatnonzero(src_buf == NONE)[0])
            v, x = divmod(int(unit[i]), self.units_per_shard)
            raise CompileError(f"step {t}: gpu {sender[i]} sends chunk {x}/{self.units_per_shard} of shard {v} before "
                               f"holding it; the schedule is not valid")
        # link order (sender, receiver, channel), then the sender's layout
        order, (src_off, src_buf, channel, receiver, sender) = lexsorted((src_off, src_buf, channel, receiver,
                                                                          sender))
        unit = unit[order]
        # per row, whatever the rows' order
        dst_buf, dst_off = lay.home(receiver, unit) if op is Op.COPY else lay.acc(receiver, unit)
        if op is Op.REDUCE:
            unit_first = unit_first[order]
        staged_send = staged_recv = np.zeros(sender.size, bool)
        if self.opt.consolidate:
            part_buf, part_off = dst_buf, dst_off
            for _ in range(2 if op is Op.REDUCE else 1):
                if op is Op.REDUCE:         # the partial each direct receive reads (the first direct one in place)
                    d = np.flatnonzero(~staged_recv)
                    o = d[lexorder((channel[d], sender[d], unit[d], receiver[d]))]
                    first = np.r_[True, (receiver[o][1:] != receiver[o][:-1]) | (unit[o][1:] != unit[o][:-1])][:o.size]
                    f = o[first]
                    part_buf, part_off = dst_buf.copy(), dst_off.copy()
                    part_buf[f], part_off[f] = lay.locbuf[receiver[f], unit[f]], lay.locoff[receiver[f], unit[f]]
                ss, sr = self._consolidate_plan(sender, receiver, channel, src_buf, src_off, dst_buf, dst_off, part_buf,
                                                part_off)
                staged_send, staged_recv = staged_send | ss, staged_recv | sr
            if staged_send.any():
                src_buf, src_off = self._gather(t, sender, receiver, channel, src_buf, src_off, staged_send)
        direct = np.flatnonzero(~staged_recv)
        if direct.size == sender.size:
            self._direct(t, op, sender, receiver, channel, unit, src_buf, src_off, dst_buf, dst_off,
                         presorted=not staged_send.any(), first=unit_first if op is Op.REDUCE else None)
        elif direct.size:
            self._direct(t, op, *(a[direct] for a in (sender, receiver, channel, unit, src_buf, src_off, dst_buf,
                                                      dst_off)), presorted=not staged_send.any())
        staged = np.flatnonzero(staged_recv)
        if staged.size:
            self._staged_receive(t, op, *(a[staged] for a in (sender, receiver, channel, unit, src_buf, src_off,
                                                              dst_buf, dst_off)))

    def _direct(self, t, op, sender, receiver, channel, unit, src_buf, src_off, dst_buf, dst_off,
                presorted: bool = False, first: np.ndarray | None = None) -> None:
        """Messages straight into place: `r` into the home, or `rrc` (partial + message) into the accumulator.
        The links into a gpu that reduce in one step are ranked (by sender and channel): link k's reductions
        run after those of links < k, and a unit's first contribution reads the partial where it is, later ones
        the accumulator. Every message of a connection has its link's rank. `first` (reductions, when the rows
        are all of the step's): per row, whether it is its unit's first contribution, i.e. of the least (sender,
        channel), which is the least rank (`_step` finds them in its sort by receiver and unit)."""
        lay = self.layout
        if op is Op.COPY:
            rank = np.zeros(sender.size, np.int64)
            part_buf = np.full(sender.size, NONE, np.int8)
            part_off = np.full(sender.size, -1, np.int32)
        else:
            rank = self._link_ranks(sender, receiver, channel)
            if first is None:
                o = lexorder((rank, unit, receiver))
                first_c = np.empty(sender.size, bool)
                first_c[o] = np.r_[True, (receiver[o][1:] != receiver[o][:-1]) | (unit[o][1:] != unit[o][:-1])]
            else:
                first_c = first
            at = self._cells(receiver, unit)
            part_buf, part_off = self._of(lay.locbuf, at), self._of(lay.locoff, at)
            if np.any(part_buf[first_c] == NONE):
                i = int(np.flatnonzero((part_buf == NONE) & first_c)[0])
                v, x = divmod(int(unit[i]), self.units_per_shard)
                raise CompileError(f"gpu {receiver[i]} reduces into chunk {x}/{self.units_per_shard} of shard {v} "
                                   f"without holding a partial; the schedule is not valid")
            later = ~first_c
            part_buf[later], part_off[later] = dst_buf[later], dst_off[later]
        if not presorted:               # (a subset of rows in link order whose sources no gather moved is in it)
            o = lexorder((src_off, src_buf, channel, receiver, sender))
            sender, receiver, channel, unit, rank, src_buf, src_off, dst_buf, dst_off, part_buf, part_off = (
                a[o] for a in (sender, receiver, channel, unit, rank, src_buf, src_off, dst_buf, dst_off, part_buf,
                               part_off))
        adv, eq = [src_off, dst_off], [sender, receiver, channel, src_buf, dst_buf]
        if op is Op.REDUCE:
            adv.append(part_off)
            eq.append(part_buf)
        st, ln = runs(adv, eq, max_len=self.max_count)
        self._messages(t, *(a[st] for a in (sender, receiver, channel, rank, src_buf, src_off, dst_buf, dst_off)),
                       part_buf=None if op is Op.COPY else part_buf[st], part_off=part_off[st], count=ln)
        at = self._cells(receiver, unit)
        self._put(lay.locbuf, at, dst_buf)
        self._put(lay.locoff, at, dst_off)
        if op is Op.COPY:
            self._put(lay.final, at, True)

    def _link_ranks(self, sender, receiver, channel) -> np.ndarray:
        """Per row, the rank of its link (sender, channel) among the links into its receiver, ordered by (sender,
        channel). The rows come in link order (by sender, receiver, channel: `_step` sorts them so, and a subset
        keeps the order), so each link is one run and only the runs' first rows are sorted."""
        brk = _link_starts(sender, receiver, channel)
        firsts = np.flatnonzero(brk)
        # the distinct links
        ul, inv_run = unique_inverse((receiver[firsts] * self.nodes + sender[firsts]) * (1 << 20) + channel[firsts])
        lw = ul // (self.nodes << 20)
        lrank = np.arange(ul.size) - np.searchsorted(lw, lw)
        return np.repeat(lrank[inv_run], np.diff(np.r_[firsts, sender.size]))

    def _messages(self, t, sender, receiver, channel, rank, src_buf, src_off, dst_buf, dst_off, part_buf, part_off,
                  count) -> None:
        """One message per entry: a send row at the sender and its receive row at the receiver (`r`, or `rrc`
        adding the partial at (part_buf, part_off) when part_buf is given), sharing the next message ids."""
        m = sender.size
        ids = self.msg + np.arange(m, dtype=np.int64)
        self.msg += m
        self.table.add(m, gpu=sender, kind=S, t=t, phase=PH_SEND, sub=rank, tie=ids, speer=receiver, rpeer=-1,
                       chan=channel, sbuf=src_buf, soff=src_off, dbuf=NONE, doff=-1, cnt=count, msg=ids)
        kind = R if part_buf is None else RRC
        self.table.add(m, gpu=receiver, kind=kind, t=t, phase=PH_RECV, sub=rank, tie=0, speer=-1, rpeer=sender,
                       chan=channel, sbuf=NONE if kind == R else part_buf, soff=-1 if kind == R else part_off,
                       dbuf=dst_buf, doff=dst_off, cnt=count, msg=ids)

    # ----- consolidation -------------------------------------------------------------------------------------
    def _consolidate_plan(self, sender, receiver, channel, src_buf, src_off, dst_buf, dst_off, part_buf, part_off):
        """Per unit (sorted by link): whether its link stages the send (its pieces are not contiguous at the
        sender) and the receive (not contiguous at the receiver) through scratch."""
        grp_brk = _link_starts(sender, receiver, channel)
        gid = np.cumsum(grp_brk) - 1

        def breaks(adv, eq):
            brk = grp_brk.copy()
            for c in adv:
                brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 1
            for c in eq:
                brk[1:] |= np.diff(np.asarray(c, dtype=np.int64)) != 0
            return np.bincount(gid, weights=brk)[gid]

        multi = breaks([src_off, dst_off, part_off], [src_buf, dst_buf, part_buf]) > 1
        self.consolidated += int(unique(gid[multi]).size)
        return (multi & (breaks([src_off], [src_buf]) > 1),
                multi & (breaks([dst_off, part_off], [dst_buf, part_buf]) > 1))

    def _gather(self, t, sender, receiver, channel, src_buf, src_off, staged):
        """Copy each staged link's pieces into contiguous scratch at the sender; the send reads it there."""
        grp_brk = _link_starts(sender, receiver, channel)
        gid = np.cumsum(grp_brk) - 1
        sel = np.flatnonzero(staged)
        g_sel = gid[sel]
        first = np.r_[True, g_sel[1:] != g_sel[:-1]]
        sizes = np.diff(np.r_[np.flatnonzero(first), sel.size])
        bases = self._alloc(sender[sel][first], sizes)
        pos = run_positions(first)
        new_off = (np.repeat(bases, sizes) + pos).astype(np.int32)
        st, ln = runs([src_off[sel], new_off], [src_buf[sel], g_sel], max_len=self.max_count)
        i = sel[st]
        self.table.add(st.size, gpu=sender[i], kind=CPY, t=t, phase=PH_LOCAL, sub=0, tie=np.arange(st.size),
                       sbuf=src_buf[i], soff=src_off[i], dbuf=SBUF, doff=new_off[st], cnt=ln)
        src_buf, src_off = src_buf.copy(), src_off.copy()
        src_buf[sel], src_off[sel] = SBUF, new_off
        return src_buf, src_off

    def _staged_receive(self, t, op, sender, receiver, channel, unit, src_buf, src_off, dst_buf, dst_off) -> None:
        """Receive each staged link's message into contiguous scratch, then scatter: copy into the homes, or
        (reductions, after the step's direct contributions) add the partials into the staged pieces, which then
        hold them."""
        lay = self.layout
        grp_brk = _link_starts(sender, receiver, channel)
        gid = np.cumsum(grp_brk) - 1
        firsts = np.flatnonzero(grp_brk)
        sizes = np.diff(np.r_[firsts, sender.size])
        bases = self._alloc(receiver[firsts], sizes)
        recv_off = (bases[gid] + np.arange(sender.size) - firsts[gid]).astype(np.int32)
        recv_buf = np.full(sender.size, SBUF, np.int8)
        zero = np.zeros(sender.size, np.int64)
        st, ln = runs([src_off, recv_off], [sender, receiver, channel, src_buf], max_len=self.max_count)
        self._messages(t, *(a[st] for a in (sender, receiver, channel, zero, src_buf, src_off, recv_buf, recv_off)),
                       part_buf=None, part_off=None, count=ln)
        if op is Op.COPY:
            o = lexorder((recv_off, receiver))
            st, ln = runs([recv_off[o], dst_off[o]], [receiver[o], dst_buf[o]], max_len=self.max_count)
            i = o[st]
            self.table.add(st.size, gpu=receiver[i], kind=CPY, t=t, phase=PH_SCATTER, sub=0, tie=np.arange(st.size),
                           sbuf=SBUF, soff=recv_off[i], dbuf=dst_buf[i], doff=dst_off[i], cnt=ln)
            lay.locbuf[receiver, unit], lay.locoff[receiver, unit] = dst_buf, dst_off
            lay.final[receiver, unit] = True
            return
        # reductions: per unit, the k-th staged contribution adds the partial left by the (k-1)-th
        o = lexorder((channel, sender, unit, receiver))
        receiver_k, unit_k, recv_off_k = receiver[o], unit[o], recv_off[o]
        same = np.r_[False, (receiver_k[1:] == receiver_k[:-1]) & (unit_k[1:] == unit_k[:-1])]
        k = run_positions(~same)
        part_buf, part_off = lay.locbuf[receiver_k, unit_k].copy(), lay.locoff[receiver_k, unit_k].copy()
        part_buf[same], part_off[same] = SBUF, recv_off_k[np.flatnonzero(same) - 1]
        if np.any(part_buf == NONE):
            i = int(np.flatnonzero(part_buf == NONE)[0])
            raise CompileError(f"gpu {receiver_k[i]} reduces into a chunk it holds no partial of; the schedule is not "
                               f"valid")
        o2 = lexorder((recv_off_k, k, receiver_k))
        st, ln = runs([part_off[o2], recv_off_k[o2]], [receiver_k[o2], k[o2], part_buf[o2]], max_len=self.max_count)
        i = o2[st]
        self.table.add(st.size, gpu=receiver_k[i], kind=RE, t=t, phase=PH_SCATTER, sub=k[i], tie=np.arange(st.size),
                       sbuf=part_buf[i], soff=part_off[i], dbuf=SBUF, doff=recv_off_k[i], cnt=ln)
        last = np.r_[~same[1:], True]
        lay.locbuf[receiver_k[last], unit_k[last]] = SBUF
        lay.locoff[receiver_k[last], unit_k[last]] = recv_off_k[last]

    # ----- fixups --------------------------------------------------------------------------------------------
    def _fixups(self, t: int, held_only: bool = False) -> None:
        """Copy every result that is not where the collective wants it (e.g. an allgather's own shard)."""
        lay = self.layout
        gpu, unit = lay.results()
        at = self._cells(gpu, unit)
        b, o = self._of(lay.locbuf, at), self._of(lay.locoff, at)
        if held_only:
            h = b != NONE
            gpu, unit, b, o = gpu[h], unit[h], b[h], o[h]
        elif np.any(b == NONE):
            i = int(np.flatnonzero(b == NONE)[0])
            v, x = divmod(int(unit[i]), self.units_per_shard)
            raise CompileError(f"gpu {gpu[i]} never receives chunk {x}/{self.units_per_shard} of shard {v}: the "
                               f"schedule is incomplete")
        hb, ho = lay.home(gpu, unit)
        wrong = np.flatnonzero((b != hb) | (o != ho))
        if wrong.size == 0:
            return
        gpu, sb, so, db, do = gpu[wrong], b[wrong], o[wrong], hb[wrong], ho[wrong]
        st, ln = runs([so, do], [gpu, sb, db], max_len=self.max_count)
        self.table.add(st.size, gpu=gpu[st], kind=CPY, t=t, phase=PH_LOCAL, sub=0, tie=np.arange(st.size),
                       sbuf=sb[st], soff=so[st], dbuf=db[st], doff=do[st], cnt=ln)
        lay.locbuf[gpu, unit[wrong]], lay.locoff[gpu, unit[wrong]] = db, do


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
            for rows, peer in ((np.flatnonzero(kind == S), ops["speer"]),
                               (np.flatnonzero(RECEIVES[kind]), ops["rpeer"])):
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
            m1, _ = fusion_candidates(ops, is_s, is_r)
            c["fusable"] = np.bincount(ops["gpu"][unique(m1)], minlength=self.schedule.nodes)
        steps = c["rows"] - (c["fusable"] if fused else 0)
        avg = -(-steps // np.maximum(tbs, 1))
        return {"steps_per_gpu": steps, "steps_per_tb": c["steps_per_tb"], "tbs_per_gpu": tbs,
                "tbs_per_channel": c["tbs_per_channel"], "steps_per_tb_avg": int(avg.max(initial=0)),
                "messages_per_connection_step": c["messages_per_connection_step"]}


def build_messages(schedule: Schedule, profile: RuntimeProfile, opt: MscclOptions,
                   classes: ShardChannels | None = None, pairs: AlltoallPairs | None = None) -> Messages:
    """Pass 1 (see the module docstring). `classes`: the shards' channel classes (services.compiler.lowering.channels;
    computed here when not given); with opt.by_message the messages of one channel are dealt over the channels
    instead (Messages.by_message). `pairs`: an all-to-all's AlltoallPairs for opt.instances (built here when not
    given; the fit search shares one between candidates)."""
    if opt.by_message and opt.channels > 1:
        return build_messages(schedule, profile, replace(opt, channels=1, by_message=False),
                              pairs=pairs).by_message(opt.channels)
    b = _MessageBuilder(schedule, profile, opt, classes, pairs)
    b.build_messages()
    ops = b.table.concat()
    b.table.parts.clear()                   # the layout keeps the builder alive through its allocator
    return Messages(schedule, ops, b.layout, b.scratch, b.msg, b.dropped, b.consolidated)
