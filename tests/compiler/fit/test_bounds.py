"""Schedule bounds (services.compiler.fit.bounds): what the fit search reads from a candidate's message
table, bounded from the schedule alone; never above the table, exact where the table is, and the search that
uses them reaches the outcome of the search that builds every table."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from services.compiler import PROFILES, CompileError
from services.compiler.lowering.channels import ShardChannels, shard_classes
from services.compiler.msccl.ir import MscclOptions
from services.compiler.msccl.messages import build_messages
from services.compiler.fit.bounds import ScheduleBounds
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.construct import construct_collectives

SPREAD = ["torus(4, 4)", "circulant(7, 2, 3)", "hypercube(3)", "genkautz(3, 12)", "ring(5, 2)",
          "line(circulant(8, 1, 2))", "kautz(2, 3)", "dcirculant(6, 1, 2, 3, 4)", "genkautz(4, 64)"]
COLLECTIVES = (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE)
PROFILE = PROFILES["executor"]


@lru_cache(maxsize=None)
def built(expr: str):
    return construct_collectives(expr)


def _compare(s, channels: int, instances: int) -> None:
    """Every bound at most the table's value (per gpu for arrays); tbs and the per-step maximum exact at one
    instance; on an allgather (units at their homes, copies only) the connection bound is exact too. The fit's
    buffering floor (fit._check_buffering_floor): the one-channel bounds over `channels` bound those at
    `channels` (a channel's runs split the one-channel runs; a gpu's receives and sends only grow), and so do the
    one-channel table's exact counts (Messages.fused_steps_floor and its messages per connection-step), which the
    floor takes once that table is built."""
    from services.compiler.msccl.ir import RECEIVES, S

    classes = shard_classes(s) if channels > 1 else ShardChannels.identity(s.nodes)
    pre = ScheduleBounds.of(s, classes, channels, instances)
    assert pre is not None
    one = ScheduleBounds.of(s, ShardChannels.identity(s.nodes), 1, instances)
    floor = -(-one.messages_per_connection_step // channels)
    assert floor <= pre.messages_per_connection_step
    assert (one.recv <= pre.recv).all() and (one.send <= pre.send).all()
    for combined in (True, False):
        opt = MscclOptions(channels=channels, instances=instances, mode="both", consolidate=False,
                           combined=combined, fuse=combined)
        table = build_messages(s, PROFILE, opt, classes)
        exact, ours = table.lower_bounds(opt), pre.lower_bounds(opt)
        one_table = build_messages(s, PROFILE, MscclOptions(channels=1, instances=instances, mode="both",
                                                            consolidate=False))
        m1 = one_table.lower_bounds(opt, per_gpu=False)["messages_per_connection_step"]
        fused1 = one_table.fused_steps_floor()
        assert one.messages_per_connection_step <= m1
        assert -(-m1 // channels) <= exact["messages_per_connection_step"]
        kind, gpu = table.ops["kind"], table.ops["gpu"]
        assert fused1 <= np.maximum(np.bincount(gpu[kind == S], minlength=s.nodes),
                                    np.bincount(gpu[RECEIVES[kind]], minlength=s.nodes)).sum()
        # the table's per-gpu steps for fused tbs subtract every possible fusion: compare with the rows then
        rows = np.bincount(table.ops["gpu"].astype(np.int64), minlength=s.nodes)
        assert (ours["steps_per_gpu"] <= rows).all()
        if not combined:
            assert (ours["steps_per_gpu"] <= exact["steps_per_gpu"]).all()
        assert ours["steps_per_tb"] <= exact["steps_per_tb"]
        assert ours["messages_per_connection_step"] <= exact["messages_per_connection_step"]
        assert floor <= exact["messages_per_connection_step"]
        assert (ours["tbs_per_gpu"] <= exact["tbs_per_gpu"]).all()
        assert ours["tbs_per_channel"] <= exact["tbs_per_channel"]
        if instances == 1:
            assert (ours["tbs_per_gpu"] == exact["tbs_per_gpu"]).all()
            assert ours["tbs_per_channel"] == exact["tbs_per_channel"]
            if not combined:
                assert ours["steps_per_tb_avg"] <= exact["steps_per_tb_avg"]
            if s.collective is Collective.ALLGATHER:
                assert ours["steps_per_tb"] == exact["steps_per_tb"]


@pytest.mark.parametrize("expr", SPREAD)
def test_bounds_never_exceed_the_table(expr):
    for coll in COLLECTIVES:
        s = built(expr)[coll].schedule
        for channels in (1, 2, 3, 4):
            for instances in (1, 2):
                _compare(s, channels, instances)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(4, 12), jumps=st.sets(st.integers(1, 11), min_size=2, max_size=3),
       coll=st.sampled_from(COLLECTIVES), channels=st.integers(1, 4), instances=st.integers(1, 2),
       line=st.booleans())
def test_bounds_on_random_digraphs(n, jumps, coll, channels, instances, line):
    """Directed circulants and their line graphs the compiler's tests do not use."""
    offsets = sorted({j % n for j in jumps} - {0})
    assume(len(offsets) >= 2)
    expr = f"dcirculant({n}, {', '.join(map(str, offsets))})"
    try:
        s = built(f"line({expr})" if line else expr)[coll].schedule
    except ValueError:
        assume(False)
    _compare(s, channels, instances)


