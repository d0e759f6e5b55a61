"""Progress weights from measured stage costs and the ETA they give.

A job's progress is the share of its expected running time already spent: each stage weighs what it costs, as a
function of the plan's size N and the number of XML files it compiles F (runtimes x collectives),

    cost(stage) = FIXED_S[stage] + QUADRATIC_S[stage] (N / 1024)^EXPONENT[stage]   (compile: per file, times F)

Where the numbers come from: the stage durations this module's stage events record (services.store.
stage_events), measured for default plans (d = 4, the executor's three files) on a quiet 2-core machine with
the compiled message tables, dependency pass and deadlock proof, one run each (N = 1024: two):

    N     schedule  verify  store  compile (3 files)   total of the stages
    16      0.02     0.01    0.05     0.12                 0.25 s
    256     0.33     0.11    0.09     0.43                 1.17 s
    512     1.14     0.32    0.11     1.26                 2.99 s
    1024    2.46-2.64  1.43-1.52  0.23-0.36  4.48-4.51     8.8-9.3 s

A plan's main files compile while its schedules are checked and stored (services.jobs.stages.early_compile), so its
compile stage waits only for the rest: 1.5 s a file at N = 1024. A revision compiles after its schedules
(`python -m bench.failures --service --nodes 1024`, quiet: schedules and model check 2.5-2.6 s, of which about
0.6 s the check; the XML 9.8-10.3 s for three files on two processes, 3.3 s a file): its own figures are
REVISION_QUADRATIC_S. The "quadratic" terms are the N = 1024 figures, the fixed ones the N = 16 figures, and
the exponents fit the N = 256 and 512 rows (the schedules grow as about N^1.2, the XML as N^1.8, the rest as
N^2). Only the ratios matter (the ETA scales by the elapsed time): at N = 512 the model puts 46 % of the time in
the compile stage, 42 % measured; at N = 1024 51 %, 51 % measured. The frontier lookup, selection and fabric
binding do not grow with N.
The stage modules report progress in their own bands (LEGACY_BANDS: the fraction they
pass to `advance`); `plan_progress` and `revision_progress` map a point of a band onto the weighted scale, so the
bar no longer sits at 95 % while the compile stage, most of the time at large N, runs.

Plans of different kinds spend their time differently (a training plan simulates an iteration on every frontier
entry in its select stage; an MoE plan solves an all-to-all LP; an N = 16 plan is mostly fixed costs), so the
model above is only the prior. Once plans of a kind (`plan_kind`) have finished, the stage durations their events
recorded correct it: for each stage, the median over the recent finished plans of the kind of measured / modelled
seconds (`corrections`; services.jobs.stages.stage_history reads them from the store) multiplies the modelled
cost of the running plan. With one finished plan of the same size, a plan's bands are that plan's recorded
duration shares exactly; with none, the model (and DEFAULT_CORRECTIONS for the kinds it does not describe).

The ETA while running is the elapsed running time times (1 - p) / p for the weighted progress p (`eta_s`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from statistics import median

from services.jobs.requests.hybrid_workloads import is_hybrid
from services.jobs.requests.plan_spec import PlanSpec

__all__ = ["FIXED_S", "QUADRATIC_S", "EXPONENT", "REVISION_QUADRATIC_S", "LEGACY_BANDS", "plan_stages", "revision_stages", "files_of",
           "DEFAULT_CORRECTIONS", "plan_kind", "corrections", "plan_progress", "revision_progress", "eta_s"]

FIXED_S = {"frontier": 0.04, "select": 0.01, "fabric": 0.3, "repair": 0.3, "schedule": 0.02, "verify": 0.01,
           "store": 0.05, "alltoall": 0.2, "compile": 0.04, "finish": 0.02}
"""Seconds a stage costs whatever N (a cached frontier lookup, selection, a fabric reservation, bookkeeping)."""

QUADRATIC_S = {"frontier": 0.0, "select": 0.0, "fabric": 0.0, "repair": 0.0, "schedule": 2.55, "verify": 1.5,
               "store": 0.3, "alltoall": 49.0, "compile": 1.5, "finish": 0.0}
"""Seconds a stage of a plan costs at N = 1024, scaled by (N / 1024)^2 (compile: per file)."""

EXPONENT = {**{k: 2.0 for k in QUADRATIC_S}, "schedule": 1.2, "compile": 1.8}
"""How each stage's cost grows with N (the fit of the table above)."""

REVISION_QUADRATIC_S = {**QUADRATIC_S, "schedule": 1.95, "verify": 0.6, "compile": 3.3}
"""The same for a revision, where they differ: its schedules re-solve only what the failure changed, and its
files compile after them (nothing overlaps)."""

LEGACY_BANDS = {"frontier": (0.0, 0.2), "select": (0.2, 0.3), "fabric": (0.3, 0.4), "schedule": (0.4, 0.85),
                "verify": (0.85, 0.95), "store": (0.95, 0.95), "alltoall": (0.95, 0.96), "compile": (0.96, 0.99),
                "repair": (0.0, 0.15), "finish": (1.0, 1.0)}
"""The fraction each stage module passes to `advance`, from where the stage starts to where it ends."""

