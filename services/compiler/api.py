"""Stable entry points: `compile_schedule` and `check_xml` (used by the service, the worker and the CLI).

    art = compile_schedule(schedule, topology, "msccl", runtime="executor")
    art.xml, art.steps, art.chunks, art.loss, art.attempts, art.as_dict()
    report = check_xml(art.xml, "msccl", runtime="executor")     # CheckReport: ok, errors[0].kind/.message ...

Runtimes (services.compiler.runtimes): "executor" (Azure/msccl-executor-nccl), "rccl" (ROCm/rccl) and
"legacy" (microsoft/msccl) read MSCCL XML; "oneccl" names our CPU format (docs/oneccl-xml.md). Each MSCCL
runtime has defaults under which the file runs as written (`runtime_defaults`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.dependency import dependency_curve
from services.synthesis.schedule.ir import Schedule
from services.synthesis.topology.graph import Topology

from .check.msccl import check_msccl
from .check.msccl_simulate import SIMULATE_MAX_STEPS
from .errors import CheckReport, CompileError
from .fit.search import FitRequest, fit_msccl
from .lowering.grid import DEFAULT_MAX_CHUNKS, lower
from .runtimes import PROFILES, Format, Runtime, RuntimeProfile, profile_for  # noqa: F401  (PROFILES: re-exported)
from .text.msccl import to_xml

__all__ = ["FORMATS", "RUNTIMES", "CompiledArtifact", "CompileOptions", "compile_schedule", "check_xml",
           "check_options", "runtime_defaults", "format_of", "exact_chunk_bound"]

FORMATS = tuple(f.value for f in Format)
RUNTIMES = tuple(r.value for r in Runtime)
PROTOCOLS = ("Simple", "LL", "LL128")
MODES = ("out", "in", "both")
ALLTOALL_MODES = ("out",)


def format_of(runtime: str) -> str:
    """The format a runtime's files are written in (Runtime.file_format)."""
    return Runtime(runtime).file_format.value


