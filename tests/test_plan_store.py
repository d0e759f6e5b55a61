"""A plan's schedules stage stores each schedule blob once: a size range holding the main schedule's transfers
is attached to the main blob (services.jobs.size_sets.store_sets)."""
from __future__ import annotations

from services.jobs.size_sets import _stored_digest
from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.ir import allreduce
from services.synthesis.topology.catalog import build


def test_a_range_with_the_main_schedules_transfers_reuses_its_blob():
    g = build("torus(3, 4)")
    ag = bfb_allgather(g).schedule
    rs = bfb_allgather(g.transpose()).schedule.reverse(topology=g.expr)
    main = allreduce(rs, ag)
    assert _stored_digest(main, (main, "d")) == "d"
    again = allreduce(rs, ag)                         # another object, the same columns: the same blob
    assert again is not main and again.to_bytes() == main.to_bytes()
    assert _stored_digest(again, (main, "d")) == "d"
    assert _stored_digest(ag, (main, "d")) is None and _stored_digest(ag, None) is None
    other = allreduce(rs, bfb_allgather(g).schedule.regrid(2 * ag.grid))      # same transfers, finer grid
    assert _stored_digest(other, (main, "d")) is None
