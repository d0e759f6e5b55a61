"""The compile units of a plan's (or a revision's) compile stage: one XML file each.

For every runtime the plan lists and every collective it has a schedule of, the main file (the schedule
served without `range`, the runtime's default options) and, for the allgather, reduce-scatter and allreduce,
one file per size range of the collective's schedule set (`schedules.<c>.by_size`, services.jobs.stages.size_sets):
range i compiles the artifact `<prefix>schedule:<c>@<i>` with minBytes/maxBytes set to the range's window
(services.compiler.size_sets.size_windows: what the runtime selects a file by), so the files of one set
tile the sizes. A unit's `name` is its compile job's collective (`c` or `c@i`, services.store.compiles).

Exceptions, each reported, never compiled twice:
- a set of one range whose schedule is the main schedule and whose window is the runtime's default window:
  that range's XML is the main file (`alias`);
- oneCCL files have no size window: a set is not compiled for oneCCL (the main file is);
- microsoft/msccl (legacy) files end at its finite maxBytes: ranges above it have no file (`size_windows`).

`estimated_bytes` is what one compile of the unit may hold at its peak (`estimate_bytes`), the number the
stage's memory budget is counted in (services.jobs.stages.compile_pool).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from services.compiler.api import CompileOptions
from services.compiler.canonical import canonical_options
from services.compiler.errors import CompileError
from services.compiler.runtimes.names import Format, Runtime
from services.compiler.size_sets import size_windows
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective

__all__ = ["CompileUnit", "plan_units", "range_unit", "range_options", "is_alias", "estimate_bytes", "SET_COLLECTIVES",
           "COMPILE_BYTES_PER_SCHEDULE_BYTE", "COMPILE_BASE_BYTES", "COMPILE_MAX_BYTES"]

SET_COLLECTIVES = tuple(c.value for c in ALLGATHER_FAMILY)     # the collectives with schedule sets by size
# peak bytes a compile adds: a floor plus so much per byte of the stored schedule blob. Measured (peak RSS growth
# of an executor compile in a forked process, construction schedules, loaded machine): torus(4, 4) allgather
# 85 MiB for a 2.5 kB blob, genkautz(4, 64) 116 MiB for 3.9 kB, line(circulant(16, 1, 4), 1) allreduce 120
# MiB for 7.0 kB, line(circulant(16, 1, 4), 2) allgather 608 MiB for 16.2 kB (a 14.7 MB file). The growth
# per blob byte rises with N (8 k to 34 k); these constants over-estimate every one of them (192, 246, 362,
# 714 MiB), so the budget errs on the side of running fewer compiles at once
COMPILE_BYTES_PER_SCHEDULE_BYTE = 40_000
COMPILE_BASE_BYTES = 96 << 20
# ... and at most this: the growth per blob byte keeps falling with N, and the largest compiles measured, N = 1024
# (bench.compile --targets: 0.5-0.95 GB above the schedule, 1.0-1.6 GB process peak, for blobs of 266-571 kB
# that the rule above puts at 10-23 GB), stay under it; without the cap every 1024-rank file ran alone
COMPILE_MAX_BYTES = 2 << 30


@dataclass(frozen=True)
class CompileUnit:
    """One XML file, typed: `collective` (range `index` of its set, or None for the main file) compiled for
    `options` (their runtime is `runtime`; a range's options carry its minBytes/maxBytes window). What a plan's
    or revision's compile stage (`plan_units`), its early compile and an on-demand compile job (`of_job`) all
    hand to services.jobs.stages.compile_stage.compile_job. `runtime` and `collective` are the names of
    `Runtime` and `Collective` members (`target`, `kind`)."""

    runtime: str
    collective: str
    index: int | None
    options: CompileOptions
    min_bytes: int | None = None
    max_bytes: int | None = None
    alias: bool = False
    estimated_bytes: int = COMPILE_BASE_BYTES

    @property
    def name(self) -> str:
        """The compile job's collective: `c`, or `c@i` for range i (the artifact `schedule:c@i`)."""
        return self.collective if self.index is None else f"{self.collective}@{self.index}"

    @property
    def label(self) -> str:
        return f"{self.runtime}:{self.name}"

    @property
    def kind(self) -> Collective:
        return Collective(self.collective)

    @property
    def target(self) -> Runtime:
        return Runtime(self.runtime)

    @classmethod
    def of_job(cls, name: str, options: CompileOptions) -> CompileUnit:
        """The unit of a compile job's collective `name` (`c`, or `c@i` for range i) and its options (an
        on-demand compile: services.jobs.kinds.compiling)."""
        collective, _, index = name.partition("@")
        return cls(Runtime(options.runtime).value, Collective(collective).value, int(index) if index else None,
                   options)

    def as_dict(self) -> dict:
        return {"runtime": self.runtime, "collective": self.collective, "index": self.index,
                "options": dataclasses.asdict(self.options), "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes, "alias": self.alias, "estimated_bytes": self.estimated_bytes}

    @classmethod
    def from_dict(cls, d: dict) -> "CompileUnit":
        return cls(**{**d, "options": CompileOptions(**d["options"])})


def estimate_bytes(schedule_blob_bytes: int) -> int:
    """Peak bytes one compile of a schedule stored in `schedule_blob_bytes` bytes may add (see the module
    constants)."""
    return min(COMPILE_MAX_BYTES, COMPILE_BASE_BYTES + COMPILE_BYTES_PER_SCHEDULE_BYTE * int(schedule_blob_bytes))


def range_options(options: CompileOptions, by_size: list[dict], index: int) -> CompileOptions:
    """`options` with range `index`'s minBytes/maxBytes window (CompileError: the runtime has no window, or
    none for this range; IndexError: no such range). The options' own max_bytes bounds the last legacy file."""
    if options.min_bytes is not None:
        raise CompileError("a size range's file takes minBytes/maxBytes from the range; leave min_bytes out",
                           limit="min_bytes", value=options.min_bytes)
    if not 0 <= index < len(by_size):
        raise IndexError(index)
    windows = size_windows(options.runtime, [(r["min_bytes"], r["max_bytes"]) for r in by_size], options.max_bytes)
    if index >= len(windows):
        raise CompileError(f"the {options.runtime} runtime's files end at maxBytes {windows[-1][1]}: size range "
                           f"{index} (from {by_size[index]['min_bytes']} bytes) has no file (give a larger "
                           "max_bytes)", limit="max_bytes", value=by_size[index]["min_bytes"],
                           maximum=windows[-1][1])
    lo, hi = windows[index]
    return dataclasses.replace(options, min_bytes=lo, max_bytes=hi)


def is_alias(collective: str, by_size: list[dict], range_digest: str | None, main_digest: str | None,
             options: CompileOptions, main_options: CompileOptions) -> bool:
    """Range 0 of a one-range set whose schedule and window are the main file's: that file is its XML."""
    return (len(by_size) == 1 and range_digest is not None and range_digest == main_digest
            and canonical_options(options, collective).key() == canonical_options(main_options, collective).key())


def range_unit(collective: str, index: int, options: CompileOptions, by_size: list[dict], range_digest: str | None,
               main_digest: str | None) -> CompileUnit:
    """The file of size range `index` of `collective`'s set (`by_size`: its rows) for `options`, resolved in
    one place for the compile stage and the API: the range's minBytes/maxBytes window (`range_options`:
    CompileError when the runtime has none for it, IndexError without the range), the options in canonical
    form (every spelling of the same file is one compile job: services.compiler.canonical), and whether the
    file is the main one (`is_alias`)."""
    opts = canonical_options(range_options(options, by_size, index), collective)
    alias = is_alias(collective, by_size, range_digest, main_digest, opts, options)
    row = by_size[index]
    return CompileUnit(Runtime(options.runtime).value, Collective(collective).value, index, opts, row["min_bytes"],
                       row["max_bytes"], alias)


def plan_units(runtimes, collectives, by_size: dict[str, list[dict]], digests: dict[str, str],
               blob_bytes: dict[str, int]) -> tuple[list[CompileUnit], dict[str, str]]:
    """(units, skipped): every file of the stage in the order to compile them (main files, then ranges;
    allreduces last, so their phases' refusals are known first: services.jobs.stages.compile_stage), and why a range
    has no file (`runtime:c@i` -> reason). `digests` / `blob_bytes`: artifact name (`c`, `c@i`) -> the
    stored schedule's digest / size."""
    units: list[CompileUnit] = []
    skipped: dict[str, str] = {}
    order = sorted(collectives, key=lambda c: c == Collective.ALLREDUCE)
    for runtime in runtimes:
        main = CompileOptions(runtime)
        for c in order:
            units.append(CompileUnit(runtime, c, None, main, estimated_bytes=estimate_bytes(blob_bytes.get(c, 0))))
    for runtime in runtimes:
        main = CompileOptions(runtime)
        for c in order:
            rows = by_size.get(c) or []
            if c not in SET_COLLECTIVES or not rows:
                continue
            if Runtime(runtime).file_format is Format.ONECCL:
                skipped[f"{runtime}:{c}"] = ("oneCCL files have no minBytes/maxBytes window: the set is not "
                                             "selectable by size there (the main file is compiled)")
                continue
            for i in range(len(rows)):
                name = f"{c}@{i}"
                try:
                    unit = range_unit(c, i, main, rows, digests.get(name), digests.get(c))   # as the API's
                except CompileError as exc:
                    skipped[f"{runtime}:{name}"] = str(exc)
                    continue
                units.append(dataclasses.replace(unit, estimated_bytes=estimate_bytes(blob_bytes.get(name, 0))))
    return units, skipped
