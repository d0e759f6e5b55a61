"""Which schedule a size range's XML file holds (schedule sets): the range's own when the compiler takes its grid,
otherwise the fastest over the range among the schedules it can take exactly.

A file carries a schedule lowered to at most `bound` chunks per shard (the compiler's rule:
services.compiler.api.exact_chunk_bound). A pipelined tree packing
`trees/P` of a fine grid exceeds it; the compiler would re-solve it as the chunked BFB (App. E.2) at `bound`
chunks. The substitute is instead chosen over the range [lo, hi): among the other ranges' schedules of the same
set that fit the bound exactly and the chunked BFB at `bound`, the one whose worst ratio of time to the range's
own schedule over the range is smallest. On uniform links a schedule's time is the line steps alpha + tau M / B
(`LinkModel.time`), and the ratio of two lines is monotone in M, so its worst is at an end of the range (for the
last range, M -> inf: the ratio of the taus).
"""
from __future__ import annotations

from fractions import Fraction

from services.compiler.lowering.grid import chunked_bfb, chunks_per_shard
from services.synthesis.schedule.cost import LinkModel, measured_tau
from services.synthesis.schedule.ir import Schedule
from services.synthesis.topology.graph import Topology

__all__ = ["worst_ratio", "substitute"]


def _line(schedule: Schedule, degree: int) -> tuple[int, Fraction]:
    return schedule.steps, measured_tau(schedule, degree)


def worst_ratio(line: tuple[int, Fraction], own: tuple[int, Fraction], link: LinkModel, lo: int,
                hi: int | None) -> float:
    """max over M in [lo, hi) of T_line(M) / T_own(M) (see the module docstring).

    >>> link = LinkModel.from_units(10, 100)
    >>> worst_ratio((6, Fraction(2)), (3, Fraction(1)), link, 0, None)
    2.0
    """
    ends = [link.time(*line, max(lo, 1)) / link.time(*own, max(lo, 1))]
    if hi is not None:
        ends.append(link.time(*line, hi - 1) / link.time(*own, hi - 1))
    else:
        ends.append(float(line[1] / own[1]) if own[1] else ends[0])
    return max(ends)


def substitute(schedule: Schedule, topology: Topology, others: dict[str, Schedule], link: LinkModel, lo: int,
               hi: int | None, bound: int) -> tuple[str, Schedule, float]:
    """(name, schedule, worst ratio) held by the file of a range [lo, hi) whose `schedule` needs more than `bound`
    chunks per shard: the fittest of `others` (name -> the set's other ranges' schedules) that fit `bound`, and
    the chunked BFB at `bound` ("chunked-bfb/<bound>")."""
    own = _line(schedule, topology.degree)
    cands = {name: s for name, s in others.items() if chunks_per_shard(s) <= bound}
    cbfb = chunked_bfb(topology, schedule.collective, bound)
    cbfb.topology = schedule.topology or topology.expr
    cands[f"chunked-bfb/{bound}"] = cbfb
    scored = sorted((worst_ratio(_line(s, topology.degree), own, link, lo, hi), name) for name, s in cands.items())
    ratio, name = scored[0]
    return name, cands[name], ratio
