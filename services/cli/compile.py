"""`fabricplan compile EXPR`: an expression's schedule compiled to the XML a runtime loads (docs/runtimes.md),
fitting the runtime's limits (exit 2 naming the limit when nothing fits); `--by-size` one file per size range,
`--check FILE.xml` validates and simulates an existing file.
"""
from __future__ import annotations

import json
import os
import sys

from services.compiler.runtimes.names import DEFAULT_RUNTIME, MSCCL_RUNTIMES, Format, Runtime

from .common import UsageError, emit, jsonable, progress_bar
from .inputs import build_topology, schedule_set

__all__ = ["register", "run"]


def _compile_options(args):
    from services.compiler.api import CompileOptions

    if args.runtime and args.dialect and args.runtime != args.dialect:
        raise UsageError(f"--runtime {args.runtime} and --dialect {args.dialect} disagree: --dialect is the old "
                         f"name of --runtime; give one of them")
    if args.format == Format.ONECCL and (args.runtime or args.dialect or Runtime.ONECCL) != Runtime.ONECCL:
        raise UsageError(f"--format oneccl writes the oneCCL format; --runtime {args.runtime or args.dialect} is an "
                         f"MSCCL runtime: give --runtime oneccl or --format msccl")
    runtime = Runtime(args.runtime or args.dialect or (Runtime.ONECCL if args.format == Format.ONECCL
                                                       else DEFAULT_RUNTIME)).value
    consolidate = {"auto": None, "yes": True, "no": False}[args.consolidate]
    return CompileOptions(runtime, proto=args.proto, inplace=args.inplace, min_bytes=args.min_bytes,
                          max_bytes=args.max_bytes, channels=args.channels, instances=args.instances,
                          max_chunks=args.max_chunks, consolidate=consolidate, max_steps=args.max_steps)


def _check_file(args) -> int:
    from services.compiler.api import check_xml

    try:
        with open(args.expr, "rb") as fh:
            text = fh.read(1 << 30)
        if not text.isascii() or b"\r" in text:       # read as text (newlines translated), as always
            with open(args.expr, encoding="utf-8") as fh:
                text = fh.read(1 << 30)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.expr}: {exc}") from None
    head = text[:2000] if isinstance(text, str) else text[:2000].decode("ascii")
    fmt = Format.ONECCL if args.runtime == Runtime.ONECCL or "<oneccl_schedule" in head else Format.MSCCL
    if fmt is Format.ONECCL and isinstance(text, bytes):
        text = text.decode("ascii")
    report = check_xml(text, fmt.value, runtime=None if fmt is Format.ONECCL else (args.runtime or args.dialect),
                       max_steps=args.max_steps)
    out = {"file": args.expr, "ok": report.ok, "format": fmt.value,
           "runtime": Runtime.ONECCL.value if fmt is Format.ONECCL else report.dialect,
           "collective": report.collective, "ngpus": report.ngpus, "comm_steps": report.comm_steps}
    if fmt is Format.ONECCL:       # oneCCL's counts: per-rank instructions and messages (no thread blocks)
        out.update(max_rank_instructions=report.steps, instructions=report.instructions, messages=report.messages)
    else:
        out.update(xml_steps=report.xml_steps, max_tb_steps=report.steps, threadblocks=report.threadblocks)
    out.update(simulated=report.simulated, errors=[str(e) for e in report.errors[:10]],
               warnings=[str(w) for w in report.warnings[:10]])
    emit(out, args.json)
    return 0 if report.ok else 1


