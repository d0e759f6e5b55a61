"""The Pareto frontier of (N, d) on a collective's exact costs, cached in the store per (N, d, options): what
the plan's frontier stage starts from (services.jobs.kinds.plan.select) and what GET /v1/frontiers serves.
"""
from __future__ import annotations

import time

from services.synthesis.schedule.ir import Collective
from services.synthesis.search.finder import frontier, frontier_entry

from services.config import get_settings
from services.store import repo
from services.store.db import session_scope

__all__ = ["frontier_entries"]


def frontier_entries(nodes: int, degree: int, bidirectional: bool,
                     collective: str = "allgather") -> tuple[list[dict], bool]:
    """(entries, from_cache): the frontier on the collective's exact costs (`frontier_entry`)."""
    coll = Collective.parse(collective)
    options = f"bidirectional={str(bool(bidirectional)).lower()};collective={coll.value}"
    with session_scope(get_settings().sqlalchemy_url) as s:
        hit = repo.cached_frontier(s, nodes, degree, options)
        if hit is not None:
            return list(hit.entries), True
    t0 = time.perf_counter()
    entries = [frontier_entry(c, coll) for c in frontier(nodes, degree, bidirectional=bidirectional, collective=coll)]
    with session_scope(get_settings().sqlalchemy_url) as s:
        repo.store_frontier(s, nodes, degree, options, entries, time.perf_counter() - t0)
    return entries, False
