"""Schedule -> MSCCL program (paper section 7; reference section 2), as passes over the instruction table of
services.compiler.msccl.ir, each pass a module beside this one:

1. messages      every transfer as send and receive rows, one message per contiguous run (`build_messages`)
2. threadblocks  a thread block per (receive peer, send peer, channel), paired by a matching
3. fusion        a receive forwarded unchanged in the next step fused with its send (rcs / rrcs / rrs)
4. order         each tb's rows by (comm step, phase, contribution rank, send order)
5. dependencies  the waits on other tbs (RAW, WAR, WAW per chunk), the first on the row, the rest on nops

`build_program` runs passes 2-5 over pass 1's `Messages`; services.compiler.text.msccl prints the result.
"""
from __future__ import annotations

import numpy as np

from services.synthesis.schedule.ir import Schedule

from ..common.arrays import lexorder, unique
from ..runtimes import RuntimeProfile
from .dep_kernels import xml_positions
from .dependencies import dependencies
from .fusion import apply_fusion, rrs_predicate
from .ir import MscclOptions, MscclProgram
from .messages import Messages, build_messages
from .order import receive_order
from .order_kernels import tb_order
from .threadblocks import assign_thread_blocks, place_local

__all__ = ["build_program"]


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
    tb, tbs, pairs = assign_thread_blocks(ops, opt, n, lay, msgs.connections())
    rrs_pred = None
    if opt.fuse and pairs[0].size:
        W, G = lay.results()
        hb, ho = lay.home(W, G)
        hk = lay.alias_key(W, hb, ho) if both else lay.plain_key(hb, ho)
        result_keys = unique(W.astype(np.int64) << 42 | hk)
        rrs_pred = rrs_predicate(ops, lay, both, result_keys)
    ops, tb, fused = apply_fusion(ops, tb, pairs, opt.fuse, rrs_pred)
    # local instructions: onto the gpu's least-loaded tbs, round robin (a copy tb when the gpu has none)
    local = tb < 0
    if local.any():
        tb = place_local(ops, tb, tbs, n)
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
    tie = receive_order(ops, tb)
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
    (d_op, d_tb, d_idx), idx, tb_start = dependencies(ops, tb, n_tbs, lay, both)
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
