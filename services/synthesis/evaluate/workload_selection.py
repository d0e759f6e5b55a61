"""The frontier topology fastest for a workload (the paper's section 5.2, equation (1)): every entry priced by
its exact collective costs, sum_i w_i (steps_i alpha + tau_i M_i / B), plus an all-to-all share priced by the
entry's MCF throughput f (LP (3), section 6.3), w_a2a (D/N) / (f B/d). The one implementation behind
`fabricplan select` and a plan's selection stage: each passes the throughputs it already knows (a plan keeps
them on its frontier entries) and gets the ones computed here back.

>>> from services.synthesis.schedule.cost import LinkModel
>>> from services.synthesis.schedule.ir import Collective
>>> from services.synthesis.search.finder import WorkloadItem, frontier
>>> cands = frontier(8, 2)
>>> sel, f = select_workload(cands, LinkModel.from_units(10, 100), [WorkloadItem(Collective.ALLREDUCE, 1e6)])
>>> sel.best in cands and len(sel.times_s) == len(cands) and f == {}
True
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from services.synthesis.schedule.cost import LinkModel
from services.synthesis.search.finder import Candidate, FinderError, Selection, WorkloadItem, select

__all__ = ["select_workload"]


def select_workload(cands: Sequence[Candidate], link: LinkModel, items: list[WorkloadItem], *,
                    alltoall_bytes: float = 0.0, alltoall_weight: float = 0.0,
                    throughputs: Mapping[str, float | None] | None = None,
                    on_throughputs: Callable[[int], None] | None = None) -> tuple[Selection, dict[str, float]]:
    """(selection, throughputs): the entry with the smallest workload time (ties: fewer steps) and, when the
    workload has an all-to-all share, every entry's all-to-all throughput f by expression (`throughputs` gives
    the known ones; the others are computed, after `on_throughputs(count)` says how many). FinderError on an
    empty candidate list or workload, or an all-to-all share without its bytes."""
    known = {k: v for k, v in (throughputs or {}).items() if v is not None}
    if alltoall_weight:
        if not alltoall_bytes:
            raise FinderError("an all-to-all share (alltoall_weight) needs the bytes per node (alltoall_bytes)")
        missing = [c for c in cands if c.expr not in known]
        if missing:
            from services.synthesis.evaluate.alltoall import alltoall_throughput
            from services.synthesis.topology.catalog import build

            if on_throughputs is not None:
                on_throughputs(len(missing))
            for c in missing:
                known[c.expr] = alltoall_throughput(build(c.expr)).throughput
    sel = select(list(cands), link, items, alltoall_bytes=alltoall_bytes, alltoall_weight=alltoall_weight,
                 alltoall_f=lambda c: known.get(c.expr))
    return sel, (known if alltoall_weight else {})
