"""A plan's schedules stage stores each schedule blob once: an allreduce range composed of the plan's own
reduce-scatter and allgather holds the plan's allreduce object (services.jobs.stages.size_sets._hold_allreduce), so the
encoder the stage shares with store_sets encodes every schedule object once and the range's blob is the main
allreduce's."""
from __future__ import annotations

from services.jobs.stages import size_sets
from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.topology.catalog import build


def test_a_range_with_the_main_schedules_transfers_reuses_its_blob(monkeypatch):
    g = build("torus(3, 4)")
    ag = bfb_allgather(g).schedule
    rs = bfb_allgather(g.transpose()).schedule.reverse(topology=g.expr)
    main = allreduce(rs, ag)
    schedules = {Collective.ALLGATHER: ag, Collective.REDUCESCATTER: rs, Collective.ALLREDUCE: main}
    sets = size_sets.plan_sets(g, LinkModel.from_units(10, 100), schedules)
    composed = [r for r in sets[Collective.ALLREDUCE].ranges
                if r.phases and r.phases[0].schedule is rs and r.phases[1].schedule is ag]
    assert composed and all(r.schedule is main for r in composed)
    again = allreduce(rs, ag)                         # another object, the same columns: the same blob
    assert again is not main and again.to_bytes() == main.to_bytes()
    encode = size_sets.encoder()
    calls = []
    real = Schedule.to_bytes
    monkeypatch.setattr(Schedule, "to_bytes", lambda self: calls.append(id(self)) or real(self))
    blobs = {c: encode(x) for c, x in schedules.items()}
    ranges = {id(r.schedule): encode(r.schedule) for ss in sets.values() for r in ss.ranges}
    monkeypatch.undo()
    objects = {id(x) for x in schedules.values()} | set(ranges)
    assert sorted(calls) == sorted(objects)           # one encoding per object
    assert ranges[id(main)] == blobs[Collective.ALLREDUCE] == main.to_bytes()