DEFAULT_CORRECTIONS = {"training": {"select": 20.0}, "hybrid": {"select": 40.0}}
"""Corrections a kind starts from before any plan of it has finished: a training plan's select stage simulates
an iteration on each frontier entry and baseline (0.23 s at N = 16 for six topologies, against the model's
0.01 s of a plain selection: 20x; a hybrid plan also searches the parallel strategies)."""


def plan_kind(spec: PlanSpec, has_alltoall: bool) -> str:
    """The kind whose recorded stage durations weigh a plan's stages: its workload form (collective sizes,
    training, hybrid-parallel training), whether it plans an all-to-all, whether it binds to a fabric."""
    workload = "collective"
    if spec.training is not None:
        workload = "hybrid" if is_hybrid(spec) else "training"
    return workload + ("+alltoall" if has_alltoall else "") + ("+fabric" if spec.fabric_id else "")


def files_of(spec: PlanSpec, has_alltoall: bool) -> int:
    """How many XML files the compile stage writes: runtimes x (allgather, reduce-scatter, allreduce[, all-to-all])."""
    return len(spec.runtime_list) * (4 if has_alltoall else 3)


def _cost(stage: str, nodes: int, files: int, quadratic: dict = QUADRATIC_S) -> float:
    c = FIXED_S[stage] + quadratic[stage] * (max(1, nodes) / 1024) ** EXPONENT[stage]
    return c * files if stage == "compile" else c


def _model_stages(spec: PlanSpec, has_alltoall: bool) -> list[tuple[str, float]]:
    names = ["frontier", "select"] + (["fabric"] if spec.fabric_id else []) + ["schedule", "verify", "store"]
    names += (["alltoall"] if has_alltoall else []) + ["compile", "finish"]
    n, f = spec.nodes, files_of(spec, has_alltoall)
    return [(s, _cost(s, n, f)) for s in names]


def plan_stages(spec: PlanSpec, has_alltoall: bool,
                correction: Mapping[str, float] | None = None) -> list[tuple[str, float]]:
    """A plan's stages in order with their expected costs (seconds): the model's, times the kind's
    `correction` per stage (`corrections` of its finished plans; DEFAULT_CORRECTIONS when None)."""
    if correction is None:
        correction = DEFAULT_CORRECTIONS.get(plan_kind(spec, has_alltoall).split("+")[0], {})
    return [(s, c * correction.get(s, 1.0)) for s, c in _model_stages(spec, has_alltoall)]


def corrections(finished: Iterable[tuple[PlanSpec, bool, Mapping[str, float]]]) -> dict[str, float]:
    """Per stage, the median over finished plans (spec, has_alltoall, {stage: recorded seconds}) of recorded /
    modelled seconds; stages no plan recorded keep the kind's default. All the plans should be of one kind."""
    ratios: dict[str, list[float]] = {}
    default: dict[str, float] = {}
    for spec, alltoall, durations in finished:
        default = DEFAULT_CORRECTIONS.get(plan_kind(spec, alltoall).split("+")[0], {})
        for stage, modelled in _model_stages(spec, alltoall):
            if stage in durations and modelled > 0:
                ratios.setdefault(stage, []).append(max(0.0, durations[stage]) / modelled)
    return {**default, **{stage: median(r) for stage, r in ratios.items()}}


def revision_stages(spec: PlanSpec, has_alltoall: bool = False) -> list[tuple[str, float]]:
    """A revision's stages (repair -> schedules [-> alltoall] -> compile -> finish) with their expected costs
    (seconds); the all-to-all is re-planned when the workload has one."""
    n, f = spec.nodes, files_of(spec, has_alltoall)
    names = ("repair", "schedule") + (("alltoall",) if has_alltoall else ()) + ("verify", "compile", "finish")
    return [(s, _cost(s, n, f, REVISION_QUADRATIC_S)) for s in names]


def _weighted(stages: list[tuple[str, float]], stage: str, local: float) -> float:
    total = sum(c for _, c in stages) or 1.0
    before = 0.0
    for name, c in stages:
        if name == stage:
            return min(1.0, (before + max(0.0, min(1.0, local)) * c) / total)
        before += c
    return min(1.0, before / total)


def _local(bands: dict, stage: str, legacy: float) -> float:
    lo, hi = bands.get(stage, (legacy, legacy))
    return 0.0 if hi <= lo else (legacy - lo) / (hi - lo)


def plan_progress(spec: PlanSpec, has_alltoall: bool, stage: str, legacy: float,
                  correction: Mapping[str, float] | None = None) -> float:
    """The weighted progress of a plan at the point `legacy` of its stage's band (LEGACY_BANDS), its stages
    weighed by `plan_stages(spec, has_alltoall, correction)`."""
    return _weighted(plan_stages(spec, has_alltoall, correction), stage, _local(LEGACY_BANDS, stage, legacy))


def revision_progress(spec: PlanSpec, stage: str, local: float, has_alltoall: bool = False) -> float:
    """The weighted progress of a revision at the fraction `local` of its stage."""
    return _weighted(revision_stages(spec, has_alltoall), stage, local)


def eta_s(progress: float, elapsed_s: float) -> float | None:
    """Seconds left at weighted progress p after `elapsed_s` of running: elapsed (1 - p) / p (None before any)."""
    if progress <= 0.0 or elapsed_s < 0.0:
        return None
    return max(0.0, elapsed_s * (1.0 - progress) / progress)