def exact_chunk_bound(options: CompileOptions, nodes: int) -> int | None:
    """The most chunks per shard a file for `options` holds without re-solving its schedule (None: no bound,
    the oneCCL format): the lowering's `max_chunks` and the runtime's 16-bit chunk offsets,
    N x P x instances <= max_offset + 1 (services.compiler.lowering.grid). A finer schedule is re-solved as the
    chunked BFB (paper App. E.2) when compiled."""
    if Runtime(options.runtime).file_format is Format.ONECCL:
        return None
    return min(options.max_chunks, (profile_for(options.runtime).max_offset + 1) // (nodes * options.instances))


def runtime_defaults(runtime: str, collective: str) -> dict:
    """Options under which the default file runs on `runtime`: the executor and RCCL read inplace and
    outofplace separately, so one file serves both kinds of call, with no upper size bound (maxBytes="0");
    microsoft/msccl serves one mode per file (in place for allreduce, as PyTorch calls it; out of place for
    allgather and reduce-scatter) and needs a finite maxBytes (its own default when the attribute is
    absent, 128 MiB; it allocates scratch for maxBytes at init)."""
    if runtime == "oneccl":
        return {"inplace": "out"}
    p = profile_for(runtime)
    # maxBytes="0" only where the runtime reads 0 as unbounded (microsoft/msccl never selects such a file)
    max_bytes = 0 if p.max_bytes_zero_unbounded else p.default_max_bytes
    if p.reads_outofplace:
        return {"inplace": "out" if collective == "alltoall" else "both", "min_bytes": 0, "max_bytes": max_bytes,
                "proto": "Simple"}
    return {"inplace": "in" if collective == "allreduce" else "out", "min_bytes": 0, "max_bytes": max_bytes,
            "proto": "Simple"}


@dataclass(frozen=True)
class CompileOptions:
    """Everything that changes a compiled file; None = the runtime's default or the fit search's choice.
    `key()` is the canonical cache key."""

    runtime: str = "executor"
    proto: str | None = None
    inplace: str | None = None          # out | in | both
    min_bytes: int | None = None
    max_bytes: int | None = None
    channels: int | None = None
    instances: int = 1
    max_chunks: int = DEFAULT_MAX_CHUNKS
    consolidate: bool | None = None
    max_steps: int | None = None

    def key(self) -> str:
        parts = [self.runtime]
        for f in fields(self)[1:]:
            v = getattr(self, f.name)
            if v is not None and v != f.default:
                parts.append(f"{f.name}={str(v).lower() if isinstance(v, bool) else v}")
        return ";".join(parts)

    def resolved(self, collective: str) -> "CompileOptions":
        d = runtime_defaults(self.runtime, collective)
        kw = {k: (getattr(self, k) if getattr(self, k) is not None else d.get(k)) for k in
              ("proto", "inplace", "min_bytes", "max_bytes")}
        return CompileOptions(self.runtime, channels=self.channels, instances=self.instances,
                              max_chunks=self.max_chunks, consolidate=self.consolidate, max_steps=self.max_steps,
                              **kw)


@dataclass
class CompiledArtifact:
    """A compiled schedule. `steps` is the number of communication steps (T_L = alpha * steps) the XML
    realizes, `chunks` the chunks per shard P0 of the lowered grid (the XML's chunk loop is N * P0 *
    instances, `chunks_per_loop`), `loss` the relative bandwidth loss of lowering (tau ratio - 1; 0.0 when
    exact). `xml_steps` counts every <step> of the file; `max_tb_steps` the most in one thread block.
    `attempts` lists the fit search's candidates; `predicted_time_us` / `schedule_time_us` give, per message
    size, the dependency-driven time (what the XML realises: no barrier between steps; DESIGN section 2) of the
    compiled program and of the schedule it came from, `predicted_barrier_time_us` / `schedule_barrier_time_us`
    their step-synchronous alpha-beta prices.

    The file is kept once, as ASCII bytes (`xml_data`: write or store these); `xml` decodes a str copy on
    every access (convenient for small files; a 1024-rank file is hundreds of MB)."""

    xml_data: bytes
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
    dialect: str | None = None          # the runtime (msccl); kept under its old name
    runtime: str | None = None
    proto: str | None = None
    inplace: str = "out"                # out | in | both
    min_bytes: int | None = None
    max_bytes: int | None = None
    channels: int = 1
    instances: int = 1
    nchannels: int = 1
    combined: bool = False
    consolidated: bool = False
    fused: int = 0
    threadblocks: int | None = None     # most thread blocks on one gpu (msccl)
    max_tb_steps: int | None = None     # most XML steps in one thread block (msccl) / instructions of one rank
    xml_steps: int | None = None
    xml_threadblocks: int | None = None     # every <tb> of the file (msccl)
    xml_dependent_steps: int | None = None  # steps with hasdep="1" (msccl)
    messages: int = 0                   # point-to-point messages per chunk loop
    dropped_units: int = 0              # redundant deliveries of a copy step left out
    options: str = ""
    attempts: list = field(default_factory=list)
    predicted_time_us: dict = field(default_factory=dict)
    schedule_time_us: dict = field(default_factory=dict)
    predicted_barrier_time_us: dict = field(default_factory=dict)
    schedule_barrier_time_us: dict = field(default_factory=dict)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    # the checker's report on exactly this file when the fit search already ran it (parse, rules, simulation):
    # callers that check what they store reuse it instead of checking the same text twice
    check_report: CheckReport | None = field(default=None, repr=False, compare=False)

    @property
    def xml(self) -> str:
        return self.xml_data.decode("ascii")

    @property
    def xml_bytes(self) -> int:
        return len(self.xml_data)

    def as_dict(self, with_xml: bool = False) -> dict:
        d = asdict(replace(self, xml_data=b"", check_report=None))
        d.pop("xml_data")
        d.pop("check_report")
        if with_xml:
            d["xml"] = self.xml
        d["xml_bytes"] = self.xml_bytes
        return d


def _validate_msccl_options(profile: RuntimeProfile, coll: str, opts: CompileOptions) -> None:
    if opts.proto not in PROTOCOLS:
        raise CompileError(f"proto must be one of {', '.join(PROTOCOLS)}, got {opts.proto!r}", limit="proto",
                           value=opts.proto)
    if opts.inplace not in MODES:
        raise CompileError(f"inplace must be one of {', '.join(MODES)}, got {opts.inplace!r}", limit="inplace",
                           value=opts.inplace)
    if opts.inplace == "both" and not profile.reads_outofplace:
        raise CompileError(f"the {profile.name} runtime reads only the inplace flag, so a file serves in-place or "
                           f"out-of-place calls, not both; choose inplace=in or inplace=out", limit="inplace",
                           value="both")
    why = profile.window_problem(opts.min_bytes, opts.max_bytes)
    if why:
        raise CompileError(f"{why}; choose minBytes/maxBytes that select some message size", limit="max_bytes",
                           value=opts.max_bytes)
    if not isinstance(opts.instances, int) or not 1 <= opts.instances <= profile.max_channels:
        raise CompileError(f"instances must be an integer in 1..{profile.max_channels}, got {opts.instances!r}",
                           limit="instances", value=opts.instances, maximum=profile.max_channels)
    if opts.channels is not None and (not isinstance(opts.channels, int)
                                      or not 1 <= opts.channels * opts.instances <= profile.max_channels):
        raise CompileError(f"channels x instances must be in 1..{profile.max_channels} for the {profile.name} runtime, "
                           f"got {opts.channels!r} x {opts.instances}", limit="max_channels", value=opts.channels,
                           maximum=profile.max_channels)
    try:
        profile.coll_name(coll)
    except ValueError as exc:
        raise CompileError(str(exc), limit="collective", value=coll) from None
    _check_alltoall_mode(coll, opts.inplace)


def _check_alltoall_mode(coll: str, inplace: str) -> None:
    if coll == "alltoall" and inplace not in ALLTOALL_MODES:
        raise CompileError(f"an all-to-all file serves out-of-place calls only (a rank's output overwrites the "
                           f"blocks it still has to send in place); got inplace={inplace!r}", limit="inplace",
                           value=inplace)


def check_options(options: CompileOptions, collective: str) -> CompileOptions:
    """The options resolved with the runtime's defaults; CompileError (.limit names the option) if a runtime
    cannot take them, before any work is done."""
    if options.runtime not in RUNTIMES:
        raise CompileError(f"unknown runtime {options.runtime!r}; known: {', '.join(RUNTIMES)}", limit="runtime",
                           value=options.runtime)
    opts = options.resolved(collective)
    if options.runtime == "oneccl":
        if opts.inplace not in ("out", "in"):
            raise CompileError("the oneccl format serves one mode per file: inplace=out or inplace=in",
                               limit="inplace", value=opts.inplace)
        _check_alltoall_mode(collective, opts.inplace)
        return opts
    _validate_msccl_options(profile_for(options.runtime).with_overrides(max_steps=options.max_steps), collective,
                            opts)
    return opts


def _times(link: LinkModel | None, sizes, low, schedule: Schedule, degree: int) -> tuple[dict, dict, dict, dict]:
    """Per size: the compiled program's and the original schedule's dependency-driven times (DESIGN section 2:
    what the XML realises, `schedule.dependency`), then their step-synchronous prices (steps alpha + tau M/B)."""
    if link is None:
        return {}, {}, {}, {}
    sizes = [int(m) for m in (sizes or (1 << 20, 1 << 28))]
    out = []
    for sched in (low.schedule, schedule):
        curve = dependency_curve(sched, link, degree)
        out.append({str(m): float(curve(m)) * 1e6 for m in sizes})
    return (out[0], out[1], {str(m): link.time(low.schedule.steps, low.tau, m) * 1e6 for m in sizes},
            {str(m): link.time(low.steps_original, low.tau_original, m) * 1e6 for m in sizes})


def compile_schedule(schedule: Schedule, topology: Topology, fmt: str | None = None, *,
                     runtime: str | RuntimeProfile | None = None, dialect: str | None = None,
                     options: CompileOptions | None = None,
                     proto: str | None = None, inplace=None, min_bytes: int | None = None,
                     max_bytes: int | None = None, channels: int | None = None, instances: int = 1,
                     max_chunks: int = DEFAULT_MAX_CHUNKS, consolidate=None, combined: bool | None = None,
                     fuse: bool = True, max_steps: int | None = None, allow_resolve: bool = True,
                     name: str | None = None, link: LinkModel | None = None, sizes=None, simulate: bool = True,
                     deadline_s: float | None = None, progress=None, check: bool = False,
                     simulate_max_steps: int = SIMULATE_MAX_STEPS) -> CompiledArtifact:
    """Compile `schedule` (any collective of the IR) on `topology` to the XML a runtime loads.

    runtime       "executor" (default), "rccl", "legacy" (MSCCL XML) or "oneccl" (fmt is implied; `dialect`
                  is the old name of `runtime`), or a RuntimeProfile (e.g. a profile with_overrides for a
                  custom build).
    options       a CompileOptions (the fields below override nothing then), or the fields one by one:
    proto         Simple | LL | LL128.
    inplace       "out", "in", "both" (executor/RCCL: one file for both kinds of call), or True/False.
    min_bytes, max_bytes   the file's size window (executor/RCCL: maxBytes 0 = unbounded).
    channels      channels a link's messages are spread over (None: the fit search chooses).
    instances     every transfer cut in that many parts on their own channels.
    max_chunks    bound on the lowered chunks per shard P; a finer schedule is re-solved as the discrete
                  chunked BFB (lowering="chunked-bfb", loss reported); allow_resolve=False refuses instead.
    consolidate, combined, fuse   pin the fit search's program options (None: the search chooses).
    max_steps     steps per thread block for a runtime built with another MSCCL_MAX_NUM_STEPS.
    link, sizes   a LinkModel and message sizes for predicted_time_us / schedule_time_us.
    simulate      simulate candidate programs (up to `simulate_max_steps` XML steps); programs not simulated
                  are held to the profile's limits and proved deadlock-free (services.compiler.check.deadlock), with
                  combined thread blocks only where the buffering bound allows them.
    deadline_s    give up the fit search after this long (CompileError naming what was tried).
    progress      progress(message) is called after every candidate the fit search tries.
    check         run check_xml on the result and raise CompileError if it fails.
    Raises CompileError (with .limit, .value, .maximum, and .attempts for a failed search) when nothing fits.
    """
    t0 = time.perf_counter()
    custom = runtime if isinstance(runtime, RuntimeProfile) else None      # a profile object (a custom build)
    runtime = custom.name if custom else runtime
    runtime = (options.runtime if options is not None else None) or runtime or dialect or (
        "oneccl" if fmt == "oneccl" else "executor")
    if runtime not in RUNTIMES:
        raise CompileError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}", limit="runtime",
                           value=runtime)
    if fmt is None:
        fmt = format_of(runtime)
    if fmt not in FORMATS:
        raise CompileError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", limit="format", value=fmt)
    if fmt == "oneccl":
        runtime = "oneccl"
    elif runtime == "oneccl":
        raise CompileError("runtime 'oneccl' writes the oneccl format, not msccl", limit="runtime", value=runtime)
    coll = schedule.collective.value
    if isinstance(inplace, bool):
        inplace = "in" if inplace else "out"
    if options is None:
        options = CompileOptions(runtime, proto=proto, inplace=inplace, min_bytes=min_bytes, max_bytes=max_bytes,
                                 channels=channels, instances=instances, max_chunks=max_chunks,
                                 consolidate=None if consolidate in (None, "auto") else bool(consolidate),
                                 max_steps=max_steps)
    opts = options.resolved(coll)
    if fmt == "oneccl":
        return _compile_oneccl(schedule, topology, opts, name=name, link=link, sizes=sizes,
                               allow_resolve=allow_resolve, t0=t0)
    profile = (custom or profile_for(runtime)).with_overrides(max_steps=opts.max_steps)
    _validate_msccl_options(profile, coll, opts)
    if schedule.nodes != topology.nodes:
        raise CompileError(f"schedule has {schedule.nodes} nodes, topology {topology.expr} has {topology.nodes}")
    req = FitRequest(instances=opts.instances, channels=opts.channels, mode=opts.inplace,
                     consolidate=opts.consolidate, combined=combined, fuse=fuse, max_chunks=opts.max_chunks,
                     allow_resolve=allow_resolve, proto=opts.proto, simulate=simulate,
                     simulate_max_steps=simulate_max_steps, deadline_s=deadline_s,
                     progress=progress)
    title = name or f"fabricplan {coll} {topology.expr}"
    rendered: list = [None, b""]          # the last program rendered (held, so its id cannot be reused) and its text

    def render(prog, low, opt) -> bytes:
        if rendered[0] is not prog:
            rendered[:] = [prog, to_xml(prog, name=title, coll=profile.coll_name(coll), proto=opts.proto,
                                        profile=profile, inplace=opt.mode in ("in", "both"),
                                        outofplace=opt.mode in ("out", "both"), min_bytes=opts.min_bytes,
                                        max_bytes=opts.max_bytes,
                                        header=_header(profile, coll, topology, low, opt, opts))]
        return rendered[1]

    reports: dict = {}

    def simulate_fn(prog, low, opt):
        rep = check_msccl(render(prog, low, opt).decode("ascii"), runtime=profile)
        reports.clear()
        reports["last"] = (prog, rep)                 # the program itself is held: ids of freed ones repeat
        return None if rep.ok else (rep.error.kind, str(rep.error))

    fitted = fit_msccl(schedule, topology, profile, req, simulate_fn=simulate_fn)
    prog, low, opt = fitted.program, fitted.lowered, fitted.options
    xml = render(prog, low, opt)
    s = low.schedule
    warnings = []
    if low.method != "exact":
        warnings.append(f"the schedule's {schedule.grid} chunks per shard do not fit; re-solved as the chunked BFB "
                        f"with P={low.chunks}: tau x{low.tau_ratio:.4f}, {s.steps} steps (was {low.steps_original})")
    if prog.dropped_units:
        warnings.append(f"{prog.dropped_units} redundant chunk deliveries of copy steps left out")
    outside = [int(m) for m in (sizes or ()) if not profile.selects(int(m), opts.min_bytes, opts.max_bytes)]
    if outside:
        warnings.append(f"message sizes {outside[:4]} are outside the file's window (minBytes={opts.min_bytes}, "
                        f"maxBytes={opts.max_bytes}): the {profile.name} runtime runs those calls with NCCL's own "
                        f"algorithms")
    pred, sched_t, pred_b, sched_b = _times(link, sizes, low, schedule, topology.degree)
    st = prog.stats
    art = CompiledArtifact(
        xml_data=xml, fmt="msccl", collective=coll, topology=topology.expr, nodes=s.nodes, steps=s.steps,
        chunks=low.chunks, chunks_per_loop=s.nodes * low.chunks * opt.instances, loss=low.loss,
        tau_ratio=low.tau_ratio, tau=float(low.tau), tau_original=float(low.tau_original), lowering=low.method,
        original_steps=low.steps_original, dialect=runtime, runtime=runtime, proto=opts.proto, inplace=opt.mode,
        min_bytes=opts.min_bytes, max_bytes=opts.max_bytes, channels=opt.channels, instances=opt.instances,
        nchannels=prog.nchannels, combined=opt.combined, consolidated=prog.consolidated > 0, fused=prog.fused,
        threadblocks=int(st["tbs_per_gpu"].max()), max_tb_steps=int(st["steps_per_tb"].max()),
        xml_steps=int(st["steps_per_tb"].sum()), xml_threadblocks=int(st["tbs_per_gpu"].sum()),
        xml_dependent_steps=int(np.count_nonzero(prog.hasdep)), messages=prog.messages, dropped_units=prog.dropped_units,
        options=opt.label(), attempts=[a.as_dict() for a in fitted.attempts], predicted_time_us=pred,
        schedule_time_us=sched_t, predicted_barrier_time_us=pred_b,
        schedule_barrier_time_us=sched_b, warnings=warnings)
    checked_prog, passed = reports.get("last", (None, None))
    if checked_prog is prog and passed.ok:
        art.check_report = passed
    if check:
        rep = art.check_report or check_xml(art.xml, "msccl", runtime=profile)
        if not rep.ok:
            raise CompileError(f"the compiled XML fails its check: {rep.error}", limit="check")
    art.seconds = time.perf_counter() - t0
    return art


