"""Fit, don't fail: the MSCCL program that fits a runtime's limits at the least predicted cost.

Every candidate computes the same collective correctly; they differ in what the runtime's limits see:

1. the exact lowering (the schedule's own chunk grid, cost unchanged), then the discrete chunked BFB with
   fewer chunks per shard P (Theorem 20 bounds its bandwidth loss by about d/P; the loss is measured and
   reported as the predicted-time cost);
2. for each lowering, the program options in order of preference (fit_msccl): one thread block per (receive
   peer, send peer, channel) with fused instructions; separate send and receive thread blocks (which need no
   buffering on connections to make progress), first with a connection's messages dealt over the channels
   (Messages.by_message: the fewest per tb, ceil(M / c)), then with every shard on its class's channel
   (a send waits only on its own channel's receive tbs); more channels, which spread a link's messages over
   more thread blocks (fewer steps per tb, more tbs); scratch consolidation, which merges a link's
   non-contiguous pieces of one step into one message (fewer sends and receives, more local copies).

A candidate is abandoned as soon as a limit is exceeded, before its dependencies are computed (the limits
that only grow later, steps per tb and parser nodes, are checked again after). When the program is small
enough it is also simulated (services.compiler.check.msccl) with the runtime's connection buffering; a larger
one is proved to run by the cycle test of its waits (services.compiler.check.deadlock, linear in its steps), and a
program that does not run is abandoned too. Combined thread blocks too large to simulate are refused before they
are built when they need more than half the runtime's buffering (30 of 75 such programs on 8-64 ranks deadlock,
and building one to find out costs seconds at 1024 ranks). The first candidate that passes wins; if none does,
the error names the limit the most promising candidate hit and lists what was tried.

Splitting by size range is the runtimes' own mechanism (several files with disjoint minBytes/maxBytes windows,
e.g. LL for small messages and Simple above); the compile options min_bytes, max_bytes and proto produce them.
"""
from __future__ import annotations

import time
from fractions import Fraction
from dataclasses import dataclass, field, replace
from functools import cache, partial

import numpy as np

from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective, Schedule
from services.synthesis.topology.graph import Topology

from ..check.deadlock import deadlock
from ..check.msccl_simulate import SIMULATE_MAX_STEPS, simulable
from ..common.arrays import unique_counts
from ..errors import CompileError
from ..lowering.channels import ShardChannels, shard_classes
from ..lowering.layout import AlltoallPairs
from ..lowering.grid import Lowered, chunked_bfb, chunks_per_shard
from ..msccl.ir import MscclOptions, MscclProgram
from ..msccl.messages import Messages, build_messages
from ..msccl.program import build_program
from ..runtimes import RuntimeProfile
from .bounds import ScheduleBounds

__all__ = ["FitRequest", "Attempt", "Fitted", "fit_msccl", "check_program_limits"]

@dataclass(frozen=True)
class FitRequest:
    """What the caller fixed (None: the search may choose)."""

    instances: int = 1
    channels: int | None = None
    mode: str = "out"
    consolidate: bool | None = None
    combined: bool | None = None
    fuse: bool = True
    max_chunks: int = 64
    allow_resolve: bool = True
    proto: str = "Simple"
    simulate: bool = True
    simulate_max_steps: int = SIMULATE_MAX_STEPS   # larger programs are checked by their limits, not simulated
    deadline_s: float | None = None
    progress: object = None             # progress(message) after every candidate


@dataclass
class Attempt:
    chunks: int
    lowering: str
    options: str
    ok: bool
    limit: str | None = None
    reason: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"chunks": self.chunks, "lowering": self.lowering, "options": self.options, "ok": self.ok,
                "limit": self.limit, "reason": self.reason, "seconds": round(self.seconds, 3)}


@dataclass
class Fitted:
    program: MscclProgram
    lowered: Lowered
    options: MscclOptions
    attempts: list[Attempt] = field(default_factory=list)


def _limit_error(limit: str, msg: str, value, maximum, gpu=None, tb=None) -> CompileError:
    return CompileError(msg, limit=limit, value=value, maximum=maximum, gpu=gpu, tb=tb)


