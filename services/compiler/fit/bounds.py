"""What a program without consolidation needs at least, computed from the lowered schedule alone.

fit_msccl refuses most candidates before their message table is built (Messages.lower_bounds); at 1024 ranks
building one table costs 1.5-4 s. `ScheduleBounds` gives the same quantities (steps per gpu, the most messages
on one connection-channel and in one step, thread blocks) as lower bounds from the transfers, so a candidate
whose bounds already exceed a limit is refused with no table at all. Soundness rests on where units live
(services.compiler.lowering.layout): unit g = v x P + j x P0 + x of shard v sits at offset g of the big buffer.

* Home steps. In an allgather every unit a gpu sends or receives is at its home g (the own shard is copied
  to the output before the first send); in an allreduce every partial and result is at g too (input or output
  buffer). A message reads and writes contiguous offsets on one channel in one step, so on a connection-channel
  in a home step it covers one run of consecutive g of the units the step moves there: the runs of the
  transfers' intervals [v P0 + lo, v P0 + hi) are a lower bound of its messages, at the sender and the
  receiver alike. More instances only split runs (an instance's units of consecutive shards are not adjacent),
  and so do the message-size cap and a change of buffer.
* Other steps (a reduce-scatter's reductions into scratch accumulators): at least one message per
  connection-channel and step.
* A copy step that delivers a unit its receiver holds (or delivers twice) lets the builder drop units, which
  can remove a run: no bound is given then (`ScheduleBounds.of` returns None), nor for the all-to-all.

Every message is one send at its sender and one receive at its receiver; a step of a thread block holds at
most one of each, and only a combined fused layout merges a receive with a send. So a gpu's steps are at least
its receives plus its sends (separate or unfused tbs) or the larger of the two (fused). Thread blocks are
exact at one instance: one per (peer, direction, channel) with traffic (separate), or per channel the larger
of its in- and out-peers (combined); with more instances they are a lower bound, and the average steps per
tb is left out.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from services.synthesis.schedule.ir import Collective, Op, Schedule

from ..common.arrays import lexorder
from ..lowering.channels import ShardChannels
from ..msccl.threadblocks import thread_block_counts

__all__ = ["ScheduleBounds"]


class ScheduleBounds:
    """Messages.lower_bounds for a candidate (schedule, shard classes, channels, instances) without its table.
    Build with `ScheduleBounds.of`, or `for_schedule` for several channel counts (None when no sound bound
    exists)."""

    def __init__(self, nodes: int, width: int, conn: np.ndarray, per_conn: np.ndarray, per_group_max: int,
                 recv: np.ndarray, send: np.ndarray, instances: int):
        """conn: the distinct connection-channels ((sender x n + receiver) x width + channel), per_conn their
        messages (at least), recv/send per gpu."""
        n = nodes
        self.instances = instances
        self.steps_per_tb = int(per_conn.max(initial=0))
        self.messages_per_connection_step = per_group_max
        self.recv, self.send = recv, send
        u, w, ch = conn // (width * n), (conn // width) % n, conn % width
        self.tbs_combined, self.tbs_separate, self.tbs_per_channel, _ = thread_block_counts(
            u * width + ch, w * width + ch, width, n)

    @classmethod
    def of(cls, schedule: Schedule, classes: ShardChannels, channels: int,
           instances: int = 1) -> "ScheduleBounds | None":
        """The bounds of `schedule` at `channels` (None when no sound bound exists)."""
        return cls.for_schedule(schedule, classes, instances)(channels)

    @classmethod
    def for_schedule(cls, schedule: Schedule, classes: "ShardChannels | Callable[[], ShardChannels]",
                     instances: int = 1) -> "Callable[[int], ScheduleBounds | None]":
        """channels -> the bounds at that channel count; what does not depend on it is done once here (the fit
        search asks for several counts of one lowering). `classes` may be a function returning them, called only
        for more than one channel (on one, every shard's class is 0)."""
        coll = schedule.collective
        if schedule.transfers == 0 or coll is Collective.ALLTOALL:
            return lambda channels: None
        n, P0, steps = schedule.nodes, schedule.grid, schedule.steps
        i64 = np.int64                         # no copy of the columns already int64 (nothing here writes them)
        step = np.asarray(schedule.step_of, i64)
        u, w = np.asarray(schedule.sender, i64), np.asarray(schedule.receiver, i64)
        v, lane = np.asarray(schedule.source, i64), np.asarray(schedule.lane, i64)
        lo, hi = np.asarray(schedule.lo, i64), np.asarray(schedule.hi, i64)
        copy = schedule.ops[step - 1] == Op.COPY
        cw, cv, clo, chi = w[copy], v[copy], lo[copy], hi[copy]
        if np.any(cw == cv):                   # a unit delivered to its owner would be dropped
            return lambda channels: None
        o = lexorder((clo, cv, cw))
        if np.any((cw[o][1:] == cw[o][:-1]) & (cv[o][1:] == cv[o][:-1]) & (clo[o][1:] < chi[o][:-1])):
            return lambda channels: None        # delivered twice: the second is dropped
        home = copy | (coll is Collective.ALLREDUCE)
        lanes = int(lane.max()) + 1
        link = u * n + w
        g_lo = np.where(home, v * P0 + lo, 0)
        g_hi = np.where(home, v * P0 + hi, 0)

        def at(channels: int) -> ScheduleBounds:
            width = lanes * channels
            cls_of = 0 if channels == 1 else (classes() if callable(classes) else classes).of(v, channels)
            group = ((link * width + lane * channels + cls_of) * (steps + 1)) + step
            o = lexorder((g_lo, group))
            grp, a, b, hm = group[o], g_lo[o], g_hi[o], home[o]
            same = grp[1:] == grp[:-1]
            run_start = np.r_[True, ~(same & (~hm[1:] | (a[1:] == b[:-1])))]     # other steps: one run per group
            group_start = np.r_[True, ~same]
            per_group = np.bincount(np.cumsum(group_start)[run_start] - 1)
            gconn = grp[group_start] // (steps + 1)            # sorted
            conn_start = np.r_[True, gconn[1:] != gconn[:-1]]
            per_conn = np.add.reduceat(per_group, np.flatnonzero(conn_start))
            uconn = gconn[conn_start]
            cu, cw2 = uconn // (width * n), (uconn // width) % n
            recv = np.bincount(cw2, weights=per_conn, minlength=n).astype(np.int64)
            send = np.bincount(cu, weights=per_conn, minlength=n).astype(np.int64)
            return cls(n, width, uconn, per_conn, int(per_group.max()), recv, send, instances)
        return at

    def lower_bounds(self, opt, per_gpu: bool = True) -> dict:
        """The keys of Messages.lower_bounds, as lower bounds (module docstring)."""
        tbs = self.tbs_combined if opt.combined else self.tbs_separate
        out = {"steps_per_tb": self.steps_per_tb, "tbs_per_gpu": tbs, "tbs_per_channel": self.tbs_per_channel,
               "messages_per_connection_step": self.messages_per_connection_step, "steps_per_gpu": None,
               "steps_per_tb_avg": None}
        if per_gpu:
            steps = np.maximum(self.recv, self.send) if opt.combined and opt.fuse else self.recv + self.send
            out["steps_per_gpu"] = steps
            # the average needs the exact tbs (one instance); with more, a tb count only bounded below
            avg = -(-steps // np.maximum(tbs, 1))
            out["steps_per_tb_avg"] = int(avg.max(initial=0)) if self.instances == 1 else 0
        return out