def _header(profile: RuntimeProfile, coll: str, topology: Topology, low, opt, opts: CompileOptions) -> str:
    window = (f"minBytes={opts.min_bytes} maxBytes={opts.max_bytes}"
              + (" (0: unbounded)" if opts.max_bytes == 0 and profile.max_bytes_zero_unbounded else ""))
    return (f"runtime={profile.name} coll={coll} topology={topology.expr} ranks={low.schedule.nodes} "
            f"chunks_per_shard={low.chunks} instances={opt.instances} channels={opt.channels} mode={opt.mode} "
            f"proto={opts.proto} {window}. Used for calls whose element count times "
            f"{'nranks' if coll in ('allgather', 'reducescatter', 'alltoall') else '1'} is a multiple of "
            f"nchunksperloop. Load it as docs/runtimes.md says for {profile.name}.")


def _compile_oneccl(schedule, topology, opts: CompileOptions, *, name, link, sizes, allow_resolve, t0):
    from .text.oneccl import compile_oneccl

    if opts.inplace not in ("out", "in"):
        raise CompileError("the oneccl format serves one mode per file: inplace=out or inplace=in",
                           limit="inplace", value=opts.inplace)
    _check_alltoall_mode(schedule.collective.value, opts.inplace)
    low = lower(schedule, topology, max_chunks=opts.max_chunks, allow_resolve=allow_resolve,
                max_buffer_chunks=1 << 31)
    warnings = []
    if low.method != "exact":
        warnings.append(f"schedule grid {schedule.grid} exceeds the bound; re-solved as the chunked BFB with "
                        f"P={low.chunks}: tau x{low.tau_ratio:.4f}")
    xml, stats = compile_oneccl(low.schedule, topology, inplace=opts.inplace == "in", name=name)
    s = low.schedule
    pred, sched_t, pred_b, sched_b = _times(link, sizes, low, schedule, topology.degree)
    return CompiledArtifact(
        xml_data=xml, fmt="oneccl", collective=schedule.collective.value, topology=topology.expr, nodes=s.nodes,
        steps=s.steps, chunks=low.chunks, chunks_per_loop=s.nodes * low.chunks, loss=low.loss,
        tau_ratio=low.tau_ratio, tau=float(low.tau), tau_original=float(low.tau_original), lowering=low.method,
        original_steps=low.steps_original, runtime="oneccl", inplace=opts.inplace,
        max_tb_steps=stats["max_tb_steps"], messages=stats["messages"], predicted_time_us=pred,
        schedule_time_us=sched_t, predicted_barrier_time_us=pred_b,
        schedule_barrier_time_us=sched_b, warnings=warnings, seconds=time.perf_counter() - t0)