def check_program_limits(stats: dict, profile: RuntimeProfile, nodes: int, *, final: bool) -> None:
    """Raise CompileError for the first limit of `profile` the program exceeds. Before dependencies are known
    (final=False) the instruction counts are lower bounds of the steps."""
    P = profile
    if nodes > P.max_children:
        raise _limit_error("max_children", f"{nodes} ranks: the runtime's XML parser keeps at most {P.max_children} "
                                           f"children per element (MAX_SUBS), so <algo> holds at most "
                                           f"{P.max_children} gpus", nodes, P.max_children)
    if stats["nchannels"] > P.max_channels:
        raise _limit_error("max_channels", f"the program needs {stats['nchannels']} channels; the {P.name} runtime "
                                           f"has {P.max_channels} (MAXCHANNELS)", stats["nchannels"], P.max_channels)
    tpg = stats["tbs_per_gpu"]
    if tpg.max() > P.max_tbs:
        g = int(tpg.argmax())
        raise _limit_error("max_tbs", f"gpu {g} needs {int(tpg.max())} thread blocks; the {P.name} runtime allows "
                                      f"{P.max_tbs} (MSCCL_MAX_NUM_THREAD_BLOCKS)", int(tpg.max()), P.max_tbs, gpu=g)
    steps = stats["steps_per_tb"] if final else stats["ops_per_tb"]
    if steps.size and steps.max() > P.max_steps:
        t = int(steps.argmax())
        g = int(stats["tb_gpu"][t])
        raise _limit_error("max_steps", f"gpu {g} thread block (send {int(stats['tb_send'][t])}, recv "
                                        f"{int(stats['tb_recv'][t])}, chan {int(stats['tb_chan'][t])}) needs "
                                        f"{'at least ' if not final else ''}{int(steps.max())} steps; the {P.name} "
                                        f"runtime allows {P.max_steps} per thread block (MSCCL_MAX_NUM_STEPS)",
                           int(steps.max()), P.max_steps, gpu=g)
    per_gpu = np.bincount(stats["tb_gpu"], weights=steps, minlength=nodes) if steps.size else np.zeros(nodes)
    parser = 1 + nodes + tpg + per_gpu.astype(np.int64)
    if parser.max() >= P.max_parser_nodes:
        g = int(parser.argmax())
        raise _limit_error("max_parser_nodes", f"gpu {g}'s part of the file is {'at least ' if not final else ''}"
                                               f"{int(parser.max())} parser nodes (the algo, {nodes} gpus, its "
                                               f"{int(tpg[g])} thread blocks and their steps); the runtime's XML "
                                               f"parser is limited to {P.max_parser_nodes} (MAX_NODES)",
                           int(parser.max()), P.max_parser_nodes - 1, gpu=g)
    for what, peers in (("sending", stats["tb_send"]), ("receiving", stats["tb_recv"])):
        m = peers >= 0
        if m.any():
            key = stats["tb_gpu"][m] * 4096 + stats["tb_chan"][m]
            _, c = unique_counts(key)
            if c.max() > P.max_tbs_per_channel:
                raise _limit_error("max_tbs_per_channel", f"{int(c.max())} thread blocks {what} on one channel of a "
                                                          f"gpu; the runtime allows {P.max_tbs_per_channel}",
                                   int(c.max()), P.max_tbs_per_channel)
    biggest = max(int(stats["scratch"].max()) if stats["scratch"].size else 0, stats["i_chunks"], stats["o_chunks"])
    if biggest - 1 > P.max_offset:
        raise _limit_error("max_offset", f"chunk offsets up to {biggest - 1}; the runtime stores offsets as 16-bit "
                                         f"integers (max {P.max_offset})", biggest - 1, P.max_offset)
    if final and stats.get("max_dep_tb", -1) > P.max_dep_tb:
        raise _limit_error("max_dep_tb", f"a dependency on thread block {stats['max_dep_tb']}; the runtime stores "
                                         f"depid as int8 (max {P.max_dep_tb})", stats["max_dep_tb"], P.max_dep_tb)


