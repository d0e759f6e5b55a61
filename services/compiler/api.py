"""Stable entry points: `compile_schedule` and `check_xml` (used by the service, the worker and the CLI).

    art = compile_schedule(schedule, topology, fmt="msccl", dialect="executor")
    art.xml, art.steps, art.chunks, art.loss, art.as_dict()
    report = check_xml(art.xml, "msccl")          # CheckReport: ok, errors[0].kind/.message, comm_steps ...
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.topology.graph import Topology

from .errors import CheckReport, CompileError
from .limits import DIALECTS, limits_for
from .lowering import DEFAULT_MAX_CHUNKS, lower
from .msccl import MscclBuilder, check_limits, finalize, to_xml
from .msccl_check import check_msccl

FORMATS = ("msccl", "oneccl")


@dataclass
class CompiledArtifact:
    """A compiled schedule. `steps` is the number of communication steps (T_L = alpha * steps) the XML
    realizes, `chunks` the chunks per shard P of the integer grid (the XML's chunk loop is N * P,
    `chunks_per_loop`), `loss` the relative bandwidth loss of lowering (tau ratio - 1; 0.0 when exact)."""

    xml: str
    fmt: str
    collective: str
    topology: str
    nodes: int
    steps: int
    chunks: int
    chunks_per_loop: int
    loss: float
    tau_ratio: float
    tau: float
    tau_original: float
    lowering: str                       # "exact" | "chunked-bfb"
    original_steps: int
    dialect: str | None = None          # msccl only
    channels: int = 1
    inplace: bool = False
    consolidated: bool = False
    threadblocks: int | None = None     # most thread blocks on one gpu (msccl)
    max_tb_steps: int | None = None     # most XML steps in one thread block (msccl) / instructions of one rank (oneccl)
    messages: int = 0                   # point-to-point messages per chunk loop
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def xml_bytes(self) -> int:
        return len(self.xml.encode())

    def as_dict(self, with_xml: bool = False) -> dict:
        d = asdict(self)
        if not with_xml:
            d.pop("xml")
        d["xml_bytes"] = self.xml_bytes
        return d


def _collective_name(c: Collective, dialect: str) -> str:
    if c is Collective.REDUCESCATTER:
        return limits_for(dialect).reducescatter
    return c.value


def _compile_msccl(low, topology: Topology, *, dialect: str, channels: int, inplace: bool, consolidate,
                   proto: str, min_bytes: int, max_bytes: int, name: str | None, max_steps: int | None):
    limits = limits_for(dialect).with_overrides(max_steps=max_steps)
    if proto not in ("Simple", "LL", "LL128"):
        raise CompileError(f"proto must be Simple, LL or LL128, got {proto!r}", limit="proto", value=proto)
    if consolidate not in (True, False, "auto"):
        raise CompileError(f"consolidate must be True, False or 'auto', got {consolidate!r}")
    s = low.schedule
    lanes = int(s.lane.max()) + 1 if s.transfers else 1
    nchannels = lanes * channels
    if nchannels > limits.max_channels:
        raise CompileError(f"the program needs {nchannels} channels ({lanes} parallel arcs x {channels}); the "
                           f"{limits.dialect} runtime allows at most {limits.max_channels}", limit="max_channels",
                           value=nchannels, maximum=limits.max_channels)
    attempts = [False, True] if consolidate == "auto" else [bool(consolidate)]
    for k, cons in enumerate(attempts):
        b = MscclBuilder(s, channels=channels, inplace=inplace, consolidate=cons, limits=limits)
        gpus = b.build()
        blocks = finalize(gpus)
        try:
            check_limits(gpus, blocks, limits, nchannels, s.nodes)
        except CompileError as e:
            if e.limit == "max_steps" and k + 1 < len(attempts):
                continue                    # auto: retry with scratch consolidation
            raise
        coll = _collective_name(s.collective, dialect)
        xml = to_xml(blocks, gpus, name=name or f"fabricplan {s.collective.value} {topology.expr}", coll=coll,
                     proto=proto, nchannels=nchannels, nchunksperloop=s.nodes * s.grid, inplace=inplace,
                     min_bytes=min_bytes, max_bytes=max_bytes,
                     redop="nop" if s.collective is Collective.ALLGATHER else "sum")
        stats = {"threadblocks": max(len(bl) for bl in blocks),
                 "max_tb_steps": max(len(st) for bl in blocks for _, st in bl),
                 "messages": b.messages, "consolidated": cons and b.consolidated > 0}
        return xml, stats
    raise AssertionError("unreachable")


def compile_schedule(schedule: Schedule, topology: Topology, fmt: str = "msccl", *,
                     dialect: str = "executor", channels: int = 1, max_chunks: int = DEFAULT_MAX_CHUNKS,
                     inplace: bool = False, consolidate="auto", proto: str = "Simple", min_bytes: int = 0,
                     max_bytes: int = 0, name: str | None = None, max_steps: int | None = None,
                     allow_resolve: bool = True, check: bool = False) -> CompiledArtifact:
    """Compile `schedule` (any collective of the IR) on `topology` to MSCCL or oneCCL XML.

    Options:
      dialect       MSCCL runtime: "executor" (msccl-executor-nccl, 64 steps per tb), "rccl" (256) or
                    "legacy" (microsoft/msccl prototype: coll="reduce_scatter", 256 steps).
      channels      split every transfer over this many channels per link (MSCCL; P grows by this factor).
      max_chunks    bound on the chunks per shard P; a schedule on a finer grid is re-solved as the
                    discrete chunked BFB with P <= max_chunks (lowering="chunked-bfb", loss reported).
      allow_resolve False: raise CompileError instead of re-solving.
      inplace       emit an in-place algorithm (inplace=1 outofplace=0) instead of out-of-place.
      consolidate   MSCCL scratch consolidation of non-contiguous sends: True, False or "auto" (only
                    when the plain program exceeds the runtime's steps per thread block).
      proto, min_bytes, max_bytes, name: <algo> attributes (maxBytes=0: no upper limit).
      max_steps     override the dialect's steps-per-thread-block limit.
      check         run check_xml on the result and raise CompileError if it fails.
    Raises CompileError (with .limit, .value, .maximum) when a runtime limit cannot be met.
    """
    if fmt not in FORMATS:
        raise CompileError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", limit="format", value=fmt)
    if fmt == "msccl" and dialect not in DIALECTS:
        raise CompileError(f"unknown MSCCL dialect {dialect!r}; known: {', '.join(DIALECTS)}", limit="dialect",
                           value=dialect)
    t0 = time.perf_counter()
    limits = limits_for(dialect if fmt == "msccl" else "executor")
    if fmt == "msccl" and (not isinstance(channels, int) or not 1 <= channels <= limits.max_channels):
        raise CompileError(f"channels must be an integer in 1..{limits.max_channels} for the {dialect} runtime, got "
                           f"{channels!r}", limit="max_channels", value=channels, maximum=limits.max_channels)
    low = lower(schedule, topology, max_chunks=max_chunks, channels=channels if fmt == "msccl" else 1,
                max_buffer_chunks=limits.max_offset + 1, allow_resolve=allow_resolve)
    warnings = []
    if low.method != "exact":
        warnings.append(f"schedule grid {schedule.grid} exceeds the bound; re-solved as the chunked BFB with "
                        f"P={low.chunks}: tau x{low.tau_ratio:.4f}")
    if fmt == "msccl":
        xml, stats = _compile_msccl(low, topology, dialect=dialect, channels=channels, inplace=inplace,
                                    consolidate=consolidate, proto=proto, min_bytes=min_bytes,
                                    max_bytes=max_bytes, name=name, max_steps=max_steps)
    else:
        from .oneccl import compile_oneccl
        xml, stats = compile_oneccl(low.schedule, topology, inplace=inplace, name=name)
    s = low.schedule
    art = CompiledArtifact(
        xml=xml, fmt=fmt, collective=schedule.collective.value, topology=topology.expr, nodes=s.nodes,
        steps=s.steps, chunks=low.chunks, chunks_per_loop=s.nodes * low.chunks, loss=low.loss,
        tau_ratio=low.tau_ratio, tau=float(low.tau), tau_original=float(low.tau_original), lowering=low.method,
        original_steps=low.steps_original, dialect=dialect if fmt == "msccl" else None,
        channels=channels if fmt == "msccl" else 1, inplace=inplace, seconds=0.0, warnings=warnings, **stats)
    if check:
        rep = check_xml(xml, fmt, dialect=dialect if fmt == "msccl" else None, max_steps=max_steps)
        if not rep.ok:
            raise CompileError(f"the compiled XML fails its check: {rep.error}", limit="check")
    art.seconds = time.perf_counter() - t0
    return art


def check_xml(xml: str, fmt: str = "msccl", *, dialect: str | None = None, simulate: bool = True, fifo: int = 2,
              seed: int = 0, max_steps: int | None = None) -> CheckReport:
    """Validate any MSCCL or oneCCL XML and simulate it on CPU (see msccl_check / oneccl_check).

    dialect: MSCCL runtime whose rules and limits apply (default: "legacy" when coll="reduce_scatter" or
    outofplace is absent, else "executor"). fifo: messages in flight per connection in the simulation
    (default 2: NCCL_STEPS = 8 buffer slots, a chunk takes MSCCL_CHUNKSTEPS = 4; 0 = rendezvous, a send
    completes only when the receiving thread block waits at the matching receive). Returns a CheckReport; `ok` False with `errors[0]` naming the kind, gpu/rank, tb and step.
    """
    if fmt == "msccl":
        return check_msccl(xml, dialect=dialect, simulate=simulate, fifo=fifo, seed=seed, max_steps=max_steps)
    if fmt == "oneccl":
        from .oneccl_check import check_oneccl
        return check_oneccl(xml, simulate=simulate, seed=seed)
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