def check_xml(xml: str | bytes, fmt: str = "msccl", *, runtime: str | RuntimeProfile | None = None,
              dialect: str | None = None, simulate: bool = True, fifo: int | None = None, seed: int = 0,
              max_steps: int | None = None, simulate_max_steps: int = SIMULATE_MAX_STEPS) -> CheckReport:
    """Validate any MSCCL or oneCCL XML and simulate it on CPU (see services.compiler.check.msccl / check.oneccl). MSCCL XML may
    be given as the file's bytes (UTF-8).

    runtime (or its old name dialect): the MSCCL runtime whose profile applies (default: the one our header
    comment names, else "legacy" when coll="reduce_scatter" or outofplace is absent, else "executor").
    fifo: messages in flight per connection in the simulation (default: what the runtime buffers for the
    file's protocol; 0 = rendezvous). max_steps: for a runtime built with another MSCCL_MAX_NUM_STEPS.
    An MSCCL file too large to simulate (more than simulate_max_steps steps, or the simulator's memory) is proved
    deadlock-free instead, with a warning.
    Returns a CheckReport; `ok` False with `errors[0]` naming the kind, gpu/rank, tb and step.
    """
    if fmt == "msccl":
        return check_msccl(xml, runtime=runtime or dialect, simulate=simulate, fifo=fifo, seed=seed,
                           max_steps=max_steps, simulate_max_steps=simulate_max_steps)
    if fmt == "oneccl":
        from .check.oneccl import check_oneccl
        return check_oneccl(xml, simulate=simulate, seed=seed)
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