def test_no_bound_where_units_are_dropped():
    """A copy step that delivers a unit twice or to its owner (the builder drops it, which may remove a run)
    gets no bound, nor does the all-to-all; the untouched schedule gets one."""
    from tests.helpers import rebuild

    s = built("ring(8)")[Collective.ALLGATHER].schedule
    identity = ShardChannels.identity(s.nodes)
    assert ScheduleBounds.of(s, identity, 1) is not None
    last = s.step_slice(s.steps).start
    assert ScheduleBounds.of(rebuild(s, extra=[last]), identity, 1) is None
    owner = s.receiver.copy()
    owner[last] = s.source[last]
    assert ScheduleBounds.of(rebuild(s, receiver=owner), identity, 1) is None
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule

    a2a = alltoall_schedule(built("ring(8)")[Collective.ALLGATHER].topology).schedule
    assert ScheduleBounds.of(a2a, identity, 1) is None


@pytest.mark.parametrize("expr,coll,max_steps", [("line(circulant(8, 1, 2))", Collective.ALLGATHER, 4),
                                                 ("genkautz(4, 64)", Collective.ALLREDUCE, 12),
                                                 ("torus(4, 4)", Collective.ALLREDUCE, 6),
                                                 ("kautz(2, 3)", Collective.ALLGATHER, 3),
                                                 ("genkautz(4, 64)", Collective.REDUCESCATTER, 6)])
def test_the_fit_reaches_the_same_outcome_without_the_bounds(expr, coll, max_steps, monkeypatch):
    """Runtimes built with few steps per thread block: the search that refuses candidates from the schedule
    fits the same program (or refuses with the same limit) as the search that builds every table."""
    import services.compiler.fit.search as fit

    r = built(expr)[coll]
    prof = PROFILE.with_overrides(max_steps=max_steps)
    req = fit.FitRequest(mode="both", simulate=False)
    seen = []

    def outcome():
        try:
            f = fit.fit_msccl(r.schedule, r.topology, prof, req)
            return ("fitted", f.lowered.chunks, f.lowered.method, f.options.label())
        except CompileError as exc:
            return ("refused", exc.limit)

    real = ScheduleBounds.for_schedule

    def counting(*a, **k):
        at = real(*a, **k)

        def recorded(channels):
            b = at(channels)
            seen.append(b)
            return b
        return recorded
    monkeypatch.setattr(fit.ScheduleBounds, "for_schedule", staticmethod(counting))
    with_bounds = outcome()
    assert any(b is not None for b in seen)
    monkeypatch.setattr(fit.ScheduleBounds, "for_schedule", staticmethod(lambda *a, **k: lambda channels: None))
    assert with_bounds == outcome()