def run(args) -> int:

    from services.compiler.api import check_options, check_xml, compile_schedule
    from services.compiler.errors import CompileError
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.construct import construct
    from services.synthesis.schedule.ir import Collective

    if args.expr.endswith(".xml") and not os.path.exists(args.expr):
        raise UsageError(f"{args.expr}: no such file (an XML file to check, or a topology expression)")
    if args.expr.endswith(".xml"):
        if not args.check:
            raise UsageError(f"{args.expr} is an XML file: add --check to validate and simulate it")
        return _check_file(args)
    topology = build_topology(args.expr)
    collective = Collective.parse(args.collective)
    for name in ("channels", "instances", "max_chunks", "max_steps"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {v}")
    for name in ("min_bytes", "max_bytes"):
        v = getattr(args, name)
        if v is not None and v < 0:
            raise UsageError(f"--{name.replace('_', '-')} must not be negative, got {v}")
    link = None
    if args.alpha_us is not None or args.bandwidth_gbps is not None:
        if args.alpha_us is None or args.bandwidth_gbps is None or args.alpha_us < 0 or args.bandwidth_gbps <= 0:
            raise UsageError("give both --alpha-us (>= 0) and --bandwidth-gbps (> 0) for predicted times")
        link = LinkModel.from_units(args.alpha_us, args.bandwidth_gbps)
    if args.by_size:
        return _compile_set(args, collective, link)
    if args.links:
        raise UsageError("--links applies to --by-size")
    options = _compile_options(args)
    if not 1 <= args.gpus_per_host <= 64:
        raise UsageError(f"--gpus-per-host must be in 1..64, got {args.gpus_per_host}")
    if args.gpus_per_host != 1 and collective is Collective.ALLTOALL:
        raise UsageError("--gpus-per-host builds hierarchical allgather, reducescatter and allreduce schedules, "
                         "not alltoall")
    extra = {}
    try:
        if collective is Collective.ALLTOALL:
            from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule

            check_options(options, collective.value)        # refuse bad options before solving the LP
            a2a = alltoall_schedule(topology)
            schedule, topology = a2a.schedule, a2a.topology
            extra = {"schedule_tau": float(a2a.tau), "mcf_tau": a2a.mcf_tau}
        elif args.gpus_per_host > 1:
            from services.synthesis.schedule.hierarchical import phase_cost
            from services.synthesis.search.hierarchical import hierarchical
            from services.synthesis.schedule.verify import verify

            if topology.nodes * args.gpus_per_host > 4096:
                raise UsageError(f"hierarchical schedules are limited to 4096 ranks, got {args.gpus_per_host} x "
                                 f"{topology.nodes}")
            schedule, topology = hierarchical(topology, args.gpus_per_host, collective)
            verify(schedule, topology).raise_if_invalid()
            extra = {"hierarchical": {"gpus_per_host": args.gpus_per_host, "hosts": topology.nodes // args.gpus_per_host,
                                      **phase_cost(schedule, args.gpus_per_host).to_dict()}}
        else:
            built = construct(args.expr, collective)
            schedule, topology = built.schedule, built.topology
        with progress_bar(f"compiling {collective.value} for {options.runtime}") as progress:
            art = compile_schedule(schedule, topology, options=options, link=link, sizes=args.size,
                                   deadline_s=args.timeout, progress=progress)
    except CompileError as exc:
        raise UsageError(str(exc), type="refused", limit=exc.limit, value=jsonable(exc.value),
                         maximum=jsonable(exc.maximum)) from None
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    summary = {**art.as_dict(), **extra}
    for key in ("predicted_time_us", "schedule_time_us", "predicted_barrier_time_us", "schedule_barrier_time_us"):
        if not summary.get(key):
            # times need message sizes (--size) and a link model (--alpha-us, --bandwidth-gbps): without them
            # there is nothing to show
            summary.pop(key, None)
    summary.pop("attempts", None)
    summary["attempts"] = len(art.attempts)
    code = 0
    if args.check:
        report = check_xml(art.xml, art.fmt, runtime=art.runtime if art.fmt == Format.MSCCL else None,
                           max_steps=args.max_steps)
        summary["check"] = {"ok": report.ok, "simulated": report.simulated, "comm_steps": report.comm_steps,
                            "errors": [str(e) for e in report.errors[:5]]}
        code = 0 if report.ok else 1
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(art.xml_data)
        summary["output"] = args.output
        emit(summary, args.json)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(art.xml_data)
        sys.stdout.buffer.flush()
        print(json.dumps(summary), file=sys.stderr)
    return code


def _compile_set(args, collective, link) -> int:
    """One XML per range of the schedule set, minBytes/maxBytes set so the runtime selects it by size."""
    import dataclasses

    from services.compiler.api import check_xml, compile_schedule
    from services.compiler.errors import CompileError
    from services.compiler.size_sets import size_windows

    if not args.output:
        raise UsageError("--by-size writes one file per size range: give the directory with -o")
    if args.min_bytes is not None:
        raise UsageError("--by-size sets minBytes from the ranges; --max-bytes bounds the last legacy file only")
    args.alpha_us = 10.0 if args.alpha_us is None else args.alpha_us
    args.bandwidth_gbps = 100.0 if args.bandwidth_gbps is None else args.bandwidth_gbps
    args.size = 1.0
    topo, sset = schedule_set(args, collective)
    base = _compile_options(args)
    try:
        windows = size_windows(base.runtime, [(r.min_bytes, r.max_bytes) for r in sset.ranges], args.max_bytes)
    except CompileError as exc:
        raise UsageError(str(exc)) from None
    os.makedirs(args.output, exist_ok=True)
    files, code = [], 0
    for i, (r, (lo, hi)) in enumerate(zip(sset.ranges, windows)):
        options = dataclasses.replace(base, min_bytes=lo, max_bytes=hi)
        try:
            art = compile_schedule(r.schedule, topo, options=options, link=link, deadline_s=args.timeout)
        except (CompileError, ValueError) as exc:
            raise UsageError(f"range [{r.min_bytes}, {r.max_bytes}) ({r.scheduler}): {exc}") from None
        ext = "xml"
        path = os.path.join(args.output, f"{collective.value}-{i:02d}-{r.min_bytes}-"
                                         f"{'inf' if r.max_bytes is None else r.max_bytes}.{ext}")
        with open(path, "wb") as fh:
            fh.write(art.xml_data)
        entry = {**r.as_dict(topo.degree), "file": path, "minBytes": lo, "maxBytes": hi, "lowering": art.lowering,
                 "xml_steps": art.xml_steps, "warnings": art.warnings}
        if args.check:
            report = check_xml(art.xml, art.fmt, runtime=art.runtime, max_steps=args.max_steps)
            entry["check"] = {"ok": report.ok, "simulated": report.simulated,
                              "errors": [str(e) for e in report.errors[:5]]}
            code = code or (0 if report.ok else 1)
        files.append(entry)
    if len(windows) < len(sset.ranges):
        first = sset.ranges[len(windows)].min_bytes
        skipped = {"min_bytes": first, "reason": f"the {base.runtime} runtime's files end at maxBytes {windows[-1][1]}"}
    else:
        skipped = None
    summary = {"expr": topo.expr, "collective": collective.value, "runtime": base.runtime, "files": files}
    if skipped:
        summary["not_written"] = skipped
    emit(summary, args.json)
    return code


def register(sub) -> None:
    """Add the `compile` sub-command to the parser's subparsers."""
    p = sub.add_parser("compile", help="compile an expression's schedule to the XML a runtime loads (docs/runtimes.md)",
                        description="Compile the schedule of EXPR for a runtime, fitting its limits (exit 2 with the "
                                    "limit when nothing fits). With --check on an existing FILE.xml: validate and "
                                    "simulate that file for --runtime.")
    p.add_argument("expr", help="topology expression, or with --check an XML file to validate")
    p.add_argument("--collective", default="allreduce",
                    help="allgather, reducescatter, allreduce (default) or alltoall (built by the all-to-all LP)")
    p.add_argument("--runtime", choices=[r.value for r in Runtime], default=None,
                    help="msccl-executor-nccl (default), RCCL, microsoft/msccl, or the oneCCL format")
    p.add_argument("--format", choices=[f.value for f in Format], default=Format.MSCCL.value,
                   help="msccl (default) or oneccl")
    p.add_argument("--dialect", choices=[r.value for r in MSCCL_RUNTIMES], default=None, help="old name of --runtime")
    p.add_argument("--proto", choices=["Simple", "LL", "LL128"], default=None, help="NCCL protocol (default Simple)")
    p.add_argument("--inplace", choices=["out", "in", "both"], default=None,
                    help="calls the file serves (default: both on executor/RCCL; in for allreduce, out otherwise on "
                         "microsoft/msccl)")
    p.add_argument("--min-bytes", type=int, default=None, help="smallest message size that selects the file")
    p.add_argument("--max-bytes", type=int, default=None,
                    help="largest message size (executor/RCCL: 0 = unbounded, the default; microsoft/msccl: sizes "
                         "below it, default 134217728)")
    p.add_argument("--channels", type=int, default=None, help="channels a link's messages spread over (default: fit)")
    p.add_argument("--instances", type=int, default=1, help="copies of the program, each on 1/instances of every chunk")
    p.add_argument("--max-chunks", type=int, default=64, help="bound on chunks per shard when lowering")
    p.add_argument("--consolidate", choices=["auto", "yes", "no"], default="auto", help="scratch consolidation")
    p.add_argument("--max-steps", type=int, default=None, help="steps per thread block of a custom executor build")
    p.add_argument("--alpha-us", type=float, default=None, help="link latency for predicted times")
    p.add_argument("--bandwidth-gbps", type=float, default=None, help="node bandwidth for predicted times")
    p.add_argument("--size", type=float, nargs="+", default=None, help="message sizes in bytes for predicted times")
    p.add_argument("--timeout", type=float, default=None, help="give up the fit search after this many seconds")
    p.add_argument("--gpus-per-host", type=int, default=1,
                    help="hosts of G GPUs (scale-up domain; NIC k on GPU k mod G): a hierarchical schedule over "
                         "G x N ranks (allgather, reducescatter, allreduce)")
    p.add_argument("-o", "--output", help="write the XML here (default: stdout, summary on stderr)")
    p.add_argument("--check", action="store_true", help="validate and simulate the XML on CPU")
    p.add_argument("--by-size", action="store_true",
                    help="compile the schedule set: one XML per size range into the directory -o names")
    p.add_argument("--links", help="with --by-size: JSON file of per-arc alpha_us / bandwidth_gbps")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
