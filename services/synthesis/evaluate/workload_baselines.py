"""A selected workload's time on the topologies clusters use today (paper section 9.2, Table 4): the finder's
workload (services.synthesis.search.finder.WorkloadItem, all-to-all share included) priced on each baseline of
services.synthesis.evaluate.baselines that exists for (N, d)."""
from __future__ import annotations

from services.synthesis.evaluate.baselines import baseline_alltoall_time, baseline_costs
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.search.finder import WorkloadItem

__all__ = ["WORKLOAD_BASELINES", "baseline_times"]

WORKLOAD_BASELINES = ("ring", "shifted_ring", "shifted_bfb_ring", "double_binary_tree", "torus_classic")


def baseline_times(nodes: int, degree: int, link: LinkModel, items: list[WorkloadItem],
                   alltoall_bytes: float = 0.0, alltoall_weight: float = 0.0) -> dict[str, float]:
    """The same workload, all-to-all share included, on what clusters use today (paper section 9.2):
    seconds per baseline that exists for (N, d) (e.g. the shifted rings need d = 4)."""
    out = {}
    for name in WORKLOAD_BASELINES:
        try:
            t = sum(i.weight * baseline_costs(name, nodes, degree, link, i.size_bytes, i.collective).seconds
                    for i in items)
            if alltoall_weight:
                t += alltoall_weight * baseline_alltoall_time(name, nodes, degree, alltoall_bytes,
                                                              link.node_bandwidth_Bps)
            out[name] = t
        except (ValueError, NotImplementedError):
            continue
    return out