def _buffering_error(worst: int, depth: int, at_least: bool = False) -> CompileError:
    """A combined program whose connections carry at most half the runtime's buffered messages per step cannot
    deadlock (a sender is then never more than a step ahead of a receiver that is itself waiting); one that
    carries more is accepted only when the simulator ran it."""
    return CompileError(f"combined thread blocks with {'at least' if at_least else 'up to'} {worst} messages per "
                        f"connection and step rely on more buffering than the runtime's {depth} messages per "
                        f"connection, and the program is too large to simulate", limit="simulation")


def _check_buffering_floor(one: ScheduleBounds, channels: int, profile: RuntimeProfile, *, may_simulate: bool,
                           proto: str, simulate_max_steps: int, table: tuple[int, int] = (0, 0)) -> None:
    """Refuse combined thread blocks on `channels` channels from the one-channel schedule bounds `one`, before the
    shard classes and the bounds at `channels` are computed: the buffering check of `_check_lower_bounds`, on
    lower bounds of what it reads. Dealing a connection-step's units over c channels splits its runs (a run of a
    channel's units lies inside one run of all of them, and the intervals of one step on one link are disjoint),
    so the busiest connection-channel-step carries at least ceil(m / c) of the m messages on one channel, and a
    gpu's receives and sends (so its steps) only grow: a program large on one channel is large on c. When the
    one-channel message table is already built (an earlier candidate needed it), its exact counts (`table`: its
    most messages per connection-step, Messages.fused_steps_floor) replace the schedule's bounds, which they can
    only exceed: a connection-step's messages on
    one channel are runs of units, which the schedule's intervals bound from below (a reduce step's units need
    not lie contiguously)."""
    if channels <= 1:
        return
    fused_steps = np.maximum(one.recv, one.send)       # the smaller of the two per-gpu bounds (fused)
    large = max(int(fused_steps.sum()), table[1]) > simulate_max_steps
    if large or not may_simulate:
        m = max(one.messages_per_connection_step, table[0])
        depth, worst = profile.fifo_messages(proto), -(-m // channels)
        if 2 * worst > depth:
            raise _buffering_error(worst, depth, at_least=True)


def _classes_of(schedule: Schedule, chans: list[int]) -> ShardChannels:
    return shard_classes(schedule) if chans != [1] else ShardChannels.identity(schedule.nodes)


def _alltoall_pairs(schedule: Schedule, instances: int) -> AlltoallPairs | None:
    return AlltoallPairs(schedule, instances) if schedule.collective is Collective.ALLTOALL else None


def _channel_counts(req: FitRequest, profile: RuntimeProfile, lanes: int) -> list[int]:
    if req.channels is not None:
        return [req.channels]
    out, c = [], 1
    while lanes * req.instances * c <= profile.max_channels:
        out.append(c)
        c *= 2
    return out or [1]


def _lowerings(schedule: Schedule, topology: Topology, req: FitRequest, profile: RuntimeProfile):
    """(P0, Lowered) candidates: the exact grid if it fits the offsets and max_chunks, then the chunked BFB
    with fewer chunks (largest first, halving), built lazily."""
    n = schedule.nodes
    tau0 = measured_tau(schedule, topology.degree)
    cap = (profile.max_offset + 1) // (n * req.instances)
    bound = min(req.max_chunks, cap)
    if bound < 1:
        raise CompileError(f"{n} nodes x {req.instances} instances do not fit the runtime's "
                           f"{profile.max_offset + 1} chunk offsets (int16)", limit="max_offset",
                           value=n * req.instances, maximum=profile.max_offset + 1)
    p0 = chunks_per_shard(schedule)
    if p0 <= bound:
        yield p0, (lambda: Lowered(schedule, p0, "exact", tau0, tau0, schedule.steps))
    if not req.allow_resolve or schedule.collective not in ALLGATHER_FAMILY:
        if p0 > bound:
            raise CompileError(f"the {schedule.collective.value} schedule has {p0} chunks per block; {n} ranks x "
                               f"{req.instances} instances allow at most {bound} (max_chunks {req.max_chunks}, "
                               f"{profile.max_offset + 1} chunk offsets) and it has no chunked re-solve",
                               limit="max_chunks" if req.max_chunks < cap else "max_offset", value=p0, maximum=bound)
        return
    p = min(bound, p0 - 1) if p0 <= bound else bound
    seen = set()
    while p >= 1:
        if p not in seen:
            seen.add(p)

            def make(p=p):
                s = chunked_bfb(topology, schedule.collective, p)
                s.topology = schedule.topology or topology.expr
                return Lowered(s, p, "chunked-bfb", tau0, measured_tau(s, topology.degree), schedule.steps)
            yield p, make
        p //= 2


# what a failed candidate says about the next ones
_MORE_CHANNELS_HELP = {"max_steps"}                  # spreading a link's messages shortens each tb
_CHANNELS_ONLY_HURT = {"max_tbs", "max_tbs_per_channel", "max_channels"}   # a channel's tbs split with it
_NEXT_LOWERING = {"max_parser_nodes", "max_offset", "max_children", "max_count"}


def fit_msccl(schedule: Schedule, topology: Topology, profile: RuntimeProfile, req: FitRequest,
              simulate_fn=None) -> Fitted:
    """The first program (see the module docstring) that fits `profile`; CompileError when none does.

    Search order per lowering: consolidation off, then on; channels 1, 2, 4, ...; thread blocks combined, then
    separate with the messages dealt over the channels, then separate with shard classes (`_layouts`; the
    class table serves both class layouts, and the one-channel table, built once per lowering and
    consolidation, every dealing). A candidate's failure decides what is tried next: too
    many steps per tb tries the other layout and more channels; a program that does not run with the runtime's
    buffering (combined tbs rely on it) tries separate tbs; a limit no option changes (parser nodes,
    offsets) moves on to fewer chunks."""
    attempts: list[Attempt] = []
    first_error: CompileError | None = None
    t_start = time.perf_counter()
    lanes = int(schedule.lane.max()) + 1 if schedule.transfers else 1
    if schedule.nodes > profile.max_children:
        raise _limit_error("max_children", f"{schedule.nodes} ranks: the runtime's XML parser keeps at most "
                                           f"{profile.max_children} children per element (MAX_SUBS), so <algo> holds "
                                           f"at most {profile.max_children} gpus; no program for this runtime can "
                                           f"describe {schedule.nodes} ranks", schedule.nodes, profile.max_children)
    combined_ok = [True, False] if req.combined is None else [req.combined]
    consolidations = [False, True] if req.consolidate is None else [req.consolidate]
    chans = _channel_counts(req, profile, lanes)
    for p0, make in _lowerings(schedule, topology, req, profile):
        try:
            low = make()
        except Exception as exc:                       # a re-solve that cannot run here: try fewer chunks
            attempts.append(Attempt(p0, "chunked-bfb", "-", False, "resolve", str(exc)))
            continue
        next_lowering = False
        # each computed on first need, once per lowering: the shard classes (only candidates with shard classes on
        # channels > 1 need them), the schedule bounds per channel count, and an all-to-all's held pairs (every
        # table of the lowering's candidates shares them: they depend on the schedule and instances only)
        classes = cache(partial(_classes_of, low.schedule, chans))
        bounds_at = cache(ScheduleBounds.for_schedule(low.schedule, classes, req.instances))
        floor = partial(bounds_at, 1)               # the one-channel bounds (no shard classes needed)
        pairs = cache(partial(_alltoall_pairs, low.schedule, req.instances))
        for cons in consolidations:
            dead: set[tuple[bool, bool]] = set()    # layouts more channels cannot help (their tbs only grow)
            one_channel: list[Messages] = []        # the table on one channel, dealt by message at every count

            def on_one_channel(cons=cons) -> Messages:
                if not one_channel:
                    opt1 = MscclOptions(instances=req.instances, channels=1, mode=req.mode, consolidate=cons)
                    one_channel.append(build_messages(low.schedule, profile, opt1, pairs=pairs()))
                return one_channel[0]
            min_c = 1
            for c in chans:
                if c < min_c:
                    continue
                if req.deadline_s is not None and time.perf_counter() - t_start > req.deadline_s:
                    raise _summary_error(first_error, attempts, profile, "the compile deadline passed")
                base = MscclOptions(instances=req.instances, channels=c, mode=req.mode, consolidate=cons)
                layouts = _layouts(combined_ok, c)
                tables: dict[bool, Messages] = {}   # by by_message, built on first need, shared by the layouts
                wanted: list[int] = []              # per layout: the fewest channels that may fit its steps per tb
                # without consolidation the schedule bounds what the class table would show (fit.bounds)
                # computed on first need: combined tbs may be refused from the one-channel bounds before it
                pre = partial(bounds_at, c)
                skip: set[tuple[bool, bool]] = set()
                for i, (comb, by_msg) in enumerate(layouts):
                    if (comb, by_msg) in dead or (comb, by_msg) in skip:
                        continue
                    opt = replace(base, combined=comb, fuse=req.fuse and comb, by_message=by_msg)

                    def messages(opt=opt) -> Messages:
                        if c == 1:
                            return on_one_channel()
                        if opt.by_message not in tables:
                            tables[opt.by_message] = (on_one_channel().by_message(c) if opt.by_message else
                                                      build_messages(low.schedule, profile, opt, classes(), pairs()))
                        return tables[opt.by_message]
                    cheap_first = opt.fuse and any(not k[0] and k not in dead for k in layouts[i + 1:])
                    result = _try(low, p0, opt, messages, None if cons or by_msg else pre,
                                  None if cons or not comb else floor, schedule, profile, req,
                                  simulate_fn, attempts, cheap_first, one_channel[0] if one_channel else None)
                    if isinstance(result, Fitted):
                        return result
                    if first_error is None or (first_error.limit == "simulation" and result.limit != "simulation"):
                        first_error = result
                    if result.limit in _NEXT_LOWERING:
                        next_lowering = True
                        break
                    if result.limit in _CHANNELS_ONLY_HURT:
                        dead.add((comb, by_msg))
                    elif result.limit in _MORE_CHANNELS_HELP:
                        # x channels (a multiple of c) divide a connection's messages at best evenly; dealt by
                        # message they divide them exactly evenly (the one-channel table's count, over x)
                        need = getattr(result, "lower_bound", None)
                        if need is not None and by_msg:
                            need = Fraction(on_one_channel().lower_bounds(opt, per_gpu=False)["steps_per_tb"], c)
                            # shard classes only cut the one-channel messages further: a connection-channel
                            # carries at least as many as dealt
                            skip.add((False, False))
                        fits = [x for x in chans if x > c and (need is None or -(-need * c // x) <= profile.max_steps)]
                        if fits:
                            wanted.append(fits[0] if need is not None else min(x for x in chans if x > c))
                tables.clear()
                if next_lowering or not wanted or all(k in dead for k in _layouts(combined_ok, 2)):
                    break
                min_c = min(wanted)
            if next_lowering:
                break
    raise _summary_error(first_error, attempts, profile, None)


def _layouts(combined_ok: list[bool], channels: int) -> list[tuple[bool, bool]]:
    """(combined, by_message) in the order tried: combined tbs with shard classes (their receives fuse with the
    forwarding sends), then separate tbs with the messages dealt over the channels (the fewest per thread block,
    Messages.by_message), then separate with shard classes (a send waits on the receive tbs of its own channel
    only, fewer nops). On one channel the two dealings are the same table."""
    out = []
    for comb in combined_ok:
        if comb:
            out.append((True, False))
        else:
            out += [(False, True), (False, False)] if channels > 1 else [(False, False)]
    return out


def _try(low: Lowered, p0: int, opt: MscclOptions, messages, pre, floor, schedule: Schedule,
         profile: RuntimeProfile, req: FitRequest, simulate_fn, attempts: list[Attempt], cheap_first: bool = False,
         one_table: Messages | None = None):
    """One candidate: for combined tbs the buffering floor from the one-channel schedule bounds (`floor()`) and
    the one-channel table when an earlier candidate built it (`one_table`), its
    bounds from the schedule (`pre()`, when there are some), then from its message table (`messages()`, built on
    first need), then the program, its limits and its run."""
    t0 = time.perf_counter()
    att = Attempt(p0, low.method, opt.label(), False)
    attempts.append(att)

    def budget(stats):
        check_program_limits(stats, profile, schedule.nodes, final=False)

    try:
        def check(bounds):
            _check_lower_bounds(bounds, opt, profile, schedule.nodes, may_simulate=simulate_fn is not None and
                                req.simulate, simulate_max_steps=req.simulate_max_steps, proto=req.proto,
                                cheap_first=cheap_first)
        one = floor() if floor is not None else None
        if one is not None and opt.combined:
            _check_buffering_floor(one, opt.channels, profile, may_simulate=simulate_fn is not None and req.simulate,
                                   proto=req.proto, simulate_max_steps=req.simulate_max_steps,
                                   table=(0, 0) if one_table is None else (
                                       one_table.lower_bounds(opt, per_gpu=False)["messages_per_connection_step"],
                                       one_table.fused_steps_floor()))
        bounds = pre() if pre is not None else None
        if bounds is not None:
            check(bounds)
        msgs = messages()
        check(msgs)
        prog = build_program(low.schedule, profile, opt, budget=budget, messages=msgs)
        prog.stats["max_dep_tb"] = prog.max_dep_tb
        check_program_limits(prog.stats, profile, schedule.nodes, final=True)
        small = simulable(int(prog.stats["steps_per_tb"].sum()), int(prog.tb_gpu.size),
                          int(np.count_nonzero(prog.hasdep)), req.simulate_max_steps)
        if not (simulate_fn is not None and req.simulate and small):   # too large to simulate: prove progress
            stuck = deadlock(prog, profile.fifo_messages(req.proto))
            if stuck is not None:
                raise CompileError(f"the program does not run with the runtime's connection buffering: {stuck}",
                                   limit="simulation")
        else:
            problem = simulate_fn(prog, low, opt)
            if problem is not None:
                kind, msg = problem
                if kind != "deadlock":           # a wrong result or a race is our bug, not a limit
                    raise RuntimeError(f"internal error: the compiled program fails its check ({opt.label()}): {msg}")
                raise CompileError(f"the program does not run with the runtime's connection buffering: {msg}",
                                   limit="simulation")
    except CompileError as exc:
        att.limit, att.reason, att.seconds = exc.limit, str(exc), time.perf_counter() - t0
        if exc.limit is None:                      # the schedule itself cannot be lowered
            raise
        if req.progress is not None:
            req.progress(f"P={p0} [{opt.label()}]: {exc.limit}")
        # the traceback holds this frame and with it the program: a kept error must not keep them alive
        return exc.with_traceback(None)
    att.ok, att.seconds = True, time.perf_counter() - t0
    return Fitted(prog, low, opt, attempts)


def _check_lower_bounds(msgs: Messages | ScheduleBounds, opt: MscclOptions, profile: RuntimeProfile, nodes: int, *,
                        may_simulate: bool, proto: str, simulate_max_steps: int = SIMULATE_MAX_STEPS,
                        cheap_first: bool = False) -> None:
    """Refuse a candidate from its messages alone (Messages.lower_bounds), or before they are built from its
    schedule (ScheduleBounds), when its thread-block layout cannot fit: parser nodes, thread blocks (exact), tbs
    per channel (exact), steps per tb (a connection's messages; a gpu's steps over its tbs), and for combined tbs
    too large to simulate the connection buffering they rely on.

    cheap_first (fit_msccl sets it for combined fused tbs when the separate layout of the same messages is
    tried next): the limits that need no per-gpu step count go first, since counting the receives fusion could
    merge costs as much as the rest (0.75 s at 1024 ranks). A candidate refused by one of them is not checked
    for parser nodes; the separate layout's parser bound, checked next, is at least as large (more tbs, no
    fusion), so the search reaches the same decision."""
    if cheap_first:
        _check_layout_limits(msgs.lower_bounds(opt, per_gpu=False), profile)
    lb = msgs.lower_bounds(opt)
    per_gpu, tbs = lb["steps_per_gpu"], lb["tbs_per_gpu"]
    if per_gpu.size:
        parser = 1 + nodes + tbs + per_gpu
        g = int(parser.argmax())
        if parser[g] >= profile.max_parser_nodes:
            raise _limit_error("max_parser_nodes", f"gpu {g}'s part of the file needs at least {int(parser[g])} parser "
                                                   f"nodes (the algo, {nodes} gpus, {int(tbs[g])} thread blocks and "
                                                   f"at least {int(per_gpu[g])} steps); the runtime's XML parser "
                                                   f"is limited to {profile.max_parser_nodes} (MAX_NODES)",
                               int(parser[g]), profile.max_parser_nodes - 1, gpu=g)
    _check_layout_limits(lb, profile)
    if lb["steps_per_tb_avg"] > profile.max_steps:
        raise _limit_error("max_steps", f"a gpu's {lb['steps_per_tb_avg']} steps per thread block on average exceed the "
                                        f"{profile.name} runtime's {profile.max_steps} per thread block "
                                        f"(MSCCL_MAX_NUM_STEPS)", lb["steps_per_tb_avg"], profile.max_steps)
    large = int(per_gpu.sum()) > simulate_max_steps
    if opt.combined and (large or not may_simulate):
        depth, worst = profile.fifo_messages(proto), lb["messages_per_connection_step"]
        if 2 * worst > depth:
            raise _buffering_error(worst, depth)


def _check_layout_limits(lb: dict, profile: RuntimeProfile) -> None:
    """Thread blocks per gpu and per channel (exact) and a connection's messages (steps per tb)."""
    tbs = lb["tbs_per_gpu"]
    if tbs.size:
        g = int(tbs.argmax())
        if tbs[g] > profile.max_tbs:
            raise _limit_error("max_tbs", f"gpu {g} needs {int(tbs[g])} thread blocks; the {profile.name} runtime "
                                          f"allows {profile.max_tbs} (MSCCL_MAX_NUM_THREAD_BLOCKS)", int(tbs[g]),
                               profile.max_tbs, gpu=g)
    if lb["tbs_per_channel"] > profile.max_tbs_per_channel:
        raise _limit_error("max_tbs_per_channel", f"{lb['tbs_per_channel']} thread blocks sending or receiving on one "
                                                  f"channel of a gpu; the runtime allows {profile.max_tbs_per_channel}",
                           lb["tbs_per_channel"], profile.max_tbs_per_channel)
    if lb["steps_per_tb"] > profile.max_steps:
        err = _limit_error("max_steps", f"a connection carries {lb['steps_per_tb']} messages on one channel, so its "
                                        f"thread block needs at least that many steps; the {profile.name} runtime "
                                        f"allows {profile.max_steps} per thread block (MSCCL_MAX_NUM_STEPS)",
                           lb["steps_per_tb"], profile.max_steps)
        err.lower_bound = lb["steps_per_tb"]
        raise err


def _summary_error(err: CompileError | None, attempts: list[Attempt], profile: RuntimeProfile, why) -> CompileError:
    tried = "; ".join(f"P={a.chunks} {a.lowering} [{a.options}]: {a.limit}" for a in attempts[:12])
    more = f" (and {len(attempts) - 12} more)" if len(attempts) > 12 else ""
    head = str(err) if err is not None else "no candidate could be built"
    msg = (f"nothing fits the {profile.name} runtime: {head}" + (f"; {why}" if why else "")
           + f". Tried {len(attempts)} candidates: {tried}{more}")
    out = CompileError(msg, limit=err.limit if err else "fit", value=err.value if err else None,
                       maximum=err.maximum if err else None, gpu=err.gpu if err else None)
    out.attempts = [a.as_dict() for a in attempts]
    out.timed_out = why is not None
    return out
