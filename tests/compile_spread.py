"""The spread of compiled files whose bytes the byte-identity test pins (tests/compiler/test_bytes.py).

Programs are built directly (services.compiler.msccl.program.build_program) over every thread-block layout (combined
and fused, combined unfused, separate), consolidation, one to three channels (by shard class and, for separate
tbs, by message), instances, the three modes, and written for every MSCCL runtime's <algo> attributes; plus
all-to-all programs, oneCCL files of every collective and both modes, and whole compile_schedule fits of each
runtime (the fit search chooses the options). A case is named by a string; `digests()` maps each name to the
SHA-256 of its file (or to "refused: <limit>" when the compiler refuses it, which must stay so too).

    python -m tests.make_compile_digests        # records tests/data/compile_digests.json from this code
"""
from __future__ import annotations

import hashlib
import itertools
from functools import cache

from services.compiler import CompileError, compile_schedule
from services.compiler.msccl.ir import MscclOptions
from services.compiler.msccl.program import build_program
from services.compiler.text.msccl import to_xml
from services.compiler.text.oneccl import compile_oneccl
from services.compiler.runtimes import profile_for
from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.construct import construct_collectives
from services.synthesis.topology.catalog import build

__all__ = ["cases", "digest_of", "digests"]

TOPOLOGIES = ["torus(3, 4)", "circulant(7, 2, 3)", "hypercube(3)", "genkautz(3, 12)", "ring(5, 2)",
              "line(bipartite(2))"]
ALLTOALL = ["torus(3, 3)", "hypercube(3)", "ring(5, 2)"]
FIT = ["torus(4, 4)", "line(circulant(16, 1, 4))"]
COLLECTIVES = (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE)
RUNTIMES = ("executor", "rccl", "legacy")
LAYOUTS = ((True, True), (True, False), (False, False))          # (combined, fuse)


@cache
def _built(expr: str):
    return construct_collectives(expr)


@cache
def _a2a(expr: str):
    topology = build(expr)
    return alltoall_schedule(topology).schedule, topology


def _msccl(schedule, opt: MscclOptions, runtime: str, coll: str) -> bytes:
    profile = profile_for(runtime)
    prog = build_program(schedule, profile, opt)
    return to_xml(prog, name=f"spread {coll} {opt.label()}", coll=profile.coll_name(coll), proto="Simple",
                  profile=profile, inplace=opt.mode in ("in", "both"), outofplace=opt.mode in ("out", "both"),
                  min_bytes=0, max_bytes=0 if runtime != "legacy" else 1 << 27,
                  header=f"spread -- {runtime} {opt.label()}")


def _program_options():
    """28 option sets: every layout x consolidation x channels (the mode taking turns), messages dealt over
    the channels, two instances."""
    for i, ((combined, fuse), cons, ch) in enumerate(itertools.product(LAYOUTS, (False, True), (1, 2, 3))):
        yield MscclOptions(channels=ch, mode=("out", "in", "both")[i % 3], consolidate=cons, combined=combined,
                           fuse=fuse)
        if not combined and ch > 1:
            yield MscclOptions(channels=ch, consolidate=cons, combined=False, fuse=False, by_message=True)
        if ch == 1:
            yield MscclOptions(instances=2, mode="both", consolidate=cons, combined=combined, fuse=fuse)


def cases():
    """(name, thunk returning the file's bytes) for every case of the spread, in a fixed order."""
    opts = list(_program_options())
    for k, (expr, coll) in enumerate(itertools.product(TOPOLOGIES, COLLECTIVES)):
        for i, opt in enumerate(opts):
            runtime = RUNTIMES[(i + k) % len(RUNTIMES)]     # every option set meets every runtime's <algo>
            yield (f"msccl {expr} {coll.value} {runtime} {opt.label()}",
                   lambda e=expr, c=coll, o=opt, r=runtime: _msccl(_built(e)[c].schedule, o, r, c.value))
    for expr in ALLTOALL:
        for cons, (combined, fuse), ch in itertools.product((False, True), LAYOUTS, (1, 2)):
            opt = MscclOptions(channels=ch, consolidate=cons, combined=combined, fuse=fuse)
            yield (f"msccl {expr} alltoall executor {opt.label()}",
                   lambda e=expr, o=opt: _msccl(_a2a(e)[0], o, "executor", "alltoall"))
        yield (f"oneccl {expr} alltoall out",
               lambda e=expr: compile_oneccl(_a2a(e)[0], _a2a(e)[1], name="spread")[0])
    for expr, coll, inplace in itertools.product(TOPOLOGIES, COLLECTIVES, (False, True)):
        yield (f"oneccl {expr} {coll.value} inplace={inplace}",
               lambda e=expr, c=coll, i=inplace: compile_oneccl(_built(e)[c].schedule, _built(e)[c].topology,
                                                                inplace=i)[0])
    for expr, coll, runtime in itertools.product(FIT, COLLECTIVES, RUNTIMES + ("oneccl",)):
        def fit(e=expr, c=coll, r=runtime):
            b = _built(e)[c]
            return compile_schedule(b.schedule, b.topology, runtime=r).xml_data
        yield f"fit {expr} {coll.value} {runtime}", fit


def digest_of(thunk) -> str:
    try:
        data = thunk()
    except CompileError as exc:
        return f"refused: {exc.limit}"
    return hashlib.sha256(data).hexdigest()


def digests() -> dict[str, str]:
    return {name: digest_of(thunk) for name, thunk in cases()}
