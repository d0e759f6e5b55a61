"""BFB on the fastest links only: the schedule one gets by removing the slower links and running BFB (LP (1),
paper section 6) on what is left, as a schedule of the whole topology (it leaves the slow links idle).

On links of two speeds it is the natural comparator of a heterogeneous scheduler ("as good as not having the
slow links"), and a candidate in its own right: when the slow links add little bandwidth, a schedule of
D(G') steps on the fast ones can beat a pipelined tree packing whose steps fill and drain. The removed
links are every arc slower than a threshold: the fastest bandwidth if the rest stays strongly connected,
else the next slower one, and so on (on a node whose in-links are all slow, those stay and only the slowest
go); when no threshold above the slowest bandwidth keeps the topology connected there is no such schedule
(`FastLinksUnavailable`).
"""
from __future__ import annotations

import numpy as np

from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.ir import Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.topology.failures import remove_arcs
from services.synthesis.topology.graph import TopologyError

__all__ = ["FastLinksUnavailable", "bfb_fast_links"]


class FastLinksUnavailable(ValueError):
    """Every link is as fast as the fastest, or the fastest alone do not connect every node."""


def bfb_fast_links(costs: LinkCosts, **bfb_options) -> Schedule:
    """The BFB allgather of the topology without its slower links, on the topology's own arcs (lanes mapped
    back to the original parallel arcs).

    >>> import numpy as np
    >>> from services.synthesis.topology.catalog import build
    >>> g = build("torus(3, 3)")
    >>> bw = np.full(g.arcs, 2.0); bw[0] = 1.0
    >>> s = bfb_fast_links(LinkCosts(g, np.zeros(g.arcs), bw))
    >>> bool((g.arc_index(s.sender, s.receiver, s.lane) != 0).all()), s.steps
    (True, 2)
    """
    g = costs.topology
    levels = np.unique(costs.bandwidth_Bps)[::-1]
    if levels.size == 1:
        raise FastLinksUnavailable("every link is as fast as the fastest")
    cut = None
    for level in levels[:-1]:
        slow = np.flatnonzero(costs.bandwidth_Bps < level)
        try:
            cut = remove_arcs(g, [(int(g.tails[a]), int(g.heads[a]), int(g.lanes[a])) for a in slow])
            break
        except TopologyError:
            continue
    if cut is None:
        raise FastLinksUnavailable("removing the slowest links leaves the topology not strongly connected")
    s = bfb_allgather(cut.topology, **bfb_options).schedule
    sub = cut.topology
    arc = cut.kept[sub.arc_index(s.sender, s.receiver, s.lane)]
    return Schedule(s.collective, s.nodes, s.grid, s.step_ptr, s.source, g.tails[arc].astype(np.int32),
                    g.heads[arc].astype(np.int32), g.lanes[arc].astype(np.int32), s.lo, s.hi, s.ops, g.expr)
